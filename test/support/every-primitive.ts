/**
 * Every primitive once, through one lock client: a plain lock acquired, re-entered and released (watchdog and
 * fixed lease) with a waiter woken by its release message; a fair lock and a read-write lock with waiters; both
 * semaphores and a latch; and a multi-lock over names of different slots held past a renewal, so that the
 * watchdog's calls run too. For tests that judge what every call of the library does on a server (its
 * requests, its slots).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'vitest';
import type { LockClient } from '../../src/index.js';
import { uniqueName } from './fixture.js';

/** `holdMs`: how long the multi-lock is held; more than the client's renewal period (watchdogTimeout / 3). */
export async function everyPrimitive(locks: LockClient, holdMs: number): Promise<void> {
  const name = (kind: string): string => uniqueName(kind);

  const lock = locks.getLock(name('lock'));
  await locks.run(async () => {
    const lease = await lock.acquire();
    await lock.withLock(() => undefined);
    const waiter = locks.run(() => lock.acquire({ waitTime: 5000 }));
    await sleep(100);
    await lease.release();
    await (await waiter).release();
  });
  await locks.getLock(name('lock')).withLock(() => undefined, { leaseTime: 5000 });

  const fair = name('fair');
  const first = await locks.getFairLock(fair).acquire();
  const second = locks.run(() => locks.getFairLock(fair).acquire({ waitTime: 5000 }));
  await sleep(100);
  await first.release();
  await (await second).release();

  const rw = name('rw');
  const readers = await Promise.all([1, 2].map(() => locks.run(() => locks.getReadWriteLock(rw).readLock().acquire())));
  const writer = locks.run(() => locks.getReadWriteLock(rw).writeLock().acquire({ waitTime: 5000 }));
  await sleep(100);
  for (const reader of readers) await reader.release();
  await (await writer).release();

  const semaphore = locks.getSemaphore(name('semaphore'));
  await semaphore.trySetPermits(1);
  await semaphore.acquire();
  await semaphore.release();
  const expirable = locks.getPermitExpirableSemaphore(name('permits'));
  await expirable.trySetPermits(2);
  await (await expirable.acquire()).release();
  const latch = locks.getCountDownLatch(name('latch'));
  await latch.trySetCount(1);
  await latch.countDown();
  expect(await latch.await(1000)).toBe(true);

  await locks.getMultiLock([name('multi'), name('multi'), name('multi')]).withLock(() => sleep(holdMs));
}
