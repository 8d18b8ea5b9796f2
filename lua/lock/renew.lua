--[[
  renew: the watchdog's batch renewal of every kind of lock hold; extends each hold only while its owner
  still has it.

  KEYS[1..n] pairs   KEYS[2i-1] lockKey: the hash of hold i (plain, fair or read-write lock), one Cluster
                     slot per call; KEYS[2i] timeoutBase: for a read hold, the prefix of its per-hold
                     timeout keys "<timeoutBase>:<field>:rwlock_timeout:<k>" (Redisson's layout); for
                     any other hold the lock key again (unused)

  ARGV[1] leaseMs       integer > 0, milliseconds: the TTL each held lock gets
  ARGV[2i], ARGV[2i+1]  field of hold i in its hash (owner id; write holds "<owner>:write"), and its
                        kind: "hash" (plain, fair and write holds) or "read"

  Returns
    array of n/2 integers: 1 the field is still in its hash (its TTL is now at least leaseMs), 0 it is not

  Side effects
    PEXPIRE lockKey leaseMs when the field is there and the TTL is shorter; for a read hold also PEXPIRE of
    its own timeout keys 1..count. Never touches another owner's hold (other readers' timeout keys
    included: a dead reader's keys run out, Redisson #7098) and never creates a key
]]
local leaseMs = tonumber(ARGV[1])
local firstEntry = 2

local results = {}
for i = 1, #KEYS / 2 do
  local lockKey = KEYS[2 * i - 1]
  local timeoutBase = KEYS[2 * i]
  local field = ARGV[firstEntry + 2 * (i - 1)]
  local kind = ARGV[firstEntry + 2 * (i - 1) + 1]
  local count = tonumber(redis.call('HGET', lockKey, field))
  if count then
    if kind == 'read' then
      for k = 1, count do
        redis.call('PEXPIRE', timeoutBase .. ':' .. field .. ':rwlock_timeout:' .. k, leaseMs)
      end
    end
    local pttl = redis.call('PTTL', lockKey)
    if pttl >= 0 and pttl < leaseMs then
      redis.call('PEXPIRE', lockKey, leaseMs)
    end
    results[i] = 1
  else
    results[i] = 0
  end
end
return results
