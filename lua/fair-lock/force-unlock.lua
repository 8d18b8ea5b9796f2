--[[
  force-unlock: free a fair lock whoever holds it, and wake the first waiter in line.

  KEYS[1] lockKey      the lock hash
  KEYS[2] queueKey     list of waiter ids
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)
  KEYS[4] channelBase  "redisson_lock__channel:{<name>}" (prefixed); waiters are woken on "<channelBase>:<id>"
  KEYS[5] holdKey      hash of this library's side fields of the holds (see includes/hold-key.lua)

  ARGV[1] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster

  Returns
    1  the lock was held and is now free
    0  the lock was not held

  Side effects
    DEL lockKey and holdKey; when the lock was deleted, drop head entries whose deadline passed and PUBLISH (or
    SPUBLISH) "0" to the head's channel. The queue itself is kept: its waiters still wait their turn
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local channelBase = KEYS[4]
local holdKey = KEYS[5]
local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "fair-queue"

redis.call('DEL', holdKey)
if redis.call('DEL', lockKey) == 0 then
  return 0
end
wakeFirst(queueKey, timeoutKey, channelBase, publish)
return 1
