-- releaseHold(lockKey, holdKey, requestKey, fields, mode, undoMemo, memoMs, dropOne, dropLast, check): the
-- release logic every lock kind shares. Finds the nearest field of `fields` (the calling flow chain, nearest
-- first) with a count in lockKey and drops one hold ("one", "undo") or all ("all", "purge"); "undo" and
-- "purge" act only if the field's last acquire was undoMemo (see acquiredBy).
-- Every release that changes a count leaves its answer in requestKey (PX memoMs, SET NX before the change;
-- only a resend, which finds it there, reads it), so that a resend is answered from it and changes nothing:
-- also when the same owner holds the lock again by then, and without reading the hold key on the way.
-- dropOne(field, count), if given, runs when one hold of several is dropped; dropLast(field, count, index)
-- drops the field's last hold(s) (and its side fields) and returns how many subscribers its announcement
-- reached (and, after that, anything more the reply should carry). check(field, count, index), if given,
-- runs before anything changes: a reply it returns is the release's, and nothing changes.
-- Returns {remaining, index}, {0, index, woken}, or nil when no field of the chain holds the lock (nor did
-- this release free it before: then {0, index} from requestKey).

-- The answer a release left in requestKey, as its reply: "<remaining> <index>" ("<index>" alone from
-- earlier versions, which memoed only releases that freed the lock).
local function memoReply(memo)
  local remaining, index = string.match(memo, '^(%-?%d+) (%d+)$')
  if remaining then return {tonumber(remaining), tonumber(index)} end
  return {0, tonumber(memo)}
end

-- acquiredBy(holdKey, field, undoMemo): whether the field's last acquire is undoMemo: its "<field>:acq" in
-- holdKey, or, for "~<id>" (an acquire sent lean, see lock/acquire.lua), <id> or no memo at all.
local function acquiredBy(holdKey, field, undoMemo)
  local acquired = redis.call('HGET', holdKey, field .. ':acq')
  if string.sub(undoMemo, 1, 1) == '~' then
    return acquired == false or acquired == string.sub(undoMemo, 2)
  end
  return acquired == undoMemo
end

local function releaseHold(lockKey, holdKey, requestKey, fields, mode, undoMemo, memoMs, dropOne, dropLast,
                           check)
  for index, field in ipairs(fields) do
    local count = tonumber(redis.call('HGET', lockKey, field))
    if count then
      if (mode == 'undo' or mode == 'purge') and not acquiredBy(holdKey, field, undoMemo) then
        return {-1, 0}
      end
      local refused = check and check(field, count, index)
      if refused then
        return refused
      end
      local one = (mode == 'one' or mode == 'undo') and count > 1
      local answer = (one and count - 1 or 0) .. ' ' .. index
      -- SET NX, and a GET only when that finds a memo (a resend; the script's clock is frozen, so it is
      -- still there): one call in the usual case, as SET ... NX GET (Redis 7.0) took.
      if not redis.call('SET', requestKey, answer, 'PX', memoMs, 'NX') then
        return memoReply(redis.call('GET', requestKey))
      end
      if one then
        local remaining = redis.call('HINCRBY', lockKey, field, -1)
        if mode == 'undo' then
          -- Undone once: a second undo of the same acquire (its caller may send one too) must not take
          -- another hold of the owner.
          redis.call('HSET', holdKey, field .. ':acq', '')
          -- A hold that outlived its side fields (another client kept the hash alive past this one's
          -- lease) just recreated them: they get an expiry too.
          if redis.call('PTTL', holdKey) == -1 then redis.call('PEXPIRE', holdKey, memoMs) end
        end
        if dropOne then dropOne(field, count) end
        return {remaining, index}
      end
      return {0, index, dropLast(field, count, index)}
    end
  end
  local earlier = redis.call('GET', requestKey)
  if earlier then
    return memoReply(earlier)
  end
  return nil
end
