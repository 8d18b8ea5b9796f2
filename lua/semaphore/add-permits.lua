--[[
  add-permits: add to (or, with a negative delta, take from) the available permits of a semaphore.

  KEYS[1] permitsKey    string: available permits (created at 0 if missing)
  KEYS[2] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[3] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[4] channel       "redisson_sc:{<name>}" (prefixed)
  KEYS[5] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] delta       integer, not 0
  ARGV[2] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    the number of available permits afterwards (negative when more were taken than there were)

  Side effects
    INCRBY permitsKey delta (keeps a TTL the key has, unlike Redisson's SET); when the delta is positive
    and permits are available, the queued waiters they serve are woken (but those the permits free before
    served: woken already), and what no queued waiter needs is published on channel
]]
local permitsKey = KEYS[1]
local queueKey = KEYS[2]
local deadlinesKey = KEYS[3]
local channel = KEYS[4]
local wakeChannel = KEYS[5]
local delta = tonumber(ARGV[1])
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, queueKey = queueKey, deadlinesKey = deadlinesKey, channel = channel,
  wakeChannel = wakeChannel, publish = publish,
}

local available = redis.call('INCRBY', permitsKey, delta)
if delta > 0 and available > 0 then
  announcePermits(q, available, available - delta)
end
return available
