--[[
  leave: a waiting writer of this library gives up (wait time over, aborted, client closed): it stops
  holding back new readers at once, and the readers it held back are woken.

  KEYS[1] writersKey  sorted set of waiting writers: write field -> deadline (epoch ms)
  KEYS[2] lockKey     the read-write lock hash
  KEYS[3] channel     "redisson_rwlock:{<name>}" (prefixed)

  ARGV[1] field    the leaving writer's write field "<owner>:write"
  ARGV[2] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster

  Returns
    1  the writer was registered and is gone
    0  it was not registered (its registration ran out, or something deleted the registry)

  Side effects
    ZREM writersKey field; when no live writer is left and no write hold exists, PUBLISH (or SPUBLISH)
    channel "1" (every waiter retries, as after a write release), also when the writer's registration was
    gone already: readers it held back sleep until a message or its registration's deadline (up to
    watchdogTimeout past its latest attempt), and the registry's deletion woke nobody
]]
local writersKey = KEYS[1]
local lockKey = KEYS[2]
local channel = KEYS[3]
local field = ARGV[1]
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

--- @include "server-time"

local removed = redis.call('ZREM', writersKey, field)
local now = serverTime()
redis.call('ZREMRANGEBYSCORE', writersKey, '-inf', now)
if redis.call('ZCARD', writersKey) == 0 and redis.call('HGET', lockKey, 'mode') ~= 'write' then
  redis.call(publish, channel, '1')
end
return removed
