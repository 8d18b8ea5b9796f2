/**
 * Reading a lock hash: which fields are holders, what they hold, and since when. Holders are the fields
 * with an integer value (Redisson's layout: `<clientId>:<flowId>` = hold count, `<…>:write` for a write
 * hold), except `mode`. This library keeps its side fields of each holder in a hash of its own (the hold
 * key): `<field>:acq` and `<field>:rel` (request-id memos), `<field>:token`, and `<field>:info`
 * (`#<server time µs> <label>`, written with a fresh hold); earlier versions kept them in the lock hash
 * itself, where they are still recognised (a rolling upgrade). Java clients write no `:info`: their holders
 * show no age and no label.
 */

/** The members of the lock family, as `inspectLock` tells them apart. */
export type LockKind =
  'lock' | 'fair-lock' | 'read-write-lock' | 'semaphore' | 'permit-expirable-semaphore' | 'count-down-latch';

export const LOCK_KINDS: readonly LockKind[] = [
  'lock',
  'fair-lock',
  'read-write-lock',
  'semaphore',
  'permit-expirable-semaphore',
  'count-down-latch',
];

/** One holder of a lock hash. */
export interface Holder {
  /** The hash field: `<clientId>:<flowId>`, or `<clientId>:<flowId>:write` for a write hold. */
  readonly owner: string;
  readonly clientId: string;
  /** A flow id of this library, a thread id of a Java client. */
  readonly flowId: string;
  /** `read` or `write` on a read-write lock, else null. */
  readonly mode: 'read' | 'write' | null;
  readonly holdCount: number;
  /**
   * When the hold began (server clock, ISO 8601), from the holder info; null without it (a Java client,
   * holder info off, or a plain lock's hold not renewed yet: it records the info at its first renewal).
   */
  readonly since: string | null;
  /** How long it has been held, by the server's clock; null without holder info. */
  readonly heldMs: number | null;
  /** The holder's label (`<host> pid <pid> (<app>)`); null without holder info (see `since`). */
  readonly who: string | null;
  /**
   * A read hold's remaining lease: the longest TTL of its per-hold timeout keys (0 when they all ran out: a
   * dead reader that other readers keep in the hash). null for other holds (the lock's TTL is theirs).
   */
  readonly leaseMs: number | null;
}

/** Side fields earlier versions kept in the lock hash. */
const SIDE_FIELDS = [':acq', ':rel', ':info'] as const;
const WRITE_SUFFIX = ':write';
const INTEGER = /^-?\d+$/;

function isSideField(field: string): boolean {
  return SIDE_FIELDS.some((suffix) => field.endsWith(suffix));
}

function isHolderField(field: string, value: string): boolean {
  return field !== 'mode' && !isSideField(field) && INTEGER.test(value);
}

/**
 * Whether a hash has a lock's shape: at least one holder field with a `:` in its name, and nothing but
 * holders, their side fields and a read-write lock's `mode`. Lock hashes carry no marker (Redisson's layout),
 * so an application hash of that shape is taken for a lock.
 */
export function isLockShaped(hash: Readonly<Record<string, string>>): boolean {
  let holders = 0;
  for (const [field, value] of Object.entries(hash)) {
    if (field === 'mode') {
      if (value !== 'read' && value !== 'write') return false;
    } else if (isHolderField(field, value)) {
      if (!field.includes(':')) return false;
      holders++;
    } else if (!isSideField(field)) {
      return false;
    }
  }
  return holders > 0;
}

/** Holder info `#<µs> <label>`: when and by whom the hold was taken. */
function parseInfo(value: string | undefined): { readonly sinceMs: number; readonly who: string } | undefined {
  const match = value === undefined ? null : /^#(\d+) (.*)$/s.exec(value);
  if (!match) return undefined;
  return { sinceMs: Number(match[1]) / 1000, who: match[2] ?? '' };
}

/**
 * The holders of a lock hash, at server time `nowMs`; `leases` gives read holds' remaining leases by
 * field; `side` is the lock's hold key (holder info); `records` the holder records by client id. Sorted by age, oldest first, holders without info last.
 */
export function parseHolders(
  hash: Readonly<Record<string, string>>,
  nowMs: number,
  leases: ReadonlyMap<string, number> = new Map(),
  side: Readonly<Record<string, string>> = {},
  records: ReadonlyMap<string, string> = new Map(),
): Holder[] {
  const readWrite = hash['mode'] !== undefined;
  const holders: Holder[] = [];
  for (const [field, value] of Object.entries(hash)) {
    if (!isHolderField(field, value)) continue;
    const write = readWrite && field.endsWith(WRITE_SUFFIX);
    const id = write ? field.slice(0, -WRITE_SUFFIX.length) : field;
    const colon = id.lastIndexOf(':');
    const clientId = colon === -1 ? id : id.slice(0, colon);
    const info = parseInfo(side[`${field}:info`] ?? hash[`${field}:info`]);
    holders.push({
      owner: field,
      clientId,
      flowId: colon === -1 ? '' : id.slice(colon + 1),
      mode: readWrite ? (write ? 'write' : 'read') : null,
      holdCount: Number(value),
      since: info ? new Date(info.sinceMs).toISOString() : null,
      heldMs: info ? Math.max(0, Math.round(nowMs - info.sinceMs)) : null,
      // Without holder info of its own, its client's record says who (not since when).
      who: info ? info.who : (records.get(clientId) ?? null),
      leaseMs: leases.get(field) ?? null,
    });
  }
  return holders.sort(byAge);
}

/** Oldest first; holders of unknown age last, by owner id. */
function byAge(a: Holder, b: Holder): number {
  if (a.heldMs !== null && b.heldMs !== null) return b.heldMs - a.heldMs;
  if (a.heldMs !== null) return -1;
  if (b.heldMs !== null) return 1;
  return a.owner < b.owner ? -1 : a.owner > b.owner ? 1 : 0;
}

/** Escapes the glob characters of `text` for a SCAN MATCH pattern. */
export function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** A RegExp that matches what the Redis glob `pattern` matches (`*`, `?`, `[…]`, `[^…]`, `\x`). */
export function globToRegExp(pattern: string): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i] ?? '';
    if (char === '*') source += '[\\s\\S]*';
    else if (char === '?') source += '[\\s\\S]';
    else if (char === '\\' && i + 1 < pattern.length) source += escapeRegExp(pattern[++i] ?? '');
    else if (char === '[') {
      const close = pattern.indexOf(']', i + 2);
      if (close === -1) {
        source += '\\[';
        continue;
      }
      let body = pattern.slice(i + 1, close);
      const negated = body.startsWith('^');
      if (negated) body = body.slice(1);
      source += `[${negated ? '^' : ''}${body.replace(/[\]\\^]/g, '\\$&')}]`;
      i = close;
    } else source += escapeRegExp(char);
  }
  return new RegExp(`^${source}$`, 'u');
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/** Whether `pattern` has glob characters (a lock name to watch is a pattern only then). */
export function isGlob(pattern: string): boolean {
  return /[*?[]/.test(pattern);
}
