import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LockAcquireTimeoutError, LockLostError } from '../../src/index.js';
import { uniqueName, useRedis } from '../support/fixture.js';
import { recordFigures, soak } from '../support/figures.js';

const redis = useRedis();

describe('RMultiLock', () => {
  it('takes every member, re-enters them from the same flow, and releases them all', async () => {
    const locks = redis.locks();
    const base = uniqueName('multi');
    const names = [`${base}:c`, `${base}:a`, `${base}:b`, `${base}:a`];
    const multi = locks.getMultiLock(names);
    expect(multi.names).toEqual([`${base}:a`, `${base}:b`, `${base}:c`]);
    await multi.withLock(async (signal, lease) => {
      expect(signal.aborted).toBe(false);
      expect([...lease.fencingTokens.keys()]).toEqual(multi.names);
      for (const name of multi.names) expect(await redis.admin.exists(name)).toBe(1);
      // Re-entrant per flow: a member, or the whole multi-lock again, is re-entered, not waited for.
      expect(await locks.getLock(`${base}:b`).tryLock()).toBe(true);
      await locks.getLock(`${base}:b`).unlock();
      await multi.withLock(async () => {
        expect(await locks.getLock(`${base}:a`).getHoldCount()).toBe(2);
      });
    });
    for (const name of multi.names) expect(await redis.admin.exists(name)).toBe(0);
  });

  it('is all-or-nothing: a member it cannot get in time leaves none of the others held', async () => {
    const holder = redis.locks();
    const locks = redis.locks();
    const base = uniqueName('multi');
    const blocker = await holder.getLock(`${base}:b`).acquire();
    const started = performance.now();
    const error: unknown = await locks
      .getMultiLock([`${base}:a`, `${base}:b`, `${base}:c`])
      .acquire({ waitTime: 200 })
      .catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    expect(error).toBeInstanceOf(LockAcquireTimeoutError);
    // Gives up at its waitTime, not at the blocker's 30 s lease (a loaded machine adds some to the 200 ms).
    expect(elapsed).toBeLessThan(1000);
    expect(await redis.admin.exists(`${base}:a`)).toBe(0);
    expect(await redis.admin.exists(`${base}:c`)).toBe(0);
    await blocker.release();
  });

  it('never deadlocks: overlapping multi-locks in opposite orders, and each name stays exclusive', async () => {
    // Fresh clients every round: a new client's subscriber handshake once lost a subscription (ioredis 5),
    // which left a waiter asleep for the holder's whole lease. Rounds are bounded well below that lease.
    const rounds = 10 * soak;
    let slowestRoundMs = 0;
    for (let round = 0; round < rounds; round++) {
      const clients = [redis.locks(), redis.locks(), redis.locks()];
      const base = uniqueName('multi');
      const pool = ['p', 'q', 'r', 's'].map((suffix) => `${base}:${suffix}`);
      const inside = new Map<string, number>(pool.map((name) => [name, 0]));
      let overlaps = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: 24 }, async (_, i) => {
          const locks = clients[i % clients.length];
          if (!locks) return;
          const names = i % 2 === 0 ? [pool[i % 4], pool[(i + 1) % 4]] : [pool[(i + 1) % 4], pool[i % 4]];
          await locks.getMultiLock(names as string[]).withLock(
            async () => {
              for (const name of names as string[]) {
                const now = (inside.get(name) ?? 0) + 1;
                inside.set(name, now);
                if (now > 1) overlaps++;
              }
              await sleep(round % 3);
              for (const name of names as string[]) inside.set(name, (inside.get(name) ?? 1) - 1);
            },
            { waitTime: 10_000 },
          );
        }),
      );
      slowestRoundMs = Math.max(slowestRoundMs, performance.now() - started);
      expect(overlaps).toBe(0);
      await Promise.all(clients.map((client) => client.close()));
    }
    recordFigures('multi-lock: 24 overlapping from 3 fresh clients', {
      rounds,
      slowestRoundMs: Math.round(slowestRoundMs),
    });
    expect(slowestRoundMs).toBeLessThan(10_000);
  });

  it('with a fixed lease, starts over when an earlier member ran out while a later one was awaited', async () => {
    const holder = redis.locks();
    const locks = redis.locks();
    const base = uniqueName('multi');
    const blocker = await holder.getLock(`${base}:b`).acquire();
    // (Caught: should the test fail first, the release would meet a closed client at cleanup.)
    setTimeout(() => void blocker.release().catch(() => undefined), 2500);
    // A lease of 1 s, so that the checks below run well within the fresh one on a loaded machine.
    const lease = await locks.getMultiLock([`${base}:a`, `${base}:b`]).acquire({ leaseTime: 1000, waitTime: 10_000 });
    // Member a's 1 s lease ran out while b was held for 2.5 s: the lease returned holds both afresh.
    expect(lease.signal.aborted).toBe(false);
    expect(await redis.admin.exists(`${base}:a`)).toBe(1);
    expect(await redis.admin.exists(`${base}:b`)).toBe(1);
    await lease.release();
  });

  it('aborts the lease signal when any member is lost', async () => {
    const locks = redis.locks({ watchdogTimeout: 900 });
    const base = uniqueName('multi');
    const lease = await locks.getMultiLock([`${base}:x`, `${base}:y`]).acquire();
    await redis.admin.del(`${base}:y`);
    await new Promise((resolve) => lease.signal.addEventListener('abort', resolve));
    expect(lease.signal.reason).toMatchObject({ code: 'LOCK_LOST', lockName: `${base}:y` });
    await expect(lease.release()).rejects.toMatchObject({ code: 'LOCK_NOT_HELD' });
    expect(await redis.admin.exists(`${base}:x`)).toBe(0);
  });

  it('rejects bad names before any I/O', () => {
    const locks = redis.locks();
    expect(() => locks.getMultiLock([])).toThrow(RangeError);
    expect(() => locks.getMultiLock('a' as unknown as string[])).toThrow(TypeError);
    expect(() => locks.getMultiLock(['ok', ''])).toThrow(/name must not be empty/);
  });

  it("withLock rejects with LockLostError carrying fn's result when a member was lost while fn ran", async () => {
    const locks = redis.locks();
    const [a, b] = [uniqueName(), uniqueName()];
    const error = await locks
      .getMultiLock([a, b])
      .withLock(async () => {
        await redis.admin.del(b);
        return 'sent';
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect(error).toMatchObject({ code: 'LOCK_LOST', lockName: b, result: 'sent' });
    // One key at a time: on a cluster the members live in different slots.
    expect((await redis.admin.exists(a)) + (await redis.admin.exists(b))).toBe(0);
  });
});
