--[[
  release: drop one hold (or all holds) of the nearest owner in the calling flow chain that holds the lock.

  KEYS[1] lockKey     hash: field <owner> = hold count (Redisson's layout)
  KEYS[2] channel     release channel "redisson_lock__channel:{<name>}" (prefixed); gets "0" when freed
  KEYS[3] holdKey     hash of this library's side fields (see includes/hold-key.lua): <owner>:acq = id of
                      the owner's last acquire (absent for a lean grant, see lock/acquire.lua)
  KEYS[4] requestKey  string: this release's answer, "<remaining> <ownerIndex>", so that a resend is
                      answered from it, not run again

  ARGV[1] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[2] mode       "one": drop one hold; "all": drop every hold of the owner (client shutdown);
                     "undo": drop one hold only if the owner's last acquire was ARGV[3] (an acquire whose
                     reply never came: it may or may not have run);
                     "purge": drop every hold of the owner only if its last acquire was ARGV[3] (a hold
                     the client declared lost, or a stale hold an acquire re-entered by mistake)
  ARGV[3] undoId     request id of the acquire to undo in modes "undo" and "purge" ("~<id>" for an acquire
                     sent lean: it also matches a hold with no acquire memo), else ""
  ARGV[4] publish    "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub; the channel is in
                     the lock's slot)
  ARGV[5..n] owners  owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    woken                    the uncontended release (mode "one" or "all", owners[1]'s single hold): the
                             lock is free; woken = subscribers that got the release message (an integer)
    {remaining, ownerIndex}  remaining hold count of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   the lock is free; woken = subscribers that got the release message
    {-1, 0}                  no owner of the chain holds the lock (or, for "undo" and "purge", none
                             took it last with undoId); nothing changed

  Side effects
    either:          SET requestKey "<remaining> <ownerIndex>" PX memoMs NX, before the change
    count > 0 left:  HINCRBY lockKey owner -1 (and, for "undo", clear <owner>:acq, so that the same
                     acquire is never undone twice)
    count reaches 0: DEL lockKey and holdKey (the last hold is dropped without a decrement); PUBLISH (or
                     SPUBLISH) channel "0"
    replay:          nothing (a resend finds requestKey: also once the same owner holds the lock again)
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local holdKey = KEYS[3]
local requestKey = KEYS[4]
local memoMs = tonumber(ARGV[1])
local mode = ARGV[2]
local undoId = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

-- The uncontended cycle's release first, inline, before anything else of the script is built: the calling
-- flow's own single hold, released for the first time (releaseHold below does the same, and everything
-- else). The last hold is dropped without a decrement: the lock is free. Its reply is the woken count alone,
-- an integer (a table reply costs the server more than the rest).
if (mode == 'one' or mode == 'all') and redis.call('HGET', lockKey, ARGV[5]) == '1' then
  -- memoMs as the string it came in (redis.call formats a Lua number with snprintf).
  if redis.call('SET', requestKey, '0 1', 'PX', ARGV[1], 'NX') then
    redis.call('DEL', lockKey, holdKey)
    return redis.call(publish, channel, '0')
  end
end

local function dropLast()
  redis.call('DEL', lockKey, holdKey)
  return redis.call(publish, channel, '0')
end

--- @include "release-hold"

return releaseHold(lockKey, holdKey, requestKey, {unpack(ARGV, 5)}, mode, undoId, memoMs, nil, dropLast)
  or {-1, 0}
