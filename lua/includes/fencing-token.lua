--- @include "server-time"
-- nextToken(fenceKey, legacyFenceKey, clock): the fencing token of a free -> held transition, as a decimal
-- string: max(shared counter + 1, server clock in microseconds, legacy per-name counter + 1), stored back in
-- the shared counter. The counter is shared by every lock of the key prefix (of the slot, on a Cluster), so
-- a lock that sat free for a month keeps no key of its own and still draws a higher token than it ever did.
-- The clock floor keeps tokens rising when the counter is lost or stale: missing after a restart without
-- persistence or an eviction, or behind on a promoted replica that missed the last grants (a failover takes
-- seconds, far more than the microseconds between tokens), as long as the servers' clocks agree and do not
-- step back. The legacy key is what clients of earlier versions count on: while they share the locks during
-- a rolling upgrade, a token here must exceed every token they drew, and theirs must exceed ours, so a
-- legacy key that exists is moved up to the token too (none is ever created). `clock`: serverTime()'s
-- second result.
local function nextToken(fenceKey, legacyFenceKey, clock)
  -- One read of both counters and one write in the usual case (the clock has moved past the last token):
  -- as many calls as SET ... GET (Redis 6.2) and a GET of the legacy key took, on the 6.0 floor.
  local counters = redis.call('MGET', fenceKey, legacyFenceKey)
  local legacy = tonumber(counters[2] or '0')
  local last = math.max(tonumber(counters[1] or '0'), legacy)
  local token = clock
  if last >= tonumber(clock) then
    -- Several grants within one microsecond, a clock that stepped back, or a legacy counter ahead: count on
    -- from the last token (formatted in full: Lua would print a number this large in exponent form).
    token = string.format('%.0f', last + 1)
  end
  if legacy > 0 then
    redis.call('MSET', fenceKey, token, legacyFenceKey, token)
  else
    redis.call('SET', fenceKey, token)
  end
  return token
end

-- lastToken(fenceKey, legacyFenceKey): a token no lower than any drawn for the lock so far and lower than
-- any it will draw (a read hold's: what the reader sees was written under a token no higher).
local function lastToken(fenceKey, legacyFenceKey)
  local counters = redis.call('MGET', fenceKey, legacyFenceKey)
  return math.max(tonumber(counters[1] or '0'), tonumber(counters[2] or '0'))
end
