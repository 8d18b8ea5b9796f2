--[[
  available-permits: the number of available permits of a semaphore (plain or expirable: they share the
  count), once the expirable permits whose lease ended are given back and dead queue entries are gone.

  KEYS[1] permitsKey    string: available permits
  KEYS[2] timeoutKey    sorted set "{<name>}:timeout": expirable permits -> lease end (epoch ms)
  KEYS[3] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[4] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed)
  KEYS[6] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    available permits (0 when the semaphore has none set)

  Side effects
    expirable permits whose lease ended go back (ZREMRANGEBYSCORE timeoutKey, INCRBY permitsKey) and wake
    the waiters they serve; entries whose deadline passed leave the queue (what they kept is announced)
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local queueKey = KEYS[3]
local deadlinesKey = KEYS[4]
local channel = KEYS[5]
local wakeChannel = KEYS[6]
local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, timeoutKey = timeoutKey, queueKey = queueKey, deadlinesKey = deadlinesKey,
  channel = channel, wakeChannel = wakeChannel, publish = publish,
}
reclaimPermits(q)
return (reapAndAnnounce(q))
