--[[
  renew: the watchdog's batch renewal of every kind of hold (locks, expirable permits); extends each hold
  only while its owner still has it.

  KEYS[1..n], per hold i in order (one Cluster slot per call):
    lockKey      the hash of the hold (plain, fair or read-write lock), or for a permit the sorted set
                 "{<name>}:timeout" of its semaphore
    holdKey      for a lock's hold, the hash of this library's side fields (see includes/hold-key.lua),
                 which must live as long as the hold; for a permit the lock key again (unused)
    timeouts     for a read hold, its timeout keys "<timeoutBase>:<field>:rwlock_timeout:<k>", k = 1, 2, ...
                 (Redisson's layout; as many as the client counts holds: built by the client, since every
                 key a script touches is declared); none for any other hold

  ARGV[1] leaseMs  integer > 0, milliseconds: the TTL each held lock gets
  ARGV[5i-3..5i+1] hold i: its field in its hash (owner id; write holds "<owner>:write"; a permit's id, 16
                   raw bytes); its kind: "hash" (plain, fair and write holds), "read" or "permit"; for a
                   plain lock's hold taken lean (lock/acquire.lua) and not yet renewed, its fencing token
                   and holder info ("#<grant time in us> <label>", or "") to record in holdKey, else "" and
                   ""; and how many timeout keys it declared

  Returns
    array of one integer per hold: 1 the field is still in its hash (its TTL is now at least leaseMs), or the
    permit's lease has not ended (it now ends leaseMs from now, server time); 0 otherwise

  Side effects
    PEXPIRE lockKey leaseMs when the field is there and the TTL is shorter, and PEXPIRE holdKey to the longer
    of leaseMs and the lock key's TTL when its own is shorter
    (after HSET holdKey <field>:token and <field>:info, when given: a lean hold's side fields, written
    only for a hold that lives long enough to be renewed);
    for a read hold also PEXPIRE of its own timeout keys 1..count (those declared: a count the client has
    not learnt yet is renewed from its next renewal on); for a permit ZADD XX of its new lease
    end. Never touches another owner's hold (other readers' timeout keys included: a dead reader's keys
    run out, Redisson #7098) and never creates a key but the hold key of a lean hold
]]
local leaseMs = tonumber(ARGV[1])
local firstEntry = 2

--- @include "server-time"
--- @include "hold-key"

local now
local results = {}
local nextKey = 1
for i = 1, (#ARGV - 1) / 5 do
  local lockKey = KEYS[nextKey]
  local holdKey = KEYS[nextKey + 1]
  local entry = firstEntry + 5 * (i - 1)
  local field = ARGV[entry]
  local kind = ARGV[entry + 1]
  local token = ARGV[entry + 2]
  local info = ARGV[entry + 3]
  local timeouts = tonumber(ARGV[entry + 4])
  local firstTimeout = nextKey + 2
  nextKey = firstTimeout + timeouts
  if kind == 'permit' then
    now = now or serverTime()
    local leaseEnd = tonumber(redis.call('ZSCORE', lockKey, field))
    if leaseEnd and leaseEnd > now then
      redis.call('ZADD', lockKey, 'XX', now + leaseMs, field)
      results[i] = 1
    else
      results[i] = 0
    end
  else
    local count = tonumber(redis.call('HGET', lockKey, field))
    if count then
      if kind == 'read' then
        for k = firstTimeout, firstTimeout + math.min(count, timeouts) - 1 do
          redis.call('PEXPIRE', KEYS[k], leaseMs)
        end
      end
      local pttl = redis.call('PTTL', lockKey)
      if pttl >= 0 and pttl < leaseMs then
        redis.call('PEXPIRE', lockKey, leaseMs)
      end
      if token ~= '' then
        if info ~= '' then
          redis.call('HSET', holdKey, field .. ':token', token, field .. ':info', info)
        else
          redis.call('HSET', holdKey, field .. ':token', token)
        end
      end
      -- As long as the lock key at least (a fixed lease re-entered in watchdog mode may run longer): the
      -- memos in it must last while the hold can.
      extendHold(holdKey, math.max(pttl, leaseMs))
      results[i] = 1
    else
      results[i] = 0
    end
  end
end
return results
