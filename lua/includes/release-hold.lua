-- releaseHold(lockKey, holdKey, requestKey, fields, mode, memo, undoMemo, memoMs, dropOne, dropLast): the
-- release logic every lock kind shares. Finds the nearest field of `fields` (the calling flow chain, nearest
-- first) with a count in lockKey and drops one hold ("one", "undo") or all ("all", "purge"); "undo" and
-- "purge" act only if the field's "<field>:acq" in holdKey is undoMemo. `memo` is recorded in "<field>:rel"
-- so that a resend is answered, not re-run; a release that dropped the last hold is remembered in
-- requestKey (PX memoMs), since the hold key goes with the hold.
-- dropOne(field, count), if given, runs when one hold of several is dropped; dropLast(field, count, index)
-- drops the field's last hold(s) (and its side fields) and returns how many subscribers its announcement
-- reached.
-- Returns {remaining, index}, {0, index, woken}, or nil when no field of the chain holds the lock (nor did
-- this release free it before: then {0, index} from requestKey).
local function releaseHold(lockKey, holdKey, requestKey, fields, mode, memo, undoMemo, memoMs, dropOne, dropLast)
  for index, field in ipairs(fields) do
    local count = tonumber(redis.call('HGET', lockKey, field))
    if count then
      local side = redis.call('HMGET', holdKey, field .. ':rel', field .. ':acq')
      if (mode == 'undo' or mode == 'purge') and side[2] ~= undoMemo then
        return {-1, 0}
      end
      if side[1] == memo then
        return {count, index}
      end
      if (mode == 'one' or mode == 'undo') and count > 1 then
        local remaining = redis.call('HINCRBY', lockKey, field, -1)
        if mode == 'undo' then
          -- Undone once: a second undo of the same acquire (its caller may send one too) must not take
          -- another hold of the owner.
          redis.call('HSET', holdKey, field .. ':rel', memo, field .. ':acq', '')
        else
          redis.call('HSET', holdKey, field .. ':rel', memo)
        end
        -- A hold that outlived its side fields (another client kept the hash alive past this one's lease)
        -- just recreated them: they get an expiry too.
        if redis.call('PTTL', holdKey) == -1 then redis.call('PEXPIRE', holdKey, memoMs) end
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
