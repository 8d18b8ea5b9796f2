/**
 * The scripts of the floors that the uncontended cycle is measured against, shared by the benchmark
 * (adapters.ts) and `scripts/bench-cycle.mjs`: plain strings, so that a script of the repository can load
 * them without the benchmark's client libraries.
 */

/** `set-nx-baseline`'s release: KEYS key; ARGV token. Deletes the key if it still holds the token. */
export const COMPARE_AND_DELETE =
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/**
 * The RLock-layout floor's take: KEYS lock; ARGV lease ms, owner. Free or held by the owner: count it in and
 * set the lease (nil); else the holder's TTL.
 */
export const LAYOUT_ACQUIRE = `
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return false
end
return redis.call('PTTL', KEYS[1])`;
/**
 * Its release: KEYS lock, channel, memo; ARGV owner, memo ms. A resend is answered from the memo; the last
 * hold deletes the hash and announces it; the answer is kept in the memo (PX).
 */
export const LAYOUT_RELEASE = `
local done = redis.call('GET', KEYS[3])
if done then return tonumber(done) end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[2])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], 0)
redis.call('SET', KEYS[3], 1, 'PX', ARGV[2])
return 1`;

/**
 * The RLock wire's floor of each flowlock variant of scenario (a): the same scripts driven by the client that
 * variant runs on (issue 41 judges flowlock on a client against the wire on that same client).
 */
export const WIRE_FLOORS = {
  flowlock: 'rlock-layout-floor',
  'flowlock-withlock': 'rlock-layout-floor',
  'flowlock-node-redis': 'rlock-layout-floor-node-redis',
  'flowlock-iovalkey': 'rlock-layout-floor-iovalkey',
  'flowlock-glide': 'rlock-layout-floor-glide',
} as const;
