--[[
  retire-legacy-fence: remove a per-name fencing counter of the previous layout, first carrying its value
  into the shared counter of the lock's prefix (and slot), so that no later token can fall to or below a
  token the old counter handed out.

  KEYS[1] legacyFenceKey  string: the per-name counter "flowlock:fence:{<tag>}..." (no expiry)
  KEYS[2] fenceKey        string: the shared counter "flowlock:fencing[:{<n>}]" of the same slot

  ARGV    none

  Returns
    1  the per-name counter was there and is gone
    0  it was not there

  Side effects
    SET fenceKey <legacy value> when that is larger than the shared counter (or it is missing);
    DEL legacyFenceKey
]]
local legacyFenceKey = KEYS[1]
local fenceKey = KEYS[2]

local legacy = tonumber(redis.call('GET', legacyFenceKey) or '0')
if legacy > tonumber(redis.call('GET', fenceKey) or '0') then
  -- Formatted in full: Lua would print a number this large in exponent form.
  redis.call('SET', fenceKey, string.format('%.0f', legacy))
end
return redis.call('DEL', legacyFenceKey)
