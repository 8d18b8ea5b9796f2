--[[
  leave: a waiter stops waiting (it gave up, was aborted, or its client closes): its entry leaves the permit
  queue, permits handed to it that it did not take go back, and the waiters it kept from them are served.

  KEYS[1] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[2] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[3] grantsKey     sorted set: entries handed their permits -> until when the record is kept
  KEYS[4] permitsKey    string: available permits
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed)

  ARGV[1] entry       the waiter's entry "<permits>|<clientId>|<n>|<kind>"
  ARGV[2] wakePrefix  channel prefix of the queued waiters' clients
  ARGV[3] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    2  permits had been handed to the entry: they went back
    1  the entry was queued and is gone
    0  neither (never queued, took its permits, or dropped as dead)

  Side effects
    LREM queueKey, ZREM deadlinesKey; handed permits: ZREM grantsKey, INCRBY permitsKey <need>; then,
    when permits are available, the waiters they serve are served as a release serves them
]]
local queueKey = KEYS[1]
local deadlinesKey = KEYS[2]
local grantsKey = KEYS[3]
local permitsKey = KEYS[4]
local channel = KEYS[5]
local entry = ARGV[1]
local wakePrefix = ARGV[2]
local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local left = 1
if redis.call('ZREM', grantsKey, entry) == 1 then
  redis.call('INCRBY', permitsKey, entryNeed(entry))
  left = 2
else
  redis.call('ZREM', deadlinesKey, entry)
  if redis.call('LREM', queueKey, 1, entry) == 0 then
    return 0
  end
end
local available = tonumber(redis.call('GET', permitsKey) or 0)
if available > 0 then
  announcePermits(permitsKey, queueKey, deadlinesKey, grantsKey, wakePrefix, channel, publish, available)
end
return left
