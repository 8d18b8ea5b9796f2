// A wait time bounds waiting for a holder, never the first round trip: a call that may wait never does worse
// than one that may not. Behind a link with 30 ms of latency each way, every reply takes longer than a wait
// time of 1-5 ms; each primitive's wait must still take what is free (outsiders found tryLock(1) refusing
// free locks on a loaded machine, where a reply takes longer than a millisecond now and then).
import diagnostics from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { LockAcquireTimeoutError, type LockClient, type RenewTraceContext } from '../../src/index.js';
import { onCluster, uniqueName, until, useRedis } from '../support/fixture.js';
import { TcpProxy } from '../support/proxy.js';

const redis = useRedis();
let proxy: TcpProxy | undefined;

beforeAll(async () => {
  if (onCluster) return;
  proxy = await TcpProxy.start(redis.server.port);
  proxy.latency = { toServer: 30, toClient: 30 };
});
afterAll(async () => {
  await proxy?.close();
});

/** A lock client behind the slow link, connected (the handshake is not what is timed). */
async function slowLocks(): Promise<LockClient> {
  if (!proxy) throw new Error('no proxy');
  const locks = redis.locks({}, { port: proxy.port });
  await locks.getSemaphore(uniqueName('warm-up')).availablePermits();
  return locks;
}

const WAITS = [1, 2, 5];

describe.skipIf(onCluster)('a short wait on a free lock, replies slower than the wait', () => {
  it('plain, fair, read and write locks: tryLock(w) and withLock({ waitTime: w }) take it', async () => {
    const locks = await slowLocks();
    for (const waitTime of WAITS) {
      const kinds = [
        locks.getLock(uniqueName()),
        locks.getFairLock(uniqueName('fair')),
        locks.getReadWriteLock(uniqueName('rw')).readLock(),
        locks.getReadWriteLock(uniqueName('rw')).writeLock(),
      ];
      for (const lock of kinds) {
        await locks.run(async () => {
          expect(await lock.tryLock(waitTime), `${lock.name} tryLock(${waitTime})`).toBe(true);
          await lock.unlock();
        });
        expect(await lock.withLock(() => 'ran', { waitTime })).toBe('ran');
      }
    }
  });

  it('semaphores and the latch: tryAcquire(w) and await(w) take what is free', async () => {
    const locks = await slowLocks();
    for (const waitTime of WAITS) {
      const semaphore = locks.getSemaphore(uniqueName('sem'));
      await semaphore.trySetPermits(1);
      expect(await semaphore.tryAcquire(1, waitTime)).toBe(true);

      const expirable = locks.getPermitExpirableSemaphore(uniqueName('pes'));
      await expirable.trySetPermits(1);
      const permit = await expirable.tryAcquire({ waitTime, leaseTime: 10_000 });
      expect(permit).toBeDefined();
      await permit?.release();

      const latch = locks.getCountDownLatch(uniqueName('latch'));
      expect(await latch.await(waitTime)).toBe(true); // no count set: open
    }
  });

  it('a multi-lock reached past its wait time still tries each member once', async () => {
    const locks = await slowLocks();
    for (const waitTime of WAITS) {
      const base = uniqueName('multi');
      const multi = locks.getMultiLock([`${base}:a`, `${base}:b`, `${base}:c`]);
      const lease = await multi.acquire({ waitTime });
      await lease.release();
    }
  });

  it('a held lock still times out: the wait bounds waiting for the holder', async () => {
    const locks = await slowLocks();
    const name = uniqueName();
    await locks.getLock(name).acquire({ leaseTime: 10_000 });
    const started = performance.now();
    await expect(locks.getLock(name).acquire({ waitTime: 5 })).rejects.toBeInstanceOf(LockAcquireTimeoutError);
    // One attempt's reply (60 ms of latency), not the lease: at most a few replies on a loaded machine.
    expect(performance.now() - started).toBeLessThan(2000);
  });
});

describe.skipIf(onCluster)('a grant whose reply took most of its lease', () => {
  /** A lock client connected through the in-repo proxy, its acquire script loaded: a held reply is a grant's. */
  async function throughProxy(watchdogTimeout: number): Promise<{ link: TcpProxy; locks: LockClient }> {
    const link = await TcpProxy.start(redis.server.port);
    onTestFinished(() => link.close());
    const locks = redis.locks({ watchdogTimeout }, { port: link.port });
    await locks.getLock(uniqueName('warm-up')).withLock(() => undefined);
    return { link, locks };
  }

  it('is renewed at once, not lost at the deadline the round trip left of it', async () => {
    // A lease of 3 s: renewals every 1 s, and a grant is kept when its reply comes within 2 968 ms (the lease
    // less its drift, 32 ms). One that comes after 2.3 s has about 660 ms left: less than a renewal period,
    // and far enough from both edges for a loaded machine's late timers.
    const WATCHDOG = 3000;
    const { link, locks } = await throughProxy(WATCHDOG);
    const name = uniqueName('slow-grant');
    const reply = link.holdReplyTo(new RegExp(name) /* letters, digits and colons */);
    const started = performance.now();
    const acquiring = locks.getLock(name).acquire();
    await reply.held;
    await sleep(2300);
    reply.letGo();
    const lease = await acquiring;
    // Kept, not given back and asked for again...
    expect(performance.now() - started).toBeLessThan(WATCHDOG - 32);
    // ... and renewed at once: its deadline passes long before this. (Before, the watchdog's first tick came
    // at that deadline, found it past and declared the hold lost, never asking Redis.)
    await sleep(WATCHDOG / 2);
    expect(lease.signal.aborted).toBe(false);
    expect(await redis.admin.exists(name)).toBe(1);
    await lease.release();
  });

  it('is renewed as soon as a renewal round in flight at its grant ends, not at its deadline', async () => {
    // A lease of 6 s: renewal rounds every 2 s, each waited for up to 1 s. Lock A's rounds run on the same
    // connection as B's grant, whose reply is held; A's second round (about 4 s after B was sent) is held
    // too. B's grant is let through when that round starts: B, kept with about 1.9 s of its lease left, is
    // due for renewal at once, while A's round is in flight. The round ends 400 ms later: B must be renewed
    // then. (Before, the watchdog skipped B for that round and came back at B's deadline, where it declared
    // B lost without asking Redis.)
    const WATCHDOG = 6000;
    const { link, locks } = await throughProxy(WATCHDOG);
    const rounds: number[] = [];
    const onRound = (message: unknown): void => {
      if ((message as RenewTraceContext).clientId === locks.clientId) rounds.push(performance.now());
    };
    diagnostics.subscribe('tracing:flowlock:renew:start', onRound);
    onTestFinished(() => {
      diagnostics.unsubscribe('tracing:flowlock:renew:start', onRound);
    });
    const a = await locks.getLock(uniqueName('renewed')).acquire();
    const name = uniqueName('granted-mid-round');
    const reply = link.holdReplyTo(new RegExp(name));
    const started = performance.now();
    const acquiring = locks.getLock(name).acquire();
    await reply.held;
    // A's second round since B was sent has begun, and its reply (behind the grant's) is held.
    await until(() => rounds.filter((at) => at > started).length >= 2, "A's second round", 8000);
    await until(() => reply.heldChunks >= 3, 'the grant and both rounds answered by Redis, and held', 2000);
    reply.letGoFirst();
    const b = await acquiring;
    await sleep(400);
    reply.letGo();
    // Past B's deadline from its grant (sent + 6 s - drift), with time to spare for a late timer: still held.
    await sleep(Math.max(0, started + WATCHDOG + 500 - performance.now()));
    expect(b.signal.aborted).toBe(false);
    expect(a.signal.aborted).toBe(false);
    expect(await redis.admin.exists(name)).toBe(1);
    await b.release();
    await a.release();
  });
});
