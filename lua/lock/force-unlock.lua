--[[
  force-unlock: free a lock whoever holds it, and wake its waiters.

  KEYS[1] lockKey  the lock hash
  KEYS[2] channel  release channel "redisson_lock__channel:{<name>}" (prefixed)
  KEYS[3] holdKey  hash of this library's side fields of the holds (see includes/hold-key.lua)

  ARGV[1] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1  the lock was held and is now free
    0  the lock was not held

  Side effects
    DEL lockKey and holdKey; PUBLISH (or SPUBLISH) channel "0" when the lock was held
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local holdKey = KEYS[3]
local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

redis.call('DEL', holdKey)
if redis.call('DEL', lockKey) == 1 then
  redis.call(publish, channel, '0')
  return 1
end
return 0
