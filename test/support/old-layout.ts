/**
 * Plays a client of the previous release's Redis layout, for rolling-upgrade tests: its plain lock's acquire
 * and release scripts, copied from lua/lock/ as they were before the layout moved this library's fields out
 * of Redisson's hash (comments dropped). They keep the resend memos (`<owner>:acq`, `<owner>:rel`) and the
 * holder info (`<owner>:info`) in the lock hash, and the fencing counter per name, with no expiry
 * (`flowlock:fence:{<name>}`, the `legacyFenceKey` of keys.ts).
 */
import { randomUUID } from 'node:crypto';
import { lockKeys } from '../../src/redis/keys.js';
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
