--- @include "server-time"
-- The fair lock's queue (Redisson's layout): a list of waiter ids and a sorted set of their deadlines
-- (epoch ms).
-- firstLive(queueKey, timeoutKey, now, self): drops head entries whose deadline passed (or that have none)
-- and returns the waiter now first in line with its deadline, or nil. `self` (the calling waiter, alive
-- since it is asking; or nil) is never dropped, and its deadline is not read.
local function firstLive(queueKey, timeoutKey, now, self)
  local head = redis.call('LINDEX', queueKey, 0)
  while head do
    if head == self then
      return head, nil
    end
    local deadline = tonumber(redis.call('ZSCORE', timeoutKey, head))
    if deadline and deadline > now then
      return head, deadline
    end
    redis.call('LPOP', queueKey)
    redis.call('ZREM', timeoutKey, head)
    head = redis.call('LINDEX', queueKey, 0)
  end
  return nil, nil
end

-- firstToWake(queueKey, timeoutKey): the id of the waiter first in line, once the dead ahead of it are
-- dropped, or nil: the caller returns it and the client wakes it on its channel "<channelBase>:<id>"
-- (fair-lock/wake.lua), a name no script can declare before it reads the queue.
local function firstToWake(queueKey, timeoutKey)
  local now = serverTime()
  return (firstLive(queueKey, timeoutKey, now, nil))
end
