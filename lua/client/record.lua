--[[
  record: write (or refresh) the holder record of a lock client: who it is, for operators who look at a hold
  that has no holder info of its own yet (a plain lock's lean hold before its first renewal, a fixed lease).

  KEYS[1] recordKey  string "<prefix>flowlock:client:<clientId>": the client's label

  ARGV[1] label   string: "<host> pid <pid>[ (<app>)]", the client's holder info label
  ARGV[2] ttlMs   integer > 0, milliseconds: how long the record lives unless written again

  Returns
    1

  Side effects
    SET recordKey label PX ttlMs (one key per live lock client, gone ttlMs after its last write)
]]
local recordKey = KEYS[1]
local label = ARGV[1]
local ttlMs = ARGV[2]

redis.call('SET', recordKey, label, 'PX', ttlMs)
return 1
