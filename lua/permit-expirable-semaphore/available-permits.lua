--[[
  available-permits: the number of available permits of an expirable semaphore, once the permits whose
  lease ended are given back.

  KEYS[1] permitsKey  string: available permits
  KEYS[2] timeoutKey  sorted set "{<name>}:timeout": permit id -> lease end (epoch ms)
  KEYS[3] channel     "redisson_sc:{<name>}" (prefixed)

  ARGV[1] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    available permits (0 when the semaphore has none set)

  Side effects
    permits whose lease ended go back: ZREMRANGEBYSCORE timeoutKey, INCRBY permitsKey, PUBLISH (or
    SPUBLISH) channel <available>
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local channel = KEYS[3]
local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "server-time"
--- @include "reclaim-permits"

reclaimPermits(permitsKey, timeoutKey, channel, publish, serverTime())
return tonumber(redis.call('GET', permitsKey) or 0)
