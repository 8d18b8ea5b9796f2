--[[
  leave: a waiter gives up (wait time over, aborted, client closed): its entry leaves the queue at once,
  and if the lock is free the waiter now first in line is woken (it may have been this one's turn).

  KEYS[1] lockKey      the lock hash
  KEYS[2] queueKey     list of waiter ids
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)

  ARGV[1] waiterId  the leaving waiter's id

  Returns
    {removed, head}  removed: 1 the entry was there and is gone, 0 there was none (never queued, purged, or
                     already left); head: when the lock is free, the id of the waiter now first in line, for
                     the client to wake (see fair-lock/release.lua), else nil

  Side effects
    LREM queueKey waiterId; ZREM timeoutKey waiterId. Unlike Redisson's acquireFailed, later waiters'
    deadlines are not shortened. When lockKey does not exist: drop head entries whose deadline passed
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local waiterId = ARGV[1]

--- @include "fair-queue"

redis.call('LREM', queueKey, 0, waiterId)
local removed = redis.call('ZREM', timeoutKey, waiterId)
if redis.call('EXISTS', lockKey) == 0 then
  return {removed, firstToWake(queueKey, timeoutKey)}
end
return {removed}
