--[[
  try-set-count: arm a count-down latch that is not counting (its count is zero, or was never set).

  KEYS[1] latchKey  string: the count
  KEYS[2] channel   "redisson_countdownlatch__channel__{<name>}" (prefixed)

  ARGV[1] count    integer >= 1
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1  set
    0  the latch is already counting (unchanged)

  Side effects
    SET latchKey count and PUBLISH (or SPUBLISH) channel "1" (Redisson's "new count"), when the key did
    not exist
]]
local latchKey = KEYS[1]
local channel = KEYS[2]
local count = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

if redis.call('SET', latchKey, count, 'NX') then
  redis.call(publish, channel, '1')
  return 1
end
return 0
