--[[
  read-settle: after a reader's last hold left a read-write lock that other readers still hold (see
  read-write-lock/read-release.lua), keep the lock only as long as the longest live read hold, and free it
  when none is alive (readers that died keep their field until the hash expires): Redisson's unlock does
  this inside the release, reading every reader's timeout keys, which the client cannot declare before it
  knows the readers. Nothing here is needed for safety: a lock left with a longer TTL is only freed later.

  KEYS[1] lockKey      the read-write lock hash (see read-write-lock/read-acquire.lua)
  KEYS[2] channel      "redisson_rwlock:{<name>}" (prefixed): gets "0" when the lock is freed
  KEYS[3] holdKey      hash of this library's side fields (see includes/hold-key.lua)
  KEYS[4..n] timeouts  for each reader i of ARGV, in order, its timeout keys
                       "<timeoutBase>:<field_i>:rwlock_timeout:<k>", k = 1..count_i

  ARGV[2i-1], ARGV[2i]  reader i's field and read hold count, as read-release.lua reported them
  ARGV[n]               "PUBLISH", or "SPUBLISH" on a Redis 7+ Cluster

  Returns
    woken  subscribers reached when the lock was freed; 0 otherwise

  Side effects
    nothing when the hash has a write hold, or a reader (or more holds of one) not declared here (it came
    since: its own release settles the lock); else PEXPIRE lockKey to the longest PTTL of the declared
    timeout keys when one is alive, or DEL lockKey and holdKey and PUBLISH (or SPUBLISH) channel "0"
]]
local lockKey = KEYS[1]
local channel = KEYS[2]
local holdKey = KEYS[3]
local publish = ARGV[#ARGV] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

-- The declared readers: field -> {first key index, count}.
local declared = {}
local nextKey = 4
for i = 1, #ARGV - 1, 2 do
  local count = tonumber(ARGV[i + 1])
  local field = ARGV[i]
  declared[field] = {nextKey, count}
  nextKey = nextKey + count
end

local longest = 0
local hash = redis.call('HGETALL', lockKey)
for f = 1, #hash, 2 do
  local field = hash[f]
  local count = tonumber(hash[f + 1])
  if field ~= 'mode' and count then
    local reader = declared[field]
    if string.sub(field, -6) == ':write' or not reader or count > reader[2] then
      return 0
    end
    for k = reader[1], reader[1] + count - 1 do
      longest = math.max(longest, redis.call('PTTL', KEYS[k]))
    end
  end
end
if #hash == 0 then
  return 0
end
if longest > 0 then
  redis.call('PEXPIRE', lockKey, longest)
  return 0
end
redis.call('DEL', lockKey, holdKey)
return redis.call(publish, channel, '0')
