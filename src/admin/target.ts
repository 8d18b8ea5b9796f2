/**
 * What every admin function works on: the user's ioredis (or iovalkey) client, the library's adapter and
 * script runner on it (scripts run exactly as the lock clients run them), the key prefix as the server sees
 * it, and the few per-node operations the adapter has no use for (SCAN, PUBSUB counts, TIME, CONFIG, a
 * connection to subscribe on). The client stays the caller's: nothing here closes or reconfigures it.
 */
import type { Cluster, Redis } from 'ioredis';
import { adaptClient, type RedisAdapter } from '../redis/adapter.js';
import { unprefixed } from '../redis/shared.js';
import { keySlot } from '../redis/keys.js';
import { LockScripts } from '../redis/scripts.js';
import { resolveClientOptions, type IoredisClient } from '../options.js';
import { LOCK_KINDS, type LockKind } from './shape.js';

type Client = Redis | Cluster;

export interface AdminTarget {
  readonly client: Client;
  readonly adapter: RedisAdapter;
  readonly scripts: LockScripts;
  readonly cluster: boolean;
  /** The prefix of every lock key as the server sees it: the client's own keyPrefix, then `options.prefix`. */
  readonly prefix: string;
}

/**
 * The target for `client` and `prefix`, or a TypeError/RangeError naming the bad argument (no I/O). The
 * prefix follows the lock client's rules (`options.keyPrefix`): the same validation, the same folding of
 * the client's own keyPrefix.
 */
export function adminTarget(client: IoredisClient, prefix: unknown): AdminTarget {
  const adapter = adaptClient(client, 'client');
  if (adapter.library !== 'ioredis') {
    throw new TypeError('client must be an ioredis or iovalkey Redis or Cluster: flowlock/admin scans node by node');
  }
  if (prefix !== undefined && typeof prefix !== 'string') {
    throw new TypeError(`options.prefix must be a string, got ${typeof prefix}`);
  }
  let keyPrefix: string;
  try {
    keyPrefix = resolveClientOptions({ keyPrefix: prefix ?? '' }, adapter.keyPrefix).keyPrefix;
  } catch (error) {
    // The lock client's message names its own option.
    if (error instanceof Error) error.message = error.message.replace('options.keyPrefix', 'options.prefix');
    throw error;
  }
  return {
    client: client as unknown as Client,
    adapter,
    scripts: new LockScripts(adapter),
    cluster: adapter.topology === 'cluster',
    prefix: keyPrefix,
  };
}

function isCluster(client: Client): client is Cluster {
  return (client as { isCluster?: unknown }).isCluster === true;
}

/** `host:port` of a node connection. */
export function address(node: Redis): string {
  return `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`;
}

/**
 * Resolves once the client is connected (a Cluster knows its nodes only then); connects a lazyConnect
 * client. Rejects if it ends first.
 */
async function ready(client: Client): Promise<void> {
  if (client.status === 'ready') return;
  if (client.status === 'wait') {
    await client.connect();
    return;
  }
  if (client.status === 'end') throw new Error('the Redis client is closed');
  await new Promise<void>((resolve, reject) => {
    const settle = (error?: Error): void => {
      client.off('ready', onReady);
      client.off('end', onEnd);
      if (error) reject(error);
      else resolve();
    };
    const onReady = (): void => settle();
    const onEnd = (): void => settle(new Error('the Redis client closed before it was ready'));
    client.on('ready', onReady);
    client.on('end', onEnd);
  });
}

/** Every master's connection: the one server, or each master a ready Cluster client knows. */
export async function masters(target: AdminTarget): Promise<Redis[]> {
  const { client } = target;
  if (!isCluster(client)) return [client];
  await ready(client);
  const nodes = client.nodes('master');
  if (nodes.length === 0) throw new Error('the Cluster client knows no masters');
  return nodes;
}

/** Every node's connection, replicas included (classic pub/sub subscribers may sit on any of them). */
export async function allNodes(target: AdminTarget): Promise<Redis[]> {
  const { client } = target;
  if (!isCluster(client)) return [client];
  await ready(client);
  return client.nodes('all');
}

/** The connection to the master of `key`'s slot. */
export async function masterOf(target: AdminTarget, key: string): Promise<Redis> {
  const { client } = target;
  if (!isCluster(client)) return client;
  await ready(client);
  const owner = client.slots[keySlot(key)]?.[0];
  const node = client.nodes('master').find((candidate) => address(candidate) === owner);
  if (!node) throw new Error(`no master known for the slot of ${key}`);
  return node;
}

/** A command and its arguments; keys are server-side names, unprefixed for the connection that sends them. */
export type Command = readonly [name: string, ...args: (string | number)[]];

/** A reply, or the error the server answered to that one command. */
export interface Reply {
  readonly value?: unknown;
  readonly error?: Error;
}

/** The prefix a connection puts before the keys of keyed commands. */
function connectionPrefix(connection: Client): string {
  const options = connection.options as { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } };
  const prefix = options.keyPrefix ?? options.redisOptions?.keyPrefix ?? '';
  return typeof prefix === 'string' ? prefix : '';
}

/** `args` with its first element, the key, unprefixed for a connection that puts `prefix` back. */
function keyed(args: readonly (string | number)[], prefix: string): (string | number)[] {
  const [first, ...rest] = args;
  return typeof first === 'string' ? [unprefixed(first, prefix), ...rest] : [...args];
}

/**
 * Runs `commands` (each naming its key, if any, as its first argument) in one MULTI on `connection` (the
 * client itself, which routes by key, or one node): a consistent snapshot of one lock's keys, which share a
 * slot. Replies are binary for the commands whose indexes are in `binary`, text otherwise.
 */
export async function transaction(
  connection: Client,
  commands: readonly Command[],
  binary: ReadonlySet<number> = new Set(),
): Promise<Reply[]> {
  const prefix = connectionPrefix(connection);
  const multi = connection.multi();
  commands.forEach(([name, ...args], index) => {
    if (binary.has(index)) multi.callBuffer(name, ...keyed(args, prefix));
    else multi.call(name, ...keyed(args, prefix));
  });
  return replies(await multi.exec());
}

/** Runs `commands` on `connection` in one pipeline: keys of many slots that one node serves. */
export async function pipeline(connection: Client, commands: readonly Command[]): Promise<Reply[]> {
  const prefix = connectionPrefix(connection);
  const batch = connection.pipeline();
  for (const [name, ...args] of commands) batch.call(name, ...keyed(args, prefix));
  return replies(await batch.exec());
}

/**
 * The pairs of a reply that RESP2 sends as a flat array (`HGETALL`, `ZRANGE … WITHSCORES`, `CONFIG GET`,
 * `PUBSUB NUMSUB`) and RESP3 as a map or an array of pairs: ioredis 6 speaks RESP3 by default, and maps
 * may come as objects (its `replyMapping: 'resp3'`).
 */
export function pairsOf(reply: unknown): [unknown, unknown][] {
  if (reply instanceof Map) return [...(reply as Map<unknown, unknown>).entries()];
  if (!Array.isArray(reply)) return typeof reply === 'object' && reply !== null ? Object.entries(reply) : [];
  if (reply.every((item) => Array.isArray(item) && item.length === 2)) return reply as [unknown, unknown][];
  const pairs: [unknown, unknown][] = [];
  for (let i = 0; i + 1 < reply.length; i += 2) pairs.push([reply[i], reply[i + 1]]);
  return pairs;
}

/** A hash reply as an object of strings. */
export function hashOf(reply: unknown): Record<string, string> {
  const hash: Record<string, string> = {};
  for (const [field, value] of pairsOf(reply)) hash[String(field)] = String(value);
  return hash;
}

function replies(results: [error: Error | null, value: unknown][] | null): Reply[] {
  return (results ?? []).map(([error, value]) => (error ? { error } : { value }));
}

/** Server time in milliseconds since the epoch (with microsecond precision), from one TIME reply. */
export function timeReply(reply: unknown): number {
  const [seconds, micros] = reply as [string, string];
  return Number(seconds) * 1000 + Number(micros) / 1000;
}

/**
 * Subscriber connections of `channels` (one number per channel): classic subscribers summed over every node
 * (a Cluster client subscribes on any node, replicas included), plus on a Redis 7+ Cluster the shard
 * subscribers on the master of the channels' slot (they must share one: a lock's channels do).
 */
export async function subscriberCounts(target: AdminTarget, channels: readonly string[]): Promise<number[]> {
  if (channels.length === 0) return [];
  const counts = new Map(channels.map((channel) => [channel, 0]));
  const add = (reply: unknown): void => {
    for (const [channel, n] of pairsOf(reply)) {
      const name = String(channel);
      counts.set(name, (counts.get(name) ?? 0) + Number(n));
    }
  };
  const nodes = await allNodes(target);
  for (const reply of await Promise.all(nodes.map((node) => node.call('PUBSUB', 'NUMSUB', ...channels)))) add(reply);
  if (target.cluster && (await target.scripts.pubsubMode()) === 'sharded') {
    const owner = await masterOf(target, channels[0] ?? '');
    add(await owner.call('PUBSUB', 'SHARDNUMSUB', ...channels));
  }
  return channels.map((channel) => counts.get(channel) ?? 0);
}

/**
 * A new connection to `node` (or the client's server) for pub/sub, without any keyPrefix (channels are named
 * as the server knows them). The caller disconnects it.
 */
export function subscriberFor(node: Redis): Redis {
  const connection = node.duplicate({ keyPrefix: '', lazyConnect: false });
  // Failures surface as rejected subscribe calls or the 'end' event; an unhandled 'error' would crash.
  connection.on('error', () => undefined);
  return connection;
}

/** A CONFIG GET value on `node`; undefined when CONFIG is denied (an ACL, a managed service) or renamed. */
export async function configGet(node: Redis, parameter: string): Promise<string | undefined> {
  try {
    const [pair] = pairsOf(await node.call('CONFIG', 'GET', parameter));
    return pair ? String(pair[1]) : '';
  } catch {
    return undefined;
  }
}

/** Whether `notify-keyspace-events` flags publish expirations as key events (E, and x or the alias A). */
export function notifiesExpiry(flags: string): boolean {
  return flags.includes('E') && /[xA]/.test(flags);
}

/** Whether `notify-keyspace-events` flags publish hash commands (HSET, HINCRBY) as keyevents. */
export function notifiesHashes(flags: string): boolean {
  return flags.includes('E') && /[hA]/.test(flags);
}

/** The database index of the client (notifications are per database; a Cluster has only 0). */
export function databaseOf(target: AdminTarget): number {
  if (target.cluster) return 0;
  return (target.client as Redis).options.db ?? 0;
}

/** Raised when what is asked does not fit what Redis holds (the CLI's exit code 3). */
export class PreconditionError extends Error {
  override readonly name = 'PreconditionError';
}

/** An options object's own keys, checked against `known` before any I/O. */
export function checkOptions(options: unknown, known: readonly string[]): Record<string, unknown> {
  if (options === undefined) return {};
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError('options must be an object');
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key))
      throw new TypeError(`options has an unknown option "${key}" (known: ${known.join(', ')})`);
  }
  return options as Record<string, unknown>;
}

/** A lock kind option (undefined allowed). */
export function checkKind(kind: unknown, argument: string): LockKind | undefined {
  if (kind === undefined) return undefined;
  if (typeof kind !== 'string' || !(LOCK_KINDS as readonly string[]).includes(kind)) {
    throw new RangeError(`${argument} must be one of ${LOCK_KINDS.join(', ')}`);
  }
  return kind as LockKind;
}

/** A whole number option within [min, max] (undefined allowed). */
export function checkCount(
  value: unknown,
  argument: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number') throw new TypeError(`${argument} must be a number, got ${typeof value}`);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${argument} must be a whole number from ${min} to ${max}, got ${value}`);
  }
  return value;
}
