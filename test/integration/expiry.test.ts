import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LockLostError, LockNotHeldError, LocksNotReleasedError, type LockLostEvent } from '../../src/index.js';
import { dropClient } from '../support/clients.js';
import { elapsedSince, uniqueName, until, useRedis } from '../support/fixture.js';

const redis = useRedis();

describe('leases, the watchdog and loss', () => {
  it('the watchdog keeps a lock alive for more than 3 timeouts', async () => {
    // Renewed every second: a stall has to last about 2 s to lose it (1 s stalls were seen on a loaded machine).
    const locks = redis.locks({ watchdogTimeout: 3000 });
    const name = uniqueName();
    const lease = await locks.getLock(name).acquire();
    await sleep(10_000);
    expect(lease.signal.aborted).toBe(false);
    const ttl = await redis.admin.pttl(name);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(3000);
    await lease.release();
    expect(await redis.admin.exists(name)).toBe(0);
  });

  it("an expired holder's unlock() throws LockNotHeldError and leaves the new owner alone", async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    // Both connected first, and a lease of 1 s: a reply slower than the lease (a loaded machine; a new
    // client's first command waits for its connection, on a cluster for the slots too) would be a grant too
    // late to hold, given back (tryLock false).
    await Promise.all([one, two].map((locks) => locks.getLock(name).isLocked()));
    await one.run(async () => {
      expect(await one.getLock(name).tryLock(0, 1000)).toBe(true);
      await until(async () => (await redis.admin.exists(name)) === 0, 'the 1 s lease ran out');
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
    // About the 300 ms lease, however late a loaded machine runs the timer; without its timer a fixed lease
    // would never abort (the await above would hang).
    expect(elapsedSince(start)).toBeLessThan(1000);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    expect(lost).toHaveLength(1);
    await expect(lease.release()).rejects.toBeInstanceOf(LockNotHeldError);
  });

  it('deleting the key under a holder aborts its signal at its next renewal', async () => {
    const locks = redis.locks({ watchdogTimeout: 1500 });
    const name = uniqueName();
    const lease = await locks.getLock(name).acquire();
    const lost = new Promise<LockLostEvent>((resolve) => locks.once('lockLost', resolve));
    await sleep(100);
    await redis.admin.del(name);
    const start = performance.now();
    const event = await lost;
    // Found by the next renewal (every 500 ms), not by the lease deadline (1.5 s after the last renewal): the
    // reason tells the two apart whatever the machine's load; the time only has to stay about one period.
    expect(event.error.reason).toBe('the watchdog found it held by another owner or gone');
    expect(elapsedSince(start)).toBeLessThanOrEqual(1500);
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
    // About its 1 s lease, for a new client on a loaded machine; a lease that had been kept alive would not
    // run out within the 3 s waitTime.
    expect(elapsedSince(diedAt)).toBeLessThanOrEqual(1000 + 700);
    // The holder learns it by its own deadline, whatever its timers' lateness.
    await until(() => lease.signal.aborted, 'the cut-off holder noticed its loss', 2000);
    // Its Redis client is gone: close() may name the hold as left in Redis until a moment that its own clock
    // has not quite reached (it counts from the grant's reply), which is what LocksNotReleasedError is for.
    await holder.close().catch((error: unknown) => {
      if (!(error instanceof LocksNotReleasedError)) throw error;
    });
  });
});
