--[[
  leave: a waiter for several permits gives up its claim (it stopped waiting), and the waiters the claim
  held back try again.

  KEYS[1] claimKey    string "<need>:<claimId>"
  KEYS[2] permitsKey  string: available permits
  KEYS[3] channel     "redisson_sc:{<name>}" (prefixed)

  ARGV[1] claimId  the waiter's id
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1  the claim was the waiter's and is gone
    0  it was not (never made, expired, or taken over)

  Side effects
    DEL claimKey when it is the waiter's; then PUBLISH (or SPUBLISH) channel <available> if > 0
]]
local claimKey = KEYS[1]
local permitsKey = KEYS[2]
local channel = KEYS[3]
local claimId = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local claim = redis.call('GET', claimKey)
if not claim or string.sub(claim, string.find(claim, ':', 1, true) + 1) ~= claimId then
  return 0
end
redis.call('DEL', claimKey)
local available = tonumber(redis.call('GET', permitsKey) or 0)
if available > 0 then
  redis.call(publish, channel, available)
end
return 1
