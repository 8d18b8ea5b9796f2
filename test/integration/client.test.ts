import { describe, expect, it } from 'vitest';
import { createLockClient, LockAcquireTimeoutError, LockClientClosedError, LockNotHeldError } from '../../src/index.js';
import { idleTestClient, ping } from '../support/clients.js';
import { channelSubscribers as subscribersOf, uniqueName, until, useRedis } from '../support/fixture.js';

const redis = useRedis();

async function channelSubscribers(channel: string): Promise<number> {
  return subscribersOf(redis.admin, channel);
}

describe('public API: input is checked before any I/O', () => {
  it('rejects bad names, times and options without touching Redis', async () => {
    // A client under test of the topology that has not connected: a lazyConnect ioredis client (status
    // 'wait'), or a node-redis client whose connect() was never called.
    const idle = idleTestClient(redis.target);
    const lazy = idle.client;
    const locks = createLockClient(lazy);
    expect(() => locks.getLock('')).toThrow(RangeError);
    expect(() => locks.getLock(7 as unknown as string)).toThrow(TypeError);
    expect(() => locks.getLock('x'.repeat(600))).toThrow(/name must be at most 512 bytes/);
    const lock = locks.getLock('valid');
    await locks.run(async () => {
      await expect(lock.tryLock(-1)).rejects.toThrow(RangeError);
      await expect(lock.tryLock(10, 0)).rejects.toThrow(/leaseTime/);
      await expect(lock.tryLock({ waitTime: 1.5 })).rejects.toThrow(/options\.waitTime/);
      await expect(lock.lock(NaN)).rejects.toThrow(RangeError);
      await expect(lock.acquire({ lease: 5 } as never)).rejects.toThrow(/unknown option "lease"/);
      await expect(lock.withLock('nope' as never)).rejects.toThrow(/lock\.withLock\(fn, options\) needs a function/);
    });
    expect(() => createLockClient({} as never)).toThrow(/ioredis/);
    expect(() => createLockClient(lazy, { watchdogTimeout: -5 })).toThrow(/watchdogTimeout/);
    expect(idle.untouched()).toBe(true);
    await locks.close();
    await idle.close();
  });
});

describe('acquire() and withLock()', () => {
  it('await using releases the lease at the end of the scope', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    {
      await using lease = await locks.getLock(name).acquire();
      expect(typeof lease.fencingToken).toBe('bigint');
      expect(await redis.admin.exists(name)).toBe(1);
    }
    expect(await redis.admin.exists(name)).toBe(0);
  });

  it('a lease releases once; a second release is the same promise', async () => {
    const locks = redis.locks();
    const lease = await locks.getLock(uniqueName()).acquire();
    const first = lease.release();
    expect(lease.release()).toBe(first);
    await first;
  });

  it('withLock with waitTime throws LockAcquireTimeoutError and never runs fn', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const held = await locks.getLock(name).acquire();
    let ran = false;
    const error: unknown = await locks
      .getLock(name)
      .withLock(() => (ran = true), { waitTime: 100 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockAcquireTimeoutError);
    expect(error).toMatchObject({ code: 'LOCK_ACQUIRE_TIMEOUT', lockName: name, waitTime: 100 });
    expect(ran).toBe(false);
    await held.release();
  });

  it('withLock releases when fn throws, and passes the error on', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    await expect(
      locks.getLock(name).withLock(() => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await redis.admin.exists(name)).toBe(0);
  });
});

describe('aborting a wait', () => {
  it('rejects with the signal reason and leaves no hold and no subscription', async () => {
    const holder = redis.locks();
    const waiter = redis.locks();
    const name = uniqueName();
    const held = await holder.getLock(name).acquire({ leaseTime: 30_000 });
    const controller = new AbortController();
    const waiting = waiter.getLock(name).acquire({ signal: controller.signal });
    const gaveUp = expect(waiting).rejects.toThrow('caller gave up'); // handled now, awaited after the abort
    const channel = `redisson_lock__channel:{${name}}`;
    await until(async () => (await channelSubscribers(channel)) === 1, 'the waiter subscribed');
    controller.abort(new Error('caller gave up'));
    await gaveUp;
    // The abort does not await the unsubscribe; a leaked subscription would stay while the lock is held (30 s).
    await until(async () => (await channelSubscribers(channel)) === 0, 'the waiter unsubscribed', 5000);
    await held.release();
    expect(await redis.admin.exists(name)).toBe(0);
  });

  it('an already aborted signal fails at once', async () => {
    const locks = redis.locks();
    const lock = locks.getLock(uniqueName());
    await expect(lock.acquire({ signal: AbortSignal.abort() })).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('an acquire whose reply arrives after the abort is released, not kept', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    for (let i = 0; i < 50; i++) {
      const controller = new AbortController();
      const attempt = locks.getLock(name).acquire({ signal: controller.signal });
      queueMicrotask(() => controller.abort());
      await attempt.then((lease) => lease.release()).catch(() => undefined);
    }
    // Late grants are given back without being awaited; a kept one would stay for its 30 s lease.
    await until(async () => (await redis.admin.exists(name)) === 0, 'every late grant given back', 5000);
  });
});

describe('close()', () => {
  it('ends pending waits, releases holds, unsubscribes, and leaves the caller’s connection open', async () => {
    const client = redis.client();
    const locks = createLockClient(client);
    const other = redis.locks();
    const name = uniqueName();
    const otherName = uniqueName();
    const blocker = await other.getLock(name).acquire();
    const held = await locks.getLock(otherName).acquire();
    const waiting = locks
      .getLock(name)
      .acquire()
      .catch((error: unknown) => error);
    // Subscribed (and parked), so that close() has a subscription to end.
    await until(
      () => locks.waits().some((w) => w.waiters > 0 && w.subscription === 'active'),
      'the waiter parked on an active subscription',
    );
    await locks.close();
    expect(await waiting).toBeInstanceOf(LockClientClosedError);
    expect(held.signal.aborted).toBe(true);
    expect(await redis.admin.exists(otherName)).toBe(0);
    // The server notices the closed subscriber connection a moment later (on a loaded machine, later still).
    await until(
      async () => (await channelSubscribers(`redisson_lock__channel:{${name}}`)) === 0,
      'the server dropped the closed subscriber connection',
      5000,
    );
    expect(await ping(client)).toBe('PONG');
    await expect(locks.getLock(name).isLocked()).rejects.toBeInstanceOf(LockClientClosedError);
    await expect(held.release()).rejects.toBeInstanceOf(LockNotHeldError);
    await blocker.release();
  });
});
