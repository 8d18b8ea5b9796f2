import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import {
  createLockClient,
  LockLostError,
  LockNotHeldError,
  LocksNotReleasedError,
  type LockLostEvent,
} from '../../src/index.js';
import { lockKeys } from '../../src/redis/keys.js';
import { dropClient, newTestClient, ping } from '../support/clients.js';
import { elapsedSince, onCluster, uniqueName, until, useRedis } from '../support/fixture.js';
import { TcpProxy } from '../support/proxy.js';

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

  // The lock model, seed 1668276368: a hold taken lean has no hold key; a re-entry with a shorter lease created
  // it with that lease, so the re-entry's memo, which the purge of the hold must name, was gone before the
  // hold's own lease ran out; the purge missed, and the unlock after the lockLost succeeded.
  it("a lean hold re-entered with a shorter lease is purged when lost: its hold key outlives the lock's", async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const lock = locks.getLock(name);
    const { holdKey } = lockKeys('', name, onCluster);
    await locks.run(async () => {
      const outer = await lock.acquire({ leaseTime: 1500 });
      const inner = await lock.acquire({ leaseTime: 300 });
      const lockTtl = await redis.admin.pttl(name);
      expect(await redis.admin.pttl(holdKey)).toBeGreaterThan(lockTtl - 200);
      await inner.release();
      // Past the re-entry's 300 ms, Redis keeps both keys past the hold's local deadline (as after a stall
      // inside the drift allowance): only the purge, which names the re-entry's memo, removes the lock key.
      await sleep(500);
      await redis.admin.pexpire(name, 30_000);
      await redis.admin.pexpire(holdKey, 30_000);
      await new Promise((resolve) => outer.signal.addEventListener('abort', resolve));
      await until(async () => (await redis.admin.exists(name)) === 0, 'the lost hold purged', 5000);
      await expect(outer.release()).rejects.toBeInstanceOf(LockNotHeldError);
    });
  });

  // The lock model, same seed: a release sent just before the local deadline and answered after it was
  // reported lost (lockLost, the lease's release rejected) although it reached Redis in time and freed the lock.
  it.skipIf(onCluster)(
    'a release in flight across the local deadline that frees the lock reports no loss',
    async () => {
      const proxy = await TcpProxy.start(redis.server.port);
      const connection = newTestClient(redis.target, { port: proxy.port });
      const locks = createLockClient(connection.client);
      const lost: LockLostEvent[] = [];
      locks.on('lockLost', (event) => lost.push(event));
      const name = uniqueName();
      try {
        await ping(connection.client);
        for (let round = 1; ; round++) {
          proxy.latency = { toServer: 0, toClient: 0 };
          const lease = await locks.getLock(name).acquire({ leaseTime: 1000 });
          await sleep((locks.holds()[0]?.leaseRemainingMs ?? 0) - 150);
          // The release reaches Redis at once, well inside the lease; its reply comes 400 ms late.
          proxy.latency = { toServer: 0, toClient: 400 };
          const left = locks.holds()[0]?.leaseRemainingMs ?? 0;
          const sent = performance.now();
          const release = lease.release();
          // A loop stalled past most of the margin cannot tell (the tick may come first): try again.
          if (left < 50 && round < 5) {
            await release.catch(() => undefined);
            await until(async () => (await redis.admin.exists(name)) === 0, 'the lock free', 5000);
            lost.length = 0;
            continue;
          }
          await expect(release).resolves.toBeUndefined();
          expect(elapsedSince(sent)).toBeGreaterThan(left);
          break;
        }
        expect(lost).toEqual([]);
        expect(await redis.admin.exists(name)).toBe(0);
      } finally {
        await locks.close();
        await connection.close();
        await proxy.close();
      }
    },
  );

  it.skipIf(onCluster)(
    'a hold whose lease runs out while close() waits on a stalled server is told lost, not taken for released',
    async () => {
      // A re-entry in flight during the stall is granted afresh (count 1: the hold had expired) after close()
      // gave it up; its give-back once marked the expired hold released, so its lease never aborted.
      const name = uniqueName('stale-reentry');
      const locks = redis.locks();
      const lock = locks.getLock(name);
      const sleeper = redis.redis();
      await locks.run(async () => {
        const lease = await lock.acquire({ leaseTime: 300 });
        const sleeping = sleeper.call('DEBUG', 'SLEEP', '0.6');
        await sleep(30);
        const reentry = lock.tryLock({ waitTime: 5000, leaseTime: 300 }).catch((error: unknown) => error);
        await sleep(30);
        const closing = locks.close().catch((error: unknown) => error);
        await Promise.all([reentry, sleeping, closing]);
        expect(lease.signal.aborted).toBe(true);
        expect(lease.signal.reason).toBeInstanceOf(LockLostError);
      });
      expect(await redis.admin.exists(lockKeys('', name).lockKey)).toBe(0);
    },
  );
});
