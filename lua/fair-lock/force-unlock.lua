--[[
  force-unlock: free a fair lock whoever holds it, and wake the first waiter in line.

  KEYS[1] lockKey      the lock hash
  KEYS[2] queueKey     list of waiter ids
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)
  KEYS[4] holdKey      hash of this library's side fields of the holds (see includes/hold-key.lua)

  ARGV    none

  Returns
    {1, head}  the lock was held and is now free; head: the id of the waiter now first in line (nil: none),
               for the client to wake (see fair-lock/release.lua)
    {0}        the lock was not held

  Side effects
    DEL lockKey and holdKey; when the lock was deleted, drop head entries whose deadline passed. The queue
    itself is kept: its waiters still wait their turn
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local holdKey = KEYS[4]

--- @include "fair-queue"

redis.call('DEL', holdKey)
if redis.call('DEL', lockKey) == 0 then
  return {0}
end
return {1, firstToWake(queueKey, timeoutKey)}
