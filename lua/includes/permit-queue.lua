--- @include "server-time"
-- The permit queue: this library's waiters for a semaphore's permits (plain and expirable share it), first
-- come first served. q.queueKey is a list of the waiters' places in arrival order. A waiter is named by its
-- entry "<need>|<clientId>|<n>" (permits wanted, the waiter's client, a number unique in that client), and
-- has a deadline (epoch ms, server time) after which it is presumed dead (its waiter refreshes it with
-- every attempt). A place is kept in one of two forms:
-- - "<entry>@<deadline>": the deadline in the place itself (one key for the whole queue);
-- - "<entry>": the deadline in the sorted set q.deadlinesKey, entry -> deadline. Earlier versions of this
--   library read only this form, and drop a place they find no deadline for: clients write it while such a
--   version may run (their `previousLayout` 'shared', q.layout), the first form once none does ('retired').
--   Every script reads both, and the sorted set only while a place of this form is queued.
-- A release wakes the waiters its permits serve, each on the semaphore's wake channel q.wakeChannel (declared
-- in KEYS; the client of every queued waiter listens there, and the entry names the one woken) with its
-- entry as the message, and keeps those permits for them: they take them with their next attempt.
-- (Handing the permits over inside the release would save that round trip, but a waiter that died while
-- queued would take them along: nothing can tell a dead waiter from a slow one before its deadline.)
-- Redisson's clients do not know the queue: they take permits as they find them, and hear on Redisson's
-- channel (q.channel) only the permits no queued waiter needs.
--
-- q: {permitsKey, queueKey, deadlinesKey, channel, wakeChannel, publish, layout ('shared' or 'retired'; the
-- scripts that queue waiters), timeoutKey (expirable permits' sorted set; the scripts that take permits
-- reclaim expired ones), now (server time, epoch ms: set by the caller, or read once when first needed)}

-- How long (ms) the queue's keys outlive the latest deadline in them: a dead waiter kept permits that only a
-- script finding it dead announces on Redisson's channel (Java waiters hear of them no other way). The
-- footprint contract's window (DESIGN.md: nothing outlives a free lock by more than 30 s).
local DEAD_ENTRY_GRACE_MS = 30000

-- nowOf(q): server time in epoch ms, read with the first call that needs it (a call that judges no deadline
-- reads no clock).
local function nowOf(q)
  if not q.now then
    q.now = serverTime()
  end
  return q.now
end

-- entryNeed(entry): the permits a queue entry waits for.
local function entryNeed(entry)
  return tonumber(string.match(entry, '^(%d+)|'))
end

-- readQueue(q): the queued places in order, each {element (as listed), entry, deadline (nil: none known)}.
-- One read of the list; the deadlines key is read (whole) only when a place of the sorted-set form is queued.
local function readQueue(q)
  local listed = redis.call('LRANGE', q.queueKey, 0, -1)
  local places = {}
  local scored = false
  for i, element in ipairs(listed) do
    local entry, deadline = string.match(element, '^(.*)@(%d+)$')
    if entry then
      places[i] = {element = element, entry = entry, deadline = tonumber(deadline)}
    else
      places[i] = {element = element, entry = element}
      scored = true
    end
  end
  if scored then
    local scores = redis.call('ZRANGE', q.deadlinesKey, 0, -1, 'WITHSCORES')
    local deadlines = {}
    for i = 1, #scores, 2 do
      deadlines[scores[i]] = tonumber(scores[i + 1])
    end
    for _, place in ipairs(places) do
      if place.element == place.entry then
        place.deadline = deadlines[place.entry]
      end
    end
  end
  return places
end

-- alive(q, place): whether the place's deadline is still ahead (reads the clock).
local function alive(q, place)
  return place.deadline ~= nil and place.deadline > nowOf(q)
end

-- liveQueue(q, places): the places still alive, in order, and how many it dropped as dead: past their deadline
-- (their waiter stopped refreshing it), or with none (lost, e.g. evicted: nobody could ever reap them
-- otherwise). The dead leave the list, and passed deadlines the sorted set (also those whose list entry is
-- gone, a DEL of the list: they would outlive their waiter otherwise). `places`: from readQueue, read here
-- when nil. Afterwards the list holds exactly the places returned, in that order.
local function liveQueue(q, places)
  places = places or readQueue(q)
  local live = {}
  local dropped = 0
  local scoredDead = false
  for _, place in ipairs(places) do
    if alive(q, place) then
      live[#live + 1] = place
    else
      redis.call('LREM', q.queueKey, 1, place.element)
      dropped = dropped + 1
      scoredDead = scoredDead or place.element == place.entry
    end
  end
  if scoredDead then
    redis.call('ZREMRANGEBYSCORE', q.deadlinesKey, '-inf', nowOf(q))
  end
  return live, dropped
end

-- wakeQueued(q, available, places, before): `available` permits are free: wakes the live queued waiters
-- `places` (from liveQueue) whose needs fit, in order, stopping at the first that does not (it is not
-- overtaken), each on the wake channel; when every one was woken, announces what is left on Redisson's
-- channel. `before`: the permits free before this script added some (nil: none known). The waiters that fit
-- in those were woken when they came (every script that adds permits wakes the queue so, and Redisson's
-- release wakes each client's first waiter on Redisson's channel), so only those after them are woken again:
-- one wake per woken waiter, not one per release while it is on its way.
local function wakeQueued(q, available, places, before)
  local budget = available
  local woken = before or 0
  for _, place in ipairs(places) do
    local need = entryNeed(place.entry)
    if need > budget then
      return
    end
    budget = budget - need
    if need <= woken then
      woken = woken - need
    else
      woken = -1
      redis.call(q.publish, q.wakeChannel, place.entry)
    end
  end
  if budget > 0 then
    redis.call(q.publish, q.channel, budget)
  end
end

-- announcePermits(q, available, before, places): `available` permits are free (`before` of them already were,
-- see wakeQueued): drops the dead places and wakes the waiters they serve. `places`: the queue as read by this
-- script (from readQueue, nothing changed since), read here when nil.
local function announcePermits(q, available, before, places)
  wakeQueued(q, available, (liveQueue(q, places)), before)
end

-- reclaimPermits(q): gives back every expirable permit whose lease ended by now, and wakes the waiters they
-- serve. Returns the earliest lease end of a permit still out (epoch ms; Redisson's 922337203685477 for a
-- permit without a lease; nil: none is out), and the permits available after giving some back (nil: none
-- came back). Only that earliest one is read unless it has ended.
local function reclaimPermits(q)
  local earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  if not (earliest[2] and tonumber(earliest[2]) <= nowOf(q)) then
    return tonumber(earliest[2]), nil
  end
  local expired = redis.call('ZREMRANGEBYSCORE', q.timeoutKey, '-inf', nowOf(q))
  local available = redis.call('INCRBY', q.permitsKey, expired)
  if available > 0 then
    announcePermits(q, available, available - expired)
  end
  earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  return tonumber(earliest[2]), available
end

-- reapAndAnnounce(q, available, places): drops dead places; what they kept is announced (to the waiters behind
-- them, or on Redisson's channel). `available`: the permits available when the caller knows them, else read
-- here; `places`: as for announcePermits. Returns the permits available, and the live places (see liveQueue).
local function reapAndAnnounce(q, available, places)
  available = available or tonumber(redis.call('GET', q.permitsKey) or 0)
  local live, dropped = liveQueue(q, places)
  if dropped > 0 and available > 0 then
    wakeQueued(q, available, live)
  end
  return available, live
end

-- placeOf(places, entry): the index of `entry`'s place (nil: not queued).
local function placeOf(places, entry)
  for i, place in ipairs(places) do
    if place.entry == entry then
      return i
    end
  end
  return nil
end

-- grant(q, entry, places, index, permits): takes `permits` for `entry`, whose place is places[index] (nil: not
-- queued), once q.claim() recorded the grant (false: recorded before, a resend: nothing is taken). Returns the
-- permits left, or nil for a resend.
local function grant(q, entry, places, index, permits)
  if not q.claim() then
    return nil
  end
  if index then
    redis.call('LREM', q.queueKey, 1, places[index].element)
  end
  -- The sorted-set form's deadline goes too, also when the list lost the place (a DEL of the list): it would
  -- outlive its waiter with nothing to reap it once nobody calls.
  if entry ~= '' and ((index and places[index].element == entry) or (not index and q.layout == 'shared')) then
    redis.call('ZREM', q.deadlinesKey, entry)
  end
  return redis.call('DECRBY', q.permitsKey, permits)
end

-- takePermits(q, entry, entryMs, permits): takes `permits` if that many are free beyond what the queued
-- waiters ahead of `entry` (all of them, for '' or an entry not queued) wait for; the entry leaves the queue
-- then. Otherwise queues the entry (or refreshes its deadline, now + entryMs) unless it is '', in the form
-- q.layout says, and the queue's keys expire DEAD_ENTRY_GRACE_MS after the latest deadline. Returns the
-- permits left after a grant; or nil, the permits available, and the milliseconds until something could
-- change without a message (the earliest deadline of an entry ahead: a dead waiter's place frees up; the
-- earliest lease end: its permit comes back), -1 when nothing would.
-- q.read() returns the permits available and whether this request was granted before (true: a resend;
-- nil: unknown, then q.claim() records the grant and is false when it was recorded before, and
-- q.ranBefore() tells it before a refusal). A resend takes nothing and queues nothing, and gets the permits
-- available as if granted.
-- The grant that meets no dead waiter ahead and enough permits (a woken waiter at the head, a free
-- semaphore) reads no clock and reclaims nothing; every other call first gives expired expirable permits
-- back and drops every dead place (what they kept is announced).
local function takePermits(q, entry, entryMs, permits)
  local available, grantedBefore = q.read()
  if grantedBefore then
    return available
  end
  local places = readQueue(q)
  local index = entry ~= '' and placeOf(places, entry) or nil
  local ahead = 0
  local fast = true
  for i = 1, (index or #places + 1) - 1 do
    if not alive(q, places[i]) then
      fast = false
      break
    end
    ahead = ahead + entryNeed(places[i].entry)
  end
  if fast and available - ahead >= permits then
    return grant(q, entry, places, index, permits) or available
  end

  local leaseEnds, reclaimed = nil, nil
  if q.timeoutKey then
    leaseEnds, reclaimed = reclaimPermits(q)
  end
  -- Giving permits back announced them, which may have dropped places: read the queue again then.
  available, places = reapAndAnnounce(q, reclaimed or available, reclaimed == nil and places or nil)
  index = entry ~= '' and placeOf(places, entry) or nil
  ahead = 0
  local untilMs = -1
  local now = nowOf(q)
  for i = 1, (index or #places + 1) - 1 do
    ahead = ahead + entryNeed(places[i].entry)
    if untilMs < 0 or places[i].deadline - now < untilMs then
      untilMs = places[i].deadline - now
    end
  end
  if available - ahead >= permits then
    return grant(q, entry, places, index, permits) or available
  end
  if grantedBefore == nil and q.ranBefore() then
    return available
  end
  if entry ~= '' then
    local deadline = now + entryMs
    local latest = deadline
    for _, place in ipairs(places) do
      latest = math.max(latest, place.deadline)
    end
    local ttl = latest - now + DEAD_ENTRY_GRACE_MS
    -- Both forms: the list runs out DEAD_ENTRY_GRACE_MS after the latest deadline, so waiters that died
    -- queued leave no key behind, and a script that looks within the grace still finds the dead and
    -- announces what they kept.
    if q.layout == 'shared' then
      if not index then
        redis.call('RPUSH', q.queueKey, entry)
      end
      redis.call('ZADD', q.deadlinesKey, deadline, entry)
      redis.call('PEXPIRE', q.deadlinesKey, ttl)
    elseif index then
      redis.call('LSET', q.queueKey, index - 1, entry .. '@' .. deadline)
    else
      redis.call('RPUSH', q.queueKey, entry .. '@' .. deadline)
    end
    redis.call('PEXPIRE', q.queueKey, ttl)
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
