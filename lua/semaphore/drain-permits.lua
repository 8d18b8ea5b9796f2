--[[
  drain-permits: take every available permit of a semaphore at once.

  KEYS[1] permitsKey  string: available permits

  ARGV (none)

  Returns
    the number of permits taken (0 when none were available)

  Side effects
    DECRBY permitsKey <available> when it is > 0 (the count becomes 0; a TTL stays)
]]
local permitsKey = KEYS[1]

local available = tonumber(redis.call('GET', permitsKey) or 0)
if available <= 0 then
  return 0
end
redis.call('DECRBY', permitsKey, available)
return available
