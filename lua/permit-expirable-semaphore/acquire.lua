--[[
  acquire: take one permit of an expirable semaphore under the caller's permit id, for leaseMs.

  KEYS[1] permitsKey  string: available permits (shared with Redisson's RPermitExpirableSemaphore)
  KEYS[2] timeoutKey  sorted set "{<name>}:timeout": permit id (16 raw bytes) -> lease end, epoch ms
                      (Redisson's 922337203685477 = no lease)
  KEYS[3] channel     "redisson_sc:{<name>}" (prefixed): gets the new number of available permits

  ARGV[1] permitId  16 raw bytes, chosen by the caller (random)
  ARGV[2] leaseMs   integer > 0, milliseconds
  ARGV[3] publish   "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {1, left}                 granted (or already granted to this permit id: a resend); left = available
    {0, available, untilMs}   not granted; untilMs = milliseconds until the earliest lease ends (when its
                              permit comes back), -1 when no permit has a lease

  Side effects
    first, permits whose lease ended go back: ZREMRANGEBYSCORE timeoutKey, INCRBY permitsKey, PUBLISH
    (or SPUBLISH) channel <available>;
    granted: DECRBY permitsKey 1; ZADD timeoutKey <now + leaseMs> permitId; the permit key's TTL, if any,
    is copied to timeoutKey (Redisson #2444). Server time (TIME), not the client's clock
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local channel = KEYS[3]
local permitId = ARGV[1]
local leaseMs = tonumber(ARGV[2])
local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "server-time"
--- @include "reclaim-permits"

local now = serverTime()
reclaimPermits(permitsKey, timeoutKey, channel, publish, now)

local available = tonumber(redis.call('GET', permitsKey) or 0)
if redis.call('ZSCORE', timeoutKey, permitId) then
  return {1, available}
end
if available >= 1 then
  local left = redis.call('DECRBY', permitsKey, 1)
  redis.call('ZADD', timeoutKey, now + leaseMs, permitId)
  local pttl = redis.call('PTTL', permitsKey)
  if pttl > 0 then
    redis.call('PEXPIRE', timeoutKey, pttl)
  end
  return {1, left}
end

local earliest = redis.call('ZRANGE', timeoutKey, 0, 0, 'WITHSCORES')
local untilMs = -1
if earliest[2] and tonumber(earliest[2]) ~= 922337203685477 then
  untilMs = math.max(0, tonumber(earliest[2]) - now)
end
return {0, available, untilMs}
