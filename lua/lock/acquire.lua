--[[
  acquire: take a free lock, or re-enter it for an owner of the calling flow chain.

  KEYS[1] lockKey         hash: field <owner> = hold count; PEXPIRE = lease. Redisson's RLock layout, and
                          nothing else
  KEYS[2] holdKey         hash of this library's side fields of the hold (see includes/hold-key.lua):
                          <owner>:acq = id of the owner's last acquire, <owner>:token, <owner>:info;
                          PEXPIRE >= the lease
  KEYS[3] fenceKey        string: the fencing counter shared by the key prefix (per slot on a Cluster), never
                          expires; every free -> held transition takes max(counter + 1, server clock in
                          microseconds, legacy counter + 1) (see includes/fencing-token.lua)
  KEYS[4] legacyFenceKey  string: the per-name counter of earlier versions (rolling upgrades): read, and
                          moved up to a new token when it exists; never created. Not sent by a client whose
                          previousLayout is 'retired' (no client of those versions runs)

  ARGV[1] leaseMs    integer > 0, milliseconds: the TTL this hold needs
  ARGV[2] requestId  string: unique per call; a resend of the same call (ioredis after a reconnect) is
                     answered from the memo field instead of counting twice. "~<requestId>" (a request id
                     never starts with "~") marks a lean call: the caller holds nothing of this lock in its
                     flow chain and has nothing else in flight on it, so a fresh hold needs no side fields
                     (no hold key: the cheap uncontended cycle), and owners[1] already holding it can only be
                     this very call run before (a resend) or a hold the caller has given up as lost. (One
                     argument for both, and none for info below: each argument costs the server a table
                     entry and a string on every call.)
  ARGV[3] info       string, not lean only: the client's holder label (host, pid, app), stored with a fresh
                     hold; "": none. A lean call sends none (its fresh hold stores no side fields)
  ARGV[4..n] owners  (lean: ARGV[3..n]) owner ids "<clientId>:<flowId>" of the calling flow, then of its
                     ancestors, nearest first

  Returns
    {1, token, holdCount, ownerIndex}  acquired (holdCount 1) or re-entered; ownerIndex is 1-based into
                                       owners and names the owner whose count rose
    token                              lean: acquired (count 1, ownerIndex 1), an integer that is also the
                                       server time of the grant in microseconds, for the holder info the
                                       first renewal writes
    {1, token, 1, 1, grantedAt}        lean: acquired when the token is not the grant's clock (the counter
                                       was ahead of it, or a legacy counter decided it); grantedAt = that
                                       clock in microseconds (an integer, or a decimal string)
    {0, pttl}                          held by another owner; pttl in ms, -1 when the holder set no expiry

  Side effects
    free -> held: INCR fenceKey, then SET it to the token unless that was the token (and SET legacyFenceKey,
                  when it exists); HSET lockKey owners[1] 1;
                  PEXPIRE lockKey leaseMs; then lean: DEL holdKey if it exists (an earlier holder's
                  leftovers); else HSET holdKey <owner>:acq, <owner>:token and (unless info is "")
                  <owner>:info = "#<server time in us> <info>"; PEXPIRE holdKey leaseMs
    lean, owners[1] holds it: taken afresh as if free (a new token, count 1, the lease set anew, holdKey
                  deleted): a resend must not count twice, a given-up hold must not count on
    re-entry:     HINCRBY lockKey owner 1; HSET holdKey memo field; PEXPIRE of either key only when that
                  lengthens its TTL (an inner hold never shortens an outer one), the hold key's to at
                  least the lock key's (a lean hold gets its hold key here)
    replay:       nothing
]]
local lockKey = KEYS[1]
local holdKey = KEYS[2]
local fenceKey = KEYS[3]
local legacyFenceKey = KEYS[4]
local leaseMs = tonumber(ARGV[1])
local requestId = ARGV[2]
local lean = string.byte(requestId) == 126
local firstOwner = lean and 3 or 4
local caller = ARGV[firstOwner]

-- Counted with weights, lockKey 4, holdKey 2, legacyFenceKey 1 (one EXISTS instead of three lookups): at
-- least 4 when the lock is held. Without the legacy key, two fewer arguments (each costs a string).
local present
if legacyFenceKey then
  present = redis.call('EXISTS', lockKey, lockKey, lockKey, lockKey, holdKey, holdKey, legacyFenceKey)
else
  present = redis.call('EXISTS', lockKey, lockKey, holdKey) * 2
end
local held = present >= 4
local holdKeyExists = present % 4 >= 2
local legacyExists = present % 2 == 1

-- The uncontended cycle's grant first, inline, before anything else of the script is built (no function,
-- no string): a lean grant of a free lock (count 1, the lease set, no side fields: the watchdog's first
-- renewal writes them). What the hold key still has is an earlier holder's (a lock deleted or expired under
-- it): its memos must not pass for this hold's. The token is nextToken's max(counter + 1, server clock in
-- microseconds) (includes/fencing-token.lua) with no legacy counter: the clock as a Lua number, exact below
-- 2^53, which redis.call passes in full (%.17g; an integer from 7.2 on) and a reply as an integer. The reply
-- is that integer alone (a table reply costs the server more than the rest of the grant's Lua), which is
-- then also the grant's clock.
if lean and not held and not legacyExists then
  local token = redis.call('INCR', fenceKey)
  local time = redis.call('TIME')
  local now = time[1] * 1000000 + time[2]
  if token <= now then
    token = now
    redis.call('SET', fenceKey, token)
  end
  -- Arguments as the strings they came in: redis.call formats a Lua number with snprintf (about 1.5 k
  -- instructions each); only the token, which has no string, is passed as a number.
  redis.call('HSET', lockKey, caller, '1')
  redis.call('PEXPIRE', lockKey, ARGV[1])
  if holdKeyExists then redis.call('DEL', holdKey) end
  if token == now then return token end
  return {1, token, 1, 1, now}
end

--- @include "fencing-token"

-- The other lean grants, as above (a legacy counter to count with, or owners[1] holding the lock already),
-- with the token by nextToken and the clock as a decimal string.
local function leanGrant()
  local _, clock = serverTime()
  local token = nextToken(fenceKey, legacyFenceKey, clock, not legacyExists)
  redis.call('HSET', lockKey, caller, 1)
  redis.call('PEXPIRE', lockKey, leaseMs)
  if holdKeyExists then redis.call('DEL', holdKey) end
  return {1, tonumber(token), 1, 1, clock}
end
if lean and not held then
  return leanGrant()
end

--- @include "reenter"
--- @include "holder-info"

-- The request id as the memo fields record it (an undo of a lean call names it "~<id>": see
-- lock/release.lua's undoId).
if lean then requestId = string.sub(requestId, 2) end
local info = lean and '' or ARGV[3]
local owners = {unpack(ARGV, firstOwner)}
if not held then
  local _, clock = serverTime()
  local token = nextToken(fenceKey, legacyFenceKey, clock, not legacyExists)
  redis.call('HSET', lockKey, caller, 1)
  redis.call('PEXPIRE', lockKey, leaseMs)
  redis.call('HSET', holdKey, caller .. ':acq', requestId, caller .. ':token', token, holderInfo(caller, info, clock))
  redis.call('PEXPIRE', holdKey, leaseMs)
  return {1, tonumber(token), 1, 1}
end
if lean and redis.call('HEXISTS', lockKey, caller) == 1 then
  return leanGrant()
end

return reenter(lockKey, holdKey, owners, requestId, leaseMs) or {0, redis.call('PTTL', lockKey)}
