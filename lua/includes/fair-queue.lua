--- @include "server-time"
-- The fair lock's queue (Redisson's layout): a list of waiter ids and a sorted set of their deadlines
-- (epoch ms).
-- firstLive(queueKey, timeoutKey, now): drops head entries whose deadline passed (or that have none) and
-- returns the waiter now first in line, or nil.
local function firstLive(queueKey, timeoutKey, now)
  local head = redis.call('LINDEX', queueKey, 0)
  while head do
    local deadline = tonumber(redis.call('ZSCORE', timeoutKey, head))
    if deadline and deadline > now then
      return head
    end
    redis.call('LPOP', queueKey)
    redis.call('ZREM', timeoutKey, head)
    head = redis.call('LINDEX', queueKey, 0)
  end
  return nil
end

-- wakeFirst(queueKey, timeoutKey, channelBase, publish): wakes the waiter first in line, on its own channel
-- "<channelBase>:<waiter id>" with "0"; returns how many subscribers that reached.
local function wakeFirst(queueKey, timeoutKey, channelBase, publish)
  local now = serverTime()
  local head = firstLive(queueKey, timeoutKey, now)
  if head then
    return redis.call(publish, channelBase .. ':' .. head, '0')
  end
  return 0
end
