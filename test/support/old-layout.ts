/**
 * Plays a client of the previous release's Redis layout, for rolling-upgrade tests: its plain lock's acquire
 * and release scripts, copied from lua/lock/ as they were before the layout moved this library's fields out
 * of Redisson's hash (comments dropped). They keep the resend memos (`<owner>:acq`, `<owner>:rel`) and the
 * holder info (`<owner>:info`) in the lock hash, and the fencing counter per name, with no expiry
 * (`flowlock:fence:{<name>}`, the `legacyFenceKey` of keys.ts).
 *
 * Also a semaphore waiter of the version before the permit queue moved into one key: its acquire script (with
 * lua/includes/permit-queue.lua as it was, comments dropped, from commit 4a3fccb), which keeps a waiter's place
 * in the list as its bare entry and its deadline in the sorted set beside it, and drops a place it finds no
 * deadline for there.
 */
import { randomUUID } from 'node:crypto';
import { lockKeys, semaphoreKeys } from '../../src/redis/keys.js';
import { onCluster, shardedChannels, type Client } from './fixture.js';

const OLD_ACQUIRE = `
local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local leaseMs = tonumber(ARGV[1])
local requestId = ARGV[2]
local info = ARGV[3]
local owners = {unpack(ARGV, 4)}
local function serverTime()
  local time = redis.call('TIME')
  local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  return ms, time[1] .. string.format('%06d', tonumber(time[2]))
end
local function nextToken(fenceKey, clock)
  if not clock then
    local _, now = serverTime()
    clock = now
  end
  -- The previous layout's SET fenceKey clock GET (Redis 6.2), as a GET and a SET: the tests run on 6.0 too.
  local previous = tonumber(redis.call('GET', fenceKey) or '0')
  if previous < tonumber(clock) then
    redis.call('SET', fenceKey, clock)
    return tonumber(clock)
  end
  redis.call('SET', fenceKey, string.format('%.0f', previous + 1))
  return previous + 1
end
local function reenter(lockKey, fenceKey, fields, memo, leaseMs)
  for index, field in ipairs(fields) do
    local held = redis.call('HMGET', lockKey, field, field .. ':acq')
    if held[1] then
      local token = tonumber(redis.call('GET', fenceKey) or '0')
      if held[2] == memo then
        return {1, token, tonumber(held[1]), index}
      end
      local count = redis.call('HINCRBY', lockKey, field, 1)
      redis.call('HSET', lockKey, field .. ':acq', memo)
      local pttl = redis.call('PTTL', lockKey)
      if pttl >= 0 and pttl < leaseMs then
        redis.call('PEXPIRE', lockKey, leaseMs)
      end
      return {1, token, count, index}
    end
  end
  return nil
end
local function holderInfo(field, info, clock)
  if info == '' then return end
  return field .. ':info', '#' .. clock .. ' ' .. info
end
if redis.call('EXISTS', lockKey) == 0 then
  local _, clock = serverTime()
  local token = nextToken(fenceKey, clock)
  redis.call('HSET', lockKey, owners[1], 1, owners[1] .. ':acq', requestId, holderInfo(owners[1], info, clock))
  redis.call('PEXPIRE', lockKey, leaseMs)
  return {1, token, 1, 1}
end
return reenter(lockKey, fenceKey, owners, requestId, leaseMs) or {0, redis.call('PTTL', lockKey)}`;

const OLD_RELEASE = `
local lockKey = KEYS[1]
local channel = KEYS[2]
local requestKey = KEYS[3]
local requestId = ARGV[1]
local memoMs = tonumber(ARGV[2])
local mode = ARGV[3]
local undoId = ARGV[4]
local publish = ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local owners = {unpack(ARGV, 6)}
local function releaseHold(lockKey, requestKey, fields, mode, memo, undoMemo, memoMs, dropOne, dropLast)
  for index, field in ipairs(fields) do
    local held = redis.call('HMGET', lockKey, field, field .. ':rel', field .. ':acq')
    local count = tonumber(held[1])
    if count then
      if (mode == 'undo' or mode == 'purge') and held[3] ~= undoMemo then
        return {-1, 0}
      end
      if held[2] == memo then
        return {count, index}
      end
      if (mode == 'one' or mode == 'undo') and count > 1 then
        local remaining = redis.call('HINCRBY', lockKey, field, -1)
        redis.call('HSET', lockKey, field .. ':rel', memo)
        if mode == 'undo' then
          redis.call('HSET', lockKey, field .. ':acq', '')
        end
        if dropOne then dropOne(field, count) end
        return {remaining, index}
      end
      local woken = dropLast(field, count, index)
      redis.call('SET', requestKey, index, 'PX', memoMs)
      return {0, index, woken}
    end
  end
  local freed = redis.call('GET', requestKey)
  if freed then
    return {0, tonumber(freed)}
  end
  return nil
end
local function dropLast()
  redis.call('DEL', lockKey)
  return redis.call(publish, channel, '0')
end
return releaseHold(lockKey, requestKey, owners, mode, requestId, undoId, memoMs, nil, dropLast) or {-1, 0}`;

/** A plain lock of the previous layout on `name`, held by `owner`. */
export class OldLayoutLock {
  readonly #redis: Client;
  readonly name: string;
  readonly owner: string;

  constructor(redis: Client, name: string, owner = `old-${randomUUID()}:1`) {
    this.#redis = redis;
    this.name = name;
    this.owner = owner;
  }

  /** The per-name fencing counter of the previous layout. */
  get fenceKey(): string {
    return lockKeys('', this.name, onCluster).legacyFenceKey;
  }

  /** One acquire: the token when acquired (or re-entered), else undefined. */
  async tryAcquire(leaseMs: number, info = 'host pid 1'): Promise<bigint | undefined> {
    const reply = (await this.#redis.eval(
      OLD_ACQUIRE,
      2,
      this.name,
      this.fenceKey,
      leaseMs,
      randomUUID(),
      info,
      this.owner,
    )) as number[];
    return reply[0] === 1 ? BigInt(reply[1] ?? 0) : undefined;
  }

  /** Drops one hold; the remaining count, or -1 when `owner` held nothing. */
  async release(): Promise<number> {
    const { channel, releaseMemoPrefix } = lockKeys('', this.name, onCluster);
    const requestId = randomUUID();
    const reply = (await this.#redis.eval(
      OLD_RELEASE,
      3,
      this.name,
      channel,
      releaseMemoPrefix + requestId,
      requestId,
      30_000,
      'one',
      '',
      shardedChannels && 'nodes' in this.#redis ? 'SPUBLISH' : 'PUBLISH',
      this.owner,
    )) as number[];
    return Number(reply[0]);
  }
}

const OLD_SEMAPHORE_ACQUIRE = `
local permitsKey = KEYS[1]
local timeoutKey = KEYS[2]
local queueKey = KEYS[3]
local deadlinesKey = KEYS[4]
local channel = KEYS[5]
local memoKey = KEYS[6]
local wakeChannel = KEYS[7]
local permits = tonumber(ARGV[1])
local memoMs = tonumber(ARGV[2])
local entry = ARGV[3]
local entryMs = tonumber(ARGV[4])
local publish = ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local function serverTime()
  local time = redis.call('TIME')
  local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  return ms, time[1] .. string.format('%06d', tonumber(time[2]))
end
local DEAD_ENTRY_GRACE_MS = 30000
local function entryNeed(entry)
  return tonumber(string.match(entry, '^(%d+)|'))
end
local function liveQueue(q, now)
  local listed = redis.call('LRANGE', q.queueKey, 0, -1)
  local scored = redis.call('ZRANGE', q.deadlinesKey, 0, -1, 'WITHSCORES')
  local deadlines = {}
  local expired = false
  for i = 1, #scored, 2 do
    local deadline = tonumber(scored[i + 1])
    if deadline > now then
      deadlines[scored[i]] = deadline
    else
      expired = true
    end
  end
  if expired then
    redis.call('ZREMRANGEBYSCORE', q.deadlinesKey, '-inf', now)
  end
  local entries = {}
  local dropped = 0
  for _, entry in ipairs(listed) do
    if deadlines[entry] then
      entries[#entries + 1] = entry
    else
      redis.call('LREM', q.queueKey, 1, entry)
      dropped = dropped + 1
    end
  end
  return entries, deadlines, dropped
end
local function wakeQueued(q, available, entries, before)
  local budget = available
  local woken = before or 0
  for _, entry in ipairs(entries) do
    local need = entryNeed(entry)
    if need > budget then
      return
    end
    budget = budget - need
    if need <= woken then
      woken = woken - need
    else
      woken = -1
      redis.call(q.publish, q.wakeChannel, entry)
    end
  end
  if budget > 0 then
    redis.call(q.publish, q.channel, budget)
  end
end
local function announcePermits(q, available, now, before)
  wakeQueued(q, available, (liveQueue(q, now or serverTime())), before)
end
local function reclaimPermits(q, now)
  local earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  if not (earliest[2] and tonumber(earliest[2]) <= now) then
    return tonumber(earliest[2]), nil
  end
  local expired = redis.call('ZREMRANGEBYSCORE', q.timeoutKey, '-inf', now)
  local available = redis.call('INCRBY', q.permitsKey, expired)
  if available > 0 then
    announcePermits(q, available, now, available - expired)
  end
  earliest = redis.call('ZRANGE', q.timeoutKey, 0, 0, 'WITHSCORES')
  return tonumber(earliest[2]), available
end
local function reapAndAnnounce(q, now, available)
  available = available or tonumber(redis.call('GET', q.permitsKey) or 0)
  local entries, deadlines, dropped = liveQueue(q, now)
  if dropped > 0 and available > 0 then
    wakeQueued(q, available, entries)
  end
  return available, entries, deadlines
end
local function takePermits(q, entry, entryMs, permits, now)
  local leaseEnds, reclaimed = reclaimPermits(q, now)
  local available, entries, deadlines = reapAndAnnounce(q, now, reclaimed)
  local ahead = 0
  local queued = false
  local untilMs = -1
  for _, other in ipairs(entries) do
    if other == entry then
      queued = true
      break
    end
    ahead = ahead + entryNeed(other)
    local deadline = deadlines[other]
    if untilMs < 0 or deadline - now < untilMs then
      untilMs = deadline - now
    end
  end
  if available - ahead >= permits then
    if not q.claim() then
      return available
    end
    if queued then
      redis.call('LREM', q.queueKey, 1, entry)
    end
    if entry ~= '' then
      redis.call('ZREM', q.deadlinesKey, entry)
    end
    return redis.call('DECRBY', q.permitsKey, permits), available
  end
  if q.ranBefore() then
    return available
  end
  if entry ~= '' then
    if not queued then
      redis.call('RPUSH', q.queueKey, entry)
    end
    redis.call('ZADD', q.deadlinesKey, now + entryMs, entry)
    local latest = now + entryMs
    for _, deadline in pairs(deadlines) do
      latest = math.max(latest, deadline)
    end
    redis.call('PEXPIRE', q.queueKey, latest - now + DEAD_ENTRY_GRACE_MS)
    redis.call('PEXPIRE', q.deadlinesKey, latest - now + DEAD_ENTRY_GRACE_MS)
  end
  if leaseEnds and leaseEnds ~= 922337203685477 then
    leaseEnds = math.max(0, leaseEnds - now)
    if untilMs < 0 or leaseEnds < untilMs then
      untilMs = leaseEnds
    end
  end
  return nil, available, untilMs
end
local q = {
  permitsKey = permitsKey, timeoutKey = timeoutKey, queueKey = queueKey, deadlinesKey = deadlinesKey,
  channel = channel, wakeChannel = wakeChannel, publish = publish,
  claim = function()
    return redis.call('SET', memoKey, permits, 'PX', memoMs, 'NX') ~= false
  end,
  ranBefore = function()
    return redis.call('EXISTS', memoKey) == 1
  end,
}
local left, available, untilMs = takePermits(q, entry, entryMs, permits, serverTime())
if left then
  return {1, left}
end
return {0, available, untilMs}
`;

/** A semaphore waiter of a client of the version before the one-key permit queue. */
export class OldSemaphoreWaiter {
  readonly #redis: Client;
  readonly name: string;
  /** Its place in the queue: "<permits>|<clientId>|<n>". */
  readonly entry: string;

  constructor(redis: Client, name: string, entry = `1|old-${randomUUID()}|1`) {
    this.#redis = redis;
    this.name = name;
    this.entry = entry;
  }

  /**
   * One attempt for the entry's permits, queueing the entry (deadline `entryMs` from now) when refused: the
   * permits left when granted, else undefined.
   */
  async attempt(entryMs = 30_000): Promise<number | undefined> {
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, wakeChannel } = semaphoreKeys(
      '',
      this.name,
      onCluster,
    );
    const reply = (await this.#redis.eval(
      OLD_SEMAPHORE_ACQUIRE,
      7,
      lockKey,
      timeoutKey,
      queueKey,
      deadlinesKey,
      channel,
      acquireMemoPrefix + randomUUID(),
      wakeChannel,
      Number(this.entry.split('|')[0]),
      30_000,
      this.entry,
      entryMs,
      shardedChannels && 'nodes' in this.#redis ? 'SPUBLISH' : 'PUBLISH',
    )) as number[];
    return reply[0] === 1 ? Number(reply[1]) : undefined;
  }
}
