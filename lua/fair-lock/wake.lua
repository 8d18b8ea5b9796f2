--[[
  wake: wake a fair lock's waiter on its own channel, which a release, leave or force-unlock named (the
  scripts that read the queue cannot declare the channel of a waiter they have not read yet).

  KEYS[1] channel  "redisson_lock__channel:{<name>}:<waiter id>" (prefixed): Redisson's per-waiter channel

  ARGV[1] publish  "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster (the channel is in the lock's slot)

  Returns
    subscribers reached (0 or 1 waiter)

  Side effects
    PUBLISH (or SPUBLISH) channel "0"
]]
local channel = KEYS[1]
local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

return redis.call(publish, channel, '0')
