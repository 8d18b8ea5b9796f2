--[[
  acquire: take a free fair lock when the caller's waiter is first in line (or nobody waits), re-enter it
  for an owner of the calling flow chain, or else keep the caller's place in the FIFO of waiters.

  KEYS[1] lockKey     hash: field <owner> = hold count; PEXPIRE = lease (RLock's layout, nothing else)
  KEYS[2] queueKey    list "redisson_lock_queue:{<name>}": waiter ids, first come first served
  KEYS[3] timeoutKey  sorted set "redisson_lock_timeout:{<name>}": waiter id -> deadline in epoch ms after
                      which the waiter is presumed gone (Redisson's entries use their client's clock)
  KEYS[4] holdKey         hash of this library's side fields of the holds (see lock/acquire.lua)
  KEYS[5] fenceKey        string: the shared fencing counter (see lock/acquire.lua)
  KEYS[6] legacyFenceKey  string: the per-name counter of earlier versions (see lock/acquire.lua); absent
                          when the previous layout is retired

  ARGV[1] leaseMs        integer > 0, milliseconds: the TTL this hold needs
  ARGV[2] requestId      string: unique per call; a resend re-entering its own grant is answered from the
                         memo field in holdKey instead of counting twice
  ARGV[3] waiterId       string "<clientId>:w<n>": the caller's place in the queue; "" for a single
                         attempt, which never queues (tryLock without a wait time)
  ARGV[4] waiterLeaseMs  integer > 0, milliseconds: how long the waiter's entry lives unless a later
                         attempt of the same waiter refreshes it (the client re-attempts well within it)
  ARGV[5] requeue        "1": the waiter had a place that is gone (a purge took it while it was first in
                         line, e.g. after a Redisson acquisition shortened every deadline): it goes back to
                         the head; "0": a new waiter goes to the tail
  ARGV[6] info           string: the client's holder label, stored with a fresh hold (see lock/acquire.lua)
  ARGV[7..n] owners      owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {1, token, holdCount, ownerIndex}  acquired (holdCount 1) or re-entered; ownerIndex 1-based
    {0, waitMs}                        not acquired; waitMs: the holder's PTTL (-1: no expiry), or, when
                                       the lock is free but another waiter is first, the time until that
                                       waiter's deadline (it is purged then unless it takes the lock)

  Side effects
    first, every head entry whose deadline has passed (or that has none) is dropped from both keys (the
    caller's own entry excepted: it is alive)
    free -> held: LPOP queueKey when the caller was first; ZREM timeoutKey waiterId; fencing token as in
                  lock/acquire.lua; HSET lockKey owners[1] 1; PEXPIRE lockKey leaseMs; the memo, token and
                  holder info fields in holdKey, PEXPIRE holdKey leaseMs (as lock/acquire.lua).
                  Unlike Redisson, other waiters' deadlines are not shortened (they stay valid longer)
    re-entry:     HINCRBY lockKey owner 1; HSET the memo field; PEXPIRE only when that lengthens a TTL
    requeue:      LPUSH queueKey waiterId and ZADD its deadline when it has no entry (before the rest)
    queued:       RPUSH queueKey waiterId if absent, with deadline now + waiterLeaseMs, or the latest
                  deadline of a Redisson waiter ahead + waiterLeaseMs; a queued waiter's deadline is raised
                  to now + waiterLeaseMs, never lowered. This library's waiter ids end in ':w<n>'
]]
local lockKey = KEYS[1]
local queueKey = KEYS[2]
local timeoutKey = KEYS[3]
local holdKey = KEYS[4]
local fenceKey = KEYS[5]
local legacyFenceKey = KEYS[6]
local leaseMs = tonumber(ARGV[1])
local requestId = ARGV[2]
local waiterId = ARGV[3]
local waiterLeaseMs = tonumber(ARGV[4])
local requeue = ARGV[5] == '1'
local info = ARGV[6]
local owners = {unpack(ARGV, 7)}

--- @include "fencing-token"
--- @include "reenter"
--- @include "fair-queue"
--- @include "holder-info"

local now, clock = serverTime()
local head, headDeadline = firstLive(queueKey, timeoutKey, now, waiterId ~= '' and waiterId or nil)

-- Adds the caller's entry (returns true), or raises its deadline to now + waiterLeaseMs (never lowers it).
-- A read, then a write: ZADD GT needs Redis 6.2.
local function enter()
  local deadline = tonumber(redis.call('ZSCORE', timeoutKey, waiterId))
  if not deadline or deadline < now + waiterLeaseMs then
    redis.call('ZADD', timeoutKey, now + waiterLeaseMs, waiterId)
  end
  return deadline == nil
end

-- A waiter that lost its place while first in line takes it back before anything else is decided.
local refreshed = false
if requeue and waiterId ~= '' and head ~= waiterId then
  refreshed = true
  if enter() then
    redis.call('LPUSH', queueKey, waiterId)
    head = waiterId
  end
end

local pttl = redis.call('PTTL', lockKey)
if pttl == -2 then
  if not head or head == waiterId then
    if head then redis.call('LPOP', queueKey) end
    -- Also when nobody is in line: a deadline whose list entry was lost (an eviction) must not stay.
    if waiterId ~= '' then redis.call('ZREM', timeoutKey, waiterId) end
    local token = nextToken(fenceKey, legacyFenceKey, clock)
    local owner = owners[1]
    redis.call('HSET', lockKey, owner, 1)
    redis.call('PEXPIRE', lockKey, leaseMs)
    redis.call('HSET', holdKey, owner .. ':acq', requestId, owner .. ':token', token, holderInfo(owner, info, clock))
    redis.call('PEXPIRE', holdKey, leaseMs)
    return {1, tonumber(token), 1, 1}
  end
else
  local reentered = reenter(lockKey, holdKey, owners, requestId, leaseMs)
  if reentered then return reentered end
end

if waiterId ~= '' and not refreshed and enter() then
  -- A new entry behind Redisson waiters counts from the latest of their deadlines, as Redisson's own entries
  -- do: each Redisson acquisition ahead subtracts its wait time from every deadline behind it.
  local target = now + waiterLeaseMs
  for _, id in ipairs(redis.call('LRANGE', queueKey, 0, -1)) do
    if not string.find(id, ':w%d+$') then
      target = math.max(target, (tonumber(redis.call('ZSCORE', timeoutKey, id)) or now) + waiterLeaseMs)
    end
  end
  if target > now + waiterLeaseMs then redis.call('ZADD', timeoutKey, target, waiterId) end
  redis.call('RPUSH', queueKey, waiterId)
end

if pttl == -2 then
  -- Free, but another waiter is first in line: it takes the lock, or is dropped at its deadline.
  return {0, math.max(1, (headDeadline or now) - now)}
end
return {0, pttl}
