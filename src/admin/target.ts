/**
 * What every admin function works on: the user's client (any supported library) through the library's
 * adapter, its script runner (scripts run exactly as the lock clients run them), the key prefix as the server
 * sees it, and the client's nodes for what the lock clients never do (SCAN, PUBSUB counts, TIME, CONFIG, a
 * connection to listen on: `AdminNodes`, one implementation per adapter). The client stays the caller's:
 * nothing here closes or reconfigures it.
 */
import type { AdminCommand, AdminNode, AdminNodes, AdminReply, RedisAdapter } from '../redis/adapter.js';
import { adaptClient } from '../redis/adapter.js';
import { LockScripts } from '../redis/scripts.js';
import { describe, resolveClientOptions, type RedisClient } from '../options.js';
import { LOCK_KINDS, type LockKind } from './shape.js';

export interface AdminTarget {
  readonly adapter: RedisAdapter;
  readonly nodes: AdminNodes;
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
export function adminTarget(client: RedisClient, prefix: unknown): AdminTarget {
  const adapter = adaptClient(client, 'client');
  if (prefix !== undefined && typeof prefix !== 'string') {
    throw new TypeError(`options.prefix must be a string, got ${describe(prefix)}`);
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
    adapter,
    nodes: adapter.adminNodes(),
    scripts: new LockScripts(adapter, '', keyPrefix),
    cluster: adapter.topology === 'cluster',
    prefix: keyPrefix,
  };
}

/**
 * Runs `commands` (each naming its key, if any, as its first argument) in one MULTI on the master of their
 * slot (`key`'s): a consistent snapshot of one lock's keys, which share a slot. Replies are binary for the
 * commands whose indexes are in `binary`, text otherwise.
 */
export async function transaction(
  target: AdminTarget,
  key: string,
  commands: readonly AdminCommand[],
  binary?: ReadonlySet<number>,
): Promise<AdminReply[]> {
  const node = await target.nodes.masterOf(key);
  return node.batch(commands, true, binary);
}

/** Runs `commands` on `node` in one pipeline: keys of many slots that one node serves. */
export function pipeline(node: AdminNode, commands: readonly AdminCommand[]): Promise<AdminReply[]> {
  return node.batch(commands, false);
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

/** Server time in milliseconds since the epoch (with microsecond precision), from one TIME reply. */
export function timeReply(reply: unknown): number {
  const [seconds, micros] = reply as [string, string];
  return Number(seconds) * 1000 + Number(micros) / 1000;
}

/**
 * The server's refusal of a command, as its message (first line): an ACL denial (`NOPERM`), or a command that
 * a managed service renamed away or does not have (`ERR unknown command`, `unknown subcommand`). Undefined for
 * any other error (a connection lost, a timeout), which the caller still throws. Admin functions meet it where
 * a provider blocks CONFIG, CLUSTER, CLIENT, INFO, PUBSUB or channels: they say what they could not read and
 * go on.
 */
export function refusalOf(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const message = error.message.split('\n')[0]?.trim() ?? '';
  return /NOPERM|no permissions?|permission ?denied|unknown command|unknown subcommand/i.test(message)
    ? message
    : undefined;
}

/**
 * Subscriber connections of `channels` (one number per channel): classic subscribers summed over every node
 * (a Cluster client subscribes on any node, replicas included), plus on a Redis 7+ Cluster the shard
 * subscribers on the master of the channels' slot (they must share one: a lock's channels do). Where the
 * server refuses CLUSTER NODES (the replicas' addresses), the masters' subscribers only, and a sentence in
 * `notices` says so; a refused PUBSUB rejects.
 */
export async function subscriberCounts(
  target: AdminTarget,
  channels: readonly string[],
  notices: string[],
): Promise<number[]> {
  if (channels.length === 0) return [];
  const counts = new Map(channels.map((channel) => [channel, 0]));
  const add = (reply: unknown): void => {
    for (const [channel, n] of pairsOf(reply)) {
      const name = String(channel);
      counts.set(name, (counts.get(name) ?? 0) + Number(n));
    }
  };
  let nodes: AdminNode[];
  try {
    nodes = await target.nodes.all();
  } catch (error) {
    const refused = refusalOf(error);
    if (refused === undefined) throw error;
    notices.push(`replicas unknown (${refused}): subscribers on replicas are not counted`);
    nodes = await target.nodes.masters();
  }
  for (const reply of await Promise.all(nodes.map((node) => node.call(['PUBSUB', 'NUMSUB', ...channels])))) add(reply);
  if (target.cluster && (await target.scripts.pubsubMode()) === 'sharded') {
    const owner = await target.nodes.masterOf(channels[0] ?? '');
    add(await owner.call(['PUBSUB', 'SHARDNUMSUB', ...channels]));
  }
  return channels.map((channel) => counts.get(channel) ?? 0);
}

/** A CONFIG GET value on `node`; undefined when CONFIG is denied (an ACL, a managed service) or renamed. */
export async function configGet(node: AdminNode, parameter: string): Promise<string | undefined> {
  try {
    const [pair] = pairsOf(await node.call(['CONFIG', 'GET', parameter]));
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

/** Raised when what is asked does not fit what Redis holds (the CLI's exit code 3). */
export class PreconditionError extends Error {
  override readonly name = 'PreconditionError';
}

/** An options object's own keys, checked against `known` before any I/O. */
export function checkOptions(options: unknown, known: readonly string[]): Record<string, unknown> {
  if (options === undefined) return {};
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new TypeError(`options must be an object, got ${describe(options)}`);
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
    throw new RangeError(`${argument} must be one of ${LOCK_KINDS.join(', ')}, got ${describe(kind)}`);
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
  if (typeof value !== 'number') throw new TypeError(`${argument} must be a number, got ${describe(value)}`);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(`${argument} must be a whole number from ${min} to ${max}, got ${value}`);
  }
  return value;
}
