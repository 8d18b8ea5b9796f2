/**
 * What the previous Redis layout left: a fencing counter per lock name (`<prefix>flowlock:fence:{<tag>}…`,
 * no expiry, so one key for every name ever locked) and, in the hashes of locks its clients hold, this
 * library's side fields (`<owner>:acq`, `<owner>:rel`, `<owner>:info`) beside Redisson's. `findLegacyLayout`
 * counts them (`flowlock doctor`); `removeLegacyLayout` removes them (`flowlock cleanup --yes`), for use once
 * no client of the previous version runs: its holds need their memo fields for resends.
 */
import type { RedisClient } from '../options.js';
import type { AdminCommand, AdminNode } from '../redis/adapter.js';
import { lockKeys, MAX_REQUEST_ARGS } from '../redis/keys.js';
import { MAX_LOCK_FIELDS, nameOfOwnKey, OWN_KEYS, scanNode, type ScanStats } from './list.js';
import { escapeGlob, isLockShaped } from './shape.js';
import { adminTarget, checkCount, checkOptions, hashOf, pipeline, type AdminTarget } from './target.js';

/** Options of `findLegacyLayout` and `removeLegacyLayout`. */
export interface LegacyOptions {
  /** The lock clients' `keyPrefix`; `findLegacyLayout` without it looks under every prefix. */
  readonly prefix?: string;
  /** SCAN's COUNT. @default 1000 */
  readonly count?: number;
}

/** What the previous layout left under a prefix. */
export interface LegacyLayout {
  /** Per-name fencing counters (`flowlock:fence:…`). */
  readonly fenceKeys: number;
  /** Lock hashes with side fields of the previous layout (held by its clients now). */
  readonly lockHashes: number;
  /** Those side fields. */
  readonly fields: number;
  /** The first few of those keys. */
  readonly examples: readonly string[];
}

/** What `removeLegacyLayout` removed. */
export interface LegacyRemoval {
  readonly fenceKeys: number;
  readonly lockHashes: number;
  readonly fields: number;
}

const LEGACY_SIDE_FIELDS = /:(acq|rel|info)$/;
/** This library's own keys, under any prefix: `<prefix>flowlock:<word>:{<tag>}...`. */
const OWN_KEY_SHAPE = /flowlock:[a-z-]+:\{/;
const EXAMPLES = 10;

interface Found {
  readonly fenceKeys: { readonly key: string; readonly fenceKey: string | undefined }[];
  readonly hashes: { readonly node: AdminNode; readonly key: string; readonly fields: string[] }[];
}

/**
 * Scans every master for the previous layout's keys under `prefix` (every prefix when undefined; a fence
 * key is then not tied to its lock's shared counter).
 */
async function survey(target: AdminTarget, prefix: string | undefined, count: number): Promise<Found> {
  const stats: ScanStats = { masters: 0, keys: 0, calls: 0, returned: 0, elapsedMs: 0, notices: [] };
  const found: Found = { fenceKeys: [], hashes: [] };
  const fencePattern = prefix === undefined ? '*flowlock:fence:*' : `${escapeGlob(prefix)}flowlock:fence:*`;
  const hashPattern = prefix === undefined ? '*' : `${escapeGlob(prefix)}*`;
  for (const node of await target.nodes.masters()) {
    for await (const keys of scanNode(node, fencePattern, 'string', count, stats)) {
      for (const key of keys) {
        const name = prefix === undefined ? undefined : nameOfOwnKey(target, key, OWN_KEYS[1]);
        found.fenceKeys.push({
          key,
          fenceKey: name === undefined ? undefined : lockKeys(target.prefix, name, target.cluster).fenceKey,
        });
      }
    }
    for await (const batch of scanNode(node, hashPattern, 'hash', count, stats)) {
      // This library's own hashes (hold keys) are not locks; a lock of the previous layout whose name holds
      // "flowlock:" (allowed then) is: the same test as listLocks' with a known prefix, else the own keys' shape.
      const candidates = batch.filter((key) =>
        prefix === undefined ? !OWN_KEY_SHAPE.test(key) : !key.startsWith(`${prefix}flowlock:`),
      );
      const sizes = await pipeline(
        node,
        candidates.map((key) => ['HLEN', key] as const),
      );
      const keys = candidates.filter((_, i) => Number(sizes[i]?.value ?? Infinity) <= MAX_LOCK_FIELDS);
      const hashes = await pipeline(
        node,
        keys.map((key) => ['HGETALL', key] as const),
      );
      keys.forEach((key, i) => {
        const hash = hashOf(hashes[i]?.value);
        const fields = Object.keys(hash).filter((field) => LEGACY_SIDE_FIELDS.test(field));
        if (fields.length > 0 && isLockShaped(hash)) found.hashes.push({ node, key, fields });
      });
    }
  }
  return found;
}

function checked(client: RedisClient, options: unknown): [AdminTarget, string | undefined, number] {
  const { prefix, count } = checkOptions(options, ['prefix', 'count']);
  const target = adminTarget(client, prefix);
  return [target, prefix === undefined ? undefined : target.prefix, checkCount(count, 'options.count', 1) ?? 1000];
}

/**
 * Counts what the previous layout left under `options.prefix` (under every prefix without it), scanning
 * every master: O(keys in the database). Read only.
 */
export async function findLegacyLayout(client: RedisClient, options?: LegacyOptions): Promise<LegacyLayout> {
  const [target, prefix, count] = checked(client, options);
  const found = await survey(target, prefix, count);
  return {
    fenceKeys: found.fenceKeys.length,
    lockHashes: found.hashes.length,
    fields: found.hashes.reduce((sum, hash) => sum + hash.fields.length, 0),
    examples: [...found.fenceKeys.map((f) => f.key), ...found.hashes.map((h) => h.key)].slice(0, EXAMPLES),
  };
}

/**
 * Removes what the previous layout left under `options.prefix` (default ''): each per-name fencing counter,
 * its value first carried into the shared counter of its lock (so tokens never fall back), and the side
 * fields in lock hashes. Run it once no client of the previous version runs: a hold of one loses the memos
 * its resends need.
 */
export async function removeLegacyLayout(client: RedisClient, options?: LegacyOptions): Promise<LegacyRemoval> {
  const [target, prefix, count] = checked(client, options);
  const found = await survey(target, prefix ?? '', count);
  let fenceKeys = 0;
  for (const { key, fenceKey } of found.fenceKeys) {
    // A key under the prefix that no lock name builds is not one of ours.
    if (fenceKey === undefined) continue;
    fenceKeys += Number(await target.scripts.run('admin/retire-legacy-fence', [key, fenceKey], []));
  }
  let fields = 0;
  for (const { node, key, fields: side } of found.hashes) {
    // HDEL and the key, then at most MAX_REQUEST_ARGS - 2 fields a command (a hash of many old holds).
    const per = MAX_REQUEST_ARGS - 2;
    const commands: AdminCommand[] = [];
    for (let i = 0; i < side.length; i += per) commands.push(['HDEL', key, ...side.slice(i, i + per)]);
    for (const reply of await pipeline(node, commands)) fields += Number(reply.value ?? 0);
  }
  return { fenceKeys, lockHashes: found.hashes.length, fields };
}
