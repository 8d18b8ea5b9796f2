--[[
  forget-record: remove a lock client's holder record at close(), when it holds nothing any more.

  KEYS[1] recordKey  string "<prefix>flowlock:client:<clientId>" (see client/record.lua)

  ARGV    none

  Returns
    the number of keys removed (0 or 1)

  Side effects
    DEL recordKey
]]
local recordKey = KEYS[1]

return redis.call('DEL', recordKey)
