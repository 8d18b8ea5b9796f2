-- holderInfo(field, info, clock): the field and value that record a fresh hold of `field` in the hold key
-- (this library's hash beside the lock), to append to the HSET that writes the hold's memo there (no
-- command of its own), or nothing when the client sends no label (holder info turned off).
-- "<field>:info" = "#<clock> <info>": when the hold began (server time, microseconds) and where (the
-- client's label: host, pid, app).
local function holderInfo(field, info, clock)
  if info == '' then return end
  return field .. ':info', '#' .. clock .. ' ' .. info
end
