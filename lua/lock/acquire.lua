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
                          moved up to a new token when it exists; never created

  ARGV[1] leaseMs    integer > 0, milliseconds: the TTL this hold needs
  ARGV[2] requestId  string: unique per call; a resend of the same call (ioredis after a reconnect) is
                     answered from the memo field instead of counting twice
  ARGV[3] info       string: the client's holder label (host, pid, app), stored with a fresh hold; "": none
  ARGV[4] lean       "1": the caller holds nothing of this lock in its flow chain and has nothing else in
                     flight on it, so a fresh hold needs no side fields (no hold key: the cheap uncontended
                     cycle), and owners[1] already holding it can only be this very call run before (a
                     resend) or a hold the caller has given up as lost; "0": otherwise
  ARGV[5..n] owners  owner ids "<clientId>:<flowId>" of the calling flow, then of its ancestors, nearest first

  Returns
    {1, token, holdCount, ownerIndex}  acquired (holdCount 1) or re-entered; ownerIndex is 1-based into
                                       owners and names the owner whose count rose
    {1, token, 1, 1, grantedAt}        lean: acquired; grantedAt = server time of the grant in microseconds
                                       (a decimal string), for the holder info the first renewal writes
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
local info = ARGV[3]
local lean = ARGV[4] == '1'
local caller = ARGV[5]

--- @include "fencing-token"

-- A lean grant to the caller: count 1, the lease set, no side fields (the watchdog's first renewal writes
-- them). What the hold key still has is an earlier holder's (a lock deleted or expired under it): its memos
-- must not pass for this hold's.
local function leanGrant(holdKeyExists, legacyExists)
  local _, clock = serverTime()
  local token = nextToken(fenceKey, legacyFenceKey, clock, not legacyExists)
  redis.call('HSET', lockKey, caller, 1)
  redis.call('PEXPIRE', lockKey, leaseMs)
  if holdKeyExists then redis.call('DEL', holdKey) end
  return {1, tonumber(token), 1, 1, clock}
end

-- Counted with weights, lockKey 4, holdKey 2, legacyFenceKey 1 (one EXISTS instead of three lookups): at
-- least 4 when the lock is held. The uncontended cycle returns right after, before anything else of the
-- script is built.
local present = redis.call('EXISTS', lockKey, lockKey, lockKey, lockKey, holdKey, holdKey, legacyFenceKey)
local held = present >= 4
local holdKeyExists = present % 4 >= 2
local legacyExists = present % 2 == 1
if lean and not held then
  return leanGrant(holdKeyExists, legacyExists)
end

--- @include "reenter"
--- @include "holder-info"

local owners = {unpack(ARGV, 5)}
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
  return leanGrant(holdKeyExists, legacyExists)
end

return reenter(lockKey, holdKey, owners, requestId, leaseMs) or {0, redis.call('PTTL', lockKey)}
