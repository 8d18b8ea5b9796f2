-- reenter(lockKey, fenceKey, fields, memo, leaseMs): re-enters the hold of the nearest field of `fields` (the
-- calling flow chain, nearest first) that has a count in lockKey. Returns {1, token, holdCount, index}, or
-- nil when no field of the chain holds the lock. `memo` is what the field's "<field>:acq" records of this
-- call: a resend that finds it there is answered with the count as it is. The TTL is only ever lengthened
-- (an inner hold never shortens an outer one).
local function reenter(lockKey, fenceKey, fields, memo, leaseMs)
  for index, field in ipairs(fields) do
    local held = redis.call('HMGET', lockKey, field, field .. ':acq')
    if held[1] then
      local token = tonumber(redis.call('GET', fenceKey) or '0')
      if held[2] == memo then
        return {1, token, tonumber(held[1]), index}
      end
      local count = redis.call('HINCRBY', lockKey, field, 1)
      redis.call('HSET', lockKey, field .. ':acq', memo)
      local pttl = redis.call('PTTL', lockKey)
      if pttl >= 0 and pttl < leaseMs then
        redis.call('PEXPIRE', lockKey, leaseMs)
      end
      return {1, token, count, index}
    end
  end
  return nil
end
