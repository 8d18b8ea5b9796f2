--[[
  acquire: take a free lock, or re-enter it for an owner of the calling flow chain.

  KEYS[1] lockKey   hash: field <owner> = hold count, field <owner>:acq = id of the owner's last acquire;
                    PEXPIRE = lease. Same layout and fields as Redisson's RLock, plus the memo field.
  KEYS[2] fenceKey  string counter: the fencing token, never expires. Every free -> held transition takes
                    max(counter + 1, server clock in microseconds). The clock floor keeps tokens rising when
                    the counter is lost or stale: missing after a restart without persistence or an eviction,
                    or behind on a promoted replica that missed the last grants (a failover takes seconds,
                    far more than the microseconds between tokens), as long as the servers' clocks agree
                    and do not step back.

  ARGV[1] leaseMs    integer > 0, milliseconds: the TTL this hold needs
  ARGV[2] requestId  string: unique per call; a resend of the same call (ioredis after a reconnect) is
                     answered from the memo field instead of counting twice
  ARGV[3] info       string: the client's holder label (host, pid, app), stored with a fresh hold; "": none
  ARGV[4..n] owners  owner ids "<clientId>:<flowId>" of the calling flow, then of its ancestors, nearest first

  Returns
    {1, token, holdCount, ownerIndex}  acquired (holdCount 1) or re-entered; ownerIndex is 1-based into
                                       owners and names the owner whose count rose
    {0, pttl}                          held by another owner; pttl in ms, -1 when the holder set no expiry

  Side effects
    free -> held: INCR fenceKey, or SET fenceKey <TIME in us> when that is larger;
                  HSET lockKey owners[1] 1, the memo field and (unless info is "") <owner>:info =
                  "#<server time in us> <info>"; PEXPIRE lockKey leaseMs
    re-entry:     HINCRBY lockKey owner 1; HSET memo field; PEXPIRE only when that lengthens the TTL
                  (an inner hold never shortens an outer one)
    replay:       nothing
]]
local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local leaseMs = tonumber(ARGV[1])
local requestId = ARGV[2]
local info = ARGV[3]
local owners = {unpack(ARGV, 4)}

--- @include "fencing-token"
--- @include "reenter"
--- @include "holder-info"

if redis.call('EXISTS', lockKey) == 0 then
  local _, clock = serverTime()
  local token = nextToken(fenceKey, clock)
  redis.call('HSET', lockKey, owners[1], 1, owners[1] .. ':acq', requestId, holderInfo(owners[1], info, clock))
  redis.call('PEXPIRE', lockKey, leaseMs)
  return {1, token, 1, 1}
end

return reenter(lockKey, fenceKey, owners, requestId, leaseMs) or {0, redis.call('PTTL', lockKey)}
