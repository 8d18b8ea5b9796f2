// An attempt sent before a call's deadline is awaited to its reply, and its grant kept: a wait time bounds
// waiting for a holder, not the round trip (a wait that gave up its attempt did worse than no wait at all,
// docs/guide/waiting.md). The call then ends after exactly one attempt, however late the reply: a second
// attempt would overlap the first, and a re-entry's memo holds only the latest request id, so that a resend of
// both would count twice (the lock model, seed 1367079284, found that when attempts were given up).
import { afterEach, describe, expect, it } from 'vitest';
import { recordDiagnostics, type DiagnosticsRecorder } from '../support/diagnostics-recorder.js';
import { until, uniqueName, useRedis } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

let server: LocalRedis | undefined;
const redis = useRedis(async () => (server = await startRedisServer()));
let recorder: DiagnosticsRecorder | undefined;

afterEach(() => {
  server?.resume();
  recorder?.dispose();
  recorder = undefined;
});

describe('an attempt in flight at the deadline', () => {
  it('is awaited past the wait time: the re-entry is kept, with one attempt, and counts once', async () => {
    if (!server) throw new Error('no server');
    const locks = redis.locks();
    const name = uniqueName();
    const lock = locks.getLock(name);
    await locks.run(async () => {
      await lock.lock();
      recorder = recordDiagnostics();
      // The re-entry's attempt waits on a stopped server well past its 100 ms wait time.
      server?.pause();
      const started = performance.now();
      const reentry = lock.acquire({ waitTime: 100 });
      let settled = false;
      void reentry.then(
        () => (settled = true),
        () => (settled = true),
      );
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(settled).toBe(false);
      server?.resume();
      const lease = await reentry;
      expect(performance.now() - started).toBeGreaterThanOrEqual(550);
      const traces = recorder.of('tracing:flowlock:acquire:asyncEnd');
      expect(traces.map((trace) => trace['attempts'])).toEqual([1]);
      expect(Number(Object.values(await redis.admin.hgetall(name))[0])).toBe(2);
      await lease.release();
      expect(Number(Object.values(await redis.admin.hgetall(name))[0])).toBe(1);
      await lock.unlock();
    });
    await until(async () => (await redis.admin.exists(name)) === 0, 'the lock key removed');
  });
});
