--[[
  release: give back one permit of an expirable semaphore by its id, if its lease has not ended.

  KEYS[1] permitsKey  string: available permits
  KEYS[2] timeoutKey  sorted set "{<name>}:timeout": permit id -> lease end (epoch ms)
  KEYS[3] channel     "redisson_sc:{<name>}" (prefixed): gets the new number of available permits
  KEYS[4] memoKey     memo of this release (release memo prefix + request id)

  ARGV[1] permitId  16 raw bytes
  ARGV[2] memoMs    integer > 0, milliseconds: how long memoKey is kept
  ARGV[3] publish   "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {0, 0, woken}  released (or released already by an earlier send of this request: woken 0)
    {-1, 0, 0}     the permit was not held: unknown, released already, or its lease had ended (it is
                   given back now all the same, as Redisson 3.17+ does)

  Side effects
    permits whose lease ended go back first (ZREMRANGEBYSCORE, INCRBY, publish); then ZREM timeoutKey
    permitId, INCRBY permitsKey 1, PUBLISH (or SPUBLISH) channel <available>, SET memoKey 1 PX memoMs
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local channel = KEYS[3]
local memoKey = KEYS[4]
local permitId = ARGV[1]
local memoMs = tonumber(ARGV[2])
local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "server-time"
--- @include "reclaim-permits"

if redis.call('EXISTS', memoKey) == 1 then
  return {0, 0, 0}
end
reclaimPermits(permitsKey, timeoutKey, channel, publish, serverTime())
if redis.call('ZREM', timeoutKey, permitId) == 0 then
  return {-1, 0, 0}
end
local available = redis.call('INCRBY', permitsKey, 1)
local woken = 0
if available > 0 then
  woken = redis.call(publish, channel, available)
end
redis.call('SET', memoKey, 1, 'PX', memoMs)
return {0, 0, woken}
