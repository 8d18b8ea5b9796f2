--[[
  read-acquire: take a read hold on a read-write lock: re-enter one of the calling flow chain, take one
  while the lock is free or read-held (unless a writer of this library waits), or one beside the chain's
  own write hold (a downgrade).

  KEYS[1] lockKey         hash (Redisson's layout, nothing else): "mode" = "read" | "write"; <owner> = read
                          hold count; <owner>:write = write hold count; PEXPIRE = the longest lease of any
                          hold
  KEYS[2] timeoutKey      the per-read-hold key this call expects to write: Redisson's
                          "<timeoutBase>:<owner>:rwlock_timeout:<k>", the owner named by ARGV[4], k = ARGV[5]
                          (string "1", PEXPIRE = that hold's lease; Redisson's readers judge each other by
                          them). Built by the client (every key a script touches is declared); a guess that
                          does not match the hold the script would take is answered with {3, ...}, unchanged
  KEYS[3] writersKey      sorted set of this library's waiting writers: write field -> deadline (epoch ms)
  KEYS[4] holdKey         hash of this library's side fields (see includes/hold-key.lua): <owner>:acq,
                          <owner>:rel, <owner>:info of the read holds, and the write holds' fields
  KEYS[5] fenceKey        string: the shared fencing counter (see lock/acquire.lua), read only here
  KEYS[6] legacyFenceKey  string: the per-name counter of earlier versions (see lock/acquire.lua); absent
                          when the previous layout is retired, read only

  ARGV[1] leaseMs    integer > 0, milliseconds: this hold's lease
  ARGV[2] requestId  string: unique per call; a resend is answered from the memo field
  ARGV[3] info       string: the client's holder label, stored with an owner's first read hold (see
                     lock/acquire.lua); "": none
  ARGV[4] ownerIndex  the 1-based index into owners of the owner KEYS[2] names
  ARGV[5] holdCount   integer > 0: the owner's read hold count after this grant, which KEYS[2] names
  ARGV[6..n] owners   owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {1, token, holdCount, ownerIndex}  acquired; token = the last token drawn (see lastToken in
                                       includes/fencing-token.lua): no lower than the latest write grant's,
                                       lower than any later one; 0 when none was ever drawn
    {3, ownerIndex, holdCount}         KEYS[2] is not the key of the hold this call would take: nothing
                                       changed; send it again with the key of owners[ownerIndex], holdCount
    {0, waitMs}                        a writer holds it (waitMs = PTTL, -1: no expiry), or a writer of
                                       this library waits (waitMs = until it would give up, at most PTTL)

  Side effects
    a hold:  HINCRBY lockKey owner 1 (HSET mode read when the lock was free); HSET holdKey <owner>:acq;
             with the owner's first read hold, HSET holdKey <owner>:info (as lock/acquire.lua);
             SET KEYS[2] (the owner's "<timeoutBase>:<owner>:rwlock_timeout:<count>") 1 PX leaseMs;
             PEXPIRE lockKey max(PTTL, leaseMs); PEXPIRE holdKey likewise
    always:  ZREMRANGEBYSCORE writersKey of writers whose deadline passed
    replay:  nothing
]]
local lockKey = KEYS[1]
local timeoutKey = KEYS[2]
local writersKey = KEYS[3]
local holdKey = KEYS[4]
local fenceKey = KEYS[5]
local legacyFenceKey = KEYS[6]
local leaseMs = tonumber(ARGV[1])
local memo = ARGV[2]
local info = ARGV[3]
local expectedIndex = tonumber(ARGV[4])
local expectedCount = tonumber(ARGV[5])
local owners = {unpack(ARGV, 6)}

--- @include "fencing-token"
--- @include "holder-info"
--- @include "hold-key"

-- One more read hold of `owner` (its count now `held`), with its own timeout key (Redisson's readers judge
-- each other by them), which the client must have named.
local function grant(owner, index, fresh, held)
  if index ~= expectedIndex or held + 1 ~= expectedCount then
    return {3, index, held + 1}
  end
  local count = redis.call('HINCRBY', lockKey, owner, 1)
  if count == 1 then
    -- The owner's first read hold: its memo, and when and where it began, in one command.
    local _, clock = serverTime()
    redis.call('HSET', holdKey, owner .. ':acq', memo, holderInfo(owner, info, clock))
  else
    redis.call('HSET', holdKey, owner .. ':acq', memo)
  end
  if fresh then redis.call('HSET', lockKey, 'mode', 'read') end
  redis.call('SET', timeoutKey, 1, 'PX', leaseMs)
  -- A hash the first hold just created has no TTL yet; one whose holder set none keeps none.
  local pttl = redis.call('PTTL', lockKey)
  if fresh or (pttl >= 0 and pttl < leaseMs) then
    redis.call('PEXPIRE', lockKey, leaseMs)
  end
  -- As long as the lock key at least (other readers may keep it longer): this reader's memo lasts as long.
  extendHold(holdKey, math.max(pttl, leaseMs))
  return {1, lastToken(fenceKey, legacyFenceKey), count, index}
end

local mode = redis.call('HGET', lockKey, 'mode')
if mode then
  for index, owner in ipairs(owners) do
    local count = tonumber(redis.call('HGET', lockKey, owner))
    if count then
      if redis.call('HGET', holdKey, owner .. ':acq') == memo then
        return {1, lastToken(fenceKey, legacyFenceKey), count, index}
      end
      return grant(owner, index, false, count)
    end
  end
  if mode == 'write' then
    for index, owner in ipairs(owners) do
      if redis.call('HEXISTS', lockKey, owner .. ':write') == 1 then
        return grant(owner, index, false, 0)
      end
    end
    return {0, redis.call('PTTL', lockKey)}
  end
end

local now = serverTime()
redis.call('ZREMRANGEBYSCORE', writersKey, '-inf', now)
local writer = redis.call('ZRANGE', writersKey, 0, 0, 'WITHSCORES')
if writer[2] then
  local pttl = redis.call('PTTL', lockKey)
  local untilGone = math.max(1, tonumber(writer[2]) - now)
  if pttl >= 0 and pttl < untilGone then return {0, math.max(pttl, 1)} end
  return {0, untilGone}
end
return grant(owners[1], 1, not mode, 0)
