-- The hold key: this library's hash beside a lock (Redisson's hash holds only Redisson's fields), with, per
-- hold field: "<field>:acq" the request id of the owner's last acquire (a resend is answered from it, not
-- run twice), "<field>:token" the hold's fencing token (plain, fair and write holds), "<field>:info" the
-- holder info. A plain lock's hold taken lean (lock/acquire.lua) has none of them until its first renewal
-- writes the token and info, or a re-entry its memo: the uncontended cycle never creates the key. (A
-- release's memo, "<field>:rel" in earlier versions, is in the release's requestKey.) Its TTL is never
-- shorter than the lease of any hold this library took or renewed on the lock, and it is deleted with the
-- lock, so it outlives the lock only when something else frees it (a Java client, an eviction), and then
-- by at most that lease.

-- extendHold(holdKey, leaseMs): the hold key lives at least leaseMs more (a key an HSET just created, with no
-- TTL yet, gets one). Callers pass at least the lock key's TTL too, so that the key outlives every hold.
local function extendHold(holdKey, leaseMs)
  if redis.call('PTTL', holdKey) < leaseMs then
    redis.call('PEXPIRE', holdKey, leaseMs)
  end
end
