--[[
  acquire: take `permits` permits of a semaphore if that many are free beyond what the queued waiters
  ahead of the caller wait for; otherwise queue the caller (when it may wait).

  KEYS[1] permitsKey    string: available permits (Redisson's RSemaphore / RPermitExpirableSemaphore key)
  KEYS[2] timeoutKey    sorted set "{<name>}:timeout": expirable permits -> lease end (epoch ms)
  KEYS[3] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[4] deadlinesKey  sorted set: queue entry -> deadline (epoch ms, server time)
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed): gets the permits no queued waiter needs
  KEYS[6] memoKey       string: memo of this acquisition (acquire memo prefix + request id)
  KEYS[7] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] permits     integer >= 1
  ARGV[2] memoMs      integer > 0, milliseconds: how long memoKey is kept
  ARGV[3] entry       the caller's queue entry "<permits>|<clientId>|<n>" when it may wait, else ""
  ARGV[4] entryMs     integer > 0, milliseconds: how long the entry lives past this attempt
  ARGV[5] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {1, left}                granted (or already granted by an earlier send of this request); left =
                             permits left
    {0, available, untilMs}  not granted: too few permits, or they are kept for queued waiters ahead;
                             untilMs = milliseconds until the earliest deadline of an entry ahead or the
                             earliest lease end of an expirable permit (-1: neither)

  Side effects
    expirable permits whose lease ended go back (and wake the waiters they serve); entries whose deadline
    passed leave the queue (what they kept is announced);
    granted: SET memoKey permits PX memoMs NX (a resend finds it: answered granted, nothing taken twice),
             DECRBY permitsKey permits; the entry leaves the queue
    refused with an entry: RPUSH it unless queued, ZADD its deadline now + entryMs; PEXPIRE queueKey and
                           deadlinesKey to 30 s past the latest deadline
]]
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local queueKey = KEYS[3]
local deadlinesKey = KEYS[4]
local channel = KEYS[5]
local memoKey = KEYS[6]
local wakeChannel = KEYS[7]
local permits = tonumber(ARGV[1])
local memoMs = tonumber(ARGV[2])
local entry = ARGV[3]
local entryMs = tonumber(ARGV[4])
local publish = ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, timeoutKey = timeoutKey, queueKey = queueKey, deadlinesKey = deadlinesKey,
  channel = channel, wakeChannel = wakeChannel, publish = publish,
  -- The memo records the grant, and what it took (an undo gives that back).
  claim = function()
    return redis.call('SET', memoKey, permits, 'PX', memoMs, 'NX') ~= false
  end,
  ranBefore = function()
    return redis.call('EXISTS', memoKey) == 1
  end,
}

local left, available, untilMs = takePermits(q, entry, entryMs, permits, serverTime())
if left then
  return {1, left}
end
return {0, available, untilMs}
