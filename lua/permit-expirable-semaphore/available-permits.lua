--[[
  available-permits: the number of available permits of an expirable semaphore, once the permits whose
  lease ended are given back.

  KEYS[1] permitsKey    string: available permits
  KEYS[2] timeoutKey    sorted set "{<name>}:timeout": permit id -> lease end (epoch ms)
  KEYS[3] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[4] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed)

  ARGV[1] wakePrefix  channel prefix of the queued waiters' clients
  ARGV[2] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    available permits (0 when the semaphore has none set)

  Side effects
    permits whose lease ended go back (ZREMRANGEBYSCORE timeoutKey, INCRBY permitsKey) and wake the
    waiters they serve
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local queueKey = KEYS[3]
local deadlinesKey = KEYS[4]
local channel = KEYS[5]
local wakePrefix = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "reclaim-permits"

reclaimPermits(permitsKey, timeoutKey, queueKey, deadlinesKey, wakePrefix, channel, publish, serverTime())
return tonumber(redis.call('GET', permitsKey) or 0)
