// A waiter that keeps a place in Redis (a fair-lock waiter's queue entry, a waiting writer's registration)
// and gives up while its attempt is in flight must leave only after that attempt has settled: an attempt
// that meets NOSCRIPT is sent again by EVAL, and one sent after the leave would take the place back, where
// nothing refreshes or removes it (the free lock then refuses everyone else for `watchdogTimeout`).
import { describe, expect, it } from 'vitest';
import { fairLockKeys, readWriteLockKeys } from '../../src/redis/keys.js';
import { commandCalls, onCluster, uniqueName, until, useRedis } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

let server: LocalRedis | undefined;
const redis = useRedis(async () => (server = await startRedisServer()));

/**
 * Starts `wait` (a wait that will abort with `controller`), and aborts it while its first attempt is on its
 * way to a stopped server whose script cache was flushed: the server then answers that attempt NOSCRIPT only
 * after it received the waiter's leave, and the attempt is sent again by EVAL after it.
 */
async function giveUpDuringNoScript(wait: (signal: AbortSignal) => Promise<unknown>): Promise<unknown> {
  if (!server) throw new Error('no server');
  await redis.admin.script('FLUSH');
  const evals = async (): Promise<number> => (await commandCalls(redis.admin))['eval'] ?? 0;
  const before = await evals();
  const controller = new AbortController();
  const paused = server;
  paused.pause();
  const outcome = wait(controller.signal).then(
    () => 'settled',
    (error: unknown) => error,
  );
  try {
    // The attempt is written within a few event-loop turns of the call (no I/O comes before it).
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort(new Error('gave up'));
  } finally {
    paused.resume();
  }
  const result = await outcome;
  // The attempt's EVAL ran by now: two EVALs since the flush are two of it, the leave (always by EVAL, sent
  // once the attempt settled, so never before it) and the waiting client's first holder record (met NOSCRIPT
  // too). The caller then closes the waiting client, which waits for the leave.
  await until(async () => (await evals()) >= before + 2, "the attempt's EVAL ran", 5000);
  return result;
}

describe.skipIf(onCluster)('a waiter that gives up while its attempt meets NOSCRIPT (issue 22, item 1)', () => {
  it('fair lock: its queue entry is gone afterwards, and another client takes the free lock', async () => {
    const name = uniqueName('fair-leave');
    const holder = redis.locks();
    const lease = await holder.getFairLock(name).acquire();
    const waiting = redis.locks();
    const fair = waiting.getFairLock(name);
    await fair.isLocked(); // the waiter's client is connected and used
    const outcome = await giveUpDuringNoScript((signal) =>
      waiting.run(() => fair.tryLock({ waitTime: 10_000, signal })),
    );
    expect(outcome).toMatchObject({ message: 'gave up' });
    await waiting.close(); // waits for the leave (seen under load: the record's EVAL counted, the leave not run yet)
    const { queueKey } = fairLockKeys('', name);
    expect(await redis.admin.llen(queueKey)).toBe(0);
    await lease.release();
    const other = redis.locks();
    expect(await other.run(() => other.getFairLock(name).tryLock(2000))).toBe(true);
  });

  it('read-write lock: its writer registration is gone afterwards, and another client reads', async () => {
    const name = uniqueName('rw-leave');
    const holder = redis.locks();
    const lease = await holder.getReadWriteLock(name).readLock().acquire();
    const waiting = redis.locks();
    const writer = waiting.getReadWriteLock(name).writeLock();
    await writer.isLocked(); // the waiter's client is connected and used
    const outcome = await giveUpDuringNoScript((signal) =>
      waiting.run(() => writer.tryLock({ waitTime: 10_000, signal })),
    );
    expect(outcome).toMatchObject({ message: 'gave up' });
    await waiting.close(); // waits for the leave
    const { writersKey } = readWriteLockKeys('', name);
    expect(await redis.admin.exists(writersKey)).toBe(0);
    await lease.release();
    const other = redis.locks();
    expect(await other.run(() => other.getReadWriteLock(name).readLock().tryLock(2000))).toBe(true);
  });
});
