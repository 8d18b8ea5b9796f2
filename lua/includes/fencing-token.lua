--- @include "server-time"
-- nextToken(fenceKey, clock): the fencing token of a free -> held transition: max(counter + 1, server clock in
-- microseconds), stored back. The clock floor keeps tokens rising when the counter is lost or stale: missing
-- after a restart without persistence or an eviction, or behind on a promoted replica that missed the last
-- grants (a failover takes seconds, far more than the microseconds between tokens), as long as the servers'
-- clocks agree and do not step back. `clock`: serverTime()'s second result, if the caller has it already.
local function nextToken(fenceKey, clock)
  if not clock then
    local _, now = serverTime()
    clock = now
  end
  -- One command in the usual case: the clock has moved past the last token.
  local previous = tonumber(redis.call('SET', fenceKey, clock, 'GET') or '0')
  if previous < tonumber(clock) then
    return tonumber(clock)
  end
  -- Several grants within one microsecond, or a clock that stepped back: count on from the last token
  -- (formatted in full: Lua would print a number this large in exponent form).
  redis.call('SET', fenceKey, string.format('%.0f', previous + 1))
  return previous + 1
end
