--[[
  release: drop one hold (or all holds) of the nearest owner in the calling flow chain that holds the fair
  lock; when that frees it, wake the first waiter in line, and only that one.

  KEYS[1] lockKey      hash: field <owner> = hold count (RLock's layout)
  KEYS[2] queueKey     list of waiter ids (see fair-lock/acquire.lua)
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)
  KEYS[4] holdKey      hash of this library's side fields (see lock/release.lua)
  KEYS[5] requestKey   string: this release's answer, so that a resend is answered, not run again

  ARGV[1] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[2] mode       "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[3] undoId     request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[4] publish    unused (the layout every release script shares): the client wakes the waiter
  ARGV[5..n] owners  owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining hold count of that owner; ownerIndex 1-based
    {0, ownerIndex, head}    the lock is free; head: the id of the waiter now first in line (nil: none),
                             for the client to wake on its channel "redisson_lock__channel:{<name>}:<head>"
                             (Redisson's per-waiter channel) with fair-lock/wake.lua: a channel named by what
                             the script reads is one no client can declare beforehand. A resend answered
                             from the memo names the head again while the lock is free
    {-1, 0, head}            no owner of the chain holds the lock (or none took it last with undoId); if the
                             lock is free (it expired), the waiter first in line all the same ({-1, 0} if
                             held)

  Side effects
    either:          SET requestKey "<remaining> <ownerIndex>" PX memoMs NX, before the change
    count > 0 left:  HINCRBY lockKey owner -1 (and clear <owner>:acq for "undo")
    count reaches 0: DEL lockKey and holdKey; drop head entries whose deadline passed
    replay:          nothing
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local holdKey = KEYS[4]
local requestKey = KEYS[5]
local memoMs = tonumber(ARGV[1])
local mode = ARGV[2]
local undoId = ARGV[3]
local owners = {unpack(ARGV, 5)}

--- @include "release-hold"
--- @include "fair-queue"

-- The head's id, or false (a nil reply element: the reply still tells a release that ran from a replay).
local function dropLast()
  redis.call('DEL', lockKey, holdKey)
  return firstToWake(queueKey, timeoutKey) or false
end

local reply = releaseHold(lockKey, holdKey, requestKey, owners, mode, undoId, memoMs, nil, dropLast)
-- A resend answered from the memo of a release that freed the lock: its first reply, with the waiter to
-- wake, may be what was lost, so the waiter now first in line is named again while the lock is free.
if reply and (reply[1] ~= 0 or #reply == 3) then return reply end
if redis.call('EXISTS', lockKey) == 0 then
  -- Also when not held by the chain: the lock is free (its lease ran out), the waiter first in line may go.
  local head = firstToWake(queueKey, timeoutKey)
  if reply then return {0, reply[2], head} end
  return {-1, 0, head}
end
return reply or {-1, 0}
