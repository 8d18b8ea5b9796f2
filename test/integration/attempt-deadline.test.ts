// A call that gives up its attempt at its deadline ends there, timed out, even when the deadline timer fires a
// little before the deadline by the monotonic clock (Node runs timers on the event loop's millisecond clock).
// A second attempt would overlap the first, and a re-entry records only its latest request id (one memo slot
// per owner): a resend of both (their connection killed after they ran) then counted the re-entry twice more
// than the two give-backs took off, leaving a count nobody releases (the lock model, seed 1367079284).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LockAcquireTimeoutError } from '../../src/index.js';
import { recordDiagnostics, type DiagnosticsRecorder } from '../support/diagnostics-recorder.js';
import { uniqueName, until, useRedis } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

/** How early the deadline timer fires (0: on time). */
const early = { ms: 0 };
vi.mock('../../src/time.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../src/time.js')>();
  return {
    ...actual,
    settleBy: (...[promise, deadline, signal, closeSignal]: Parameters<typeof actual.settleBy>) =>
      actual.settleBy(promise, deadline - early.ms, signal, closeSignal),
  };
});

let server: LocalRedis | undefined;
const redis = useRedis(async () => (server = await startRedisServer()));
let recorder: DiagnosticsRecorder | undefined;

afterEach(() => {
  early.ms = 0;
  server?.resume();
  recorder?.dispose();
  recorder = undefined;
});

describe('an attempt given up at the deadline', () => {
  it('ends the call: no second attempt overlaps the first, and the re-entry count comes back', async () => {
    if (!server) throw new Error('no server');
    const locks = redis.locks();
    const name = uniqueName();
    const lock = locks.getLock(name);
    await locks.run(async () => {
      await lock.lock();
      recorder = recordDiagnostics();
      // The re-entry's attempt waits on a stopped server; its deadline timer fires 40 ms early.
      early.ms = 40;
      server?.pause();
      const reentry = lock.acquire({ waitTime: 100 });
      await expect(reentry).rejects.toBeInstanceOf(LockAcquireTimeoutError);
      server?.resume();
      const traces = recorder.of('tracing:flowlock:acquire:asyncEnd');
      expect(traces.map((trace) => trace['attempts'])).toEqual([1]);
      // The attempt still runs once the server goes on, and its grant is given back.
      await until(async () => Number(Object.values(await redis.admin.hgetall(name))[0]) === 1, 'the count back to 1');
      await lock.unlock();
    });
    expect(await redis.admin.exists(name)).toBe(0);
  });
});
