--[[
  renew: the watchdog's batch renewal; extends each lock only while its owner still holds it.

  KEYS[1..n] lockKeys  hashes of the locks to renew (one Cluster slot per call)

  ARGV[1] leaseMs       integer > 0, milliseconds: the TTL each held lock gets
  ARGV[2..n+1] owners   ARGV[i + 1] is the owner id expected in KEYS[i]

  Returns
    array of n integers: 1 the owner holds KEYS[i] (its TTL is now at least leaseMs), 0 it does not

  Side effects
    PEXPIRE KEYS[i] leaseMs when the owner holds it and the TTL is shorter; never touches another
    owner's lock and never creates a key
]]
local leaseMs = tonumber(ARGV[1])
local firstOwner = 2

local results = {}
for i = 1, #KEYS do
  local lockKey = KEYS[i]
  if redis.call('HEXISTS', lockKey, ARGV[i + firstOwner - 1]) == 1 then
    local pttl = redis.call('PTTL', lockKey)
    if pttl >= 0 and pttl < leaseMs then
      redis.call('PEXPIRE', lockKey, leaseMs)
    end
    results[i] = 1
  else
    results[i] = 0
  end
end
return results
