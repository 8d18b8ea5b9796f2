--[[
  leave: a waiter stops waiting (it gave up, was aborted, or its client closes): its entry leaves the permit
  queue, and the waiters it kept from the permits are woken.

  KEYS[1] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[2] deadlinesKey  sorted set: queue entry -> deadline, for the places of the earlier form
  KEYS[3] permitsKey    string: available permits
  KEYS[4] channel       "redisson_sc:{<name>}" (prefixed)
  KEYS[5] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] entry       the waiter's entry "<permits>|<clientId>|<n>"
  ARGV[2] layout      the waiter's client's: "shared" (its place is the entry, its deadline in deadlinesKey)
                      or "retired" (its place "<entry>@<deadline>"); see includes/permit-queue.lua
  ARGV[3] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1  the entry was queued and is gone
    0  it was not (never queued, granted, or dropped as dead)

  Side effects
    LREM queueKey ("shared": ZREM deadlinesKey too; "retired": the place is found by a read of the queue);
    then, when permits are available, the waiters they serve are woken
    as a release wakes them
]]
local queueKey = KEYS[1]
local deadlinesKey = KEYS[2]
local permitsKey = KEYS[3]
local channel = KEYS[4]
local wakeChannel = KEYS[5]
local entry = ARGV[1]
local layout = ARGV[2]
local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, queueKey = queueKey, deadlinesKey = deadlinesKey, channel = channel,
  wakeChannel = wakeChannel, publish = publish,
}

-- The queue as this script leaves it (nil: not read; announcing reads it).
local places = nil
if layout == 'shared' then
  redis.call('ZREM', deadlinesKey, entry)
  if redis.call('LREM', queueKey, 1, entry) == 0 then
    return 0
  end
else
  places = readQueue(q)
  local index = placeOf(places, entry)
  if not index then
    return 0
  end
  redis.call('LREM', queueKey, 1, places[index].element)
  table.remove(places, index)
end
local available = tonumber(redis.call('GET', permitsKey) or 0)
if available > 0 then
  announcePermits(q, available, nil, places)
end
return 1
