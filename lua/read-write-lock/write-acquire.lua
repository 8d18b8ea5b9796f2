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
  ARGV[4..n] fields      write fields "<owner>:write" of the calling flow, then of its ancestors, nearest
                         first (the read field of an owner is its write field without ":write")

  Returns
    {1, token, holdCount, ownerIndex}  acquired (holdCount 1, new token) or re-entered (same token)
    {0, pttl}                          held by others; pttl in ms, -1 when no expiry
    {2}                                the chain holds the lock for reading only: an upgrade, refused

  Side effects
    free -> held: fencing token as in lock/acquire.lua; HSET mode write, fields[1] 1 and its memo field;
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
local firstField = 4

local mode = redis.call('HGET', lockKey, 'mode')
local time = redis.call('TIME')
if not mode then
  local token = redis.call('INCR', fenceKey)
  local clock = time[1] .. string.format('%06d', tonumber(time[2]))
  if token < tonumber(clock) then
    redis.call('SET', fenceKey, clock)
    token = tonumber(clock)
  end
  local field = ARGV[firstField]
  redis.call('HSET', lockKey, 'mode', 'write', field, 1, field .. ':acq', memo)
  redis.call('PEXPIRE', lockKey, leaseMs)
  redis.call('ZREM', writersKey, field)
  return {1, token, 1, 1}
end

if mode == 'write' then
  for i = firstField, #ARGV do
    local field = ARGV[i]
    local held = redis.call('HMGET', lockKey, field, field .. ':acq')
    if held[1] then
      local token = tonumber(redis.call('GET', fenceKey) or '0')
      local ownerIndex = i - firstField + 1
      if held[2] == memo then
        return {1, token, tonumber(held[1]), ownerIndex}
      end
      local count = redis.call('HINCRBY', lockKey, field, 1)
      redis.call('HSET', lockKey, field .. ':acq', memo)
      local pttl = redis.call('PTTL', lockKey)
      if pttl >= 0 and pttl < leaseMs then
        redis.call('PEXPIRE', lockKey, leaseMs)
      end
      return {1, token, count, ownerIndex}
    end
  end
else
  for i = firstField, #ARGV do
    local readField = string.sub(ARGV[i], 1, -7)
    if redis.call('HEXISTS', lockKey, readField) == 1 then
      return {2}
    end
  end
end

if waitingMs > 0 then
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('ZADD', writersKey, 'GT', now + waitingMs, ARGV[firstField])
end
return {0, redis.call('PTTL', lockKey)}
