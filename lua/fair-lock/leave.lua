--[[
  leave: a waiter gives up (wait time over, aborted, client closed): its entry leaves the queue at once,
  and if the lock is free the waiter now first in line is woken (it may have been this one's turn).

  KEYS[1] lockKey      the lock hash
  KEYS[2] queueKey     list of waiter ids
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)
  KEYS[4] channelBase  "redisson_lock__channel:{<name>}" (prefixed); waiters are woken on "<channelBase>:<id>"

  ARGV[1] waiterId  the leaving waiter's id
  ARGV[2] publish   "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster

  Returns
    1  the entry was there and is gone
    0  there was no entry (never queued, purged, or already left)

  Side effects
    LREM queueKey waiterId; ZREM timeoutKey waiterId. Unlike Redisson's acquireFailed, later waiters'
    deadlines are not shortened. When lockKey does not exist: drop head entries whose deadline passed and
    PUBLISH (or SPUBLISH) "0" to the head's channel
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local channelBase = KEYS[4]
local waiterId = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "fair-queue"

redis.call('LREM', queueKey, 0, waiterId)
local removed = redis.call('ZREM', timeoutKey, waiterId)
if redis.call('EXISTS', lockKey) == 0 then
  wakeFirst(queueKey, timeoutKey, channelBase, publish)
end
return removed
