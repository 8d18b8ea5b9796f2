--- @include "server-time"
-- The permit queue: this library's waiters for a semaphore's permits (plain and expirable share it), first
-- come first served. q.queueKey is a list of entries "<need>|<clientId>|<n>" (permits wanted, the waiter's
-- client, a number unique in that client); q.deadlinesKey a sorted set entry -> deadline (epoch ms, server
-- time) after which the entry is presumed dead (its waiter refreshes it with every attempt). A release
-- wakes the waiters its permits serve, each on its client's channel "<q.wakePrefix><clientId>" with its
-- entry as the message, and keeps those permits for them: they take them with their next attempt.
-- (Handing the permits over inside the release would save that round trip, but a waiter that died while
-- queued would take them along: nothing can tell a dead waiter from a slow one before its deadline.)
-- Redisson's clients do not know the queue: they take permits as they find them, and hear on Redisson's
-- channel (q.channel) only the permits no queued waiter needs.
--
-- q: {permitsKey, queueKey, deadlinesKey, channel, wakePrefix, publish, timeoutKey (expirable permits'
-- sorted set; scripts that take permits reclaim expired ones first)}

-- entryNeed(entry): the permits a queue entry waits for.
local function entryNeed(entry)
  return tonumber(string.match(entry, '^(%d+)|'))
end

-- queueNow(q): the queued entries in order, and their deadlines by entry (one read of each key, not a
-- ZSCORE per entry: a queue is read whole anyway).
local function queueNow(q)
  local entries = redis.call('LRANGE', q.queueKey, 0, -1)
  local deadlines = {}
  if #entries > 0 then
    local scored = redis.call('ZRANGE', q.deadlinesKey, 0, -1, 'WITHSCORES')
    for i = 1, #scored, 2 do
      deadlines[scored[i]] = tonumber(scored[i + 1])
    end
  end
  return entries, deadlines
end

-- liveDeadline(q, deadlines, entry): the entry's deadline (from queueNow), or nil after dropping an entry
-- that has none (its deadline was lost, e.g. evicted: nobody could ever reap it otherwise).
local function liveDeadline(q, deadlines, entry)
  local deadline = deadlines[entry]
  if not deadline then
    redis.call('LREM', q.queueKey, 1, entry)
  end
  return deadline
end

-- reapQueue(q, now): drops the entries whose deadline passed; returns how many.
local function reapQueue(q, now)
  local dead = redis.call('ZRANGEBYSCORE', q.deadlinesKey, '-inf', now)
  for _, entry in ipairs(dead) do
    redis.call('LREM', q.queueKey, 1, entry)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', q.deadlinesKey, '-inf', now)
  end
  return #dead
end

-- announcePermits(q, available): `available` permits are free: wakes the queued waiters whose needs fit,
-- in order, stopping at the first that does not (it is not overtaken), each on its client's channel; when
-- every queued waiter was woken, announces what is left on Redisson's channel.
local function announcePermits(q, available)
  reapQueue(q, serverTime())
  local budget = available
  local entries, deadlines = queueNow(q)
  for _, entry in ipairs(entries) do
    if liveDeadline(q, deadlines, entry) then
      local need = entryNeed(entry)
      if need > budget then
        return
      end
      budget = budget - need
      redis.call(q.publish, q.wakePrefix .. string.match(entry, '^%d+|(.*)|%d+$'), entry)
    end
  end
  if budget > 0 then
    redis.call(q.publish, q.channel, budget)
  end
end

-- reclaimPermits(q, now): gives back every expirable permit whose lease ended by `now`, and wakes the
-- waiters they serve; returns how many came back.
local function reclaimPermits(q, now)
  local expired = redis.call('ZREMRANGEBYSCORE', q.timeoutKey, '-inf', now)
  if expired > 0 then
    local available = redis.call('INCRBY', q.permitsKey, expired)
    if available > 0 then
      announcePermits(q, available)
    end
  end
  return expired
end

-- reapAndAnnounce(q, now): drops dead entries; what they kept is announced (to the waiters behind them, or
-- on Redisson's channel). Returns the permits available.
local function reapAndAnnounce(q, now)
  local available = tonumber(redis.call('GET', q.permitsKey) or 0)
  if reapQueue(q, now) > 0 and available > 0 then
    announcePermits(q, available)
  end
  return available
end

-- takePermits(q, entry, entryMs, permits, now): takes `permits` if that many are free beyond what the
-- queued waiters ahead of `entry` (all of them, for '' or an entry not queued) wait for; the entry leaves
-- the queue then. Otherwise queues the entry (or refreshes its deadline) unless it is ''. Expired
-- expirable permits come back first, and dead entries go (what they kept is announced). Returns the
-- permits left after a grant; or nil, the permits available, and the milliseconds until something could
-- change without a message (the earliest deadline of an entry ahead: a dead waiter's place frees up; the
-- earliest lease end: its permit comes back), -1 when nothing would.
local function takePermits(q, entry, entryMs, permits, now)
  reclaimPermits(q, now)
  local available = reapAndAnnounce(q, now)
  local ahead = 0
  local queued = false
  local untilMs = -1
  local entries, deadlines = queueNow(q)
  for _, other in ipairs(entries) do
    if other == entry then
      queued = true
      break
    end
    local deadline = liveDeadline(q, deadlines, other)
    if deadline then
      ahead = ahead + entryNeed(other)
      if untilMs < 0 or deadline - now < untilMs then
        untilMs = deadline - now
      end
    end
  end
  if available - ahead >= permits then
    if queued then
      redis.call('LREM', q.queueKey, 1, entry)
    end
    -- Also when the list lost the entry (a DEL of the list): a deadline left behind would outlive its waiter
    -- with nothing to reap it once nobody calls.
    if entry ~= '' then
      redis.call('ZREM', q.deadlinesKey, entry)
    end
    return redis.call('DECRBY', q.permitsKey, permits), available
  end
  if entry ~= '' then
    if not queued then
      redis.call('RPUSH', q.queueKey, entry)
    end
    redis.call('ZADD', q.deadlinesKey, now + entryMs, entry)
  end
  local earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  -- Redisson's 922337203685477: a permit without a lease.
  if earliest[2] and tonumber(earliest[2]) ~= 922337203685477 then
    local leaseEnds = math.max(0, tonumber(earliest[2]) - now)
    if untilMs < 0 or leaseEnds < untilMs then
      untilMs = leaseEnds
    end
  end
  return nil, available, untilMs
end
