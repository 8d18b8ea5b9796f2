// What the library tells its user, checked against real Redis (issue 22, items 12 and 13): errors that say what
// was given and what to do, and snapshots in whole milliseconds.
import { afterEach, describe, expect, it } from 'vitest';
import { createLockClient, LockClientClosedError, RedisNotOpenError } from '../../src/index.js';
import { idleTestClient, onNodeRedis, type IdleTestClient } from '../support/clients.js';
import { uniqueName, until, useRedis } from '../support/fixture.js';

const redis = useRedis();

const idle: IdleTestClient[] = [];
afterEach(async () => {
  await Promise.all(idle.splice(0).map((client) => client.close()));
});

describe('error messages show the value, the unit and the method (issue 22, item 12)', () => {
  it('shows a wrong-typed time as the value given (quoted, cut when long) with its unit', async () => {
    const lock = redis.locks().getLock(uniqueName());
    await expect(lock.acquire({ waitTime: '1000' as unknown as number })).rejects.toThrow(
      new TypeError('options.waitTime must be a number of milliseconds, got the string "1000"'),
    );
    const long = `5000${' '.repeat(60)}\n`;
    await expect(lock.tryLock(long as unknown as number)).rejects.toThrow(
      `waitTime must be a number of milliseconds, got the string "5000${' '.repeat(36)}…" (65 characters)`,
    );
    await expect(lock.tryLock(1000n as unknown as number)).rejects.toThrow(
      'waitTime must be a number of milliseconds, got the bigint 1000n',
    );
  });

  it('names the method when a function argument gets something else (swapped arguments)', async () => {
    const locks = redis.locks();
    const lock = locks.getLock(uniqueName());
    // The options first, as a caller who swapped them would write it.
    await expect(lock.withLock({ waitTime: 100 } as never, (() => undefined) as never)).rejects.toThrow(
      new TypeError(
        'lock.withLock(fn, options) needs a function as its first argument, got an object (the options come second)',
      ),
    );
    expect(() => locks.run('work' as unknown as () => void)).toThrow(
      new TypeError('locks.run(fn) needs a function as its first argument, got the string "work"'),
    );
  });

  it('names the lock in the LockClientClosedError of a wait that close() ended', async () => {
    const [plain, fair, pool] = [uniqueName('closed'), uniqueName('closedfair'), uniqueName('closedpool')];
    const holder = redis.locks();
    const leases = [await holder.getLock(plain).acquire(), await holder.getFairLock(fair).acquire()];
    await holder.getSemaphore(pool).trySetPermits(1);
    await holder.getSemaphore(pool).acquire();
    const waiting = redis.locks();
    const outcome = (promise: Promise<unknown>): Promise<unknown> =>
      promise.then(
        () => undefined,
        (error: unknown) => error,
      );
    const waits = [
      outcome(waiting.getLock(plain).acquire({ waitTime: 30_000 })),
      outcome(waiting.getFairLock(fair).acquire({ waitTime: 30_000 })),
      outcome(waiting.getSemaphore(pool).tryAcquire({ waitTime: 30_000 })),
    ];
    await until(() => waiting.waits().length === 3, 'the three waiters to wait');
    await waiting.close();
    const errors = await Promise.all(waits);
    for (const [index, name] of [plain, fair, pool].entries()) {
      expect(errors[index]).toBeInstanceOf(LockClientClosedError);
      expect(errors[index]).toMatchObject({ lockName: name, message: expect.stringContaining(`"${name}"`) });
    }
    const after = await waiting
      .getSemaphore(pool)
      .tryAcquire()
      .catch((e: unknown) => e);
    expect((after as Error).message).toContain(`"${pool}"`);
    await Promise.all(leases.map((lease) => lease.release()));
  });

  it.runIf(onNodeRedis)('says to call connect() when a node-redis client was never connected', async () => {
    const client = idleTestClient(redis.target);
    idle.push(client);
    const locks = createLockClient(client.client);
    const error = await locks
      .getLock(uniqueName())
      .acquire({ waitTime: 0 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RedisNotOpenError);
    expect(error).toMatchObject({ name: 'RedisNotOpenError', code: 'LOCK_REDIS_NOT_OPEN' });
    expect((error as Error).message).toMatch(/call `await client\.connect\(\)` before using the lock client/);
    await locks.close();
  });
});

describe('holds() in whole milliseconds (issue 22, item 13)', () => {
  it('reports heldMs and leaseRemainingMs as integers', async () => {
    const locks = redis.locks();
    const lease = await locks.getLock(uniqueName()).acquire();
    await until(() => (locks.holds()[0]?.heldMs ?? 0) > 0, 'the hold to age');
    const [hold] = locks.holds();
    expect(Number.isInteger(hold?.heldMs)).toBe(true);
    expect(Number.isInteger(hold?.leaseRemainingMs)).toBe(true);
    await lease.release();
  });
});
