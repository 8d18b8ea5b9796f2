// The diagnostics channels (src/diagnostics/channels.ts), the holds()/waits() snapshots, the holder info the
// acquire scripts write, and NODE_DEBUG=flowlock: on the client under test, against real Redis.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createQuorumLockClient, type HoldEndMessage, type LockClient } from '../../src/index.js';
import { recordDiagnostics, type DiagnosticsRecorder } from '../support/diagnostics-recorder.js';
import { onCluster, QUICK_RENEWAL, recorded, uniqueName, until, useRedis } from '../support/fixture.js';
import { lockKeys, readWriteLockKeys } from '../../src/redis/keys.js';

const redis = useRedis();
let recorder: DiagnosticsRecorder | undefined;

function record(): DiagnosticsRecorder {
  recorder = recordDiagnostics();
  return recorder;
}

afterEach(() => {
  recorder?.dispose();
  recorder = undefined;
});

/** The hold:end messages recorded so far, once `count` of them (matching `which`) have come. */
async function holdEnds(
  rec: DiagnosticsRecorder,
  which: (m: HoldEndMessage) => boolean,
  timeout: number,
): Promise<HoldEndMessage[]> {
  const ends = (): HoldEndMessage[] => (rec.of('flowlock:hold:end') as unknown as HoldEndMessage[]).filter(which);
  await vi.waitUntil(() => ends().length > 0, { timeout, interval: 20 });
  return ends();
}

describe('diagnostics channels', () => {
  it('trace withLock, its acquisition, the hold and the release in order, with the documented fields', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const rec = record();
    await locks.getLock(name).withLock(async () => sleep(20));
    const order = rec.events.map((e) => e.channel).filter((c) => !c.endsWith(':end') || c.startsWith('flowlock:'));
    expect(order).toEqual([
      'tracing:flowlock:withLock:start',
      'tracing:flowlock:acquire:start',
      'flowlock:hold:start',
      'tracing:flowlock:acquire:asyncStart',
      'tracing:flowlock:acquire:asyncEnd',
      'tracing:flowlock:release:start',
      'flowlock:hold:end',
      'tracing:flowlock:release:asyncStart',
      'tracing:flowlock:release:asyncEnd',
      'tracing:flowlock:withLock:asyncStart',
      'tracing:flowlock:withLock:asyncEnd',
    ]);
    const [acquire] = rec.of('tracing:flowlock:acquire:asyncEnd');
    expect(acquire).toMatchObject({
      name,
      key: name,
      clientId: locks.clientId,
      kind: 'lock',
      mode: 'watchdog',
      leaseMs: 30_000,
      outcome: 'acquired',
      contended: false,
      attempts: 1,
      holdCount: 1,
    });
    expect(acquire?.['owner']).toMatch(new RegExp(`^${locks.clientId}:\\d+$`));
    expect(typeof acquire?.['fencingToken']).toBe('bigint');
    const [start] = rec.of('flowlock:hold:start');
    const [end] = rec.of('flowlock:hold:end');
    expect(start).toMatchObject({ name, owner: acquire?.['owner'], fencingToken: acquire?.['fencingToken'] });
    expect(end).toMatchObject({ ...start, reason: 'released' });
    expect(end?.['heldMs']).toBeGreaterThanOrEqual(15);
    expect(rec.of('tracing:flowlock:release:asyncEnd')[0]).toMatchObject({ remaining: 0, freed: true, force: false });
    const [scope] = rec.of('tracing:flowlock:withLock:asyncEnd');
    expect(scope).toMatchObject({ outcome: 'acquired', fencingToken: acquire?.['fencingToken'] });
    expect(scope?.['heldMs']).toBeGreaterThanOrEqual(15);
  });

  it('publish a contended wait once, woken by the release message, and a timeout without an error event', async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    const rec = record();
    const lease = await one.getLock(name).acquire();
    let letGo = (): void => undefined;
    const waiting = two.run(async () => {
      const got = await two.getLock(name).tryLock(10_000);
      await new Promise<void>((resolve) => (letGo = resolve));
      await two.getLock(name).unlock();
      return got;
    });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(() => rec.of('flowlock:wait:start').length === 1, 'the wait started');
    expect(rec.of('flowlock:wait:start')[0]).toMatchObject({ name, clientId: two.clientId, kind: 'lock' });
    expect(rec.of('flowlock:wait:start')[0]?.['holderTtlMs']).toBeGreaterThan(0);
    // Released once the waiter listens: a release before that is seen by its 1 s re-check, not a message.
    await until(() => two.waits()[0]?.subscription === 'active', 'the waiter subscribed');
    await lease.release();
    await until(() => rec.of('flowlock:wait:end').length === 1, 'the wait ended');
    const [waitEnd] = rec.of('flowlock:wait:end');
    expect(waitEnd).toMatchObject({ outcome: 'acquired', clientId: two.clientId });
    expect((waitEnd?.['wakeups'] as { message: number }).message).toBeGreaterThanOrEqual(1);
    const contended = rec.of('tracing:flowlock:acquire:asyncEnd').find((c) => c['clientId'] === two.clientId);
    expect(contended).toMatchObject({ outcome: 'acquired', contended: true });
    expect(contended?.['attempts']).toBeGreaterThanOrEqual(2);

    // A tryLock that runs out is an outcome, not an error. Its wait time outlasts the first attempt's reply
    // on a loaded machine, so that it waits (contended) rather than ending after that one attempt.
    expect(await one.run(() => one.getLock(name).tryLock(1000))).toBe(false);
    const timedOut = rec.of('tracing:flowlock:acquire:asyncEnd').at(-1);
    expect(timedOut).toMatchObject({ clientId: one.clientId, outcome: 'timeout', contended: true });
    expect(rec.of('tracing:flowlock:acquire:error')).toEqual([]);
    expect(rec.of('flowlock:wait:end').at(-1)).toMatchObject({ clientId: one.clientId, outcome: 'timeout' });
    letGo();
    expect(await waiting).toBe(true);
    expect(rec.summary()).toMatchObject({ unmatchedEnds: 0, openHolds: 0, openWaits: 0 });
  });

  it('publish an acquire that fails as an error with its outcome (aborted, and timeout for acquire)', async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    const lease = await one.getLock(name).acquire();
    const rec = record();
    const controller = new AbortController();
    const aborted = two.getLock(name).acquire({ signal: controller.signal });
    aborted.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(() => rec.of('flowlock:wait:start').length === 1, 'the wait started');
    controller.abort(new Error('stop'));
    await expect(aborted).rejects.toThrow('stop');
    // Long enough that its first attempt is answered before the wait time is over, so that it waits (a wait
    // time already over after the first attempt ends the acquisition without a wait, on a loaded machine).
    await expect(two.getLock(name).acquire({ waitTime: 1000 })).rejects.toMatchObject({
      code: 'LOCK_ACQUIRE_TIMEOUT',
    });
    const outcomes = rec.of('tracing:flowlock:acquire:asyncEnd').map((c) => c['outcome']);
    expect(outcomes).toEqual(['aborted', 'timeout']);
    expect(rec.of('tracing:flowlock:acquire:error')).toHaveLength(2);
    expect(rec.of('flowlock:wait:end').map((m) => m['outcome'])).toEqual(['aborted', 'timeout']);
    await lease.release();
  });

  it('a subscriber that attaches mid-hold and mid-wait sees no end without its start', async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    const lease = await one.getLock(name).acquire();
    const waiting = two.run(async () => {
      const got = await two.getLock(name).tryLock(10_000);
      await two.getLock(name).unlock();
      return got;
    });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(() => two.waits().length === 1, 'the waiter waits');
    const rec = record();
    await lease.release();
    expect(await waiting).toBe(true);
    // The second hold began while recording: its start and end both came; the first's end did not.
    expect(rec.of('flowlock:hold:end').map((m) => m['clientId'])).toEqual([two.clientId]);
    expect(rec.of('flowlock:wait:end')).toEqual([]);
    expect(rec.summary()).toMatchObject({
      unmatchedEnds: 0,
      openHolds: 0,
      openWaits: 0,
      lowestActiveHolds: 0,
      lowestActiveWaits: 0,
    });
  });

  it('every primitive of the family publishes its acquisitions, releases and holds', async () => {
    const locks = redis.locks();
    const name = uniqueName('family');
    const rec = record();
    await locks.getFairLock(`${name}:fair`).withLock(() => undefined);
    const rw = locks.getReadWriteLock(`${name}:rw`);
    await rw.readLock().withLock(() => undefined);
    await rw.writeLock().withLock(() => undefined);
    await locks.getMultiLock([`${name}:m1`, `${name}:m2`]).withLock(() => undefined);
    const semaphore = locks.getSemaphore(`${name}:sem`);
    await semaphore.trySetPermits(1);
    await semaphore.acquire();
    await semaphore.release();
    const permits = locks.getPermitExpirableSemaphore(`${name}:permits`);
    await permits.trySetPermits(1);
    await permits.withPermit(() => undefined);
    const latch = locks.getCountDownLatch(`${name}:latch`);
    await latch.trySetCount(1);
    const opened = latch.await(5000);
    await latch.countDown();
    expect(await opened).toBe(true);
    const kinds = (channel: string): string[] => [...new Set(rec.of(channel).map((m) => String(m['kind'])))].sort();
    expect(kinds('tracing:flowlock:acquire:asyncEnd')).toEqual(
      ['fair', 'latch', 'lock', 'multi', 'permit', 'read', 'semaphore', 'write'].sort(),
    );
    expect(kinds('tracing:flowlock:release:asyncEnd')).toEqual(
      ['fair', 'latch', 'lock', 'permit', 'read', 'semaphore', 'write'].sort(),
    );
    expect(kinds('flowlock:hold:start')).toEqual(['fair', 'lock', 'permit', 'read', 'write'].sort());
    expect(kinds('tracing:flowlock:withLock:asyncEnd')).toEqual(['fair', 'multi', 'permit', 'read', 'write'].sort());
    const multi = rec.of('tracing:flowlock:acquire:asyncEnd').find((m) => m['kind'] === 'multi');
    expect(multi?.['names']).toEqual([`${name}:m1`, `${name}:m2`]);
    expect(rec.of('tracing:flowlock:acquire:asyncEnd').every((m) => m['outcome'] === 'acquired')).toBe(true);
    expect(rec.summary()).toMatchObject({ unmatchedEnds: 0, openHolds: 0, openWaits: 0 });
  });

  it.skipIf(onCluster)('the quorum lock publishes its acquisitions, holds and releases', async () => {
    const quorum = createQuorumLockClient([redis.client(), redis.client(), redis.client()]);
    try {
      const rec = record();
      await quorum.getLock(uniqueName('quorum')).withLock(() => sleep(10));
      expect(rec.of('tracing:flowlock:acquire:asyncEnd')).toMatchObject([{ kind: 'quorum', outcome: 'acquired' }]);
      expect(rec.of('flowlock:hold:end')).toMatchObject([{ kind: 'quorum', reason: 'released' }]);
      expect(rec.of('tracing:flowlock:release:asyncEnd')).toMatchObject([{ kind: 'quorum', freed: true }]);
      expect(rec.of('tracing:flowlock:withLock:asyncEnd')).toMatchObject([{ kind: 'quorum', outcome: 'acquired' }]);
    } finally {
      await quorum.close();
    }
  });

  it('report subscriber state on flowlock:pubsub', async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    const lease = await one.getLock(name).acquire();
    const rec = record();
    const waiting = two.run(() => two.getLock(name).tryLock(10_000));
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(() => rec.of('flowlock:pubsub').length > 0, 'a flowlock:pubsub event');
    expect(rec.of('flowlock:pubsub')[0]).toMatchObject({
      clientId: two.clientId,
      event: 'subscribed',
      channels: 1,
      mode: onCluster ? expect.any(String) : 'classic',
    });
    await lease.release();
    expect(await waiting).toBe(true);
    await two.close();
    expect(rec.of('flowlock:pubsub').at(-1)).toMatchObject({ clientId: two.clientId, event: 'closed' });
  });
});

describe('loss reasons, produced by real faults', () => {
  const lossOf = async (locks: LockClient, rec: DiagnosticsRecorder, timeout: number): Promise<HoldEndMessage> => {
    const [end] = await holdEnds(rec, (m) => m.clientId === locks.clientId && m.reason === 'lost', timeout);
    if (!end) throw new Error('no loss');
    return end;
  };

  it('DEL of the key: renewal_rejected', async () => {
    const locks = redis.locks({ watchdogTimeout: 1500 });
    const name = uniqueName();
    const rec = record();
    const lease = await locks.getLock(name).acquire();
    await redis.admin.del(name);
    const end = await lossOf(locks, rec, 3000);
    expect(end).toMatchObject({ name, lossReason: 'renewal_rejected', mode: 'watchdog' });
    expect(end.error?.code).toBe('LOCK_LOST');
    expect(lease.signal.aborted).toBe(true);
    expect(rec.of('tracing:flowlock:renew:asyncEnd').some((c) => c['rejected'] === 1)).toBe(true);
  });

  it('a fixed lease that runs out: lease_expired', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const rec = record();
    const sentAt = performance.now();
    await locks.getLock(name).acquire({ leaseTime: 200 });
    const acquireMs = performance.now() - sentAt;
    const end = await lossOf(locks, rec, 5000);
    expect(end).toMatchObject({ name, lossReason: 'lease_expired', mode: 'lease', leaseMs: 200 });
    // Lost at its local deadline, 200 ms less the drift allowance (1 % + 2 ms) after the acquire was sent,
    // not before: heldMs counts from the grant's reply, which a loaded machine reads late.
    expect(end.heldMs + acquireMs).toBeGreaterThanOrEqual(190);
  });

  it.skipIf(onCluster)(
    'DEBUG SLEEP longer than the lease: renewal_deadline, with the tick lateness measured',
    async () => {
      const locks = redis.locks({ watchdogTimeout: 1200 });
      const name = uniqueName();
      const rec = record();
      await locks.getLock(name).acquire();
      await vi.waitUntil(() => rec.of('tracing:flowlock:renew:asyncEnd').length > 0, { timeout: 3000, interval: 20 });
      expect(rec.of('tracing:flowlock:renew:asyncEnd')[0]).toMatchObject({ locks: 1, renewed: 1, rejected: 0 });
      expect(rec.of('tracing:flowlock:renew:asyncEnd')[0]?.['lateMs']).toBeGreaterThanOrEqual(0);
      const sleeping = redis.redis().call('DEBUG', 'SLEEP', '2.5');
      const end = await lossOf(locks, rec, 4000);
      expect(end).toMatchObject({ name, lossReason: 'renewal_deadline' });
      await sleeping;
    },
  );

  it.skipIf(onCluster)('a CLIENT PAUSE shorter than the lease: a renewal error, and no loss', async () => {
    // ioredis and iovalkey time a sent command out (commandTimeout, 300 ms here) while the connection stays
    // up: the renewal sent during the pause fails, the next one after it succeeds. node-redis times out only
    // commands not yet written (its command timeout): there the renewal sent during the pause goes
    // unanswered for longer than the library's bound (half the 3 s renewal period), which reports it. The
    // pause (2 s to 5 s) holds up the renewal due at 3 s for 2 s, and is over a second before the next.
    const locks = redis.locks({ watchdogTimeout: 9000 }, { ioredis: { commandTimeout: 300 } });
    const name = uniqueName();
    const rec = record();
    const lease = await locks.getLock(name).acquire();
    // The scenario's own timing: the pause starts a second before the renewal due at 3 s and ends a second
    // before the next one (6 s), both far from the 9 s deadline.
    await sleep(2000);
    const renewsBefore = rec.of('tracing:flowlock:renew:asyncEnd').length;
    await redis.admin.call('CLIENT', 'PAUSE', '3000', 'WRITE');
    await until(() => rec.of('tracing:flowlock:renew:error').length > 0, 'a renewal failed or went unanswered');
    await until(
      () =>
        rec
          .of('tracing:flowlock:renew:asyncEnd')
          .slice(renewsBefore)
          .some((c) => c['renewed'] === 1),
      'a renewal succeeded after the pause',
    );
    expect(rec.of('flowlock:hold:end')).toEqual([]);
    expect(lease.signal.aborted).toBe(false);
    expect(locks.holds()).toMatchObject([{ name, renewing: true }]);
    await lease.release();
  });
});

describe('what is held and waited for', () => {
  it('holds() and waits() show this client’s holds and waiters without I/O', async () => {
    const one = redis.locks();
    const two = redis.locks();
    const name = uniqueName();
    const lock = one.getLock(name);
    await one.run(async () => {
      await lock.lock();
      await lock.lock(60_000);
      const [hold] = one.holds();
      expect(hold).toMatchObject({ name, key: name, kind: 'lock', holdCount: 2, mode: 'watchdog', renewing: true });
      expect(hold?.leaseRemainingMs).toBeGreaterThan(20_000);
      expect(typeof hold?.fencingToken).toBe('bigint');
      const waiting = two.run(() => two.getLock(name).tryLock(10_000));
      waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
      await until(() => two.waits()[0]?.subscription === 'active', 'the waiter subscribed');
      expect(two.waits()).toMatchObject([{ name, waiters: 1, subscription: 'active' }]);
      await lock.unlock();
      await lock.unlock();
      expect(one.holds()).toEqual([]);
      expect(await waiting).toBe(true);
    });
    expect(two.waits()).toEqual([]);
    expect(two.holds()).toMatchObject([{ name, holdCount: 1 }]);
  });

  it("a plain lock's hold records when it began and where (server time, host, pid, app) at its first renewal; re-entry keeps it", async () => {
    // Until then nothing: an uncontended hold writes Redisson's hash only (here, renewals are 10 s away).
    const slow = redis.locks({ holderInfo: { app: 'billing' } });
    const brief = uniqueName();
    await slow.getLock(brief).withLock(async () => {
      expect(await redis.admin.exists(lockKeys('', brief, onCluster).holdKey)).toBe(0);
    });
    const locks = redis.locks({ holderInfo: { app: 'billing' }, ...QUICK_RENEWAL });
    const name = uniqueName();
    const lock = locks.getLock(name);
    // Kept beside Redisson's hash, in the lock's hold key.
    const holdKey = lockKeys('', name, onCluster).holdKey;
    await locks.run(async () => {
      await lock.lock();
      const hold = locks.holds()[0];
      const [owner, fencingToken] = [hold?.owner ?? '', hold?.fencingToken ?? 0n];
      await recorded(redis.admin, locks, name);
      const info = await redis.admin.hget(holdKey, `${owner}:info`);
      expect(info).toMatch(new RegExp(`^#\\d{16} \\S+ pid ${process.pid} \\(billing\\)$`));
      // When the hold began, not when it was renewed: the server's clock at the grant, which the token (drawn
      // there, in microseconds) is no lower than.
      const sinceUs = BigInt(/^#(\d+)/.exec(info ?? '')?.[1] ?? '0');
      expect(sinceUs).toBeLessThanOrEqual(fencingToken);
      expect(fencingToken - sinceUs).toBeLessThan(100_000n);
      expect(await redis.admin.hget(holdKey, `${owner}:token`)).toBe(fencingToken.toString());
      await sleep(5);
      await lock.lock();
      expect(await redis.admin.hget(holdKey, `${owner}:info`)).toBe(info);
      await lock.unlock();
      await lock.unlock();
    });
    const rw = locks.getReadWriteLock(uniqueName('rw'));
    const rwHoldKey = readWriteLockKeys('', rw.name, onCluster).holdKey;
    await rw.writeLock().withLock(async () => {
      const owner = locks.holds()[0]?.owner ?? '';
      expect(owner).toMatch(/:write$/);
      expect(await redis.admin.hget(rwHoldKey, `${owner}:info`)).toMatch(/^#\d{16} .+\(billing\)$/);
      // A read hold beside the write hold (a downgrade) has its own.
      await rw.readLock().withLock(async () => {
        const fields = Object.keys(await redis.admin.hgetall(rwHoldKey));
        expect(fields.filter((f) => f.endsWith(':info'))).toHaveLength(2);
      });
    });
    expect(await redis.admin.exists(rw.name, rwHoldKey)).toBe(0);
  });

  it('holderInfo: false records nothing, and bad holderInfo is refused before any I/O', async () => {
    const locks = redis.locks({ holderInfo: false });
    const name = uniqueName();
    await locks.getLock(name).withLock(async () => {
      const fields = Object.keys(await redis.admin.hgetall(lockKeys('', name, onCluster).holdKey));
      expect(fields.some((f) => f.endsWith(':info'))).toBe(false);
    });
    expect(() => redis.locks({ holderInfo: { app: '' } })).toThrow(RangeError);
    expect(() => redis.locks({ holderInfo: { app: 'a\nb' } })).toThrow(/options.holderInfo.app/);
    expect(() => redis.locks({ holderInfo: 'x' as never })).toThrow(TypeError);
    expect(() => redis.locks({ holderInfo: { colour: 'red' } as never })).toThrow(/unknown option "colour"/);
  });
});

describe('NODE_DEBUG=flowlock', () => {
  it.skipIf(onCluster)('logs acquisitions, holds and releases to stderr, from the channels', async () => {
    const { host, port } = redis.server;
    const child = spawn(
      process.execPath,
      [join(import.meta.dirname, '..', 'fixtures', 'debug-log.mjs'), String(port), host, uniqueName()],
      { env: { ...process.env, NODE_DEBUG: 'flowlock' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = (await once(child, 'exit')) as [number];
    expect(code, stderr).toBe(0);
    expect(stderr).toMatch(
      /^FLOWLOCK \d+: acquire lock \S+ by \S+: acquired after \d+ms, 1 attempt\(s\), fencing token \d+$/m,
    );
    expect(stderr).toMatch(/^FLOWLOCK \d+: hold lock \S+ by \S+: fencing token \d+, watchdog 30000ms$/m);
    expect(stderr).toMatch(/^FLOWLOCK \d+: release lock \S+ by \S+: remaining 0, woke 0$/m);
    expect(stderr).toMatch(/^FLOWLOCK \d+: hold end lock \S+ by \S+: released after \d+ms$/m);
  });
});
