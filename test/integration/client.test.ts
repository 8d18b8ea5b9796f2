import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createLockClient, LockAcquireTimeoutError, LockClientClosedError, LockNotHeldError } from '../../src/index.js';
import { idleTestClient, ping } from '../support/clients.js';
import { channelSubscribers as subscribersOf, uniqueName, useRedis } from '../support/fixture.js';

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
    await sleep(200);
    expect(await channelSubscribers(`redisson_lock__channel:{${name}}`)).toBe(1);
    controller.abort(new Error('caller gave up'));
    await expect(waiting).rejects.toThrow('caller gave up');
    await sleep(50);
    expect(await channelSubscribers(`redisson_lock__channel:{${name}}`)).toBe(0);
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
    await sleep(100);
    expect(await redis.admin.exists(name)).toBe(0);
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
    await sleep(100);
    await locks.close();
    expect(await waiting).toBeInstanceOf(LockClientClosedError);
    expect(held.signal.aborted).toBe(true);
    expect(await redis.admin.exists(otherName)).toBe(0);
    await sleep(50);
    expect(await channelSubscribers(`redisson_lock__channel:{${name}}`)).toBe(0);
    expect(await ping(client)).toBe('PONG');
    await expect(locks.getLock(name).isLocked()).rejects.toBeInstanceOf(LockClientClosedError);
    await expect(held.release()).rejects.toBeInstanceOf(LockNotHeldError);
    await blocker.release();
  });
});
