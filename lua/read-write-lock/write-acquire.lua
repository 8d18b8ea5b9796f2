--[[
  write-acquire: take the write lock of a read-write lock when nobody holds it, or re-enter the write hold
  of an owner of the calling flow chain. A chain that holds only read holds gets an upgrade refusal
  instead of waiting for itself; a writer that will wait registers, so that this library's new readers
  let it in first.

  KEYS[1] lockKey     the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] writersKey  sorted set of this library's waiting writers: write field -> deadline (epoch ms)
  KEYS[3] fenceKey    string counter: the fencing token, taken on every write grant (see lock/acquire.lua)

  ARGV[1] leaseMs        integer > 0, milliseconds: the TTL this hold needs
  ARGV[2] requestId      string: unique per call; a resend is answered from the memo field
  ARGV[3] waitingMs      integer >= 0, milliseconds: when not granted, register (or refresh) the caller as
                         a waiting writer for this long; 0: a single attempt, which does not register
  ARGV[4] info           string: the client's holder label, stored with a fresh hold (see lock/acquire.lua)
  ARGV[5..n] fields      write fields "<owner>:write" of the calling flow, then of its ancestors, nearest
                         first (the read field of an owner is its write field without ":write")

  Returns
    {1, token, holdCount, ownerIndex}  acquired (holdCount 1, new token) or re-entered (same token)
    {0, pttl}                          held by others; pttl in ms, -1 when no expiry
    {2}                                the chain holds the lock for reading only: an upgrade, refused

  Side effects
    free -> held: fencing token as in lock/acquire.lua; HSET mode write, fields[1] 1, its memo field and
                  its holder info field "<owner>:write:info" (as lock/acquire.lua);
                  PEXPIRE lockKey leaseMs; ZREM writersKey fields[1]
    re-entry:     HINCRBY; HSET memo field; PEXPIRE only when that lengthens the TTL
    not granted:  with waitingMs > 0, ZADD writersKey now + waitingMs fields[1] (never lowering it)
]]
local lockKey = KEYS[1]
local writersKey = KEYS[2]
local fenceKey = KEYS[3]
local leaseMs = tonumber(ARGV[1])
local memo = '#' .. ARGV[2]
local waitingMs = tonumber(ARGV[3])
local info = ARGV[4]
local fields = {unpack(ARGV, 5)}

--- @include "fencing-token"
--- @include "reenter"
--- @include "holder-info"

local mode = redis.call('HGET', lockKey, 'mode')
if not mode then
  local _, clock = serverTime()
  local token = nextToken(fenceKey, clock)
  redis.call('HSET', lockKey, 'mode', 'write', fields[1], 1, fields[1] .. ':acq', memo, holderInfo(fields[1], info, clock))
  redis.call('PEXPIRE', lockKey, leaseMs)
  redis.call('ZREM', writersKey, fields[1])
  return {1, token, 1, 1}
end

if mode == 'write' then
  local reentered = reenter(lockKey, fenceKey, fields, memo, leaseMs)
  if reentered then return reentered end
else
  for _, field in ipairs(fields) do
    -- The owner's read field is its write field without ":write".
    if redis.call('HEXISTS', lockKey, string.sub(field, 1, -7)) == 1 then
      return {2}
    end
  end
end

if waitingMs > 0 then
  local now = serverTime()
  redis.call('ZADD', writersKey, 'GT', now + waitingMs, fields[1])
end
return {0, redis.call('PTTL', lockKey)}
