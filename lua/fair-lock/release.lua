--[[
  release: drop one hold (or all holds) of the nearest owner in the calling flow chain that holds the fair
  lock; when that frees it, wake the first waiter in line, and only that one.

  KEYS[1] lockKey      hash: field <owner> = hold count (RLock's layout)
  KEYS[2] queueKey     list of waiter ids (see fair-lock/acquire.lua)
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)
  KEYS[4] channelBase  "redisson_lock__channel:{<name>}" (prefixed): the first waiter is woken on
                       "<channelBase>:<waiter id>" (Redisson's per-waiter channel; in the lock's slot)
  KEYS[5] holdKey      hash of this library's side fields (see lock/release.lua)
  KEYS[6] requestKey   string: this release's answer, so that a resend is answered, not run again

  ARGV[1] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[2] mode       "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[3] undoId     request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[4] publish    "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster
  ARGV[5..n] owners  owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining hold count of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   the lock is free; woken = subscribers that got the message (0 or 1 waiter)
    {-1, 0}                  no owner of the chain holds the lock (or none took it last with undoId);
                             if the lock is free (it expired), the first waiter is woken all the same

  Side effects
    either:          SET requestKey "<remaining> <ownerIndex>" PX memoMs NX, before the change
    count > 0 left:  HINCRBY lockKey owner -1 (and clear <owner>:acq for "undo")
    count reaches 0: DEL lockKey and holdKey; drop head entries whose deadline passed; PUBLISH (or SPUBLISH)
                     "<channelBase>:<head>" "0" when a waiter is left
    replay:          nothing
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local channelBase = KEYS[4]
local holdKey = KEYS[5]
local requestKey = KEYS[6]
local memoMs = tonumber(ARGV[1])
local mode = ARGV[2]
local undoId = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local owners = {unpack(ARGV, 5)}

--- @include "release-hold"
--- @include "fair-queue"

local function dropLast()
  redis.call('DEL', lockKey, holdKey)
  return wakeFirst(queueKey, timeoutKey, channelBase, publish)
end

local reply = releaseHold(lockKey, holdKey, requestKey, owners, mode, undoId, memoMs, nil, dropLast)
if reply then return reply end
-- Not held by the chain: if the lock is free (its lease ran out), the waiter first in line may go.
if redis.call('EXISTS', lockKey) == 0 then
  wakeFirst(queueKey, timeoutKey, channelBase, publish)
end
return {-1, 0}
