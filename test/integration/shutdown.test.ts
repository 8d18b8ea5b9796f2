// Shutting down (issue 22, items 9, 10 and 11): a process that quits its Redis client without close() still
// exits, and its lock client behaves as closed; close() after that names the holds it could not release and
// when they expire; close({ timeout }) bounds how long close() waits while Redis is down.
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import diagnostics from 'node:diagnostics_channel';
import {
  createLockClient,
  LockClientClosedError,
  LockLostError,
  LocksNotReleasedError,
  type CloseOptions,
  type HoldEndMessage,
  type LockClient,
  type LockLostEvent,
} from '../../src/index.js';
import { onGlide, quitClient } from '../support/clients.js';
import { busyWait, onCluster, uniqueName, until, useRedis } from '../support/fixture.js';
import { luaSources } from '../../src/redis/lua-scripts.generated.js';
import { TcpProxy } from '../support/proxy.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

let server: LocalRedis | undefined;
const redis = useRedis(async () => (server = await startRedisServer()));
const root = join(import.meta.dirname, '..', '..');

/** What close() settles with: its error, or undefined. */
function closeOutcome(locks: LockClient, options?: CloseOptions): Promise<unknown> {
  return locks.close(options).then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
}

// The admin connection reconnects while the server is down: its errors are expected here.
beforeAll(() => {
  redis.admin.on('error', () => undefined);
});

describe('shutting down (issue 22, items 9, 10, 11)', () => {
  // The child process connects a standalone client by redis.server's URL: no such server on a cluster.
  it.skipIf(onCluster)(
    'a process that quits its Redis client without close() exits; the lock client is closed',
    async () => {
      expect(existsSync(join(root, 'dist', 'index.js')), 'run `npm run build` first').toBe(true);
      const name = uniqueName('exit-quit');
      const child = fork(join(root, 'test', 'fixtures', 'exit-after-quit.mjs'), [redis.server.url, name], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      try {
        const [message] = (await once(child, 'message')) as [
          { waited: boolean; closed: boolean; leaseAborted: boolean; closedAt: number },
        ];
        expect(message).toMatchObject({ waited: false, closed: true, leaseAborted: true });
        const exited = once(child, 'exit') as Promise<[number | null]>;
        const outcome = await Promise.race([exited, sleep(5000, ['still running'])]);
        expect(outcome[0]).toBe(0);
        expect(Date.now() - message.closedAt).toBeLessThan(5000);
      } finally {
        if (child.exitCode === null) child.kill('SIGKILL');
      }
    },
  );

  it('the lock client closes by itself once its Redis client ends: calls reject, hold signals abort', async () => {
    const client = redis.client();
    const locks = createLockClient(client);
    const name = uniqueName('ended');
    const lease = await locks.getLock(name).acquire();
    await quitClient(client);
    await until(
      () =>
        locks
          .getLock(name)
          .isLocked()
          .then(
            () => false,
            (error: unknown) => error instanceof LockClientClosedError,
          ),
      'calls reject with LockClientClosedError',
      5000,
    );
    expect(lease.signal.aborted).toBe(true);
    expect(locks.holds()).toEqual([]);
    await expect(locks.close()).rejects.toBeInstanceOf(LocksNotReleasedError);
  });

  it.skipIf(onGlide)(
    'a Redis client whose reconnect strategy gives up: every hold is reported lost (client_ended)',
    async () => {
      // GLIDE always reconnects: its client never ends by itself.
      const client = redis.client({ reconnectMs: false });
      (client as { on?: (event: string, listener: () => void) => void }).on?.('error', () => undefined);
      const locks = createLockClient(client, { watchdogTimeout: 10_000 });
      const lost: LockLostEvent[] = [];
      locks.on('lockLost', (event) => lost.push(event));
      const ends: HoldEndMessage[] = [];
      const onEnd = (message: unknown): void => void ends.push(message as HoldEndMessage);
      diagnostics.subscribe('flowlock:hold:end', onEnd);
      try {
        const name = uniqueName('gave-up');
        const lease = await locks.getLock(name).acquire();
        // Every connection of the lock client's Redis client is cut; it does not reconnect.
        await redis.admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
        await until(() => lease.signal.aborted, 'the hold lost', 5000);
        expect(lease.signal.reason).toBeInstanceOf(LockLostError);
        expect(lost.map((event) => event.name)).toEqual([name]);
        expect(ends).toMatchObject([{ name, reason: 'lost', lossReason: 'client_ended' }]);
        await expect(locks.close()).rejects.toBeInstanceOf(LocksNotReleasedError);
      } finally {
        diagnostics.unsubscribe('flowlock:hold:end', onEnd);
      }
    },
  );

  it('close() after the Redis client was quit rejects, naming each hold left in Redis and when it expires', async () => {
    const client = redis.client();
    const locks = createLockClient(client, { watchdogTimeout: 10_000 });
    const name = uniqueName('quit-first');
    const before = Date.now();
    const lease = await locks.getLock(name).acquire();
    await quitClient(client);
    const error = await closeOutcome(locks);
    expect(error).toBeInstanceOf(LocksNotReleasedError);
    const notReleased = error as LocksNotReleasedError;
    expect(notReleased).toMatchObject({ name: 'LocksNotReleasedError', code: 'LOCKS_NOT_RELEASED' });
    expect(notReleased.holds).toMatchObject([{ name, key: name }]);
    const expiresBy = notReleased.holds[0]?.expiresBy.getTime() ?? 0;
    expect(expiresBy).toBeGreaterThanOrEqual(before + 10_000 - 20);
    expect(expiresBy).toBeLessThanOrEqual(Date.now() + 10_000);
    expect(notReleased.message).toContain(name);
    expect(notReleased.message).toContain('close the lock client first');
    // Asked again, it says the same; the client is closed and the hold's signal aborted.
    await expect(locks.close()).rejects.toBeInstanceOf(LocksNotReleasedError);
    expect(lease.signal.aborted).toBe(true);
    await expect(locks.run(() => locks.getLock(name).tryLock())).rejects.toBeInstanceOf(LockClientClosedError);
    expect(await redis.admin.pttl(name)).toBeGreaterThan(0);
  });

  it.skipIf(onCluster)(
    'close({ timeout }) while Redis is down settles within its bound, naming the holds left',
    async () => {
      if (!server) throw new Error('no local server');
      const local = server;
      const locks = redis.locks(); // watchdogTimeout 30 s: close() alone would wait up to that
      const name = uniqueName('down-close');
      await locks.getLock(name).acquire();
      await local.kill();
      try {
        const start = performance.now();
        const closing = closeOutcome(locks, { timeout: 300 });
        const outcome = await Promise.race([closing, sleep(5000, 'still closing')]);
        const elapsed = performance.now() - start;
        expect(outcome).toBeInstanceOf(LocksNotReleasedError);
        expect((outcome as LocksNotReleasedError).holds).toMatchObject([{ name }]);
        // Or, when this loaded process took a while to send the releases, what Redis had left of the 300 ms.
        expect((outcome as LocksNotReleasedError).message).toMatch(
          /Redis did not answer (within 300 ms|in the \d+ ms left of the 300 ms timeout)/,
        );
        expect(elapsed).toBeLessThan(2000);
        await closing;
      } finally {
        await local.restart();
      }
    },
  );

  it.skipIf(onCluster)(
    "a stall of this process past close()'s timeout: replies that came meanwhile are read, not given up on",
    async () => {
      const locks = redis.locks();
      const names = [uniqueName('stall-close'), uniqueName('stall-close')];
      for (const name of names) await locks.getLock(name).acquire();
      // Redis sleeps 500 ms: the releases close() sends wait there, and are answered while this process is busy.
      const sleeping = redis.admin.call('DEBUG', 'SLEEP', '0.5');
      await sleep(50);
      const start = performance.now();
      const closing = locks.close({ timeout: 100 });
      await sleep(50); // the releases go out; Redis is still asleep
      busyWait(900);
      await closing;
      await sleeping;
      for (const name of names) expect(await redis.admin.exists(name)).toBe(0);
      // The stall (900 ms) and a turn, not the stall charged in slices.
      expect(performance.now() - start).toBeLessThan(2000);
    },
  );

  it.skipIf(onCluster)(
    "a stall of this process before close()'s releases go out: the error says how late they went, not that Redis did not answer",
    async () => {
      if (!server) throw new Error('no local server');
      const local = server;
      const locks = redis.locks();
      const name = uniqueName('late-close');
      await locks.getLock(name).acquire();
      // Redis will not answer, and this process is busy before close() gets to send its releases.
      local.pause();
      try {
        const closing = closeOutcome(locks, { timeout: 200 });
        busyWait(400);
        const outcome = await closing;
        expect(outcome).toBeInstanceOf(LocksNotReleasedError);
        const { message, holds } = outcome as LocksNotReleasedError;
        expect(holds).toMatchObject([{ name }]);
        expect(message).toMatch(
          /the 200 ms timeout had run out when the releases went out \d+ ms into it \(this process was busy until then\)/,
        );
        expect(Number(/went out (\d+) ms into it/.exec(message)?.[1])).toBeGreaterThanOrEqual(400);
        expect(message).not.toContain('did not answer within');
      } finally {
        local.resume();
      }
      // The release it sent runs once Redis wakes (Redis answers it: the hold leaves well before its lease).
      await until(async () => (await redis.admin.exists(name)) === 0, `${name} released once Redis woke`);
    },
  );

  it.skipIf(onCluster)(
    "a fair lock's hold counts as released once Redis drops it, although the wake of the next waiter is unanswered",
    async () => {
      const link = await TcpProxy.start(redis.server.port);
      onTestFinished(() => link.close());
      const holder = redis.locks({}, { port: link.port });
      const other = redis.locks();
      const name = uniqueName('fair-close');
      await holder.getFairLock(name).acquire();
      // The wake's script is known to the server: a NOSCRIPT reply held back below would keep it from running.
      await redis.admin.call('SCRIPT', 'LOAD', luaSources['fair-lock/wake'].source);
      const waiting = other.run(() => other.getFairLock(name).tryLock(10_000));
      await until(async () => (await redis.admin.llen(`redisson_lock_queue:{${name}}`)) === 1, 'the waiter queued');
      // Parked and listening (its attempt after subscribing answered: a call on its connection comes after it),
      // so that the wake, not that attempt, is what gives it the lock.
      await until(() => other.waits().some((w) => w.subscription === 'active'), 'the waiter subscribed');
      await other.getFairLock(name).isLocked();
      // The reply to the wake (a script on the waiter's own channel, after the release) is held back.
      const wake = link.holdReplyTo(new RegExp(`${other.clientId}:w`));
      await holder.close({ timeout: 300 });
      await wake.held;
      expect(await waiting).toBe(true);
      wake.letGo();
    },
  );

  it.skipIf(onCluster)(
    'close({ timeout }) while the process is busy every turn and Redis does not answer: wall-clock time',
    async () => {
      if (!server) throw new Error('no local server');
      const local = server;
      const locks = redis.locks();
      const name = uniqueName('busy-close');
      await locks.getLock(name).acquire();
      local.pause();
      // Every turn of the event loop costs 250 ms of synchronous work, as in a service shutting down under load.
      let busy = true;
      const work = (): void => {
        if (!busy) return;
        busyWait(250);
        setImmediate(work);
      };
      try {
        const start = performance.now();
        const closing = closeOutcome(locks, { timeout: 600 });
        setImmediate(work);
        const outcome = await closing;
        const elapsed = performance.now() - start;
        busy = false;
        expect(outcome).toBeInstanceOf(LocksNotReleasedError);
        // 600 ms and a turn or two of 250 ms, with room for a loaded machine; charged in 50 ms slices, as before,
        // each costing a 250 ms turn, it took at least 3 s (6 s measured).
        expect(elapsed).toBeLessThan(2000);
      } finally {
        busy = false;
        local.resume();
      }
    },
  );

  it('close({ timeout }) checks its options before anything else', async () => {
    const locks = redis.locks();
    await expect(locks.close({ timeout: -1 })).rejects.toBeInstanceOf(RangeError);
    await expect(locks.close({ timeot: 5 } as never)).rejects.toBeInstanceOf(TypeError);
    await locks.close({ timeout: 1000 });
  });
});
