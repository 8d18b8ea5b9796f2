--- @include "server-time"
-- The permit queue: this library's waiters for a semaphore's permits (plain and expirable share it), first
-- come first served. queueKey is a list of entries "<need>|<clientId>|<n>" (permits wanted, the waiter's
-- client, a number unique in that client); deadlinesKey a sorted set entry -> deadline (epoch ms, server
-- time) after which the entry is presumed dead (its waiter refreshes it with every attempt). A release
-- wakes the waiters its permits serve, each on its client's channel "<wakePrefix><clientId>" with its entry
-- as the message, and keeps those permits for them: they take them with their next attempt. (Handing the
-- permits over inside the release would save that round trip, but a waiter that died while queued would
-- take them along: nothing can tell a dead waiter from a slow one before its deadline.) Redisson's clients
-- do not know the queue: they take permits as they find them, and hear on Redisson's channel only the
-- permits no queued waiter needs.

-- entryNeed(entry): the permits a queue entry waits for.
local function entryNeed(entry)
  return tonumber(string.match(entry, '^(%d+)|'))
end

-- reapQueue(queueKey, deadlinesKey, now): drops the entries whose deadline passed.
local function reapQueue(queueKey, deadlinesKey, now)
  local dead = redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', now)
  for _, entry in ipairs(dead) do
    redis.call('LREM', queueKey, 1, entry)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', deadlinesKey, '-inf', now)
  end
end

-- neededAhead(queueKey, entry): the permits the entries ahead of `entry` wait for (all entries when it is
-- not queued, or is ''), whether it is queued, and the entries ahead.
local function neededAhead(queueKey, entry)
  local ahead = 0
  local entries = {}
  for _, other in ipairs(redis.call('LRANGE', queueKey, 0, -1)) do
    if other == entry then
      return ahead, true, entries
    end
    ahead = ahead + entryNeed(other)
    entries[#entries + 1] = other
  end
  return ahead, false, entries
end

-- announcePermits(queueKey, deadlinesKey, wakePrefix, channel, publish, available): `available` permits are
-- free: wakes the queued waiters whose needs fit, in order, stopping at the first that does not (it is not
-- overtaken), each on its client's channel; when every queued waiter was woken, announces what is left on
-- Redisson's channel.
local function announcePermits(queueKey, deadlinesKey, wakePrefix, channel, publish, available)
  reapQueue(queueKey, deadlinesKey, serverTime())
  local budget = available
  for _, entry in ipairs(redis.call('LRANGE', queueKey, 0, -1)) do
    local need = entryNeed(entry)
    if need > budget then
      return
    end
    budget = budget - need
    redis.call(publish, wakePrefix .. string.match(entry, '^%d+|(.*)|%d+$'), entry)
  end
  if budget > 0 then
    redis.call(publish, channel, budget)
  end
end

-- takePermits(permitsKey, queueKey, deadlinesKey, entry, entryMs, permits, now): takes `permits` if that
-- many are free beyond what the queued waiters ahead of `entry` (all of them, for '' or an entry not
-- queued) wait for; the entry leaves the queue then. Otherwise queues the entry (or refreshes its
-- deadline) unless it is ''. Returns the permits left after a grant; or nil, the permits available, and
-- the milliseconds until the earliest deadline of an entry ahead (-1: none), when a dead waiter's place
-- could free up.
local function takePermits(permitsKey, queueKey, deadlinesKey, entry, entryMs, permits, now)
  reapQueue(queueKey, deadlinesKey, now)
  local available = tonumber(redis.call('GET', permitsKey) or 0)
  local ahead, queued, entries = neededAhead(queueKey, entry)
  if available - ahead >= permits then
    if queued then
      redis.call('LREM', queueKey, 1, entry)
      redis.call('ZREM', deadlinesKey, entry)
    end
    return redis.call('DECRBY', permitsKey, permits), available
  end
  if entry ~= '' then
    if not queued then
      redis.call('RPUSH', queueKey, entry)
    end
    redis.call('ZADD', deadlinesKey, now + entryMs, entry)
  end
  local untilMs = -1
  for _, other in ipairs(entries) do
    local remaining = tonumber(redis.call('ZSCORE', deadlinesKey, other)) - now
    if untilMs < 0 or remaining < untilMs then
      untilMs = remaining
    end
  end
  return nil, available, untilMs
end
