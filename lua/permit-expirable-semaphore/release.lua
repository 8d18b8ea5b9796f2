--[[
  release: give back one permit of an expirable semaphore by its id, if its lease has not ended, and wake
  the waiters it serves.

  KEYS[1] permitsKey    string: available permits
  KEYS[2] timeoutKey    sorted set "{<name>}:timeout": permit id -> lease end (epoch ms)
  KEYS[3] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[4] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed): gets the permits no queued waiter needs
  KEYS[6] memoKey       memo of this release (release memo prefix + request id)
  KEYS[7] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] permitId    16 raw bytes
  ARGV[2] memoMs      integer > 0, milliseconds: how long memoKey is kept
  ARGV[3] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    1   released (or released already by an earlier send of this request)
    -1  the permit was not held: unknown, released already, or its lease had ended (it is given back now
        all the same, as Redisson 3.17+ does)

  Side effects
    SET memoKey 1 PX memoMs NX first (a resend finds it: answered 1, nothing given back twice), deleted
    again when the permit was not held; permits whose lease ended go back; then ZREM timeoutKey permitId,
    INCRBY permitsKey 1, the waiters the permits serve are woken (those the permits free before served
    were woken already)
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local queueKey = KEYS[3]
local deadlinesKey = KEYS[4]
local channel = KEYS[5]
local memoKey = KEYS[6]
local wakeChannel = KEYS[7]
local permitId = ARGV[1]
local memoMs = tonumber(ARGV[2])
local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, timeoutKey = timeoutKey, queueKey = queueKey, deadlinesKey = deadlinesKey,
  channel = channel, wakeChannel = wakeChannel, publish = publish,
}

if not redis.call('SET', memoKey, 1, 'PX', memoMs, 'NX') then
  return 1
end
reclaimPermits(q)
if redis.call('ZREM', timeoutKey, permitId) == 0 then
  -- Nothing was released: a resend must find the same.
  redis.call('DEL', memoKey)
  return -1
end
local available = redis.call('INCRBY', permitsKey, 1)
if available > 0 then
  announcePermits(q, available, available - 1)
end
return 1
