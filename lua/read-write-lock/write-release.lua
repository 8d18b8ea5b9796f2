--[[
  write-release: drop one write hold (or all) of the nearest owner in the calling flow chain that has one;
  the last one frees the lock (message "1", Redisson's write release), or leaves the owner's own read holds
  (a downgrade: the lock turns to read mode and readers elsewhere are told with "0").

  KEYS[1] lockKey     the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] channel     "redisson_rwlock:{<name>}" (prefixed)
  KEYS[3] holdKey     hash of this library's side fields (see includes/hold-key.lua)
  KEYS[4] requestKey  string: this release's answer, so that a resend is answered, not run again

  ARGV[1] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[2] mode       "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[3] undoId     request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[4] publish    "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster
  ARGV[5..n] fields  write fields "<owner>:write" of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining write holds of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   that owner has no write hold left; woken = subscribers reached
    {-1, 0}                  no owner of the chain has a write hold (or none took it last with undoId)

  Side effects
    either:         SET requestKey "<remaining> <ownerIndex>" PX memoMs NX, before the change
    one hold less:  HINCRBY -1 (and clear the acquire memo for "undo")
    last hold:      HDEL the field, and its side fields in holdKey; then, when
                    no other hold is left, DEL lockKey and holdKey and PUBLISH (or SPUBLISH) channel "1";
                    otherwise (the owner's read holds) HSET mode read and PUBLISH "0" (Redisson publishes
                    nothing here)
    replay:         nothing
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local holdKey = KEYS[3]
local requestKey = KEYS[4]
local memoMs = tonumber(ARGV[1])
local mode = ARGV[2]
local undoMemo = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local fields = {unpack(ARGV, 5)}

--- @include "release-hold"

local function dropLast(field)
  redis.call('HDEL', lockKey, field)
  local hash = redis.call('HGETALL', lockKey)
  for f = 1, #hash, 2 do
    if hash[f] ~= 'mode' and tonumber(hash[f + 1]) then
      -- The owner's own read holds remain (a downgrade).
      redis.call('HDEL', holdKey, field .. ':acq', field .. ':rel', field .. ':info', field .. ':token')
      redis.call('HSET', lockKey, 'mode', 'read')
      return redis.call(publish, channel, '0')
    end
  end
  redis.call('DEL', lockKey, holdKey)
  return redis.call(publish, channel, '1')
end

return releaseHold(lockKey, holdKey, requestKey, fields, mode, undoMemo, memoMs, nil, dropLast)
  or {-1, 0}
