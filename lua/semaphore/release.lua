--[[
  release: give permits back to a semaphore ("release"), or undo an acquisition whose caller did not take
  it ("undo": its reply was lost, or came after the caller gave up).

  KEYS[1] permitsKey  string: available permits
  KEYS[2] channel     "redisson_sc:{<name>}" (prefixed): gets the new number of available permits
  KEYS[3] memoKey     "release": the memo of this release (release memo prefix + request id);
                      "undo": the memo of the acquisition to undo (acquire memo prefix + its request id)

  ARGV[1] permits  integer >= 1 ("release"; "undo" gives back what the acquisition took)
  ARGV[2] memoMs   integer > 0, milliseconds: how long a release's memo is kept
  ARGV[3] mode     "release" or "undo"
  ARGV[4] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    {available, woken}  permits available now; woken = subscribers that got the message (0 for a resend)
    {-1, 0}             "undo" found no such acquisition (it never ran, or was undone already)

  Side effects
    INCRBY permitsKey; PUBLISH (or SPUBLISH) channel <available> when it is > 0;
    "release": SET memoKey 1 PX memoMs (a resend is answered from it, nothing is added twice);
    "undo": DEL memoKey (an acquisition is undone once)
]]
local permitsKey = KEYS[1]
local channel = KEYS[2]
local memoKey = KEYS[3]
local permits = tonumber(ARGV[1])
local memoMs = tonumber(ARGV[2])
local mode = ARGV[3]
local publish = ARGV[4] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

if mode == 'undo' then
  local taken = redis.call('GET', memoKey)
  if not taken then
    return {-1, 0}
  end
  redis.call('DEL', memoKey)
  permits = tonumber(taken)
elseif redis.call('EXISTS', memoKey) == 1 then
  return {tonumber(redis.call('GET', permitsKey) or 0), 0}
else
  redis.call('SET', memoKey, 1, 'PX', memoMs)
end

local available = redis.call('INCRBY', permitsKey, permits)
local woken = 0
if available > 0 then
  woken = redis.call(publish, channel, available)
end
return {available, woken}
