-- releaseHold(lockKey, requestKey, fields, mode, memo, undoMemo, memoMs, dropOne, dropLast): the release
-- logic every lock kind shares. Finds the nearest field of `fields` (the calling flow chain, nearest first)
-- with a count in lockKey and drops one hold ("one", "undo") or all ("all", "purge"); "undo" and "purge" act
-- only if the field's "<field>:acq" is undoMemo. `memo` is recorded in "<field>:rel" so that a resend is
-- answered, not re-run; a release that dropped the last hold is remembered in requestKey (PX memoMs).
-- dropOne(field, count), if given, runs when one hold of several is dropped; dropLast(field, count, index)
-- drops the field's last hold(s) and returns how many subscribers its announcement reached.
-- Returns {remaining, index}, {0, index, woken}, or nil when no field of the chain holds the lock (nor did
-- this release free it before: then {0, index} from requestKey).
local function releaseHold(lockKey, requestKey, fields, mode, memo, undoMemo, memoMs, dropOne, dropLast)
  for index, field in ipairs(fields) do
    local held = redis.call('HMGET', lockKey, field, field .. ':rel', field .. ':acq')
    local count = tonumber(held[1])
    if count then
      if (mode == 'undo' or mode == 'purge') and held[3] ~= undoMemo then
        return {-1, 0}
      end
      if held[2] == memo then
        return {count, index}
      end
      if (mode == 'one' or mode == 'undo') and count > 1 then
        local remaining = redis.call('HINCRBY', lockKey, field, -1)
        redis.call('HSET', lockKey, field .. ':rel', memo)
        if mode == 'undo' then
          -- Undone once: a second undo of the same acquire (its caller may send one too) must not take
          -- another hold of the owner.
          redis.call('HSET', lockKey, field .. ':acq', '')
        end
        if dropOne then dropOne(field, count) end
        return {remaining, index}
      end
      local woken = dropLast(field, count, index)
      redis.call('SET', requestKey, index, 'PX', memoMs)
      return {0, index, woken}
    end
  end
  local freed = redis.call('GET', requestKey)
  if freed then
    return {0, tonumber(freed)}
  end
  return nil
end
