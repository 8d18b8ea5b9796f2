-- serverTime(): the server's clock, as epoch milliseconds and as a decimal string of microseconds (built as
-- a string: Lua would print a number this large in exponent form, losing digits).
local function serverTime()
  local time = redis.call('TIME')
  local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  return ms, time[1] .. string.format('%06d', tonumber(time[2]))
end
