--[[
  release: drop one hold (or all holds) of the nearest owner in the calling flow chain that holds the fair
  lock; when that frees it, wake the first waiter in line, and only that one.

  KEYS[1] lockKey      hash: field <owner> = hold count, <owner>:rel = id of the owner's last release
  KEYS[2] queueKey     list of waiter ids (see fair-lock/acquire.lua)
  KEYS[3] timeoutKey   sorted set waiter id -> deadline (epoch ms)
  KEYS[4] channelBase  "redisson_lock__channel:{<name>}" (prefixed): the first waiter is woken on
                       "<channelBase>:<waiter id>" (Redisson's per-waiter channel; in the lock's slot)
  KEYS[5] requestKey   string: memo of a release that freed the lock, so a resend is answered, not re-run

  ARGV[1] requestId  string: unique per call (also the suffix of requestKey)
  ARGV[2] memoMs     integer > 0, milliseconds: how long requestKey is kept
  ARGV[3] mode       "one", "all", "undo" or "purge", as in lock/release.lua
  ARGV[4] undoId     request id of the acquire to undo in modes "undo" and "purge", else ""
  ARGV[5] publish    "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster
  ARGV[6..n] owners  owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {remaining, ownerIndex}  remaining hold count of that owner; ownerIndex 1-based
    {0, ownerIndex, woken}   the lock is free; woken = subscribers that got the message (0 or 1 waiter)
    {-1, 0}                  no owner of the chain holds the lock (or none took it last with undoId);
                             if the lock is free (it expired), the first waiter is woken all the same

  Side effects
    count > 0 left:  HINCRBY lockKey owner -1; HSET <owner>:rel (and clear <owner>:acq for "undo")
    count reaches 0: DEL lockKey; drop head entries whose deadline passed; PUBLISH (or SPUBLISH)
                     "<channelBase>:<head>" "0" when a waiter is left; SET requestKey PX memoMs
    replay:          nothing
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local channelBase = KEYS[4]
local requestKey = KEYS[5]
local requestId = ARGV[1]
local memoMs = tonumber(ARGV[2])
local mode = ARGV[3]
local undoId = ARGV[4]
local publish = ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local firstOwner = 6

-- Wakes the first waiter still in line (entries whose deadline passed are dropped on the way).
local function wakeHead()
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local head = redis.call('LINDEX', queueKey, 0)
  while head do
    local deadline = tonumber(redis.call('ZSCORE', timeoutKey, head))
    if deadline and deadline > now then
      return redis.call(publish, channelBase .. ':' .. head, '0')
    end
    redis.call('LPOP', queueKey)
    redis.call('ZREM', timeoutKey, head)
    head = redis.call('LINDEX', queueKey, 0)
  end
  return 0
end

for i = firstOwner, #ARGV do
  local owner = ARGV[i]
  local ownerIndex = i - firstOwner + 1
  local held = redis.call('HMGET', lockKey, owner, owner .. ':rel', owner .. ':acq')
  local count = tonumber(held[1])
  if count then
    if (mode == 'undo' or mode == 'purge') and held[3] ~= undoId then
      return {-1, 0}
    end
    if held[2] == requestId then
      return {count, ownerIndex}
    end
    if (mode == 'one' or mode == 'undo') and count > 1 then
      local remaining = redis.call('HINCRBY', lockKey, owner, -1)
      redis.call('HSET', lockKey, owner .. ':rel', requestId)
      if mode == 'undo' then
        redis.call('HSET', lockKey, owner .. ':acq', '')
      end
      return {remaining, ownerIndex}
    end
    redis.call('DEL', lockKey)
    local woken = wakeHead()
    redis.call('SET', requestKey, ownerIndex, 'PX', memoMs)
    return {0, ownerIndex, woken}
  end
end

local freed = redis.call('GET', requestKey)
if freed then
  return {0, tonumber(freed)}
end
if redis.call('EXISTS', lockKey) == 0 then
  wakeHead()
end
return {-1, 0}
