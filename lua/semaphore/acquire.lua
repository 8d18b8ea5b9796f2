--[[
  acquire: take `permits` permits of a semaphore if that many are free beyond what the queued waiters
  ahead of the caller wait for; otherwise queue the caller (when it may wait).

  KEYS[1] permitsKey    string: available permits (Redisson's RSemaphore / RPermitExpirableSemaphore key)
  KEYS[2] timeoutKey    sorted set "{<name>}:timeout": expirable permits -> lease end (epoch ms)
  KEYS[3] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[4] deadlinesKey  sorted set: queue entry -> deadline (epoch ms, server time), for the places of the
                        earlier form (read only while one is queued)
  KEYS[5] channel       "redisson_sc:{<name>}" (prefixed): gets the permits no queued waiter needs
  KEYS[6] memoKey       string: memo of this acquisition (acquire memo prefix + request id)
  KEYS[7] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] permits     integer >= 1
  ARGV[2] memoMs      integer > 0, milliseconds: how long memoKey is kept
  ARGV[3] entry       the caller's queue entry "<permits>|<clientId>|<n>" when it may wait, else ""
  ARGV[4] entryMs     integer > 0, milliseconds: how long the entry lives past this attempt
  ARGV[5] layout      "shared" (the entry's deadline goes to deadlinesKey: earlier versions may run) or
                      "retired" (into its place in the list); see includes/permit-queue.lua
  ARGV[6] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {1, left}                granted (or already granted by an earlier send of this request); left =
                             permits left
    {0, available, untilMs}  not granted: too few permits, or they are kept for queued waiters ahead;
                             untilMs = milliseconds until the earliest deadline of an entry ahead or the
                             earliest lease end of an expirable permit (-1: neither)

  Side effects
    first MGET permitsKey memoKey: a memo found is a resend of a granted request, answered granted (nothing
    taken twice, nothing queued);
    unless granted at once with no dead entry ahead: expirable permits whose lease ended go back (and wake
    the waiters they serve); entries whose deadline passed leave the queue (what they kept is announced);
    granted: SET memoKey permits PX memoMs, DECRBY permitsKey permits; the entry leaves the queue
    refused with an entry: queued with its deadline now + entryMs ("retired": RPUSH "<entry>@<deadline>",
                           or LSET its place; "shared": RPUSH the entry unless queued, ZADD the deadline,
                           PEXPIRE deadlinesKey); PEXPIRE queueKey to 30 s past the latest deadline
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
local layout = ARGV[5]
local publish = ARGV[6] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, timeoutKey = timeoutKey, queueKey = queueKey, deadlinesKey = deadlinesKey,
  channel = channel, wakeChannel = wakeChannel, publish = publish, layout = layout,
  -- One read for the count and the memo of an earlier grant of this request (a resend).
  read = function()
    local found = redis.call('MGET', permitsKey, memoKey)
    return tonumber(found[1] or 0), found[2] ~= false
  end,
  -- The memo records the grant, and what it took (an undo gives that back). read() found none.
  claim = function()
    redis.call('SET', memoKey, permits, 'PX', memoMs)
    return true
  end,
}

local left, available, untilMs = takePermits(q, entry, entryMs, permits)
if left then
  return {1, left}
end
return {0, available, untilMs}
