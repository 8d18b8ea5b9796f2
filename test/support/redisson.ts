/**
 * Plays a Java service on Redisson through its wire protocol, for interoperability tests: Redisson's lock
 * (RedissonLock), fair lock (RedissonFairLock), read-write lock (RedissonReadLock / RedissonWriteLock), semaphores
 * (RedissonSemaphore, RedissonPermitExpirableSemaphore) and count-down latch scripts, written here from
 * shared/REDISSON-PROTOCOLS.md sections 2 to 6 (keys, arguments, steps and replies as described there), and
 * waiters that listen and retry the way Redisson's do.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { onTestFinished } from 'vitest';
import { masterOf, newRedis, onCluster, shardedChannels, type Client, type Cluster, type Redis } from './fixture.js';

/**
 * A subscriber connection for `channel`, as a Redisson client opens one: to the server, or on a cluster
 * to the master that owns the channel's slot (Redisson's SSUBSCRIBE goes there). Closed after the test.
 */
export function listenerFor(admin: Client, channel: string): Redis {
  const { host = '127.0.0.1', port = 6379 } = onCluster
    ? masterOf(admin as Cluster, channel).options
    : (admin as Redis).options;
  const listener = newRedis({ host, port });
  listener.on('error', () => undefined);
  onTestFinished(() => listener.disconnect());
  return listener;
}

/** Redisson's tryLockInnerAsync (RedissonLock, leaseTime given): KEYS N; ARGV lease, owner. nil when acquired, else the PTTL. */
const LOCK_TRY_ACQUIRE = `
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`;

/**
 * Redisson's unlockInnerAsync (RedissonLock): KEYS N, channel; ARGV lease, owner, publish. nil when the
 * owner holds nothing, 0 when it still holds (count left), 1 when the lock was freed (and "0" published).
 */
const LOCK_UNLOCK = `
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], 0)
return 1`;

/**
 * Redisson's stale-head purge, which every fair-lock script but acquireFailed starts with: expired entries at
 * the head of the queue leave it. `now`: the ARGV index of the caller's time (its scripts order ARGV apart).
 */
const fairPurge = (now: number): string => `
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if head == false then break end
  local deadline = tonumber(redis.call('zscore', KEYS[3], head))
  if deadline == nil or deadline > tonumber(ARGV[${now}]) then break end
  redis.call('zrem', KEYS[3], head)
  redis.call('lpop', KEYS[2])
end
`;

/**
 * The fair acquire's grant: a free lock with no queue (or the owner at its head), with every entry behind
 * moved up by the wait time (ARGV index `wait`), or a re-entry. Returns nil from the script when granted.
 */
const fairGrant = (wait: number): string => `
if redis.call('exists', KEYS[1]) == 0 and
    (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  for _, member in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[${wait}]), member)
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
`;

/** Redisson's fair acquire (EVAL_LONG): KEYS N, queue, timeout set; ARGV lease, owner, wait, now. */
const FAIR_ACQUIRE = `${fairPurge(4)}${fairGrant(3)}if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]))
end
local tail = redis.call('lindex', KEYS[2], -1)
local ttl
if tail ~= false and tail ~= ARGV[2] and redis.call('zscore', KEYS[3], tail) ~= false then
  ttl = tonumber(redis.call('zscore', KEYS[3], tail)) - tonumber(ARGV[4])
else
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl`;

/**
 * Redisson's fair tryLock() without a wait (EVAL_NULL_BOOLEAN): KEYS N, queue, timeout set; ARGV lease,
 * owner, now, wait. The stale-head purge, then a free lock with no queue (or this owner at its head), or a
 * re-entry; never queues. nil when acquired, else 1.
 */
const FAIR_TRY_LOCK = `${fairPurge(3)}${fairGrant(4)}return 1`;

/** Redisson's fair unlock: KEYS N, queue, timeout set, channel base; ARGV lease, owner, now, publish. */
const FAIR_UNLOCK = `${fairPurge(3)}if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if head ~= false then redis.call(ARGV[4], KEYS[4] .. ':' .. head, 0) end
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if head ~= false then redis.call(ARGV[4], KEYS[4] .. ':' .. head, 0) end
return 1`;

/** Redisson's read acquire: KEYS N, "{N}:<owner>:rwlock_timeout"; ARGV lease, owner, owner:write. */
const READ_ACQUIRE = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local key = KEYS[2] .. ':' .. ind
  redis.call('set', key, 1)
  redis.call('pexpire', key, ARGV[1])
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return nil
end
return redis.call('pttl', KEYS[1])`;

/**
 * Redisson's read unlock: KEYS N, channel, "{N}:<owner>:rwlock_timeout", "{N}", unlock latch; ARGV owner,
 * publish, latch TTL. The latch remembers the outcome, so that a resend is answered, not run again.
 */
const READ_UNLOCK = `
local memo = redis.call('get', KEYS[5])
if memo ~= false then return tonumber(memo) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[2], KEYS[2], 0)
  redis.call('set', KEYS[5], 1, 'px', ARGV[3])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end
local counter = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if counter == 0 then redis.call('hdel', KEYS[1], ARGV[1]) end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local maxRemain = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], field))
    if type(count) == 'number' then
      for i = count, 1, -1 do
        maxRemain = math.max(maxRemain, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if maxRemain > 0 then
    redis.call('pexpire', KEYS[1], maxRemain)
    redis.call('set', KEYS[5], 0, 'px', ARGV[3])
    return 0
  end
  if mode == 'write' then
    redis.call('set', KEYS[5], 0, 'px', ARGV[3])
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], 0)
redis.call('set', KEYS[5], 1, 'px', ARGV[3])
return 1`;

/** Redisson's write acquire: KEYS N; ARGV lease, owner:write. */
const WRITE_ACQUIRE = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])`;

/** Redisson's write unlock: KEYS N, channel, unlock latch; ARGV lease, owner:write, publish, latch TTL. */
const WRITE_UNLOCK = `
local memo = redis.call('get', KEYS[3])
if memo ~= false then return tonumber(memo) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], 1)
  redis.call('set', KEYS[3], 1, 'px', ARGV[4])
  return 1
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  redis.call('set', KEYS[3], 0, 'px', ARGV[4])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[2])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], 1)
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[3], 1, 'px', ARGV[4])
return 1`;

/** Redisson's read lock isLocked: KEYS N. Counts fields: any field of another library's shows here. */
const READ_IS_LOCKED = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then return 1 end
return 0`;

/** How long Redisson's unlock latch remembers an unlock: about its retry window. */
const UNLOCK_LATCH_MS = 13_500;

/** Redisson's unlock latch of one unlock call: its idempotency memo. */
export function unlockLatch(name: string, requestId: string): string {
  return `redisson_unlock_latch:${name.includes('{') ? name : `{${name}}`}:${requestId}`;
}

/** Redisson announces on shard channels on a Redis 7 cluster, whichever connection runs its script. */
const publishCommand = (): string => (shardedChannels ? 'spublish' : 'publish');

/** A Java thread of a Redisson client: owner id `<uuid>:<threadId>`. */
export function redissonOwner(): string {
  return `${randomUUID()}:${Math.floor(Math.random() * 1000) + 1}`;
}

/** Redisson's RLock on `name` (a key without braces), played by `redis` for the thread `owner`. */
export class RedissonLock {
  readonly #redis: Client;
  readonly #name: string;
  readonly owner: string;

  constructor(redis: Client, name: string, owner = redissonOwner()) {
    this.#redis = redis;
    this.#name = name;
    this.owner = owner;
  }

  get channel(): string {
    return `redisson_lock__channel:{${this.#name}}`;
  }

  /** One attempt with a fixed lease: null when acquired (or re-entered), else the lock's PTTL. */
  async tryLock(leaseMs: number): Promise<number | null> {
    const reply = await this.#redis.eval(LOCK_TRY_ACQUIRE, 1, this.#name, leaseMs, this.owner);
    return reply === null ? null : Number(reply);
  }

  /** null: the owner held nothing (Java's IllegalMonitorStateException); 0: still held; 1: freed. */
  async unlock(leaseMs = 30_000): Promise<number | null> {
    const reply = await this.#redis.eval(
      LOCK_UNLOCK,
      2,
      this.#name,
      this.channel,
      leaseMs,
      this.owner,
      publishCommand(),
    );
    return reply === null ? null : Number(reply);
  }
}

/** Redisson's RFairLock on `name`, played by `redis` for the thread `owner`. */
export class RedissonFairLock {
  readonly #redis: Client;
  readonly #name: string;
  readonly owner: string;

  constructor(redis: Client, name: string, owner = redissonOwner()) {
    this.#redis = redis;
    this.#name = name;
    this.owner = owner;
  }

  get #keys(): string[] {
    return [this.#name, `redisson_lock_queue:{${this.#name}}`, `redisson_lock_timeout:{${this.#name}}`];
  }

  /** The waiter's channel: Redisson wakes only the queue's head, on its own channel. */
  get channel(): string {
    return `redisson_lock__channel:{${this.#name}}:${this.owner}`;
  }

  /** One acquire: null when acquired, else the milliseconds to wait (the caller is queued). */
  async tryAcquire(leaseMs: number, waitMs: number): Promise<number | null> {
    const reply = await this.#redis.eval(FAIR_ACQUIRE, 3, ...this.#keys, leaseMs, this.owner, waitMs, Date.now());
    return reply === null ? null : Number(reply);
  }

  /** tryLock() without a wait: true when acquired (or re-entered); never queues. */
  async tryLock(leaseMs: number): Promise<boolean> {
    const reply = await this.#redis.eval(FAIR_TRY_LOCK, 3, ...this.#keys, leaseMs, this.owner, Date.now(), 300_000);
    return reply === null;
  }

  /**
   * Redisson's lock loop: acquire, then wait on the own channel (subscribed on `subscriber`) for a message
   * or the returned time, and acquire again, until acquired.
   */
  async lock(leaseMs: number, waitMs: number): Promise<void> {
    const subscriber = listenerFor(this.#redis, this.channel);
    await subscribe(subscriber, this.channel);
    for (;;) {
      const ttl = await this.tryAcquire(leaseMs, waitMs);
      if (ttl === null) return;
      await message(subscriber, this.channel, ttl > 0 ? ttl : 50);
    }
  }

  /** null: the owner held nothing; 0: still held (its lease set to `leaseMs`); 1: freed (or already gone). */
  async unlock(leaseMs = 30_000): Promise<number | null> {
    const reply = await this.#redis.eval(
      FAIR_UNLOCK,
      4,
      ...this.#keys,
      `redisson_lock__channel:{${this.#name}}`,
      leaseMs,
      this.owner,
      Date.now(),
      publishCommand(),
    );
    return reply === null ? null : Number(reply);
  }
}

/** Redisson's RReadWriteLock on `name`, played by `redis` for the thread `owner`. */
export class RedissonReadWriteLock {
  readonly #redis: Client;
  readonly #name: string;
  readonly owner: string;

  constructor(redis: Client, name: string, owner = redissonOwner()) {
    this.#redis = redis;
    this.#name = name;
    this.owner = owner;
  }

  get channel(): string {
    return `redisson_rwlock:{${this.#name}}`;
  }

  async tryReadLock(leaseMs: number): Promise<number | null> {
    const timeoutPrefix = `{${this.#name}}:${this.owner}:rwlock_timeout`;
    const reply = await this.#redis.eval(
      READ_ACQUIRE,
      2,
      this.#name,
      timeoutPrefix,
      leaseMs,
      this.owner,
      `${this.owner}:write`,
    );
    return reply === null ? null : Number(reply);
  }

  /** One read unlock; a resend (same `requestId`) is answered from Redisson's unlock latch. */
  async readUnlock(requestId: string = randomUUID()): Promise<number | null> {
    const reply = await this.#redis.eval(
      READ_UNLOCK,
      5,
      this.#name,
      this.channel,
      `{${this.#name}}:${this.owner}:rwlock_timeout`,
      `{${this.#name}}`,
      unlockLatch(this.#name, requestId),
      this.owner,
      publishCommand(),
      UNLOCK_LATCH_MS,
    );
    return reply === null ? null : Number(reply);
  }

  /** Java's `readLock().isLocked()`, which counts the hash's fields (`HLEN > 2` beside a write hold). */
  async readIsLocked(): Promise<boolean> {
    return Number(await this.#redis.eval(READ_IS_LOCKED, 1, this.#name)) === 1;
  }

  /** Java's `writeLock().isLocked()`. */
  async writeIsLocked(): Promise<boolean> {
    return (await this.#redis.hget(this.#name, 'mode')) === 'write';
  }

  async tryWriteLock(leaseMs: number): Promise<number | null> {
    const reply = await this.#redis.eval(WRITE_ACQUIRE, 1, this.#name, leaseMs, `${this.owner}:write`);
    return reply === null ? null : Number(reply);
  }

  /** One write unlock; a resend (same `requestId`) is answered from Redisson's unlock latch. */
  async writeUnlock(requestId: string = randomUUID()): Promise<number | null> {
    const reply = await this.#redis.eval(
      WRITE_UNLOCK,
      3,
      this.#name,
      this.channel,
      unlockLatch(this.#name, requestId),
      30_000,
      `${this.owner}:write`,
      publishCommand(),
      UNLOCK_LATCH_MS,
    );
    return reply === null ? null : Number(reply);
  }

  /** Redisson's wait loop for either side: retry on every message of the channel, or after the TTL. */
  async lock(side: 'read' | 'write', leaseMs: number): Promise<void> {
    const subscriber = listenerFor(this.#redis, this.channel);
    await subscribe(subscriber, this.channel);
    for (;;) {
      const ttl = side === 'read' ? await this.tryReadLock(leaseMs) : await this.tryWriteLock(leaseMs);
      if (ttl === null) return;
      await message(subscriber, this.channel, ttl > 0 ? ttl : 50);
    }
  }
}

async function subscribe(subscriber: Redis, channel: string): Promise<void> {
  if (shardedChannels) await subscriber.ssubscribe(channel);
  else await subscriber.subscribe(channel);
}

/** Resolves at the next message on `channel`, or after `timeoutMs`. */
async function message(subscriber: Redis, channel: string, timeoutMs: number): Promise<void> {
  const event = shardedChannels ? 'smessage' : 'message';
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    for (;;) {
      const [received] = (await once(subscriber, event, { signal: controller.signal })) as [string];
      if (received === channel) return;
    }
  } catch {
    // Timed out: retry, as Redisson does after the TTL.
  } finally {
    clearTimeout(timer);
  }
}

/** Redisson's RSemaphore tryAcquire(p): KEYS N; ARGV p. */
const SEMAPHORE_TRY_ACQUIRE = `
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0`;

/** Redisson's RSemaphore release(p): KEYS N, channel; ARGV p, publish. */
const SEMAPHORE_RELEASE = `
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)`;

/** Redisson's RSemaphore (and the plain side of RPermitExpirableSemaphore's key) on `name`. */
export class RedissonSemaphore {
  readonly #redis: Client;
  readonly #name: string;

  constructor(redis: Client, name: string) {
    this.#redis = redis;
    this.#name = name;
  }

  get channel(): string {
    return `redisson_sc:{${this.#name}}`;
  }

  async tryAcquire(permits = 1): Promise<boolean> {
    return Number(await this.#redis.eval(SEMAPHORE_TRY_ACQUIRE, 1, this.#name, permits)) === 1;
  }

  async release(permits = 1): Promise<void> {
    await this.#redis.eval(SEMAPHORE_RELEASE, 2, this.#name, this.channel, permits, publishCommand());
  }

  /** Redisson's acquire loop: subscribe, try, and wait for a message (unbounded there; `maxMs` here). */
  async acquire(permits: number, maxMs: number): Promise<boolean> {
    const subscriber = listenerFor(this.#redis, this.channel);
    await subscribe(subscriber, this.channel);
    const deadline = performance.now() + maxMs;
    for (;;) {
      if (await this.tryAcquire(permits)) return true;
      const remaining = deadline - performance.now();
      if (remaining <= 0) return false;
      await message(subscriber, this.channel, remaining);
    }
  }
}

/**
 * Redisson's RPermitExpirableSemaphore tryAcquire(1, lease): KEYS N, {N}:timeout, channel; ARGV 1 n,
 * 2 expiry, 3 now, 4 non-expirable score, 5 publish, 6 raw permit id. Reclaims expired permits first.
 */
const PERMIT_TRY_ACQUIRE = `
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then redis.call(ARGV[5], KEYS[3], value) end
end
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[6])
  return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] ~= nil and first[2] ~= ARGV[4] then return ':' .. first[2] end
return nil`;

/** Redisson's RPermitExpirableSemaphore tryRelease(id): KEYS N, channel, {N}:timeout; ARGV id, 1, now, publish. */
const PERMIT_TRY_RELEASE = `
local expire = redis.call('zscore', KEYS[3], ARGV[1])
local removed = redis.call('zrem', KEYS[3], ARGV[1])
if tonumber(removed) ~= 1 then return 0 end
local value = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], value)
if expire == false or tonumber(expire) <= tonumber(ARGV[3]) then return 0 end
return 1`;

/** Redisson's non-expirable permit score. */
const NO_LEASE = 922337203685477;

/** Redisson's RPermitExpirableSemaphore on `name`. */
export class RedissonPermitExpirableSemaphore {
  readonly #redis: Client;
  readonly #name: string;

  constructor(redis: Client, name: string) {
    this.#redis = redis;
    this.#name = name;
  }

  get channel(): string {
    return `redisson_sc:{${this.#name}}`;
  }

  get timeoutKey(): string {
    return `{${this.#name}}:timeout`;
  }

  /** One permit for `leaseMs` (-1: no lease): its id (hex), or undefined when none is free. */
  async tryAcquire(leaseMs: number): Promise<string | undefined> {
    const id = randomBytes(16);
    const now = Date.now();
    const reply = await this.#redis.eval(
      PERMIT_TRY_ACQUIRE,
      3,
      this.#name,
      this.timeoutKey,
      this.channel,
      1,
      leaseMs === -1 ? NO_LEASE : now + leaseMs,
      now,
      NO_LEASE,
      publishCommand(),
      id,
    );
    return reply === 'OK' ? id.toString('hex') : undefined;
  }

  /** Redisson's tryRelease: true when the permit was held and its lease had not ended. */
  async tryRelease(permitId: string): Promise<boolean> {
    const reply = await this.#redis.eval(
      PERMIT_TRY_RELEASE,
      3,
      this.#name,
      this.channel,
      this.timeoutKey,
      Buffer.from(permitId, 'hex'),
      1,
      Date.now(),
      publishCommand(),
    );
    return Number(reply) === 1;
  }
}

/** Redisson's RCountDownLatch countDown: KEYS N, channel; ARGV "0", publish. */
const LATCH_COUNT_DOWN = `
local v = redis.call('decr', KEYS[1])
if v <= 0 then redis.call('del', KEYS[1]) end
if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end`;

/** Redisson's RCountDownLatch trySetCount: KEYS N, channel; ARGV "1", count, publish. */
const LATCH_TRY_SET_COUNT = `
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[2])
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  return 1
end
return 0`;

/** Redisson's RCountDownLatch on `name`. */
export class RedissonCountDownLatch {
  readonly #redis: Client;
  readonly #name: string;

  constructor(redis: Client, name: string) {
    this.#redis = redis;
    this.#name = name;
  }

  get channel(): string {
    return `redisson_countdownlatch__channel__{${this.#name}}`;
  }

  async trySetCount(count: number): Promise<boolean> {
    const reply = await this.#redis.eval(
      LATCH_TRY_SET_COUNT,
      2,
      this.#name,
      this.channel,
      '1',
      count,
      publishCommand(),
    );
    return Number(reply) === 1;
  }

  async countDown(): Promise<void> {
    await this.#redis.eval(LATCH_COUNT_DOWN, 2, this.#name, this.channel, '0', publishCommand());
  }

  /** Redisson's await(t): GET; subscribe; wait for "0" while the count is above zero. */
  async await(maxMs: number): Promise<boolean> {
    const subscriber = listenerFor(this.#redis, this.channel);
    await subscribe(subscriber, this.channel);
    const deadline = performance.now() + maxMs;
    for (;;) {
      if (Number((await this.#redis.get(this.#name)) ?? 0) <= 0) return true;
      const remaining = deadline - performance.now();
      if (remaining <= 0) return false;
      await message(subscriber, this.channel, remaining);
    }
  }
}
