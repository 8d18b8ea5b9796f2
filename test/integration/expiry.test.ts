import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LockLostError, LockNotHeldError, type LockLostEvent } from '../../src/index.js';
import { dropClient } from '../support/clients.js';
import { elapsedSince, uniqueName, useRedis } from '../support/fixture.js';

const redis = useRedis();

describe('leases, the watchdog and loss', () => {
  it('the watchdog keeps a lock alive for more than 3 timeouts', async () => {
    const locks = redis.locks({ watchdogTimeout: 1000 });
    const name = uniqueName();
    const lease = await locks.getLock(name).acquire();
    await sleep(3500);
    expect(lease.signal.aborted).toBe(false);
    const ttl = await redis.admin.pttl(name);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(1000);
    await lease.release();
    expect(await redis.admin.exists(name)).toBe(0);
  });

  it("an expired holder's unlock() throws LockNotHeldError and leaves the new owner alone", async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    await one.run(async () => {
      expect(await one.getLock(name).tryLock(0, 200)).toBe(true);
      await sleep(300);
      expect(await two.run(() => two.getLock(name).tryLock(0, 10_000))).toBe(true);
      const before = await redis.admin.hgetall(name);
      await expect(one.getLock(name).unlock()).rejects.toBeInstanceOf(LockNotHeldError);
      expect(await redis.admin.hgetall(name)).toEqual(before);
    });
  });

  it('a fixed lease aborts its signal when it runs out', async () => {
    const locks = redis.locks();
    const lost: LockLostEvent[] = [];
    locks.on('lockLost', (event) => lost.push(event));
    const lease = await locks.getLock(uniqueName()).acquire({ leaseTime: 300 });
    const start = performance.now();
    await new Promise((resolve) => lease.signal.addEventListener('abort', resolve));
    expect(elapsedSince(start)).toBeLessThan(400);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    expect(lost).toHaveLength(1);
    await expect(lease.release()).rejects.toBeInstanceOf(LockNotHeldError);
  });

  it('deleting the key under a holder aborts its signal within one renewal period', async () => {
    const locks = redis.locks({ watchdogTimeout: 1500 });
    const name = uniqueName();
    const lease = await locks.getLock(name).acquire();
    const lost = new Promise<LockLostEvent>((resolve) => locks.once('lockLost', resolve));
    await sleep(100);
    await redis.admin.del(name);
    const start = performance.now();
    const event = await lost;
    expect(elapsedSince(start)).toBeLessThanOrEqual(500 + 150);
    expect(event.name).toBe(name);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toMatchObject({ code: 'LOCK_LOST', lockName: name });
  });

  it('a holder whose connection dies frees the lock within the watchdog timeout', async () => {
    const holderRedis = redis.client();
    const { createLockClient } = await import('../../src/index.js');
    const holder = createLockClient(holderRedis, { watchdogTimeout: 1000 });
    const name = uniqueName();
    const lease = await holder.getLock(name).acquire();
    dropClient(holderRedis);
    const diedAt = performance.now();
    const waiter = redis.locks();
    expect(await waiter.run(() => waiter.getLock(name).tryLock(3000, 5000))).toBe(true);
    expect(elapsedSince(diedAt)).toBeLessThanOrEqual(1000 + 300);
    await sleep(100);
    expect(lease.signal.aborted).toBe(true);
    await holder.close();
  });
});
