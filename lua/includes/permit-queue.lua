--- @include "server-time"
-- The permit queue: this library's waiters for a semaphore's permits (plain and expirable share it), first
-- come first served. queueKey is a list of entries "<need>|<clientId>|<n>|<kind>" (permits wanted, the
-- waiter's client, a number unique in that client, and "h" for a plain semaphore's waiter, which is handed
-- its permits, or "w" for an expirable one's, which is woken to take its permit itself); deadlinesKey a
-- sorted set entry -> deadline (epoch ms, server time) after which the entry is presumed dead (its waiter
-- refreshes it with every attempt); grantsKey a sorted set of the entries handed their permits -> until
-- when the record is kept (the waiter's deadline). A waiter is told on its client's channel
-- "<wakePrefix><clientId>", with its entry as the message. Redisson's clients do not know the queue: they
-- take permits as they find them, and hear on Redisson's channel only the permits no queued waiter needs.

-- entryNeed(entry): the permits a queue entry waits for.
local function entryNeed(entry)
  return tonumber(string.match(entry, '^(%d+)|'))
end

-- reapQueue(queueKey, deadlinesKey, grantsKey, now): drops the entries whose deadline passed, and the
-- records of handed-over permits kept as long (their permits are the waiter's: a dead waiter's are lost,
-- as a dead holder's are).
local function reapQueue(queueKey, deadlinesKey, grantsKey, now)
  local dead = redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', now)
  for _, entry in ipairs(dead) do
    redis.call('LREM', queueKey, 1, entry)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', deadlinesKey, '-inf', now)
  end
  redis.call('ZREMRANGEBYSCORE', grantsKey, '-inf', now)
end

-- neededAhead(queueKey, entry): the permits the entries ahead of `entry` wait for (all entries when it is
-- not queued, or is ''), and whether it is queued.
local function neededAhead(queueKey, entry)
  local ahead = 0
  for _, other in ipairs(redis.call('LRANGE', queueKey, 0, -1)) do
    if other == entry then
      return ahead, true
    end
    ahead = ahead + entryNeed(other)
  end
  return ahead, false
end

-- announcePermits(permitsKey, queueKey, deadlinesKey, grantsKey, wakePrefix, channel, publish, available):
-- `available` permits are free: serves the queued waiters whose needs fit, in order, stopping at the first
-- that does not (it is not overtaken): a plain semaphore's waiter is handed its permits (they are taken for
-- it and recorded in grantsKey), an expirable one's is woken to take its own; each is told on its client's
-- channel. When every queued waiter was served, announces what is left on Redisson's channel.
local function announcePermits(permitsKey, queueKey, deadlinesKey, grantsKey, wakePrefix, channel, publish, available)
  local now = serverTime()
  reapQueue(queueKey, deadlinesKey, grantsKey, now)
  local budget = available
  for _, entry in ipairs(redis.call('LRANGE', queueKey, 0, -1)) do
    local need = entryNeed(entry)
    if need > budget then
      return
    end
    budget = budget - need
    if string.sub(entry, -1) == 'h' then
      redis.call('DECRBY', permitsKey, need)
      local keepUntil = tonumber(redis.call('ZSCORE', deadlinesKey, entry))
      redis.call('ZADD', grantsKey, keepUntil, entry)
      -- The record goes with the last deadline even if no script reaps it.
      if redis.call('PTTL', grantsKey) < keepUntil - now then
        redis.call('PEXPIRE', grantsKey, keepUntil - now)
      end
      redis.call('LREM', queueKey, 1, entry)
      redis.call('ZREM', deadlinesKey, entry)
    end
    redis.call(publish, wakePrefix .. string.match(entry, '^%d+|(.*)|%d+|%a$'), entry)
  end
  if budget > 0 then
    redis.call(publish, channel, budget)
  end
end

-- takePermits(permitsKey, queueKey, deadlinesKey, grantsKey, entry, entryMs, permits, now): the permits
-- handed to `entry` if it was, else takes `permits` if that many are free beyond what the queued waiters
-- ahead of `entry` (all of them, for '' or an entry not queued) wait for; the entry leaves the queue then.
-- Otherwise queues the entry (or refreshes its deadline) unless it is ''. Returns the permits left after a
-- grant, or nil and the permits available.
local function takePermits(permitsKey, queueKey, deadlinesKey, grantsKey, entry, entryMs, permits, now)
  reapQueue(queueKey, deadlinesKey, grantsKey, now)
  local available = tonumber(redis.call('GET', permitsKey) or 0)
  if entry ~= '' and redis.call('ZREM', grantsKey, entry) == 1 then
    return available, available
  end
  local ahead, queued = neededAhead(queueKey, entry)
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
  return nil, available
end
