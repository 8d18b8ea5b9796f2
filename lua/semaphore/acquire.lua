--[[
  acquire: take `permits` permits of a semaphore if that many are available and no waiter for several
  permits that came first needs them.

  KEYS[1] permitsKey  string: available permits (Redisson's RSemaphore / RPermitExpirableSemaphore key)
  KEYS[2] claimKey    string "<need>:<claimId>": the one waiter for several permits that this library's
                      newcomers leave room for (Redisson's clients do not read it)
  KEYS[3] memoKey     string: memo of this acquisition (acquire memo prefix + request id)
  KEYS[4] channel     "redisson_sc:{<name>}" (prefixed): gets the permits left when a claim is satisfied

  ARGV[1] permits  integer >= 1
  ARGV[2] memoMs   integer > 0, milliseconds: how long memoKey is kept
  ARGV[3] claimId  the caller's waiter id when it may claim (a waiter for several permits), else ""
  ARGV[4] claimMs  integer > 0, milliseconds: how long a claim lives past its waiter's latest attempt
  ARGV[5] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {1, left}       granted (or already granted by an earlier send of this request); left = permits left
    {0, available}  not granted: too few permits, or they are kept for an older claim

  Side effects
    granted: DECRBY permitsKey permits; SET memoKey permits PX memoMs; when the caller's own claim is
             satisfied, DEL claimKey and PUBLISH (or SPUBLISH) channel <left> if left > 0, so that
             waiters held back by the claim try again
    refused with a claimId and no other waiter's claim: SET claimKey "<permits>:<claimId>" PX claimMs
]]
local permitsKey = KEYS[1]
local claimKey = KEYS[2]
local memoKey = KEYS[3]
local channel = KEYS[4]
local permits = tonumber(ARGV[1])
local memoMs = tonumber(ARGV[2])
local claimId = ARGV[3]
local claimMs = tonumber(ARGV[4])
local publish = ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local available = tonumber(redis.call('GET', permitsKey) or 0)
if redis.call('EXISTS', memoKey) == 1 then
  return {1, available}
end

-- An older waiter for several permits keeps its need free: newcomers take only what exceeds it.
local claim = redis.call('GET', claimKey)
local reserved = 0
local mine = false
if claim then
  local colon = string.find(claim, ':', 1, true)
  if string.sub(claim, colon + 1) == claimId then
    mine = true
  else
    reserved = tonumber(string.sub(claim, 1, colon - 1))
  end
end

if available - reserved >= permits then
  local left = redis.call('DECRBY', permitsKey, permits)
  redis.call('SET', memoKey, permits, 'PX', memoMs)
  if mine then
    redis.call('DEL', claimKey)
    if left > 0 then
      redis.call(publish, channel, left)
    end
  end
  return {1, left}
end

if claimId ~= '' and (mine or not claim) then
  redis.call('SET', claimKey, permits .. ':' .. claimId, 'PX', claimMs)
end
return {0, available}
