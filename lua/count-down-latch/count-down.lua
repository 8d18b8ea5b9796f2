--[[
  count-down: decrement a count-down latch; at zero it opens and every waiter of every client wakes.

  KEYS[1] latchKey  string: the count
  KEYS[2] channel   "redisson_countdownlatch__channel__{<name>}" (prefixed)
  KEYS[3] memoKey   memo of this count-down (count-down memo prefix + request id)

  ARGV[1] memoMs   integer > 0, milliseconds: how long memoKey is kept
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (sharded pub/sub)

  Returns
    the count afterwards (0: open, also when the latch was not counting)

  Side effects
    when counting and not a resend: DECR latchKey; SET memoKey 1 PX memoMs; at zero (or below: a count
    someone set negative) DEL latchKey, and at exactly zero PUBLISH (or SPUBLISH) channel "0", as Redisson
    does. A latch that is not counting is left alone
]]
local latchKey = KEYS[1]
local channel = KEYS[2]
local memoKey = KEYS[3]
local memoMs = tonumber(ARGV[1])
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

if redis.call('EXISTS', latchKey) == 0 then
  return 0
end
if redis.call('EXISTS', memoKey) == 1 then
  return tonumber(redis.call('GET', latchKey))
end
local count = redis.call('DECR', latchKey)
redis.call('SET', memoKey, 1, 'PX', memoMs)
if count <= 0 then
  redis.call('DEL', latchKey)
  if count == 0 then
    redis.call(publish, channel, '0')
  end
  return 0
end
return count
