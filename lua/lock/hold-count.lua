--[[
  hold-count: how many holds the nearest holding owner of the calling flow chain has.

  KEYS[1] lockKey  the lock hash

  ARGV[1..n] owners  owner ids of the calling flow, then of its ancestors, nearest first

  Returns
    {count, ownerIndex}  count > 0 held by owners[ownerIndex] (1-based)
    {0, 0}               no owner of the chain holds the lock

  Side effects
    none (read only)
]]
local lockKey = KEYS[1]

for i = 1, #ARGV do
  local count = redis.call('HGET', lockKey, ARGV[i])
  if count then
    return {tonumber(count), i}
  end
end
return {0, 0}
