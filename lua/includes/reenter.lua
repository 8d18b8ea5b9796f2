--- @include "hold-key"
-- reenter(lockKey, holdKey, fields, memo, leaseMs): re-enters the hold of the nearest field of `fields` (the
-- calling flow chain, nearest first) that has a count in lockKey. Returns {1, token, holdCount, index}, or
-- nil when no field of the chain holds the lock. `memo` is what "<field>:acq" in holdKey records of this
-- call: a resend that finds it there is answered with the count as it is. The token is the hold's own
-- ("<field>:token"). The TTLs are only ever lengthened (an inner hold never shortens an outer one), the hold
-- key's to at least the lock key's.
local function reenter(lockKey, holdKey, fields, memo, leaseMs)
  for index, field in ipairs(fields) do
    local count = tonumber(redis.call('HGET', lockKey, field))
    if count then
      local side = redis.call('HMGET', holdKey, field .. ':acq', field .. ':token')
      local token = tonumber(side[2] or '0')
      if side[1] == memo then
        return {1, token, count, index}
      end
      count = redis.call('HINCRBY', lockKey, field, 1)
      redis.call('HSET', holdKey, field .. ':acq', memo)
      local pttl = redis.call('PTTL', lockKey)
      if pttl >= 0 and pttl < leaseMs then
        redis.call('PEXPIRE', lockKey, leaseMs)
      end
      -- The hold key outlives the lock key: a hold taken lean has no hold key until now, and its memo must
      -- last while its (possibly longer) lease runs, or a purge of it, which names that memo, misses.
      extendHold(holdKey, math.max(pttl, leaseMs))
      return {1, token, count, index}
    end
  end
  return nil
end
