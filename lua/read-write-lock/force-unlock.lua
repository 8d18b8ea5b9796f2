--[[
  force-unlock: free a read-write lock held in the given mode, whoever holds it, and wake its waiters.

  KEYS[1] lockKey  the read-write lock hash
  KEYS[2] channel  "redisson_rwlock:{<name>}" (prefixed)
  KEYS[3] holdKey  hash of this library's side fields of the holds (see includes/hold-key.lua)

  ARGV[1] side     "read" (the read lock's forceUnlock) or "write" (the write lock's)
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster

  Returns
    1  the lock was held in that mode and is now free
    0  it was not (free, or held in the other mode): nothing changed

  Side effects
    DEL lockKey and holdKey; PUBLISH (or SPUBLISH) channel "0" (read) or "1" (write), as Redisson does. Read holds'
    timeout keys are left to run out
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local holdKey = KEYS[3]
local side = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

if redis.call('HGET', lockKey, 'mode') ~= side then
  return 0
end
redis.call('DEL', lockKey, holdKey)
redis.call(publish, channel, side == 'read' and '0' or '1')
return 1
