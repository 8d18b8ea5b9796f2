--[[
  acquire: take one permit of an expirable semaphore under the caller's permit id, for leaseMs, if one is
  free beyond what the queued waiters ahead of the caller wait for; otherwise queue the caller (when it
  may wait).

  KEYS[1] permitsKey    string: available permits (shared with Redisson's RPermitExpirableSemaphore)
  KEYS[2] timeoutKey    sorted set "{<name>}:timeout": permit id (16 raw bytes) -> lease end, epoch ms
                        (Redisson's 922337203685477 = no lease)
  KEYS[3] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[4] deadlinesKey  sorted set: queue entry -> deadline, for the places of the earlier form (read only
                        while one is queued)
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed): gets the permits no queued waiter needs
  KEYS[6] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] permitId    16 raw bytes, chosen by the caller (random)
  ARGV[2] leaseMs     integer > 0, milliseconds
  ARGV[3] entry       the caller's queue entry "1|<clientId>|<n>" when it may wait, else ""
  ARGV[4] entryMs     integer > 0, milliseconds: how long the entry lives past this attempt
  ARGV[5] layout      "shared" (the entry's deadline goes to deadlinesKey: earlier versions may run) or
                      "retired" (into its place in the list); see includes/permit-queue.lua
  ARGV[6] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {1, left}                 granted (or already granted to this permit id: a resend); left = available
    {0, available, untilMs}   not granted; untilMs = milliseconds until the earliest lease end (its permit
                              comes back) or the earliest deadline of a queue entry ahead (a dead
                              waiter's place frees up), -1 when neither

  Side effects
    unless granted at once with no dead entry ahead: permits whose lease ended go back and wake the waiters
    they serve; entries whose deadline passed leave the queue (what they kept is announced);
    granted: ZADD timeoutKey NX <now + leaseMs> permitId (a resend finds it: answered granted, nothing
             taken twice), DECRBY permitsKey 1; the entry leaves the queue;
    the permit key's TTL, if any, is copied to timeoutKey (Redisson #2444);
    refused with an entry: queued with its deadline now + entryMs ("retired": RPUSH "<entry>@<deadline>",
    or LSET its place; "shared": RPUSH the entry unless queued, ZADD the deadline, PEXPIRE deadlinesKey);
    PEXPIRE queueKey to 30 s past the latest deadline.
    Server time (TIME), not the client's clock
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local queueKey = KEYS[3]
local deadlinesKey = KEYS[4]
local channel = KEYS[5]
local wakeChannel = KEYS[6]
local permitId = ARGV[1]
local leaseMs = tonumber(ARGV[2])
local entry = ARGV[3]
local entryMs = tonumber(ARGV[4])
local layout = ARGV[5]
local publish = ARGV[6] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q
q = {
  permitsKey = permitsKey, timeoutKey = timeoutKey, queueKey = queueKey, deadlinesKey = deadlinesKey,
  channel = channel, wakeChannel = wakeChannel, publish = publish, layout = layout,
  -- Whether this request was granted before is known from the lease only (claim, ranBefore).
  read = function()
    return tonumber(redis.call('GET', permitsKey) or 0), nil
  end,
  -- The permit's lease records the grant.
  claim = function()
    return redis.call('ZADD', timeoutKey, 'NX', nowOf(q) + leaseMs, permitId) == 1
  end,
  ranBefore = function()
    return redis.call('ZSCORE', timeoutKey, permitId) ~= false
  end,
}

local left, available, untilMs = takePermits(q, entry, entryMs, 1)
if left then
  local pttl = redis.call('PTTL', permitsKey)
  if pttl > 0 then
    redis.call('PEXPIRE', timeoutKey, pttl)
  end
  return {1, left}
end
return {0, available, untilMs}
