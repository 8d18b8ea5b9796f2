--- @include "permit-queue"
-- reclaimPermits(permitsKey, timeoutKey, queueKey, deadlinesKey, grantsKey, wakePrefix, channel, publish,
-- now): gives back every permit of an expirable semaphore whose lease ended by `now` (epoch ms), and serves
-- the waiters they can; returns how many came back.
local function reclaimPermits(permitsKey, timeoutKey, queueKey, deadlinesKey, grantsKey, wakePrefix, channel, publish, now)
  local expired = redis.call('ZREMRANGEBYSCORE', timeoutKey, '-inf', now)
  if expired > 0 then
    local available = redis.call('INCRBY', permitsKey, expired)
    if available > 0 then
      announcePermits(permitsKey, queueKey, deadlinesKey, grantsKey, wakePrefix, channel, publish, available)
    end
  end
  return expired
end
