-- reclaimPermits(permitsKey, timeoutKey, channel, publish, now): gives back every permit of an expirable
-- semaphore whose lease ended by `now` (epoch ms), and wakes waiters when that frees any; returns how many.
local function reclaimPermits(permitsKey, timeoutKey, channel, publish, now)
  local expired = redis.call('ZREMRANGEBYSCORE', timeoutKey, '-inf', now)
  if expired > 0 then
    local available = redis.call('INCRBY', permitsKey, expired)
    if available > 0 then
      redis.call(publish, channel, available)
    end
  end
  return expired
end
