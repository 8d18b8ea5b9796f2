--- @include "permit-queue"
-- reclaimPermits(permitsKey, timeoutKey, queueKey, deadlinesKey, wakePrefix, channel, publish, now): gives
-- back every permit of an expirable semaphore whose lease ended by `now` (epoch ms), and wakes the waiters
-- they serve; returns how many came back.
local function reclaimPermits(permitsKey, timeoutKey, queueKey, deadlinesKey, wakePrefix, channel, publish, now)
  local expired = redis.call('ZREMRANGEBYSCORE', timeoutKey, '-inf', now)
  if expired > 0 then
    local available = redis.call('INCRBY', permitsKey, expired)
    if available > 0 then
      announcePermits(queueKey, deadlinesKey, wakePrefix, channel, publish, available)
    end
  end
  return expired
end
