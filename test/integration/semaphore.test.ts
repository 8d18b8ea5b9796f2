import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createLockClient, LockClientClosedError, type AcquireTraceContext } from '../../src/index.js';
import { permitPlace, semaphoreKeys } from '../../src/redis/keys.js';
import { LockScripts, MEMO_MS } from '../../src/redis/scripts.js';
import {
  channelSubscribers,
  commandCalls,
  elapsedSince,
  everyNode,
  onCluster,
  shardedChannels,
  publishRelease,
  scriptCalls,
  uniqueName,
  until,
  serverNow,
  untilQuiet,
  useRedis,
} from '../support/fixture.js';
import { idleTestClient } from '../support/clients.js';
import { OldSemaphoreWaiter } from '../support/old-layout.js';
import { listenerFor, RedissonSemaphore } from '../support/redisson.js';
import { recordDiagnostics } from '../support/diagnostics-recorder.js';
import { recordFigures } from '../support/figures.js';

const redis = useRedis();

/**
 * How long the tests below give a subscription or a woken waiter (ms): new clients connect and subscribe (on
 * a cluster after slot discovery), which a loaded machine can slow to seconds. Where a wake's speed matters,
 * the test bounds it apart.
 */
const SOON = 10_000;

const keysOf = (name: string) => semaphoreKeys('', name, onCluster);

const scriptCallsNow = (): Promise<number> => scriptCalls(redis.admin);

/** Settles `promise` into a record of when (ms after `start`) and how it settled. */
function track<T>(promise: Promise<T>): { done: boolean; value?: T; error?: unknown } {
  const state: { done: boolean; value?: T; error?: unknown } = { done: false };
  promise.then(
    (value) => Object.assign(state, { done: true, value }),
    (error: unknown) => Object.assign(state, { done: true, error }),
  );
  return state;
}

describe('RSemaphore', () => {
  it("counts permits in Redisson's key: trySetPermits, tryAcquire, addPermits, drainPermits, release", async () => {
    const locks = redis.locks();
    const name = uniqueName('sem');
    const sem = locks.getSemaphore(name);
    expect(await sem.availablePermits()).toBe(0);
    expect(await sem.trySetPermits(3)).toBe(true);
    expect(await sem.trySetPermits(5)).toBe(false);
    expect(await redis.admin.get(name)).toBe('3');
    expect(await sem.tryAcquire(2)).toBe(true);
    expect(await sem.tryAcquire(2)).toBe(false);
    expect(await sem.availablePermits()).toBe(1);
    await sem.addPermits(2);
    expect(await sem.availablePermits()).toBe(3);
    await sem.addPermits(-1);
    expect(await sem.availablePermits()).toBe(2);
    expect(await sem.drainPermits()).toBe(2);
    expect(await sem.drainPermits()).toBe(0);
    await sem.release(2);
    expect(await sem.availablePermits()).toBe(2);
    await sem.acquire(2);
    expect(await sem.availablePermits()).toBe(0);
    // No owners: any instance, any client releases.
    await redis.locks().getSemaphore(name).release();
    expect(await redis.admin.get(name)).toBe('1');
    expect(await redis.admin.type(name)).toBe('string');
  });

  it('rejects bad input before any I/O, naming the argument', async () => {
    // A client under test of the topology that has not connected (lazyConnect ioredis, or node-redis whose
    // connect() was never called).
    const idle = idleTestClient(redis.target);
    const locks = createLockClient(idle.client);
    const sem = locks.getSemaphore('pool');
    expect(() => locks.getSemaphore('')).toThrow(RangeError);
    await expect(sem.trySetPermits(0)).rejects.toThrow(RangeError);
    await expect(sem.trySetPermits('3' as unknown as number)).rejects.toThrow(TypeError);
    await expect(sem.addPermits(0)).rejects.toThrow(/permits must be a whole number other than 0/);
    await expect(sem.acquire(1.5)).rejects.toThrow(/permits must be a whole number >= 1/);
    await expect(sem.acquire({ permits: -1 })).rejects.toThrow(/options\.permits/);
    await expect(sem.tryAcquire(1, -5)).rejects.toThrow(/waitTime must be >= 0/);
    await expect(sem.release(0)).rejects.toThrow(RangeError);
    const ps = locks.getPermitExpirableSemaphore('pool');
    await expect(ps.acquire({ leaseTime: 5 })).rejects.toThrow(/leaseTime must be >= 30/);
    await expect(ps.release('not-an-id')).rejects.toThrow(
      /^permitId must be 32 lowercase hex digits, got the string "not-an-id"$/,
    );
    await expect(ps.release(42 as unknown as string)).rejects.toThrow(/^permitId must be a string, got 42$/);
    const latch = locks.getCountDownLatch('boot');
    await expect(latch.trySetCount(0)).rejects.toThrow(/count must be a whole number >= 1/);
    await expect(latch.await(-1)).rejects.toThrow(/waitTime must be >= 0/);
    expect(idle.untouched()).toBe(true);
    await locks.close();
    await idle.close();
  });

  it('waits by pub/sub: no command while parked, woken by the release', async () => {
    const name = uniqueName('sem');
    const sem = redis.locks().getSemaphore(name);
    await sem.trySetPermits(1);
    await sem.acquire();
    const waiting = redis.locks();
    const waiter = track(waiting.getSemaphore(name).acquire());
    await until(async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1, 'subscribed', SOON);
    // The client counts the subscription active once it read the reply, and the waiter then asks once
    // more: wait for that, and for that ask to be answered.
    await until(() => waiting.waits()[0]?.subscription === 'active', 'the subscription active', SOON);
    await untilQuiet(scriptCallsNow, 'script calls');
    const quietFrom = performance.now();
    const before = await scriptCallsNow();
    await sleep(300);
    const calls = (await scriptCallsNow()) - before;
    // Under sharded pub/sub a parked waiter re-checks every 2 s (a slot migration drops subscriptions
    // silently): one ask per 2 s begun there; none on a standalone server.
    expect(calls).toBeLessThanOrEqual(onCluster ? Math.ceil(elapsedSince(quietFrom) / 2000) : 0);
    expect(waiter.done).toBe(false);
    const start = performance.now();
    await sem.release();
    await until(() => waiter.done, 'the waiter is done', SOON);
    // Woken by the release message: a parked waiter re-checks on its own only after 2 s (on a cluster) or
    // its 10 s refresh.
    expect(elapsedSince(start)).toBeLessThan(1000);
    expect(waiter.error).toBeUndefined();
  });

  it('wakes exactly the queued waiters the released permits serve, in arrival order, and no one else', async () => {
    const name = uniqueName('sem');
    const locks = redis.locks();
    // Both scripts loaded on the node first, so that no NOSCRIPT retry counts below.
    await locks.getSemaphore(name).release();
    expect(await locks.getSemaphore(name).tryAcquire()).toBe(true);
    const order: number[] = [];
    // Each acquisition's trace context counts its attempts and its wake-ups, live.
    const rec = recordDiagnostics();
    onTestFinished(() => rec.dispose());
    const waiters = Array.from({ length: 5 }, (_, i) => {
      const waiting = locks
        .getSemaphore(name)
        .acquire()
        .then(() => order.push(i));
      waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
      return waiting;
    });
    await until(async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1, 'subscribed', SOON);
    // The client counts the subscription active once it read the reply, and its waiters then ask once more:
    // wait for that, and for those asks to be answered.
    await until(() => locks.waits()[0]?.subscription === 'active', 'the subscription active', SOON);
    await untilQuiet(scriptCallsNow, 'script calls');
    const contexts = rec.of('tracing:flowlock:acquire:start') as unknown as AcquireTraceContext[];
    expect(contexts).toHaveLength(5);
    const counted = (c: AcquireTraceContext) => ({ attempts: c.attempts, ...c.wakeups });
    const countsBefore = new Map(contexts.map((c) => [c, counted(c)]));
    const since = (c: AcquireTraceContext) => {
      const now = counted(c);
      const then = countsBefore.get(c) ?? now;
      return {
        attempts: now.attempts - then.attempts,
        message: now.message - then.message,
        timeout: now.timeout - then.timeout,
      };
    };
    const before = await scriptCallsNow();
    await redis.locks().getSemaphore(name).release(3);
    await until(() => order.length === 3, 'three waiters served', SOON);
    await sleep(100);
    expect(order).toEqual([0, 1, 2]);
    const served = contexts.filter((c) => c.outcome === 'acquired').map(since);
    const parked = contexts.filter((c) => c.outcome === undefined).map(since);
    if ([...served, ...parked].some((c) => c.timeout > 0)) {
      // A re-check on a waiter's own timer (every 2 s on a cluster, at its 10 s refresh anywhere) fell in the
      // window: it may take a permit ahead of the message and pass its unused wake on, so this window does
      // not tell who the release woke. Rare on a standalone server; on a cluster most windows miss it.
      recordFigures('semaphore wake: a re-check fell in the window', { served: served.length });
    } else {
      // Each served waiter was woken by the release and asked once; nobody else was woken or asked.
      expect(served).toEqual(Array.from({ length: 3 }, () => ({ attempts: 1, message: 1, timeout: 0 })));
      expect(parked).toEqual(Array.from({ length: 2 }, () => ({ attempts: 0, message: 0, timeout: 0 })));
      // The release and the three woken waiters' attempts: no other script ran.
      expect((await scriptCallsNow()) - before).toBe(4);
    }
    await redis.locks().getSemaphore(name).release(2);
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4]);
  });

  it('lets no smaller need overtake a waiter for several permits', async () => {
    const name = uniqueName('sem');
    const locks = redis.locks();
    const big = track(locks.getSemaphore(name).acquire(3));
    await until(async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1, 'subscribed', SOON);
    const small = track(locks.getSemaphore(name).acquire(1));
    await sleep(50);
    const other = redis.locks().getSemaphore(name);
    await other.release(2);
    await sleep(200);
    expect(big.done).toBe(false);
    expect(small.done).toBe(false);
    await other.release(1);
    await until(() => big.done, 'the big waiter is done', SOON);
    await sleep(100);
    expect(small.done).toBe(false);
    await other.release(1);
    await until(() => small.done, 'the small waiter is done', SOON);
    expect(await other.availablePermits()).toBe(0);
  });

  it('does not let smaller needs of other processes starve a waiter for several permits', async () => {
    const name = uniqueName('sem');
    const setup = redis.locks().getSemaphore(name);
    await setup.trySetPermits(3);
    // Three clients take and give back one permit each, as fast as they can: there is rarely more than one
    // permit free at a time, and never three, unless the big waiter's claim holds the newcomers back.
    let stop = false;
    let cycles = 0;
    const churners = Array.from({ length: 3 }, async () => {
      const sem = redis.locks().getSemaphore(name);
      while (!stop) {
        if (await sem.tryAcquire(1, 1000)) {
          cycles++;
          await sleep(2);
          await sem.release();
        }
      }
    });
    await until(() => cycles > 30, 'more than 30 cycles', SOON);
    const start = performance.now();
    const granted = await redis.locks().getSemaphore(name).tryAcquire(3, 5000);
    const waited = elapsedSince(start);
    stop = true;
    await Promise.all(churners);
    expect(granted).toBe(true);
    // Served before its 5 s wait ran out (starved, it would time out), with room for a loaded machine.
    expect(waited).toBeLessThan(4500);
    // A churner that gave up leaves the queue a moment later (after its last call is answered).
    await until(async () => (await redis.admin.exists(keysOf(name).queueKey)) === 0, 'the queue key is gone', 5000);
    await setup.release(3);
    expect(await setup.availablePermits()).toBe(3);
  });

  it('leaves the queue when it stops waiting, and serves the waiters it held back', async () => {
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const sem = redis.locks().getSemaphore(name);
    await sem.trySetPermits(1);
    expect(await redis.locks().getSemaphore(name).tryAcquire(2, 300)).toBe(false);
    await until(
      async () => (await redis.admin.exists(queueKey, deadlinesKey)) === 0,
      'the queue and its deadlines are gone',
      SOON,
    );
    expect(await sem.tryAcquire(1)).toBe(true);
    await sem.release();
    // A waiter for 2 is queued first: a newcomer of another process for 1 queues behind it (the free permit
    // is kept for the first); the first aborts: the newcomer is handed the permit at once.
    const controller = new AbortController();
    const first = track(redis.locks().getSemaphore(name).acquire({ permits: 2, signal: controller.signal }));
    await until(async () => (await redis.admin.llen(queueKey)) === 1, 'one waiter queued', SOON);
    const heldBack = track(redis.locks().getSemaphore(name).tryAcquire(1, 5000));
    await until(async () => (await redis.admin.llen(queueKey)) === 2, 'two waiters queued', SOON);
    await sleep(200);
    expect(heldBack.done).toBe(false);
    const start = performance.now();
    controller.abort(new Error('enough'));
    await until(() => heldBack.done, 'the held-back waiter is done', SOON);
    expect(heldBack.value).toBe(true);
    expect(elapsedSince(start)).toBeLessThan(1000);
    expect((first.error as Error).message).toBe('enough');
    expect(await redis.admin.exists(queueKey, deadlinesKey)).toBe(0);
  });

  it("expires the queue's keys 30 s after the latest deadline: waiters that die queued leave nothing behind", async () => {
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const holder = redis.locks().getSemaphore(name);
    await holder.trySetPermits(1);
    expect(await holder.tryAcquire(1)).toBe(true);
    // Two waiters whose entries live 30 s and 60 s past their attempts (their clients' watchdogTimeout).
    const short = track(redis.locks().getSemaphore(name).acquire());
    await until(async () => (await redis.admin.zcard(deadlinesKey)) === 1, 'the first waiter queued', SOON);
    const long = redis.locks({ watchdogTimeout: 60_000 });
    const late = track(long.getSemaphore(name).acquire());
    await until(async () => (await redis.admin.zcard(deadlinesKey)) === 2, 'the second waiter queued', SOON);
    const [, latest] = await redis.admin.zrange(deadlinesKey, -1, -1, 'WITHSCORES');
    const untilLatest = Number(latest) - (await serverNow(redis.admin));
    for (const key of [queueKey, deadlinesKey]) {
      const ttl = await redis.admin.pttl(key);
      // Not before the latest deadline (the 60 s waiter's) and the 30 s in which a script still announces
      // what dead waiters kept, nor after.
      expect(ttl).toBeGreaterThan(untilLatest + 30_000 - 1000);
      expect(ttl).toBeLessThanOrEqual(60_000 + 30_000);
    }
    await holder.release();
    await until(() => short.done, 'the first waiter is granted', SOON);
    await redis.locks().getSemaphore(name).release();
    await until(() => late.done, 'the second waiter is granted', SOON);
    expect(await redis.admin.exists(queueKey, deadlinesKey)).toBe(0);
  });

  it('leaves no deadline behind for a waiter granted after the queue list was deleted', async () => {
    // Found by the model test (test/model/semaphore.ts): a grant took the entry's deadline out only with its
    // list entry, so a DEL of the list left the deadline in Redis, with nothing to reap it once nobody calls.
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const holder = redis.locks().getSemaphore(name);
    await holder.trySetPermits(1);
    expect(await holder.tryAcquire(1)).toBe(true);
    const waiter = track(redis.locks().getSemaphore(name).acquire());
    await until(async () => (await redis.admin.zcard(deadlinesKey)) === 1, 'the waiter queued', SOON);
    await redis.admin.del(queueKey);
    await holder.release();
    await until(() => waiter.done, 'the waiter is granted', SOON);
    expect(waiter.error).toBeUndefined();
    expect(await redis.admin.exists(queueKey, deadlinesKey)).toBe(0);
  });

  it('drops a queue entry whose deadline was lost (an eviction), whether an attempt or a release finds it', async () => {
    // The queue's scripts read every deadline at once (queueNow in lua/includes/permit-queue.lua): an entry
    // missing from the deadlines is dead, and must neither hold back the waiters behind it nor stay.
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const semaphore = redis.locks().getSemaphore(name);
    await semaphore.trySetPermits(1);
    // An attempt: a lost entry first in line does not count as a waiter ahead.
    await redis.admin.lpush(queueKey, '1|lost-client|1');
    expect(await semaphore.tryAcquire(1)).toBe(true);
    expect(await redis.admin.exists(queueKey)).toBe(0);
    // A release: a live waiter queued behind a lost entry is woken and served at once.
    const waiter = track(redis.locks().getSemaphore(name).acquire());
    await until(async () => (await redis.admin.zcard(deadlinesKey)) === 1, 'the waiter queued', SOON);
    await redis.admin.lpush(queueKey, '1|lost-client|2');
    const start = performance.now();
    await semaphore.release();
    await until(() => waiter.done, 'the waiter is granted', SOON);
    expect(waiter.error).toBeUndefined();
    expect(elapsedSince(start)).toBeLessThan(SOON / 2);
    expect(await redis.admin.exists(queueKey, deadlinesKey)).toBe(0);
  });

  it('lets a waiter behind a dead waiter’s entry in as soon as that entry’s deadline passes', async () => {
    const name = uniqueName('sem');
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, wakeChannel } = keysOf(name);
    const scripts = new LockScripts(redis.adapter());
    await redis.admin.set(lockKey, 0);
    // A waiter of a process that died: queued, its entry refreshed last time with 600 ms to live.
    await scripts.runAnnouncing(
      'semaphore/acquire',
      [lockKey, timeoutKey, queueKey, deadlinesKey, channel, `${acquireMemoPrefix}dead`, wakeChannel],
      [1, MEMO_MS, '1|dead-client|1', 600, 'retired'],
    );
    const start = performance.now();
    const waiter = track(redis.locks({ watchdogTimeout: 30_000 }).getSemaphore(name).tryAcquire(1, 5000));
    await until(async () => (await redis.admin.llen(queueKey)) === 2, 'two waiters queued', SOON);
    // The release keeps its permit for the dead waiter first in line (it is woken, and never comes).
    await redis.locks().getSemaphore(name).release();
    await until(() => waiter.done, 'the waiter is done', 4000);
    // Woken at the dead entry's deadline, not at its own refresh (10 s) or its wait's end.
    expect(waiter.value).toBe(true);
    expect(elapsedSince(start)).toBeLessThan(1500);
    expect(await redis.admin.exists(queueKey, deadlinesKey)).toBe(0);
  });

  it('gives a plain waiter the permit of an expirable lease that ended, without anyone releasing it', async () => {
    const name = uniqueName('sem');
    const { timeoutKey } = keysOf(name);
    await redis.admin.set(name, 0);
    // An expirable permit is out (a holder that froze or died), its lease ending 300 ms from now (timed from
    // before the clock is read, so that the round trips that set it up do not shorten the bound below).
    const start = performance.now();
    await redis.admin.zadd(timeoutKey, (await serverNow(redis.admin)) + 300, Buffer.alloc(16, 7));
    expect(await redis.locks({ watchdogTimeout: 30_000 }).getSemaphore(name).tryAcquire(1, 3000)).toBe(true);
    // Woken when the lease ended (the attempt's reply says when), not at its 10 s refresh.
    expect(elapsedSince(start)).toBeGreaterThanOrEqual(250);
    expect(elapsedSince(start)).toBeLessThan(1500);
    expect(await redis.admin.zcard(timeoutKey)).toBe(0);
  });

  it('announces on Redisson’s channel what a dead queued waiter kept, once its deadline has passed', async () => {
    const name = uniqueName('sem');
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, wakeChannel } = keysOf(name);
    const scripts = new LockScripts(redis.adapter());
    await redis.admin.set(lockKey, 0);
    await scripts.runAnnouncing(
      'semaphore/acquire',
      [lockKey, timeoutKey, queueKey, deadlinesKey, channel, `${acquireMemoPrefix}dead`, wakeChannel],
      [1, MEMO_MS, '1|dead-client|1', 500, 'shared'],
    );
    // A Java waiter listens on Redisson's channel.
    const java = listenerFor(redis.admin, channel);
    const heard: string[] = [];
    java.on(shardedChannels ? 'smessage' : 'message', (_channel: string, message: string) => heard.push(message));
    await (shardedChannels ? java.ssubscribe(channel) : java.subscribe(channel));
    const sem = redis.locks().getSemaphore(name);
    await sem.release(); // kept for the dead waiter first in line: Java hears nothing
    await sleep(100);
    expect(heard).toEqual([]);
    await sleep(500);
    // The next script that looks drops the dead entry and announces the permit it kept.
    expect(await sem.availablePermits()).toBe(1);
    await until(() => heard.length === 1, 'one message heard', SOON);
    expect(heard).toEqual(['1']);
  });

  it('wakes a waiter for several permits on a Redisson message that carries only the permits added', async () => {
    const name = uniqueName('sem');
    const sem = redis.locks().getSemaphore(name);
    await sem.trySetPermits(1);
    const waiter = track(redis.locks().getSemaphore(name).tryAcquire(2, 5000));
    await until(async () => (await redis.admin.llen(keysOf(name).queueKey)) === 1, 'one waiter queued', SOON);
    await sleep(50);
    // Redisson's expirable addPermits(1): INCRBY, and the delta (not the total) as the message.
    await redis.admin.incr(name);
    const start = performance.now();
    await publishRelease(redis.admin, keysOf(name).channel, '1');
    await until(() => waiter.done, 'the waiter is done', 2000);
    expect(waiter.value).toBe(true);
    expect(elapsedSince(start)).toBeLessThan(1000);
  });

  it('answers a resent grant or release from its memo, and undoes a grant exactly once', async () => {
    const name = uniqueName('sem');
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, releaseMemoPrefix, wakeChannel } =
      keysOf(name);
    const scripts = new LockScripts(redis.adapter());
    const publish = shardedChannels ? 'SPUBLISH' : 'PUBLISH';
    await redis.admin.set(lockKey, 5);
    const acquire = () =>
      scripts.run(
        'semaphore/acquire',
        [lockKey, timeoutKey, queueKey, deadlinesKey, channel, `${acquireMemoPrefix}r1`, wakeChannel],
        [2, MEMO_MS, '', 1000, 'retired', publish],
      );
    expect(await acquire()).toEqual([1, 3]);
    expect(await acquire()).toEqual([1, 3]);
    expect(await redis.admin.get(lockKey)).toBe('3');
    const release = (memo: string, mode: string) =>
      scripts.run(
        'semaphore/release',
        [lockKey, queueKey, deadlinesKey, channel, memo, wakeChannel],
        [1, MEMO_MS, mode, publish],
      );
    const available = async (memo: string, mode: string) => ((await release(memo, mode)) as number[])[0];
    expect(await available(`${releaseMemoPrefix}r2`, 'release')).toBe(4);
    expect(await available(`${releaseMemoPrefix}r2`, 'release')).toBe(4);
    expect(await available(`${acquireMemoPrefix}r1`, 'undo')).toBe(6);
    expect(await release(`${acquireMemoPrefix}r1`, 'undo')).toEqual([-1]);
    expect(await redis.admin.get(lockKey)).toBe('6');
    // A resend of a grant that took the last permits is refused no permits and queues nothing: the memo,
    // written by the grant itself, answers it also where a fresh request would wait.
    const takeAll = (entry: string) =>
      scripts.run(
        'semaphore/acquire',
        [lockKey, timeoutKey, queueKey, deadlinesKey, channel, `${acquireMemoPrefix}r3`, wakeChannel],
        [6, MEMO_MS, entry, 1000, 'shared', publish],
      );
    expect(await takeAll('6|resent|1')).toEqual([1, 0]);
    expect(await takeAll('6|resent|1')).toEqual([1, 0]);
    expect(await redis.admin.get(lockKey)).toBe('0');
    expect(await redis.admin.llen(queueKey)).toBe(0);
    expect(await redis.admin.zcard(deadlinesKey)).toBe(0);
  });

  it('wakes a queued waiter once: releases while it is on its way do not wake it again', async () => {
    const name = uniqueName('sem');
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, wakeChannel } = keysOf(name);
    const scripts = new LockScripts(redis.adapter());
    const publish = shardedChannels ? 'SPUBLISH' : 'PUBLISH';
    const sem = redis.locks().getSemaphore(name);
    await sem.release(); // both scripts loaded, the semaphore at one permit
    expect(await sem.tryAcquire()).toBe(true);
    // A waiter's entry, queued as its client's attempt queues it; no client acts on its wake here, so that
    // nothing takes the permits between the releases below.
    const entry = '1|on-its-way|1';
    expect(
      await scripts.run(
        'semaphore/acquire',
        [lockKey, timeoutKey, queueKey, deadlinesKey, channel, `${acquireMemoPrefix}w1`, wakeChannel],
        [1, MEMO_MS, entry, 10_000, 'retired', publish],
      ),
    ).toEqual([0, 0, -1]);
    const published = async () => {
      const calls = await commandCalls(redis.admin);
      return (calls['publish'] ?? 0) + (calls['spublish'] ?? 0);
    };
    const before = await published();
    await sem.release(); // wakes the entry, and keeps the permit for it
    expect((await published()) - before).toBe(1);
    await sem.release(); // the entry was woken: only what is left for others is announced (Redisson's channel)
    expect((await published()) - before).toBe(2);
    expect(await redis.admin.lrange(queueKey, 0, -1)).toEqual([expect.stringMatching(/^1\|on-its-way\|1@\d+$/)]);
    expect(await redis.admin.get(lockKey)).toBe('2');
  });

  it('re-checks after the subscriber reconnects: a release sent meanwhile is not missed (Redisson #5762)', async () => {
    const name = uniqueName('sem');
    const locks = redis.locks();
    const waiter = track(locks.getSemaphore(name).acquire());
    await until(async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1, 'subscribed', SOON);
    await sleep(50);
    for (const node of everyNode(redis.admin)) await node.client('KILL', 'TYPE', 'pubsub').catch(() => 0);
    // Given back without a message anyone hears: the key changes, nobody is subscribed.
    await redis.admin.incr(name);
    const start = performance.now();
    await until(() => waiter.done, 'the waiter is done', 5000);
    expect(waiter.error).toBeUndefined();
    expect(elapsedSince(start)).toBeLessThan(3000);
  });

  it('times out, aborts and closes without taking anything or leaving a subscription', async () => {
    const name = uniqueName('sem');
    const locks = redis.locks();
    const sem = locks.getSemaphore(name);
    const start = performance.now();
    expect(await sem.tryAcquire(1, 200)).toBe(false);
    expect(elapsedSince(start)).toBeGreaterThanOrEqual(190);
    const controller = new AbortController();
    const aborted = sem.acquire({ signal: controller.signal });
    setTimeout(() => controller.abort(new Error('stop')), 50);
    await expect(aborted).rejects.toThrow('stop');
    const closed = expect(sem.acquire(2)).rejects.toThrow(LockClientClosedError);
    await sleep(50);
    await locks.close();
    await closed;
    await expect(sem.release()).rejects.toThrow(LockClientClosedError);
    // The subscriber connection is closed; the server notices a moment later.
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 0,
      'no subscriber left',
      SOON,
    );
    const { queueKey, deadlinesKey } = keysOf(name);
    await until(
      async () => (await redis.admin.exists(queueKey, deadlinesKey)) === 0,
      'the queue and its deadlines are gone',
      SOON,
    );
    expect(Number((await redis.admin.get(name)) ?? 0)).toBe(0);
  });

  describe('with Redisson (played through its protocol)', () => {
    it('shares the permits, and each side’s release wakes the other’s waiter', async () => {
      const name = uniqueName('sem');
      const java = new RedissonSemaphore(redis.admin, name);
      expect(java.channel).toBe(keysOf(name).channel);
      const sem = redis.locks().getSemaphore(name);
      expect(await sem.trySetPermits(2)).toBe(true);
      expect(await java.tryAcquire(1)).toBe(true);
      expect(await sem.tryAcquire(1)).toBe(true);
      expect(await java.tryAcquire(1)).toBe(false);
      expect(await sem.availablePermits()).toBe(0);
      // Ours waits; the Java release wakes it.
      const ours = track(redis.locks().getSemaphore(name).acquire());
      await until(
        async () => (await channelSubscribers(redis.admin, java.channel)) === 1,
        'subscribed to the Java channel',
        SOON,
      );
      await java.release(1);
      await until(() => ours.done, 'our waiter is done', SOON);
      expect(ours.error).toBeUndefined();
      // Java waits (on its own subscriber); our release wakes it.
      const javaSide = new RedissonSemaphore(redis.admin, name);
      const javaWaiting = javaSide.acquire(1, 5000);
      await until(
        async () => (await channelSubscribers(redis.admin, java.channel)) === 1,
        'subscribed to the Java channel',
        SOON,
      );
      const start = performance.now();
      await sem.release();
      expect(await javaWaiting).toBe(true);
      expect(elapsedSince(start)).toBeLessThan(1000);
      listenerFor(redis.admin, java.channel);
      expect(await sem.availablePermits()).toBe(0);
    });
  });
});

describe("the permit queue's two forms of a place (previousLayout)", () => {
  /** The waiters queued, in order, as [entry, deadline-form]: 'place' ("<entry>@<deadline>") or 'set'. */
  const placesOf = async (name: string): Promise<[string, 'place' | 'set'][]> =>
    (await redis.admin.lrange(keysOf(name).queueKey, 0, -1)).map((place) => {
      const { entry, deadline } = permitPlace(place);
      return [entry, deadline === undefined ? 'set' : 'place'];
    });

  it("keeps a 'retired' client's deadline in its place and a 'shared' one's in the sorted set; serves both in order", async () => {
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const holder = redis.locks().getSemaphore(name);
    await holder.trySetPermits(1);
    expect(await holder.tryAcquire()).toBe(true);
    const shared = redis.locks({ previousLayout: 'shared' });
    const retired = redis.locks({ previousLayout: 'retired' });
    const order: string[] = [];
    const wait = (label: string, client: typeof shared) => {
      const sem = client.getSemaphore(name);
      return track(
        sem
          .acquire()
          .then(() => order.push(label))
          .then(() => sem.release()),
      );
    };
    const first = wait('shared 1', shared);
    await until(async () => (await redis.admin.llen(queueKey)) === 1, 'one waiter queued', SOON);
    const second = wait('retired', retired);
    await until(async () => (await redis.admin.llen(queueKey)) === 2, 'two waiters queued', SOON);
    const third = wait('shared 2', shared);
    await until(async () => (await redis.admin.llen(queueKey)) === 3, 'three waiters queued', SOON);
    const places = await placesOf(name);
    expect(places.map(([, form]) => form)).toEqual(['set', 'place', 'set']);
    expect(await redis.admin.zcard(deadlinesKey)).toBe(2);
    // The list outlives the latest deadline (30 s, the clients' watchdogTimeout) by the 30 s grace.
    expect(await redis.admin.pttl(queueKey)).toBeGreaterThan(55_000);
    await holder.release();
    await until(() => first.done && second.done && third.done, 'every waiter served', SOON);
    expect([first.error, second.error, third.error]).toEqual([undefined, undefined, undefined]);
    expect(order).toEqual(['shared 1', 'retired', 'shared 2']);
    expect(await redis.admin.exists(queueKey, deadlinesKey)).toBe(0);
  });

  it("refreshes a 'retired' waiter's place where it stands, and takes it out when the waiter gives up", async () => {
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const holder = redis.locks().getSemaphore(name);
    await holder.trySetPermits(1);
    expect(await holder.tryAcquire()).toBe(true);
    // Its entry lives 600 ms past each attempt, which it repeats every 200 ms (a third of watchdogTimeout).
    const retired = redis.locks({ previousLayout: 'retired', watchdogTimeout: 600 });
    const controller = new AbortController();
    const waiter = track(retired.getSemaphore(name).acquire({ signal: controller.signal }));
    await until(async () => (await redis.admin.llen(queueKey)) === 1, 'the waiter queued', SOON);
    const behind = track(redis.locks().getSemaphore(name).tryAcquire(1, 10_000));
    await until(async () => (await redis.admin.llen(queueKey)) === 2, 'a second waiter queued', SOON);
    const [before] = await redis.admin.lrange(queueKey, 0, 0);
    await sleep(1000);
    // Still first, with a later deadline: refreshed in place (LSET), not queued again at the back.
    const [after] = await redis.admin.lrange(queueKey, 0, 0);
    expect(after?.split('@')[0]).toBe(before?.split('@')[0]);
    expect(Number(after?.split('@')[1])).toBeGreaterThan(Number(before?.split('@')[1]));
    expect(await redis.admin.zcard(deadlinesKey)).toBe(1);
    controller.abort(new Error('enough'));
    await until(async () => (await redis.admin.llen(queueKey)) === 1, 'the first waiter left', SOON);
    await holder.release();
    await until(() => behind.done, 'the waiter behind is served', SOON);
    expect(behind.value).toBe(true);
    expect((waiter.error as Error).message).toBe('enough');
    await redis.locks().getSemaphore(name).release();
  });

  it('shares the queue with a waiter of the version before: in order, whichever form, as long as clients share', async () => {
    const name = uniqueName('sem');
    const { queueKey, deadlinesKey } = keysOf(name);
    const holder = redis.locks().getSemaphore(name);
    await holder.trySetPermits(1);
    expect(await holder.tryAcquire()).toBe(true);
    // A waiter of the earlier version queues first; one of this version ('retired' or 'shared') behind it.
    const old = new OldSemaphoreWaiter(redis.admin, name);
    expect(await old.attempt()).toBeUndefined();
    const retired = track(redis.locks({ previousLayout: 'retired' }).getSemaphore(name).tryAcquire(1, 10_000));
    await until(async () => (await redis.admin.llen(queueKey)) === 2, 'two waiters queued', SOON);
    // The release keeps its permit for the old waiter first in line (its deadline read from the sorted set).
    await holder.release();
    await sleep(300);
    expect(retired.done).toBe(false);
    expect(await old.attempt()).toBe(0);
    await redis.locks().getSemaphore(name).release();
    await until(() => retired.done, 'the waiter behind is served', SOON);
    expect(retired.value).toBe(true);
    // A 'shared' waiter queues first: the earlier version sees it, its deadline where it looks, and waits behind.
    const sharedLocks = redis.locks({ previousLayout: 'shared' });
    const shared = track(sharedLocks.getSemaphore(name).tryAcquire(1, 10_000));
    await until(async () => (await redis.admin.llen(queueKey)) === 1, 'the waiter queued', SOON);
    // Parked: once its channel is subscribed it tries again (a release may have gone unseen meanwhile), and a
    // permit that appeared before that attempt would be taken. A call on its connection is answered after it.
    await until(() => sharedLocks.waits().some((w) => w.subscription === 'active'), 'the waiter subscribed', SOON);
    await sharedLocks.getSemaphore(name).availablePermits();
    await redis.admin.incr(keysOf(name).lockKey); // a permit appears without anyone announcing it
    expect(await old.attempt()).toBeUndefined();
    expect((await placesOf(name)).map(([, form]) => form)).toEqual(['set', 'set']);
    await publishRelease(redis.admin, keysOf(name).channel, '1');
    await until(() => shared.done, 'the shared waiter is served', SOON);
    expect(shared.value).toBe(true);
    // What the earlier version does with a 'retired' place (why 'retired' waits for the end of the rollout):
    // finding no deadline in the sorted set, it drops the place as lost. The waiter queues again, at the back.
    const late = track(redis.locks({ previousLayout: 'retired' }).getSemaphore(name).tryAcquire(1, 10_000));
    await until(async () => (await placesOf(name)).some(([, form]) => form === 'place'), 'queued in place', SOON);
    const lateEntry = (await placesOf(name)).find(([, form]) => form === 'place')?.[0];
    await old.attempt();
    // The late waiter may already have tried again (its place refresh), and then it stands behind the old one.
    const after = (await placesOf(name)).map(([entry]) => entry);
    expect([[old.entry], [old.entry, lateEntry]]).toContainEqual(after);
    await redis.admin.del(queueKey, deadlinesKey);
    await redis.locks().getSemaphore(name).release(2);
    await until(() => late.done, 'the late waiter is done', SOON);
    expect(late.value).toBe(true);
  });
});
