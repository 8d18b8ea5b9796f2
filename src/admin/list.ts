/**
 * `listLocks`: the held locks under a prefix, found by `SCAN MATCH <prefix><glob> TYPE hash` on every master
 * (a Cluster's keys are spread over them, and SCAN sees one node only), keeping the hashes of a lock's shape.
 * There is no index of held locks to read instead: one would be cross-slot on a Cluster and cost a write per
 * acquire and release. SCAN walks the whole keyspace of each master, so a listing costs O(keys in the
 * database), in batches of `count` keys per call. With `all`, also the names of this library's own keys of
 * a lock: its hold keys (`<prefix>flowlock:hold:…`, which live as long as a hold that was renewed or
 * re-entered, and until a lock freed by another client runs out its lease), and the per-name fencing
 * counters an earlier version left (`<prefix>flowlock:fence:…`), so held or not.
 */
import { describe, type RedisClient } from '../options.js';
import type { AdminNode } from '../redis/adapter.js';
import { lockKeys, type LockKeys } from '../redis/keys.js';
import { readLock, type LockInfo } from './inspect.js';
import { escapeGlob, globToRegExp, isLockShaped } from './shape.js';
import { adminTarget, checkCount, checkOptions, hashOf, pipeline, refusalOf, type AdminTarget } from './target.js';

/** Options of `listLocks`. */
export interface ListOptions {
  /** The lock clients' `keyPrefix` (after the Redis client's own, as for `createLockClient`). @default '' */
  readonly prefix?: string;
  /** A Redis glob on lock names (without the prefix). @default '*' */
  readonly match?: string;
  /**
   * Also the names this library's own keys show, held or not: hold keys of the current and recent holds,
   * and the per-name fencing counters of earlier versions. @default false
   */
  readonly all?: boolean;
  /** SCAN's COUNT: keys examined per call on a node (larger: fewer round trips, longer calls). @default 1000 */
  readonly count?: number;
  /** Stop after this many locks. @default no limit */
  readonly limit?: number;
}

/** What a listing cost so far (complete once its iteration ended). */
export interface ScanStats {
  /** Masters scanned. */
  masters: number;
  /** Keys in their databases when each scan began (DBSIZE): what SCAN walks. */
  keys: number;
  /** SCAN calls made. */
  calls: number;
  /** Keys SCAN returned (those matching the pattern and type, duplicates included). */
  returned: number;
  /** Milliseconds from the first command to the end of the iteration. */
  elapsedMs: number;
  /** What could not be read because the server refused a command (DBSIZE: `keys` leaves that master out). */
  readonly notices: string[];
}

/** The locks a listing finds, in scan order (not sorted), and what it cost. */
export interface LockListing extends AsyncIterable<LockInfo> {
  readonly stats: ScanStats;
}

/**
 * More fields than any lock hash has (a holder and its three side fields each, for a thousand readers of a
 * read-write lock): a larger hash is not read.
 */
export const MAX_LOCK_FIELDS = 4096;

/** Redis ≥ 6 filters SCAN by TYPE; Redis 5 answers the option with a syntax error. */
function isTypeOptionRefused(error: unknown): boolean {
  return error instanceof Error && /syntax error/i.test(error.message);
}

/** The keys one SCAN over `node` returns, batch by batch. */
export async function* scanNode(
  node: AdminNode,
  pattern: string,
  type: 'hash' | 'string',
  count: number,
  stats: ScanStats,
): AsyncGenerator<string[]> {
  let byType = true;
  let cursor = '0';
  do {
    let reply: [unknown, unknown[]];
    try {
      reply = (await (byType
        ? node.call(['SCAN', cursor, 'MATCH', pattern, 'COUNT', count, 'TYPE', type])
        : node.call(['SCAN', cursor, 'MATCH', pattern, 'COUNT', count]))) as [unknown, unknown[]];
    } catch (error) {
      if (!byType || !isTypeOptionRefused(error)) throw error;
      byType = false;
      continue;
    }
    stats.calls++;
    stats.returned += reply[1].length;
    cursor = String(reply[0]);
    let keys = reply[1].map(String);
    if (!byType && keys.length > 0) {
      const types = await pipeline(
        node,
        keys.map((key) => ['TYPE', key] as const),
      );
      keys = keys.filter((_, i) => String(types[i]?.value) === type);
    }
    if (keys.length > 0) yield keys;
  } while (cursor !== '0');
}

/** This library's own keys of one lock that `all` lists names from: the word in their name, and their type. */
export const OWN_KEYS = [
  { word: 'hold', type: 'hash', of: (keys: LockKeys) => keys.holdKey },
  { word: 'fence', type: 'string', of: (keys: LockKeys) => keys.legacyFenceKey },
] as const;

/**
 * The lock name an own key of a lock (`<prefix>flowlock:<word>:{<tag>}[:<lock key>]`) belongs to, or
 * undefined for a key that is not one. Read back from the key's name and confirmed by building it again
 * with keys.ts (so only keys.ts knows how it is built).
 */
export function nameOfOwnKey(target: AdminTarget, key: string, own: (typeof OWN_KEYS)[number]): string | undefined {
  const head = `${target.prefix}flowlock:${own.word}:{`;
  if (!key.startsWith(head)) return undefined;
  const close = key.indexOf('}', head.length);
  if (close === -1) return undefined;
  const tag = key.slice(head.length, close);
  const rest = key.slice(close + 1);
  const lockKey = rest === '' ? tag : rest.slice(1);
  if (!lockKey.startsWith(target.prefix)) return undefined;
  const name = lockKey.slice(target.prefix.length);
  return name !== '' && own.of(lockKeys(target.prefix, name, target.cluster)) === key ? name : undefined;
}

/** The names one node's keys show, batch by batch: lock-shaped hashes, or this library's own keys. */
async function* namesOn(
  target: AdminTarget,
  node: AdminNode,
  options: Required<Pick<ListOptions, 'match' | 'all' | 'count'>>,
  seen: Set<string>,
  stats: ScanStats,
): AsyncGenerator<string[]> {
  const { prefix } = target;
  const fresh = (key: string): boolean => !seen.has(key) && Boolean(seen.add(key));
  // With `all`, a name is listed once, whichever of its keys shows it first.
  const named = new Set<string>();
  const once = (name: string): boolean => !options.all || (!named.has(name) && Boolean(named.add(name)));
  if (options.all) {
    const wanted = globToRegExp(options.match);
    for (const own of OWN_KEYS) {
      const pattern = `${escapeGlob(prefix)}flowlock:${own.word}:*`;
      for await (const keys of scanNode(node, pattern, own.type, options.count, stats)) {
        const names = keys.filter(fresh).map((key) => nameOfOwnKey(target, key, own));
        yield names.filter((name): name is string => name !== undefined && wanted.test(name) && once(name));
      }
    }
  }
  const pattern = escapeGlob(prefix) + options.match;
  for await (const batch of scanNode(node, pattern, 'hash', options.count, stats)) {
    const candidates = batch.filter((key) => fresh(key) && !key.startsWith(`${prefix}flowlock:`));
    // Two pipelines per batch show which hashes have a lock's shape: their sizes first, so that a large
    // application hash is never read whole (HGETALL is O(fields) and blocks the server meanwhile).
    const sizes = await pipeline(
      node,
      candidates.map((key) => ['HLEN', key] as const),
    );
    const keys = candidates.filter((_, i) => Number(sizes[i]?.value ?? Infinity) <= MAX_LOCK_FIELDS);
    const hashes = await pipeline(
      node,
      keys.map((key) => ['HGETALL', key] as const),
    );
    yield keys
      .filter((_, i) => isLockShaped(hashOf(hashes[i]?.value)))
      .map((key) => key.slice(prefix.length))
      .filter(once);
  }
}

/** DBSIZE of `node`; 0 and a notice in `stats` when the server refuses it (the scan itself goes on). */
async function databaseSize(node: AdminNode, stats: ScanStats): Promise<number> {
  try {
    return Number(await node.call(['DBSIZE']));
  } catch (error) {
    const refused = refusalOf(error);
    if (refused === undefined) throw error;
    stats.notices.push(`keys on ${node.address} not counted (${refused})`);
    return 0;
  }
}

/**
 * Lists held locks (or, with `all`, every name this library ever locked) under `options.prefix` whose
 * names match `options.match`, scanning every master; each entry is what `inspectLock` reports, without
 * the subscriber count. Read only; costs O(keys in the database) per master (see `stats`). The masters are
 * read again at the end: one that appeared meanwhile (a failover) is scanned too, and keys seen twice count
 * once.
 */
export function listLocks(client: RedisClient, options?: ListOptions): LockListing {
  const checked = checkOptions(options, ['prefix', 'match', 'all', 'count', 'limit']);
  const target = adminTarget(client, checked['prefix']);
  const { match = '*', all = false } = checked;
  if (typeof match !== 'string' || match === '') {
    throw new TypeError(`options.match must be a non-empty string, got ${describe(match)}`);
  }
  if (typeof all !== 'boolean') throw new TypeError(`options.all must be a boolean, got ${describe(all)}`);
  const count = checkCount(checked['count'], 'options.count', 1) ?? 1000;
  const limit = checkCount(checked['limit'], 'options.limit', 1) ?? Infinity;
  const stats: ScanStats = { masters: 0, keys: 0, calls: 0, returned: 0, elapsedMs: 0, notices: [] };
  return {
    stats,
    async *[Symbol.asyncIterator]() {
      const started = performance.now();
      const seen = new Set<string>();
      const scanned = new Set<string>();
      let found = 0;
      try {
        for (let pass = 0; pass < 2; pass++) {
          for (const node of await target.nodes.masters()) {
            const at = node.address;
            if (scanned.has(at)) continue;
            scanned.add(at);
            stats.masters++;
            stats.keys += await databaseSize(node, stats);
            for await (const names of namesOn(target, node, { match, all, count }, seen, stats)) {
              // A batch is read at once: its MULTIs go out back to back on the client's connections.
              for (const info of await Promise.all(names.map((name) => readLock(target, name, undefined, at)))) {
                if (!all && !info.held) continue;
                yield info;
                if (++found >= limit) return;
              }
            }
          }
        }
      } finally {
        stats.elapsedMs = performance.now() - started;
      }
    },
  };
}
