/**
 * The seam between the library and the user's Redis client: one small interface that every supported client
 * library implements (ioredis.ts for ioredis and iovalkey, node-redis.ts for node-redis 5 and 6, glide.ts for
 * Valkey GLIDE; the interface is in seam.ts, exported here again), and the detection that picks the adapter by
 * the client's shape. Nothing above this file names a client library.
 *
 * Keys and channels cross this seam by their server-side names: when the user's client has a `keyPrefix`,
 * the library's names already start with it (options.ts folds it into the lock client's prefix), and each
 * adapter hands the client the names without it, for the client to put back (scripts' KEYS and plain
 * commands), or names channels to the server as they are (pub/sub, which no client prefixes alike).
 */
import { GlideAdapter, isGlide } from './glide.js';
import { isIoredis, IoredisAdapter } from './ioredis.js';
import { isNodeRedis, NodeRedisAdapter } from './node-redis.js';
import type { RedisAdapter } from './seam.js';

export type * from './seam.js';

/**
 * The adapter for `client`, chosen by its shape (node-redis 5 has no class to test with `instanceof`, and
 * the client packages are never imported at run time). Throws a TypeError naming `argument` for anything
 * else. `glideSubscriber`: `options.glideSubscriber`, which only a GLIDE client takes.
 */
export function adaptClient(client: unknown, argument: string, glideSubscriber?: unknown): RedisAdapter {
  if (isGlide(client)) return new GlideAdapter(client, argument, glideSubscriber);
  if (glideSubscriber !== undefined) {
    throw new TypeError(`options.glideSubscriber is for a GLIDE client only, and ${argument} is none`);
  }
  if (isIoredis(client)) return new IoredisAdapter(client, argument);
  if (isNodeRedis(client)) return new NodeRedisAdapter(client, argument);
  throw new TypeError(
    `${argument} must be a Redis client: an ioredis or iovalkey Redis or Cluster, a node-redis client, ` +
      'cluster or sentinel (createClient, createCluster, createSentinel), or a Valkey GLIDE GlideClient or ' +
      'GlideClusterClient',
  );
}
