/**
 * Per-file test fixture: one Redis for the file, clients and lock clients that are closed after each test,
 * and helpers that read the server's own counters. Lock clients run on the client under test
 * (`REDIS_CLIENT`, see clients.ts); `redis()` and `admin` are ioredis connections for the test's own
 * commands (ioredis 6 under `REDIS_CLIENT=ioredis6`). `REDIS_TOPOLOGY=cluster` gives the file a Redis Cluster
 * (3 masters, 1 replica each) instead, and the fixture's clients are then `Cluster` clients.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Cluster as Cluster5, Redis as IORedis5, type ClusterOptions, type RedisOptions } from 'ioredis';
import { Cluster as Cluster6, Redis as IORedis6 } from 'ioredis6';
import { afterAll, afterEach, beforeAll } from 'vitest';
import {
  createLockClient,
  LocksNotReleasedError,
  type LockClient,
  type LockClientOptions,
  type RedisClient,
} from '../../src/index.js';
import { adaptClient, type RedisAdapter } from '../../src/redis/adapter.js';
import { keySlot, lockKeys } from '../../src/redis/keys.js';
import { clientKind, newTestClient, type ClientOptions, type Target, type TestClient } from './clients.js';
import { startRedisCluster, type TestCluster } from './redis-cluster.js';
import { serverMajor, startTestRedis, type TestRedis } from './redis-server.js';

export type Redis = IORedis5;
export type Cluster = Cluster5;
/** A client of the fixture's topology: a `Redis` on a standalone server, a `Cluster` on a cluster. */
export type Client = Redis | Cluster;
export const ioredisMajor = clientKind === 'ioredis6' ? 6 : 5;
const RedisClass = (ioredisMajor === 6 ? IORedis6 : IORedis5) as unknown as typeof IORedis5;
const ClusterClass = (ioredisMajor === 6 ? Cluster6 : Cluster5) as unknown as typeof Cluster5;

const topology = process.env['REDIS_TOPOLOGY'] ?? 'standalone';
if (topology !== 'standalone' && topology !== 'cluster') {
  throw new Error(`REDIS_TOPOLOGY must be "standalone" or "cluster", not "${topology}"`);
}
/** `REDIS_TOPOLOGY=cluster`: `useRedis()` files run on a Redis Cluster through ioredis `Cluster` clients. */
export const onCluster = topology === 'cluster';
/** Lock channels are shard channels (SPUBLISH) on a Redis 7+ cluster; classic below 7.0, as the library detects. */
export const shardedChannels = onCluster && serverMajor() >= 7;

/** Whether `redis` is an ioredis Cluster. */
export function isCluster(redis: Client): redis is Cluster {
  return (redis as { isCluster?: unknown }).isCluster === true;
}

export function newRedis(server: { host: string; port: number }, options: RedisOptions = {}): Redis {
  return new RedisClass({ host: server.host, port: server.port, ...options });
}

/**
 * A `Cluster` client on `cluster`, seeded with its masters as in test/integration/cluster.test.ts.
 * `lazyConnect` applies to the Cluster; the other options to its node connections.
 */
export function newCluster(cluster: TestCluster, options: RedisOptions = {}): Cluster {
  const { lazyConnect, ...redisOptions } = options;
  const clusterOptions: ClusterOptions = { redisOptions };
  if (lazyConnect !== undefined) clusterOptions.lazyConnect = lazyConnect;
  return new ClusterClass(
    cluster.nodes.slice(0, 3).map((n) => ({ host: n.host, port: n.port })),
    clusterOptions,
  );
}

export function uniqueName(label = 'lock'): string {
  return `test:${label}:${randomUUID().slice(0, 8)}`;
}

export interface RedisFixture {
  /** The standalone server (there is none on a cluster: this throws there). */
  readonly server: TestRedis;
  /** A new ioredis client of the topology, quit after the test. */
  redis(options?: RedisOptions): Client;
  /** A new client under test (`REDIS_CLIENT`) of the topology, closed after the test. */
  client(options?: ClientOptions): RedisClient;
  /** The library's adapter on a new client under test. */
  adapter(options?: ClientOptions): RedisAdapter;
  /** A lock client on a new client under test of the topology, closed after the test. */
  locks(options?: LockClientOptions, clientOptions?: ClientOptions): LockClient;
  /** Where the topology's clients connect. */
  readonly target: Target;
  /** An admin connection for inspecting the server or cluster (kept for the file). */
  readonly admin: Client;
}

/**
 * One Redis for the file: by `start` on the standalone topology, a new 3-master cluster (one replica each)
 * under `REDIS_TOPOLOGY=cluster` (`start` is then not used).
 */
export function useRedis(start: () => Promise<TestRedis> = startTestRedis): RedisFixture {
  let server: TestRedis | undefined;
  let cluster: TestCluster | undefined;
  let admin: Client | undefined;
  const redisClients: Client[] = [];
  const testClients: TestClient[] = [];
  const lockClients: LockClient[] = [];

  beforeAll(
    async () => {
      if (onCluster) {
        cluster = await startRedisCluster(3, 1);
        const client = newCluster(cluster);
        client.on('error', () => undefined);
        admin = client;
        // commandCalls() and the tests' per-node commands need the admin's view of the nodes.
        await once(client, 'ready');
      } else {
        server = await start();
        admin = newRedis(server);
      }
    },
    onCluster ? 60_000 : undefined,
  );
  afterEach(async () => {
    // A test that left holds behind a dead server or a closed client is told so by close(): nothing to do.
    const closed = (error: unknown): void => {
      if (!(error instanceof LocksNotReleasedError)) throw error;
    };
    await Promise.all(lockClients.splice(0).map((c) => c.close().catch(closed)));
    await Promise.all(redisClients.splice(0).map((c) => c.quit().catch(() => c.disconnect())));
    await Promise.all(testClients.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.stop();
    await cluster?.stop();
  });

  const fixture: RedisFixture = {
    get server() {
      if (onCluster) throw new Error('REDIS_TOPOLOGY=cluster: there is no single server, use redis.redis()');
      if (!server) throw new Error('the Redis server is not started yet');
      return server;
    },
    get admin() {
      if (!admin) throw new Error('the Redis server is not started yet');
      return admin;
    },
    redis(options = {}) {
      let client: Client;
      if (onCluster) {
        if (!cluster) throw new Error('the Redis cluster is not started yet');
        client = newCluster(cluster, options);
      } else {
        client = newRedis(fixture.server, options);
      }
      client.on('error', () => undefined);
      redisClients.push(client);
      return client;
    },
    get target(): Target {
      if (onCluster) {
        if (!cluster) throw new Error('the Redis cluster is not started yet');
        return { topology: 'cluster', nodes: cluster.nodes.slice(0, 3) };
      }
      const { host, port } = fixture.server;
      return { topology: 'standalone', host, port };
    },
    client(options) {
      const created = newTestClient(fixture.target, options);
      testClients.push(created);
      return created.client;
    },
    adapter(options) {
      return adaptClient(fixture.client(options), 'redis');
    },
    locks(options, clientOptions) {
      const client = createLockClient(fixture.client(clientOptions), options);
      lockClients.push(client);
      return client;
    },
  };
  return fixture;
}

/** The master connections of a ready `Cluster` client. */
function masters(cluster: Cluster): Redis[] {
  const nodes = cluster.nodes('master');
  if (nodes.length === 0) throw new Error('the Cluster client knows no masters (is it ready?)');
  return nodes;
}

/**
 * Calls per command from `INFO commandstats` (e.g. `{ evalsha: 12, subscribe: 1 }`), added up over the
 * masters on a cluster.
 */
export async function commandCalls(redis: Client): Promise<Record<string, number>> {
  const infos = isCluster(redis)
    ? await Promise.all(masters(redis).map((node) => node.info('commandstats')))
    : [await redis.info('commandstats')];
  const calls: Record<string, number> = {};
  for (const info of infos) {
    for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      const command = match[1] ?? '';
      calls[command] = (calls[command] ?? 0) + Number(match[2]);
    }
  }
  return calls;
}

/** EVALSHA and EVAL calls so far, from `INFO commandstats` (added up over the masters on a cluster). */
export async function scriptCalls(redis: Client): Promise<number> {
  const calls = await commandCalls(redis);
  return (calls['evalsha'] ?? 0) + (calls['eval'] ?? 0);
}

/**
 * Resolves with `count()`'s value once it has not changed for `quietMs`: for example once the asks that
 * settling subscriptions set off are answered, before a test counts what a step costs. The default leaves
 * room for a request that the client has made but not yet sent: GLIDE hands it to its core thread, which a
 * loaded machine may not run for a while. Where the request may wait for a reconnect, first wait until it
 * has arrived (a count above the one before it), then until quiet.
 */
export async function untilQuiet(count: () => Promise<number>, what: string, quietMs = 300): Promise<number> {
  let last = await count();
  let since = performance.now();
  await until(async () => {
    const now = await count();
    if (now !== last) [last, since] = [now, performance.now()];
    return performance.now() - since >= quietMs;
  }, `${what} unchanged for ${quietMs} ms`);
  return last;
}

/** The connection to the master that owns `key`'s slot (a cluster's sharded channels live there). */
export function masterOf(cluster: Cluster, key: string): Redis {
  const address = cluster.slots[keySlot(key)]?.[0];
  const node = masters(cluster).find((n) => `${n.options.host ?? ''}:${n.options.port ?? ''}` === address);
  if (!node) throw new Error(`no master known for the slot of ${key}`);
  return node;
}

/**
 * Subscriber connections of `channel`: `PUBSUB NUMSUB` on a standalone server; on a cluster, where lock
 * channels are shard channels (Redis 7), `PUBSUB SHARDNUMSUB` on the master owning the channel's slot.
 */
export async function channelSubscribers(admin: Client, channel: string): Promise<number> {
  if (isCluster(admin) && !shardedChannels) {
    // Classic pub/sub on a cluster before 7.0: a subscriber may be on any node.
    const replies = await Promise.all(admin.nodes('all').map((node) => node.pubsub('NUMSUB', channel)));
    return replies.reduce<number>((sum, reply) => sum + Number((reply as [string, number | string])[1]), 0);
  }
  const reply = isCluster(admin)
    ? await masterOf(admin, channel).pubsub('SHARDNUMSUB', channel)
    : await admin.pubsub('NUMSUB', channel);
  return Number((reply as [string, number | string])[1]);
}

/** Publishes a lock channel message the way a Redisson client on this topology does (SPUBLISH on a cluster). */
export async function publishRelease(admin: Client, channel: string, message = '0'): Promise<number> {
  return isCluster(admin) && shardedChannels
    ? Number(await admin.spublish(channel, message))
    : await admin.publish(channel, message);
}

/** Every connection to inspect or act on: each node of a cluster, else the one server. */
export function everyNode(admin: Client): Redis[] {
  return isCluster(admin) ? admin.nodes('all') : [admin];
}

/** The server's clock (TIME), in epoch milliseconds. */
export async function serverNow(admin: Client): Promise<number> {
  const [seconds, micros] = await admin.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

export function elapsedSince(start: number): number {
  return performance.now() - start;
}

/** Blocks the event loop for `ms`, as synchronous work does (timers, replies and the watchdog all wait). */
export function busyWait(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spinning on purpose
  }
}

/**
 * A lock client whose watchdog renews every 300 ms: a plain lock's hold records its fencing token and holder
 * info at its first renewal (a lean hold, lua/lock/acquire.lua), which `recorded` then waits for.
 */
export const QUICK_RENEWAL = { watchdogTimeout: 900 } as const;

/** Resolves once every hold of `locks` on plain lock `name` has recorded its holder info in Redis. */
export async function recorded(admin: Client, locks: LockClient, name: string): Promise<void> {
  const { holdKey } = lockKeys('', name, onCluster);
  const owners = locks
    .holds()
    .filter((hold) => hold.name === name)
    .map((hold) => hold.owner);
  await until(
    async () => (await Promise.all(owners.map((owner) => admin.hexists(holdKey, `${owner}:info`)))).every(Boolean),
    `the holder info of ${name} in Redis`,
  );
}

/** Resolves once `check` says yes (asked every 5 ms); rejects naming `what` after `timeoutMs`. */
export async function until(check: () => Promise<boolean> | boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
