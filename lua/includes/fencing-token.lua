--- @include "server-time"
-- nextToken(fenceKey, legacyFenceKey, clock, legacyAbsent): the fencing token of a free -> held transition,
-- as a decimal string: max(shared counter + 1, server clock in microseconds, legacy per-name counter + 1),
-- stored back in the shared counter. The counter is shared by every lock of the key prefix (of the slot, on
-- a Cluster), so a lock that sat free for a month keeps no key of its own and still draws a higher token
-- than it ever did. The clock floor keeps tokens rising when the counter is lost or stale: missing after a
-- restart without persistence or an eviction, or behind on a promoted replica that missed the last grants (a
-- failover takes seconds, far more than the microseconds between tokens), as long as the servers' clocks
-- agree and do not step back. The legacy key is what clients of earlier versions count on: while they share
-- the locks during a rolling upgrade, a token here must exceed every token they drew, and theirs must exceed
-- ours, so a legacy key that exists is moved up to the token too (none is ever created). `clock`:
-- serverTime()'s second result. `legacyAbsent`: true when the caller knows the legacy key is absent (it
-- counted it in an EXISTS it sends anyway); else the key is read here. `legacyFenceKey` nil: the client
-- retired the earlier layout (its previousLayout option) and sent no such key.
local function nextToken(fenceKey, legacyFenceKey, clock, legacyAbsent)
  local legacy = 0
  if legacyFenceKey and not legacyAbsent then
    legacy = tonumber(redis.call('GET', legacyFenceKey) or '0')
  end
  -- INCR and a SET of the clock in the usual case (the clock has moved past the last token), both forms of
  -- Redis 1.0, and no number formatted (a %.0f format costs more than the rest); INCR alone when the counter
  -- is ahead of the clock (grants within one microsecond, a clock that stepped back).
  local counted = redis.call('INCR', fenceKey)
  local now = tonumber(clock)
  local token = clock
  if counted > now and counted > legacy then
    -- Formatted in full: Lua would print a number this large in exponent form.
    token = string.format('%.0f', counted)
  else
    if legacy >= now then
      token = string.format('%.0f', legacy + 1)
    end
    redis.call('SET', fenceKey, token)
  end
  if legacy > 0 then
    redis.call('SET', legacyFenceKey, token)
  end
  return token
end

-- lastToken(fenceKey, legacyFenceKey): a token no lower than any drawn for the lock so far and lower than
-- any it will draw (a read hold's: what the reader sees was written under a token no higher). `legacyFenceKey`
-- nil: as for nextToken.
local function lastToken(fenceKey, legacyFenceKey)
  if not legacyFenceKey then return tonumber(redis.call('GET', fenceKey) or '0') end
  local counters = redis.call('MGET', fenceKey, legacyFenceKey)
  return math.max(tonumber(counters[1] or '0'), tonumber(counters[2] or '0'))
end
