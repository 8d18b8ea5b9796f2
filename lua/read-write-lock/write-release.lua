--[[
  write-release: drop one write hold (or all) of the nearest owner in the calling flow chain that has one;
  the last one frees the lock (message "1", Redisson's write release), or leaves the owner's own read holds
  (a downgrade: the lock turns to read mode and readers elsewhere are told with "0").

  KEYS[1] lockKey     the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] channel     "redisson_rwlock:{<name>}" (prefixed)
  KEYS[3] requestKey  string: memo of a release that dropped an owner's last write hold

  ARGV[1] requestId  string: unique per call (also the suffix of requestKey)
  ARGV[2] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[3] mode       "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[4] undoId     request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[5] publish    "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster
  ARGV[6..n] fields  write fields "<owner>:write" of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining write holds of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   that owner has no write hold left; woken = subscribers reached
    {-1, 0}                  no owner of the chain has a write hold (or none took it last with undoId)

  Side effects
    one hold less:  HINCRBY -1; HSET memo field (and clear the acquire memo for "undo")
    last hold:      HDEL the field and its memo fields; SET requestKey PX memoMs; then, when no other
                    hold is left, DEL lockKey and PUBLISH (or SPUBLISH) channel "1"; otherwise (the
                    owner's read holds) HSET mode read and PUBLISH "0" (Redisson publishes nothing here)
    replay:         nothing
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local requestKey = KEYS[3]
local memo = '#' .. ARGV[1]
local memoMs = tonumber(ARGV[2])
local mode = ARGV[3]
local undoMemo = '#' .. ARGV[4]
local publish = ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local firstField = 6

for i = firstField, #ARGV do
  local field = ARGV[i]
  local ownerIndex = i - firstField + 1
  local held = redis.call('HMGET', lockKey, field, field .. ':rel', field .. ':acq')
  local count = tonumber(held[1])
  if count then
    if (mode == 'undo' or mode == 'purge') and held[3] ~= undoMemo then
      return {-1, 0}
    end
    if held[2] == memo then
      return {count, ownerIndex}
    end
    if (mode == 'one' or mode == 'undo') and count > 1 then
      local remaining = redis.call('HINCRBY', lockKey, field, -1)
      redis.call('HSET', lockKey, field .. ':rel', memo)
      if mode == 'undo' then redis.call('HSET', lockKey, field .. ':acq', '') end
      return {remaining, ownerIndex}
    end
    redis.call('HDEL', lockKey, field, field .. ':acq', field .. ':rel')
    redis.call('SET', requestKey, ownerIndex, 'PX', memoMs)
    local others = false
    local fields = redis.call('HGETALL', lockKey)
    for f = 1, #fields, 2 do
      if fields[f] ~= 'mode' and tonumber(fields[f + 1]) then
        others = true
        break
      end
    end
    if others then
      redis.call('HSET', lockKey, 'mode', 'read')
      return {0, ownerIndex, redis.call(publish, channel, '0')}
    end
    redis.call('DEL', lockKey)
    return {0, ownerIndex, redis.call(publish, channel, '1')}
  end
end

local freed = redis.call('GET', requestKey)
if freed then
  return {0, tonumber(freed)}
end
return {-1, 0}
