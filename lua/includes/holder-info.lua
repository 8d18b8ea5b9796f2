-- holderInfo(field, info, clock): the field and value that record a fresh hold of `field`, to append to the
-- HSET that creates the hold (no command of its own), or nothing when the client sends no label (holder
-- info turned off). "<field>:info" = "#<clock> <info>": when the hold began (server time, microseconds) and
-- where (the client's label: host, pid, app). The leading "#" keeps it from being read as a hold count by
-- anything that scans a hash for numeric fields (Redisson's read-write lock, our read and write releases).
local function holderInfo(field, info, clock)
  if info == '' then return end
  return field .. ':info', '#' .. clock .. ' ' .. info
end
