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
  /** Persistent fencing counter, incremented on every free -> held transition. */
  readonly fenceKey: string;
  /** Prefix of the short-lived keys that remember a release which freed the lock (append the request id). */
  readonly releaseMemoPrefix: string;
}

const SLOTS = 16384;

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
  for (const byte of Buffer.from(text, 'utf8')) {
    crc = ((crc << 8) ^ (crcTable[((crc >> 8) ^ byte) & 0xff] ?? 0)) & 0xffff;
  }
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
  if (!hashed.includes('}')) return hashed;
  const slot = keySlot(lockKey);
  for (let i = 0; ; i++) {
    if (crc16(String(i)) % SLOTS === slot) return String(i);
  }
}

/**
 * The keys of lock `name`. On Redis Cluster (`cluster`) the channel must share the lock's slot too, since
 * the release script names it in KEYS: Redisson's channel does when there is no prefix and the name has no
 * braces (the case where Redisson can share the lock); otherwise a slot-consistent variant is used there.
 */
export function lockKeys(keyPrefix: string, name: string, cluster = false): LockKeys {
  const lockKey = keyPrefix + name;
  const tag = slotTag(lockKey);
  // The tag alone names the lock when it is the whole key; otherwise append the key so that two locks
  // sharing a tag (`a{t}`, `b{t}`) never share auxiliary keys.
  const suffix = tag === lockKey ? '' : `:${lockKey}`;
  const redissonChannel = `${keyPrefix}redisson_lock__channel:{${name}}`;
  const channel =
    cluster && keySlot(redissonChannel) !== keySlot(lockKey)
      ? `${keyPrefix}redisson_lock__channel:{${tag}}${suffix}`
      : redissonChannel;
  return {
    lockKey,
    channel,
    fenceKey: `${keyPrefix}flowlock:fence:{${tag}}${suffix}`,
    releaseMemoPrefix: `${keyPrefix}flowlock:released:{${tag}}:`,
  };
}
