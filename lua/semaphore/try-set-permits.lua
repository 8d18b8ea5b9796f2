--[[
  try-set-permits: set the number of permits of a semaphore that has none set yet.

  KEYS[1] permitsKey    string: available permits
  KEYS[2] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[3] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[4] channel       "redisson_sc:{<name>}" (prefixed)
  KEYS[5] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] permits     integer >= 1
  ARGV[2] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1  set
    0  the semaphore already had a count (unchanged)

  Side effects
    when the key did not exist: SET permitsKey permits; the queued waiters they serve are woken, and what
    no queued waiter needs is published on channel
]]
local permitsKey = KEYS[1]
local queueKey = KEYS[2]
local deadlinesKey = KEYS[3]
local channel = KEYS[4]
local wakeChannel = KEYS[5]
local permits = tonumber(ARGV[1])
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, queueKey = queueKey, deadlinesKey = deadlinesKey, channel = channel,
  wakeChannel = wakeChannel, publish = publish,
}

if redis.call('SET', permitsKey, permits, 'NX') then
  announcePermits(q, permits)
  return 1
end
return 0
