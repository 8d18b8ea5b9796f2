--[[
  try-set-permits: set the number of permits of a semaphore that has none set yet.

  KEYS[1] permitsKey  string: available permits
  KEYS[2] channel     "redisson_sc:{<name>}" (prefixed)

  ARGV[1] permits  integer >= 1
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1  set
    0  the semaphore already had a count (unchanged)

  Side effects
    SET permitsKey permits and PUBLISH (or SPUBLISH) channel <permits>, when the key did not exist
]]
local permitsKey = KEYS[1]
local channel = KEYS[2]
local permits = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

if redis.call('SET', permitsKey, permits, 'NX') then
  redis.call(publish, channel, permits)
  return 1
end
return 0
