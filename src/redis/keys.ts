/**
 * Redis names of one lock: its hash, its release channel and the auxiliary keys, all in one Cluster slot.
 *
 * The hash (`<keyPrefix><name>`) and the channel (`<keyPrefix>redisson_lock__channel:{<name>}`) are
 * Redisson's, so a Java service using Redisson's RLock on the same name excludes us and wakes our waiters.
 * The auxiliary keys carry a hash tag chosen so that they hash to the same slot as the lock hash, whatever
 * braces the name holds.
 */
export interface LockKeys {
  /** The lock hash: field = owner id, value = hold count. */
  readonly lockKey: string;
  /** Where the release script publishes `0` when the lock becomes free. */
  readonly channel: string;
  /**
   * Hash of this library's side fields of the holds (`<field>:acq`, `<field>:info`, `<field>:token`), kept
   * out of Redisson's hash; its TTL follows the holds' leases. A plain lock's lean hold has none until its
   * first renewal or re-entry (lua/lock/acquire.lua).
   */
  readonly holdKey: string;
  /**
   * The fencing counter shared by every lock of the key prefix in the lock's hash slot (on every topology,
   * so that the acquire script touches one slot): the last token drawn there. The one key without an
   * expiry; at most one per slot per prefix.
   */
  readonly fenceKey: string;
  /** The per-name fencing counter of earlier versions: read (never written) so that tokens keep rising. */
  readonly legacyFenceKey: string;
  /** Prefix of the short-lived keys that remember a release which freed the lock (append the request id). */
  readonly releaseMemoPrefix: string;
}

const SLOTS = 16384;

/**
 * The most arguments one request may carry, command name included: ElastiCache Serverless refuses more than
 * 3 999. Batches of the watchdog and of `flowlock/admin` are cut to stay within it; like one hash slot per
 * script call (keySlot), it is a limit of the managed services the library runs on.
 */
export const MAX_REQUEST_ARGS = 3999;

const crcTable = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = crc & 0xffff;
  }
  return table;
})();

/** CRC16-XMODEM over the UTF-8 bytes, as Redis Cluster computes key slots. */
function crc16(text: string): number {
  let crc = 0;
  // ASCII (most keys) is its own UTF-8: no buffer to allocate per key.
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code > 0x7f) return crc16OfBytes(Buffer.from(text, 'utf8'));
    crc = ((crc << 8) ^ (crcTable[((crc >> 8) ^ code) & 0xff] ?? 0)) & 0xffff;
  }
  return crc;
}

function crc16OfBytes(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) ^ (crcTable[((crc >> 8) ^ byte) & 0xff] ?? 0)) & 0xffff;
  return crc;
}

/** The part of a key Redis Cluster hashes: the first non-empty `{...}`, else the whole key. */
export function hashedPart(key: string): string {
  const open = key.indexOf('{');
  if (open === -1) return key;
  const close = key.indexOf('}', open + 1);
  if (close === -1 || close === open + 1) return key;
  return key.slice(open + 1, close);
}

export function keySlot(key: string): number {
  return crc16(hashedPart(key)) % SLOTS;
}

/**
 * A string that, wrapped in braces, hashes to `slot` like `lockKey` does. The hashed part of the lock key
 * itself serves unless it contains `}` (a key like `a}b` or `x{}y` with no valid tag): then the shortest
 * decimal number with the same slot stands in, found by a short deterministic search.
 */
function slotTag(lockKey: string): string {
  const hashed = hashedPart(lockKey);
  return hashed.includes('}') ? slotTagOf(keySlot(lockKey)) : hashed;
}

/**
 * Redisson's `prefixName(word, name)`: `word:{name}`, or `word:name` when the name already holds a `{`
 * (so that a name with its own hash tag keeps it).
 */
export function redissonPrefixName(word: string, name: string): string {
  return name.includes('{') ? `${word}:${name}` : `${word}:{${name}}`;
}

/** What every family member derives its names from: the lock hash, its slot tag and the key suffix. */
interface NameBase {
  readonly keyPrefix: string;
  readonly name: string;
  readonly lockKey: string;
  readonly tag: string;
  readonly suffix: string;
  readonly cluster: boolean;
}

function nameBase(keyPrefix: string, name: string, cluster: boolean): NameBase {
  const lockKey = keyPrefix + name;
  const tag = slotTag(lockKey);
  // The tag alone names the lock when it is the whole key; otherwise append the key so that two locks
  // sharing a tag (`a{t}`, `b{t}`) never share auxiliary keys.
  const suffix = tag === lockKey ? '' : `:${lockKey}`;
  return { keyPrefix, name, lockKey, tag, suffix, cluster };
}

/**
 * A name Redisson shares (`<keyPrefix>` + `word:{name}`); on Cluster, where a script may name only keys and
 * channels of one slot, a slot-consistent variant wherever Redisson's lands in another slot (a key prefix
 * without a hash tag, a name with an unbalanced brace): Redisson cannot share those locks anyway.
 */
function redissonName(base: NameBase, word: string, extended = false): string {
  const redisson = base.keyPrefix + redissonPrefixName(word, base.name);
  return base.cluster && !inLockSlot(base, redisson, extended)
    ? `${base.keyPrefix}${word}:{${base.tag}}${base.suffix}`
    : redisson;
}

/** Whether `name` (and, if `extended`, every `<name>:<suffix>`) hashes to the lock hash's slot. */
function inLockSlot(base: NameBase, name: string, extended: boolean): boolean {
  const slot = keySlot(base.lockKey);
  return keySlot(name) === slot && (!extended || keySlot(`${name}:x`) === slot);
}

/**
 * For each hash slot, the shortest decimal number that hashes to it, so that one fencing counter per slot
 * (`flowlock:fencing:{<n>}`) can serve every lock of the slot. Found by one scan upward from 0, carried on
 * only as far as the slots asked for need: the median slot's number is 11 206, the last slot's 109 757. The
 * table used to be built whole at a process's first lock, blocking the event loop 100-180 ms on a loaded
 * 2-core machine; now a first lock costs a few ms at the median, and a hundred names together about as much
 * as the whole table (30-50 ms there).
 */
const slotTags = new Array<string | undefined>(SLOTS);
let slotTagsScanned = 0;

function slotTagOf(slot: number): string {
  let tag = slotTags[slot];
  while (tag === undefined) {
    const candidate = String(slotTagsScanned++);
    const at = crc16(candidate) % SLOTS;
    slotTags[at] ??= candidate;
    if (at === slot) tag = candidate;
  }
  return tag;
}

/**
 * The fencing counter of the lock's prefix and slot, on every topology: a script call may touch keys of one
 * slot only, on a Cluster and on the proxy-sharded endpoints that look standalone (Azure Managed Redis with
 * its Enterprise policy, Redis Cloud multi-shard), which answer CROSSSLOT otherwise. So at most one counter
 * per slot per prefix (16 384). A prefix with a hash tag of its own puts every lock of the prefix in one
 * slot, and the counter with them; one whose braces derail the per-slot tag falls back to the lock's own
 * tag.
 *
 * Earlier versions kept one counter per prefix off a Cluster (`<prefix>flowlock:fencing`). Tokens still
 * rise across the change: a token is max(counter + 1, server clock in µs), and a counter runs ahead of the
 * clock only by the grants of one microsecond, so the first token drawn from a new, empty counter (the
 * clock) exceeds every token the old one gave, as long as the server's clock does not step back. The old
 * counter is left as it is (one key per prefix, the bound it always had).
 */
function sharedFenceKey(base: NameBase): string {
  const slot = keySlot(base.lockKey);
  const key = `${base.keyPrefix}flowlock:fencing:{${slotTagOf(slot)}}`;
  return keySlot(key) === slot ? key : `${base.keyPrefix}flowlock:fencing:{${base.tag}}`;
}

function ownKeys(base: NameBase): Pick<LockKeys, 'holdKey' | 'fenceKey' | 'legacyFenceKey' | 'releaseMemoPrefix'> {
  return {
    holdKey: `${base.keyPrefix}flowlock:hold:{${base.tag}}${base.suffix}`,
    fenceKey: sharedFenceKey(base),
    legacyFenceKey: `${base.keyPrefix}flowlock:fence:{${base.tag}}${base.suffix}`,
    releaseMemoPrefix: `${base.keyPrefix}flowlock:released:{${base.tag}}:`,
  };
}

/**
 * A lock client's holder record (lua/client/record.lua): who owns the holds whose owner ids start with
 * `clientId`, for `inspect`, `list` and `watch` while a hold has no holder info of its own. One short-lived
 * key per live lock client.
 */
export function clientRecordKey(keyPrefix: string, clientId: string): string {
  return `${keyPrefix}flowlock:client:${clientId}`;
}

/**
 * The keys of lock `name`. On Redis Cluster (`cluster`) the channel must share the lock's slot too, since
 * the release script names it in KEYS: Redisson's channel does when there is no prefix and the name has no
 * unbalanced braces (the cases where Redisson can share the lock); otherwise a slot-consistent variant is
 * used there.
 */
export function lockKeys(keyPrefix: string, name: string, cluster = false): LockKeys {
  const base = nameBase(keyPrefix, name, cluster);
  return { lockKey: base.lockKey, channel: redissonName(base, 'redisson_lock__channel'), ...ownKeys(base) };
}

/** A fair lock's keys: RLock's hash, plus Redisson's FIFO of waiters and their deadlines. */
export interface FairLockKeys extends LockKeys {
  /** List of waiter ids, first come first served. */
  readonly queueKey: string;
  /** Sorted set: waiter id -> deadline (epoch ms) after which it is presumed gone. */
  readonly timeoutKey: string;
  /** Each waiter is woken on `<channel>:<waiter id>`; `channel` itself carries nothing. */
  readonly channel: string;
}

export function fairLockKeys(keyPrefix: string, name: string, cluster = false): FairLockKeys {
  const base = nameBase(keyPrefix, name, cluster);
  return {
    lockKey: base.lockKey,
    channel: redissonName(base, 'redisson_lock__channel', true),
    queueKey: redissonName(base, 'redisson_lock_queue'),
    timeoutKey: redissonName(base, 'redisson_lock_timeout'),
    ...ownKeys(base),
  };
}

/** A read-write lock's keys: one hash (`mode`, read and write holds) and one channel for both sides. */
export interface ReadWriteLockKeys extends LockKeys {
  /** Redisson's `redisson_rwlock:{name}`: "0" when the last reader leaves, "1" when the writer does. */
  readonly channel: string;
  /**
   * Prefix of the per-read-hold timeout keys `<timeoutBase>:<owner>:rwlock_timeout:<k>` (Redisson's
   * `{name}`; see readTimeoutKeys).
   */
  readonly timeoutBase: string;
  /** Sorted set of this library's waiting writers (field -> deadline, epoch ms): new readers wait for them. */
  readonly writersKey: string;
}

export function readWriteLockKeys(keyPrefix: string, name: string, cluster = false): ReadWriteLockKeys {
  const base = nameBase(keyPrefix, name, cluster);
  const redissonBase = keyPrefix + (name.includes('{') ? name : `{${name}}`);
  return {
    lockKey: base.lockKey,
    channel: redissonName(base, 'redisson_rwlock'),
    timeoutBase:
      base.cluster && !inLockSlot(base, redissonBase, true) ? `${keyPrefix}{${base.tag}}${base.suffix}` : redissonBase,
    writersKey: `${keyPrefix}flowlock:writers:{${base.tag}}${base.suffix}`,
    ...ownKeys(base),
  };
}

/**
 * The timeout key `<timeoutBase>:<owner>:rwlock_timeout:<k>` of read hold `k` of `owner` (Redisson's name,
 * which its scripts build in Lua; ours get it in KEYS).
 */
export function readTimeoutKey(timeoutBase: string, owner: string, k: number): string {
  return `${timeoutBase}:${owner}:rwlock_timeout:${k}`;
}

/** The timeout keys of read holds 1..`count` of `owner`. */
export function readTimeoutKeys(timeoutBase: string, owner: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => readTimeoutKey(timeoutBase, owner, i + 1));
}

/**
 * A semaphore's names. RSemaphore and RPermitExpirableSemaphore share Redisson's permit counter and channel
 * (a Java client of either excludes ours); the expirable one adds the sorted set of its permits.
 */
export interface SemaphoreKeys {
  /** String: the number of available permits (Redisson's `N`). Files the permits' holds. */
  readonly lockKey: string;
  /** Redisson's `redisson_sc:{name}`: the new number of available permits whenever it grows. */
  readonly channel: string;
  /** Redisson's `{name}:timeout`: sorted set of permit id (16 raw bytes) -> lease end (epoch ms). */
  readonly timeoutKey: string;
  /** Ours: this library's waiters, first come first served (list of "<need>|<clientId>|<n>"). */
  readonly queueKey: string;
  /** Ours: sorted set of queue entry -> deadline (epoch ms) after which its waiter is presumed gone. */
  readonly deadlinesKey: string;
  /**
   * Queued waiters are woken on this channel (in the semaphore's slot), each by its entry as the message: one
   * channel that scripts declare, which the client of every queued waiter listens to.
   */
  readonly wakeChannel: string;
  /** Prefix of the memo of a grant (append the request id): a resend is answered, an undo finds it. */
  readonly acquireMemoPrefix: string;
  /** Prefix of the memo of a release (append the request id): a resend is answered, not run again. */
  readonly releaseMemoPrefix: string;
}

/** Redisson's `suffixName(name, suffix)`: `{name}:suffix`, or `name:suffix` when the name holds a `{`. */
function redissonSuffixName(name: string, suffix: string): string {
  return name.includes('{') ? `${name}:${suffix}` : `{${name}}:${suffix}`;
}

/**
 * A waiter's place in the permit queue (`queueKey`): "<entry>@<deadline>" (epoch ms), or the bare entry of the
 * earlier form, whose deadline is in `deadlinesKey` (lua/includes/permit-queue.lua).
 */
export function permitPlace(place: string): { readonly entry: string; readonly deadline: number | undefined } {
  const inPlace = /^(.*)@(\d+)$/.exec(place);
  return inPlace ? { entry: inPlace[1] ?? place, deadline: Number(inPlace[2]) } : { entry: place, deadline: undefined };
}

export function semaphoreKeys(keyPrefix: string, name: string, cluster = false): SemaphoreKeys {
  const base = nameBase(keyPrefix, name, cluster);
  const timeoutKey = keyPrefix + redissonSuffixName(name, 'timeout');
  return {
    lockKey: base.lockKey,
    channel: redissonName(base, 'redisson_sc'),
    timeoutKey:
      base.cluster && !inLockSlot(base, timeoutKey, false)
        ? `${keyPrefix}{${base.tag}}${base.suffix}:timeout`
        : timeoutKey,
    queueKey: `${keyPrefix}flowlock:permit-queue:{${base.tag}}${base.suffix}`,
    deadlinesKey: `${keyPrefix}flowlock:permit-deadlines:{${base.tag}}${base.suffix}`,
    wakeChannel: `${keyPrefix}flowlock:permit-wake:{${base.tag}}${base.suffix}`,
    acquireMemoPrefix: `${keyPrefix}flowlock:acquired:{${base.tag}}:`,
    releaseMemoPrefix: `${keyPrefix}flowlock:released:{${base.tag}}:`,
  };
}

/** A count-down latch's names. */
export interface LatchKeys {
  /** String: the count (Redisson's `N`); deleted when it reaches zero. */
  readonly lockKey: string;
  /** `redisson_countdownlatch__channel__{name}`: "0" when the count reaches zero, "1" when it is set. */
  readonly channel: string;
  /** Prefix of the memo of a count-down (append the request id): a resend does not count twice. */
  readonly countDownMemoPrefix: string;
}

/**
 * Redisson wraps the name in braces for the latch's channel whatever it holds. For a name that has braces
 * of its own that channel hashes to another slot than the count (`{a}b` -> tag `{a`), which a Cluster
 * refuses in one script: there, and only there, the channel carries the count's slot tag instead
 * (`redisson_countdownlatch__channel__{a}:{a}b`), so Java clients do not wake on our count-downs for such
 * names on a Cluster (they cannot count down there at all: CROSSSLOT).
 */
export function latchKeys(keyPrefix: string, name: string, cluster = false): LatchKeys {
  const base = nameBase(keyPrefix, name, cluster);
  const word = 'redisson_countdownlatch__channel__';
  const channel = `${keyPrefix}${word}{${name}}`;
  return {
    lockKey: base.lockKey,
    channel:
      base.cluster && !inLockSlot(base, channel, false) ? `${keyPrefix}${word}{${base.tag}}${base.suffix}` : channel,
    countDownMemoPrefix: `${keyPrefix}flowlock:counted:{${base.tag}}:`,
  };
}
