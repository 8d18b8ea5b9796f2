--- @include "server-time"
-- nextToken(fenceKey, clock): the fencing token of a free -> held transition: max(counter + 1, server clock in
-- microseconds), stored back. The clock floor keeps tokens rising when the counter is lost or stale: missing
-- after a restart without persistence or an eviction, or behind on a promoted replica that missed the last
-- grants (a failover takes seconds, far more than the microseconds between tokens), as long as the servers'
-- clocks agree and do not step back. `clock`: serverTime()'s second result, if the caller has it already.
local function nextToken(fenceKey, clock)
  local token = redis.call('INCR', fenceKey)
  if not clock then
    local _, now = serverTime()
    clock = now
  end
  if token < tonumber(clock) then
    redis.call('SET', fenceKey, clock)
    token = tonumber(clock)
  end
  return token
end
