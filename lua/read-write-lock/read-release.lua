--[[
  read-release: drop one read hold (or all) of the nearest owner in the calling flow chain that has one;
  when no hold is left, free the lock and announce it as Redisson's readers do.

  KEYS[1] lockKey      the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] channel      "redisson_rwlock:{<name>}" (prefixed): gets "0" when the last reader frees the lock
  KEYS[3] holdKey      hash of this library's side fields (see includes/hold-key.lua)
  KEYS[4] requestKey   string: this release's answer, so that a resend is answered, not run again
  KEYS[5..n] timeouts  the timeout keys "<timeoutBase>:<owner>:rwlock_timeout:<k>" of the owner named by
                       ARGV[5], for k = 1, 2, ... (as many as the client believes it has, or more): built
                       by the client, since every key a script touches is declared. A release that would
                       touch one not declared is answered with {-2, ...}, unchanged

  ARGV[1] memoMs      integer > 0, milliseconds: how long requestKey is kept
  ARGV[2] mode        "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[3] undoId      request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[4] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster
  ARGV[5] ownerIndex  the 1-based index into owners of the owner KEYS[5..n] belong to
  ARGV[6..n] owners   owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining read holds of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   that owner has no read hold left and nobody else holds the lock: it is free;
                             woken = subscribers reached
    {0, ownerIndex, 0, field1, count1, ...}
                             that owner has no read hold left, and other readers (field, read hold count)
                             have: whether any of them is still alive is read by their timeout keys, which
                             the client declares to read-write-lock/read-settle.lua next (Redisson's unlock
                             reads them here, undeclared)
    {-1, 0}                  no owner of the chain has a read hold (or none took it last with undoId)
    {-2, ownerIndex, count}  KEYS[5..n] are not the keys of the owner that holds (owners[ownerIndex], with
                             count holds): nothing changed; send it again with that owner's keys 1..count

  Side effects
    one hold less:   HINCRBY -1; DEL its timeout key "<timeoutBase>:<owner>:rwlock_timeout:<count>";
                     (SET requestKey "<remaining> <ownerIndex>" PX memoMs NX before either change)
    last hold:       HDEL the owner's field, HDEL its side fields in holdKey, DEL all its timeout keys;
                     then, when no other hold is left (a write hold, another reader's), DEL lockKey and
                     holdKey and PUBLISH (or SPUBLISH) channel "0"
    replay:          nothing
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local holdKey = KEYS[3]
local requestKey = KEYS[4]
local firstTimeout = 5
local memoMs = tonumber(ARGV[1])
local mode = ARGV[2]
local undoMemo = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local declaredIndex = tonumber(ARGV[5])
local owners = {unpack(ARGV, 6)}

--- @include "release-hold"

-- The owner's hold `count` is declared when the client named that owner's keys, at least `count` of them;
-- else the client is asked for them (a resend of a release that ran is answered from its memo first).
local function declared(_, count, index)
  if index == declaredIndex and #KEYS - firstTimeout + 1 >= count then
    return nil
  end
  local earlier = redis.call('GET', requestKey)
  if earlier then
    return memoReply(earlier)
  end
  return {-2, index, count}
end

local function dropOne(_, count)
  redis.call('DEL', KEYS[firstTimeout + count - 1])
end

local function dropLast(owner, count, index)
  redis.call('DEL', unpack(KEYS, firstTimeout, firstTimeout + count - 1))
  redis.call('HDEL', lockKey, owner)
  redis.call('HDEL', holdKey, owner .. ':acq', owner .. ':rel', owner .. ':info')
  local readers = {}
  local hash = redis.call('HGETALL', lockKey)
  for f = 1, #hash, 2 do
    local field = hash[f]
    if field ~= 'mode' and tonumber(hash[f + 1]) then
      if string.sub(field, -6) == ':write' then
        return 0
      end
      readers[#readers + 1] = field
      readers[#readers + 1] = hash[f + 1]
    end
  end
  if #readers > 0 then
    return 0, unpack(readers)
  end
  redis.call('DEL', lockKey, holdKey)
  return redis.call(publish, channel, '0')
end

return releaseHold(lockKey, holdKey, requestKey, owners, mode, undoMemo, memoMs, dropOne, dropLast, declared)
  or {-1, 0}
