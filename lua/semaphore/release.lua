--[[
  release: give permits back to a semaphore ("release"), or undo an acquisition whose caller did not take
  it ("undo": its reply was lost, or came after the caller gave up), and wake the waiters they serve.

  KEYS[1] permitsKey    string: available permits
  KEYS[2] queueKey      list: the permit queue (see includes/permit-queue.lua)
  KEYS[3] deadlinesKey  sorted set: queue entry -> deadline
  KEYS[4] channel       "redisson_sc:{<name>}" (prefixed): gets the permits no queued waiter needs
  KEYS[5] memoKey       "release": the memo of this release (release memo prefix + request id);
                        "undo": the memo of the acquisition to undo (acquire memo prefix + its request id)
  KEYS[6] wakeChannel   "flowlock:permit-wake:{<tag>}..." (prefixed): this library's queued waiters are
                        woken here, each by its entry as the message (every waiting client hears it)

  ARGV[1] permits     integer >= 1 ("release"; "undo" gives back what the acquisition took)
  ARGV[2] memoMs      integer > 0, milliseconds: how long a release's memo is kept
  ARGV[3] mode        "release" or "undo"
  ARGV[4] publish     "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {available}  permits available now
    {-1}         "undo" found no such acquisition (it never ran, or was undone already); nothing changed

  Side effects
    INCRBY permitsKey; then, when permits are available, the queued waiters they serve are woken in order
    on wakeChannel (message: their entry), except those the permits free before served (woken already), and
    what no queued waiter needs is published on channel (Redisson's message: a permit count);
    "release": SET memoKey 1 PX memoMs NX, first (a resend finds it and is answered without adding twice);
    "undo": DEL memoKey (an acquisition is undone once)
]]
local permitsKey = KEYS[1]
local queueKey = KEYS[2]
local deadlinesKey = KEYS[3]
local channel = KEYS[4]
local memoKey = KEYS[5]
local wakeChannel = KEYS[6]
local permits = tonumber(ARGV[1])
local memoMs = tonumber(ARGV[2])
local mode = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "permit-queue"

local q = {
  permitsKey = permitsKey, queueKey = queueKey, deadlinesKey = deadlinesKey, channel = channel,
  wakeChannel = wakeChannel, publish = publish,
}

if mode == 'undo' then
  local taken = redis.call('GET', memoKey)
  if not taken then
    return {-1}
  end
  redis.call('DEL', memoKey)
  permits = tonumber(taken)
elseif not redis.call('SET', memoKey, 1, 'PX', memoMs, 'NX') then
  -- A resend of a release that ran: nothing is added twice.
  return {tonumber(redis.call('GET', permitsKey) or 0)}
end

local available = redis.call('INCRBY', permitsKey, permits)
if available > 0 then
  announcePermits(q, available, available - permits)
end
return {available}
