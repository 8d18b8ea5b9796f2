--[[
  write-acquire: take the write lock of a read-write lock when nobody holds it, or re-enter the write hold
  of an owner of the calling flow chain. A chain that holds only read holds gets an upgrade refusal
  instead of waiting for itself; a writer that will wait registers, so that this library's new readers
  let it in first.

  KEYS[1] lockKey         the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] writersKey      sorted set of this library's waiting writers: write field -> deadline (epoch ms)
  KEYS[3] holdKey         hash of this library's side fields (see includes/hold-key.lua)
  KEYS[4] fenceKey        string: the shared fencing counter, drawn on every write grant (see
                          lock/acquire.lua)
  KEYS[5] legacyFenceKey  string: the per-name counter of earlier versions (see lock/acquire.lua); absent
                          when the previous layout is retired

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
    free -> held: fencing token as in lock/acquire.lua; HSET lockKey mode write, fields[1] 1;
                  PEXPIRE lockKey leaseMs; HSET holdKey "<owner>:write:acq", ":token" and ":info" (as
                  lock/acquire.lua), PEXPIRE holdKey leaseMs; ZREM writersKey fields[1]
    re-entry:     HINCRBY; HSET memo field; PEXPIRE only when that lengthens a TTL
    not granted:  with waitingMs > 0, ZADD writersKey now + waitingMs fields[1] (never lowering it), and
                  PEXPIRE writersKey to its latest deadline
]]
local lockKey = KEYS[1]
local writersKey = KEYS[2]
local holdKey = KEYS[3]
local fenceKey = KEYS[4]
local legacyFenceKey = KEYS[5]
local leaseMs = tonumber(ARGV[1])
local memo = ARGV[2]
local waitingMs = tonumber(ARGV[3])
local info = ARGV[4]
local fields = {unpack(ARGV, 5)}

--- @include "fencing-token"
--- @include "reenter"
--- @include "holder-info"

local mode = redis.call('HGET', lockKey, 'mode')
if not mode then
  local _, clock = serverTime()
  local token = nextToken(fenceKey, legacyFenceKey, clock)
  local field = fields[1]
  redis.call('HSET', lockKey, 'mode', 'write', field, 1)
  redis.call('PEXPIRE', lockKey, leaseMs)
  redis.call('HSET', holdKey, field .. ':acq', memo, field .. ':token', token, holderInfo(field, info, clock))
  extendHold(holdKey, leaseMs)
  redis.call('ZREM', writersKey, field)
  return {1, tonumber(token), 1, 1}
end

if mode == 'write' then
  local reentered = reenter(lockKey, holdKey, fields, memo, leaseMs)
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
  -- Never lowering the caller's deadline (a read, then a write: ZADD GT needs Redis 6.2).
  local deadline = tonumber(redis.call('ZSCORE', writersKey, fields[1]))
  if not deadline or deadline < now + waitingMs then
    redis.call('ZADD', writersKey, now + waitingMs, fields[1])
  end
  -- The registry outlives its latest deadline by nothing: a writer that died waiting leaves no key behind.
  local latest = redis.call('ZRANGE', writersKey, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', writersKey, tonumber(latest[2]) - now)
end
return {0, redis.call('PTTL', lockKey)}
