--[[
  read-release: drop one read hold (or all) of the nearest owner in the calling flow chain that has one;
  when no live hold is left, free the lock and announce it as Redisson's readers do.

  KEYS[1] lockKey      the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] channel      "redisson_rwlock:{<name>}" (prefixed): gets "0" when the last reader frees the lock
  KEYS[3] timeoutBase  prefix of the per-read-hold timeout keys
  KEYS[4] holdKey      hash of this library's side fields (see includes/hold-key.lua)
  KEYS[5] requestKey   string: this release's answer, so that a resend is answered, not run again

  ARGV[1] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[2] mode       "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[3] undoId     request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[4] publish    "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster
  ARGV[5..n] owners  owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining read holds of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   that owner has no read hold left; woken = subscribers reached when that
                             freed the lock (0 when other holds remain)
    {-1, 0}                  no owner of the chain has a read hold (or none took it last with undoId)

  Side effects
    one hold less:   HINCRBY -1; DEL its timeout key "<timeoutBase>:<owner>:rwlock_timeout:<count>";
                     (SET requestKey "<remaining> <ownerIndex>" PX memoMs NX before either change)
    last hold:       HDEL the owner's field, HDEL its side fields in holdKey, DEL all its timeout keys;
                     then if a write hold or a live read hold (a timeout key with
                     TTL left) remains: PEXPIRE lockKey to the longest live read hold (unless a write hold
                     is there); otherwise DEL lockKey (with the fields of readers whose holds ran out) and
                     holdKey, and PUBLISH (or SPUBLISH) channel "0"
    replay:          nothing
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local timeoutBase = KEYS[3]
local holdKey = KEYS[4]
local requestKey = KEYS[5]
local memoMs = tonumber(ARGV[1])
local mode = ARGV[2]
local undoMemo = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local owners = {unpack(ARGV, 5)}

--- @include "release-hold"

local function timeoutKey(owner, k)
  return timeoutBase .. ':' .. owner .. ':rwlock_timeout:' .. k
end

local function dropOne(owner, count)
  redis.call('DEL', timeoutKey(owner, count))
end

local function dropLast(owner, count)
  for k = 1, count do redis.call('DEL', timeoutKey(owner, k)) end
  redis.call('HDEL', lockKey, owner)
  redis.call('HDEL', holdKey, owner .. ':acq', owner .. ':rel', owner .. ':info')
  local longest = 0
  local hash = redis.call('HGETALL', lockKey)
  for f = 1, #hash, 2 do
    local field = hash[f]
    local n = tonumber(hash[f + 1])
    if n and field ~= 'mode' then
      if string.sub(field, -6) == ':write' then
        return 0
      end
      for k = 1, n do
        longest = math.max(longest, redis.call('PTTL', timeoutKey(field, k)))
      end
    end
  end
  if longest > 0 then
    redis.call('PEXPIRE', lockKey, longest)
    return 0
  end
  redis.call('DEL', lockKey, holdKey)
  return redis.call(publish, channel, '0')
end

return releaseHold(lockKey, holdKey, requestKey, owners, mode, undoMemo, memoMs, dropOne, dropLast)
  or {-1, 0}
