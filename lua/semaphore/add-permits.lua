--[[
  add-permits: add to (or, with a negative delta, take from) the available permits of a semaphore.

  KEYS[1] permitsKey  string: available permits (created at 0 if missing)
  KEYS[2] channel     "redisson_sc:{<name>}" (prefixed)

  ARGV[1] delta    integer, not 0
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    the number of available permits afterwards (negative when more were taken than there were)

  Side effects
    INCRBY permitsKey delta (keeps a TTL the key has, unlike Redisson's SET); PUBLISH (or SPUBLISH)
    channel <available> when the delta is positive and permits are available
]]
local permitsKey = KEYS[1]
local channel = KEYS[2]
local delta = tonumber(ARGV[1])
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local available = redis.call('INCRBY', permitsKey, delta)
if delta > 0 and available > 0 then
  redis.call(publish, channel, available)
end
return available
