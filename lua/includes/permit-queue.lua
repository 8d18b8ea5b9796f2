--- @include "server-time"
-- The permit queue: this library's waiters for a semaphore's permits (plain and expirable share it), first
-- come first served. q.queueKey is a list of entries "<need>|<clientId>|<n>" (permits wanted, the waiter's
-- client, a number unique in that client); q.deadlinesKey a sorted set entry -> deadline (epoch ms, server
-- time) after which the entry is presumed dead (its waiter refreshes it with every attempt). A release
-- wakes the waiters its permits serve, each on the semaphore's wake channel q.wakeChannel (declared in KEYS;
-- the client of every queued waiter listens there, and the entry names the one woken) with its
-- entry as the message, and keeps those permits for them: they take them with their next attempt.
-- (Handing the permits over inside the release would save that round trip, but a waiter that died while
-- queued would take them along: nothing can tell a dead waiter from a slow one before its deadline.)
-- Redisson's clients do not know the queue: they take permits as they find them, and hear on Redisson's
-- channel (q.channel) only the permits no queued waiter needs.
--
-- q: {permitsKey, queueKey, deadlinesKey, channel, wakeChannel, publish, timeoutKey (expirable permits'
-- sorted set; scripts that take permits reclaim expired ones first)}

-- How long (ms) the queue's keys outlive the latest deadline in them: a dead waiter kept permits that only a
-- script finding it dead announces on Redisson's channel (Java waiters hear of them no other way). The
-- footprint contract's window (DESIGN.md: nothing outlives a free lock by more than 30 s).
local DEAD_ENTRY_GRACE_MS = 30000

-- entryNeed(entry): the permits a queue entry waits for.
local function entryNeed(entry)
  return tonumber(string.match(entry, '^(%d+)|'))
end

-- liveQueue(q, now): the entries still alive, in order, with their deadlines by entry, and how many queued
-- entries it dropped as dead: past their deadline (their waiter stopped refreshing it), or with none (lost,
-- e.g. evicted: nobody could ever reap them otherwise). The dead leave both keys. One read of each key, the
-- whole of it: every caller walks the queue anyway.
local function liveQueue(q, now)
  local listed = redis.call('LRANGE', q.queueKey, 0, -1)
  local scored = redis.call('ZRANGE', q.deadlinesKey, 0, -1, 'WITHSCORES')
  local deadlines = {}
  local expired = false
  for i = 1, #scored, 2 do
    local deadline = tonumber(scored[i + 1])
    if deadline > now then
      deadlines[scored[i]] = deadline
    else
      expired = true
    end
  end
  -- Also a deadline whose list entry is gone (a DEL of the list): it would outlive its waiter otherwise.
  if expired then
    redis.call('ZREMRANGEBYSCORE', q.deadlinesKey, '-inf', now)
  end
  local entries = {}
  local dropped = 0
  for _, entry in ipairs(listed) do
    if deadlines[entry] then
      entries[#entries + 1] = entry
    else
      redis.call('LREM', q.queueKey, 1, entry)
      dropped = dropped + 1
    end
  end
  return entries, deadlines, dropped
end

-- wakeQueued(q, available, entries, before): `available` permits are free: wakes the live queued waiters
-- `entries` (from liveQueue) whose needs fit, in order, stopping at the first that does not (it is not
-- overtaken), each on the wake channel; when every one was woken, announces what is left on Redisson's
-- channel. `before`: the permits free before this script added some (nil: none known). The waiters that fit
-- in those were woken when they came (every script that adds permits wakes the queue so, and Redisson's
-- release wakes each client's first waiter on Redisson's channel), so only those after them are woken again:
-- one wake per woken waiter, not one per release while it is on its way.
local function wakeQueued(q, available, entries, before)
  local budget = available
  local woken = before or 0
  for _, entry in ipairs(entries) do
    local need = entryNeed(entry)
    if need > budget then
      return
    end
    budget = budget - need
    if need <= woken then
      woken = woken - need
    else
      woken = -1
      redis.call(q.publish, q.wakeChannel, entry)
    end
  end
  if budget > 0 then
    redis.call(q.publish, q.channel, budget)
  end
end

-- announcePermits(q, available, now, before): `available` permits are free (`before` of them already were,
-- see wakeQueued): drops the dead entries and wakes the waiters they serve. `now`: server time in epoch ms,
-- read here when nil.
local function announcePermits(q, available, now, before)
  wakeQueued(q, available, (liveQueue(q, now or serverTime())), before)
end

-- reclaimPermits(q, now): gives back every expirable permit whose lease ended by `now`, and wakes the
-- waiters they serve. Returns the earliest lease end of a permit still out (epoch ms; Redisson's
-- 922337203685477 for a permit without a lease; nil: none is out), and the permits available after giving
-- some back (nil: none came back). Only that earliest one is read unless it has ended.
local function reclaimPermits(q, now)
  local earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  if not (earliest[2] and tonumber(earliest[2]) <= now) then
    return tonumber(earliest[2]), nil
  end
  local expired = redis.call('ZREMRANGEBYSCORE', q.timeoutKey, '-inf', now)
  local available = redis.call('INCRBY', q.permitsKey, expired)
  if available > 0 then
    announcePermits(q, available, now, available - expired)
  end
  earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  return tonumber(earliest[2]), available
end

-- reapAndAnnounce(q, now, available): drops dead entries; what they kept is announced (to the waiters behind
-- them, or on Redisson's channel). `available`: the permits available when the caller knows them, else read
-- here. Returns the permits available, and the live entries with their deadlines (see liveQueue).
local function reapAndAnnounce(q, now, available)
  available = available or tonumber(redis.call('GET', q.permitsKey) or 0)
  local entries, deadlines, dropped = liveQueue(q, now)
  if dropped > 0 and available > 0 then
    wakeQueued(q, available, entries)
  end
  return available, entries, deadlines
end

-- takePermits(q, entry, entryMs, permits, now): takes `permits` if that many are free beyond what the
-- queued waiters ahead of `entry` (all of them, for '' or an entry not queued) wait for; the entry leaves
-- the queue then. Otherwise queues the entry (or refreshes its deadline) unless it is '', and both queue
-- keys expire DEAD_ENTRY_GRACE_MS after the latest deadline. Expired
-- expirable permits come back first, and dead entries go (what they kept is announced). Returns the
-- permits left after a grant; or nil, the permits available, and the milliseconds until something could
-- change without a message (the earliest deadline of an entry ahead: a dead waiter's place frees up; the
-- earliest lease end: its permit comes back), -1 when nothing would.
-- The caller's request may be a resend of one that was granted: q.claim() records the grant (false when it
-- was recorded before), and is asked before anything is taken; q.ranBefore() tells whether it was granted,
-- asked before a refusal. Either way a resend takes nothing and queues nothing, and gets the permits
-- available as if granted. (One write where a grant is given, one read where it is not: not a read first
-- and a write again on every grant.)
local function takePermits(q, entry, entryMs, permits, now)
  local leaseEnds, reclaimed = reclaimPermits(q, now)
  local available, entries, deadlines = reapAndAnnounce(q, now, reclaimed)
  local ahead = 0
  local queued = false
  local untilMs = -1
  for _, other in ipairs(entries) do
    if other == entry then
      queued = true
      break
    end
    ahead = ahead + entryNeed(other)
    local deadline = deadlines[other]
    if untilMs < 0 or deadline - now < untilMs then
      untilMs = deadline - now
    end
  end
  if available - ahead >= permits then
    if not q.claim() then
      return available
    end
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
  if q.ranBefore() then
    return available
  end
  if entry ~= '' then
    if not queued then
      redis.call('RPUSH', q.queueKey, entry)
    end
    redis.call('ZADD', q.deadlinesKey, now + entryMs, entry)
    -- Both keys run out DEAD_ENTRY_GRACE_MS after the latest deadline: waiters that died queued leave no key
    -- behind, and a script that looks within the grace still finds the dead and announces what they kept.
    local latest = now + entryMs
    for _, deadline in pairs(deadlines) do
      latest = math.max(latest, deadline)
    end
    redis.call('PEXPIRE', q.queueKey, latest - now + DEAD_ENTRY_GRACE_MS)
    redis.call('PEXPIRE', q.deadlinesKey, latest - now + DEAD_ENTRY_GRACE_MS)
  end
  -- Redisson's 922337203685477: a permit without a lease.
  if leaseEnds and leaseEnds ~= 922337203685477 then
    leaseEnds = math.max(0, leaseEnds - now)
    if untilMs < 0 or leaseEnds < untilMs then
      untilMs = leaseEnds
    end
  end
  return nil, available, untilMs
end
