import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  createLockClient,
  LockAcquireTimeoutError,
  LockClientClosedError,
  LockLostError,
  type LockClient,
} from '../../src/index.js';
import { LockScripts, releaseReply } from '../../src/redis/scripts.js';
import { fairLockKeys } from '../../src/redis/keys.js';
import { dropClient } from '../support/clients.js';
import {
  busyWait,
  channelSubscribers,
  elapsedSince,
  onCluster,
  scriptCalls,
  serverNow,
  uniqueName,
  until,
  untilQuiet,
  useRedis,
} from '../support/fixture.js';
import { RedissonFairLock } from '../support/redisson.js';

const redis = useRedis();

async function queueOf(name: string): Promise<string[]> {
  return redis.admin.lrange(fairLockKeys('', name, onCluster).queueKey, 0, -1);
}

async function timeoutsOf(name: string): Promise<number> {
  return redis.admin.zcard(fairLockKeys('', name, onCluster).timeoutKey);
}

const evalshaCalls = (): Promise<number> => scriptCalls(redis.admin);

describe('RFairLock', () => {
  it("has RLock's interface: re-entry per flow, hold count, TTL, force unlock, fencing tokens", async () => {
    const locks = redis.locks();
    const name = uniqueName('fair');
    const lock = locks.getFairLock(name);
    await locks.run(async () => {
      expect(await lock.tryLock()).toBe(true);
      expect(await lock.tryLock(100, 5000)).toBe(true);
      expect(await lock.getHoldCount()).toBe(2);
      expect(await lock.isHeldByCurrentFlow()).toBe(true);
      expect(await lock.isLocked()).toBe(true);
      expect(await lock.remainTimeToLive()).toBeGreaterThan(5000);
      await lock.unlock();
      await lock.unlock();
      expect(await lock.isLocked()).toBe(false);
    });
    const first = await lock.acquire();
    expect(await locks.getFairLock(name).forceUnlock()).toBe(true);
    expect(first.signal.aborted).toBe(true);
    const second = await lock.withLock((_signal, lease) => lease.fencingToken);
    expect(second).toBeGreaterThan(first.fencingToken);
    expect(await redis.admin.exists(name)).toBe(0);
  });

  it('grants in arrival order across clients, waking only the head on its own channel', async () => {
    const name = uniqueName('fair');
    const holder = redis.locks().getFairLock(name);
    const lease = await holder.acquire();
    const order: number[] = [];
    const waiters: Promise<void>[] = [];
    const channels: string[] = [];
    const clients: LockClient[] = [];
    for (let i = 0; i < 5; i++) {
      const locks = redis.locks();
      clients.push(locks);
      const waiting = locks.getFairLock(name).withLock(async () => {
        order.push(i);
        await sleep(20);
      });
      // Handled here too, so that a failed assertion below leaves no unhandled rejection behind.
      waiting.catch(() => undefined);
      waiters.push(waiting);
      channels.push(`${fairLockKeys('', name, onCluster).channel}:${locks.clientId}:w0`);
      // Each one queued before the next arrives.
      await until(async () => (await queueOf(name)).length === i + 1, `waiter ${i} queued`);
    }
    // Once subscribed (each waiter then asks once more, as a release may have gone unseen meanwhile),
    // parked waiters behind a held lock send nothing while they wait: no polling, no herd. Under sharded
    // pub/sub a waiter re-checks every 2 s, since a slot migration drops subscriptions silently.
    for (const channel of channels) {
      await until(async () => (await channelSubscribers(redis.admin, channel)) === 1, `${channel} subscribed`);
    }
    // Each client counts its subscription active once it read the reply, and its waiter then asks once more:
    // wait for that, and for those asks to be answered.
    for (const locks of clients) {
      await until(() => locks.waits()[0]?.subscription === 'active', `${locks.clientId} subscribed`);
    }
    await untilQuiet(evalshaCalls, 'script calls');
    const quietFrom = performance.now();
    const before = await evalshaCalls();
    await sleep(300);
    const calls = (await evalshaCalls()) - before;
    // On a cluster: one re-check per waiter per 2 s begun.
    expect(calls).toBeLessThanOrEqual(onCluster ? 5 * Math.ceil(elapsedSince(quietFrom) / 2000) : 0);
    await lease.release();
    await Promise.all(waiters);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(await queueOf(name)).toEqual([]);
    expect(await timeoutsOf(name)).toBe(0);
  });

  it('a newcomer never overtakes a queued waiter, even while the lock is free for a moment', async () => {
    const name = uniqueName('fair');
    const a = redis.locks();
    const b = redis.locks();
    const lease = await a.getFairLock(name).acquire();
    const waiting = b.getFairLock(name).acquire();
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    await lease.release();
    // Between the release and the head's attempt, a newcomer with a single attempt is refused.
    const newcomer = await a.run(() => a.getFairLock(name).tryLock());
    const head = await waiting;
    expect(newcomer).toBe(false);
    await head.release();
  });

  it('a waiter that times out or aborts leaves the queue and its deadline at once', async () => {
    const name = uniqueName('fair');
    const holder = redis.locks();
    const lease = await holder.getFairLock(name).acquire();
    const waiter = redis.locks();
    const lock = waiter.getFairLock(name);
    const started = performance.now();
    expect(await waiter.run(() => lock.tryLock(300))).toBe(false);
    expect(elapsedSince(started)).toBeLessThan(1000);
    // Left at once: an entry left behind would stay until its 30 s deadline.
    await until(
      async () => (await queueOf(name)).length === 0 && (await timeoutsOf(name)) === 0,
      'left the queue',
      5000,
    );

    const controller = new AbortController();
    const aborted = lock.acquire({ signal: controller.signal });
    aborted.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    controller.abort(new Error('stop'));
    await expect(aborted).rejects.toThrow('stop');
    await until(
      async () => (await queueOf(name)).length === 0 && (await timeoutsOf(name)) === 0,
      'left the queue',
      5000,
    );
    await expect(lock.acquire({ waitTime: 100 })).rejects.toBeInstanceOf(LockAcquireTimeoutError);
    await lease.release();
  });

  it('a waiter giving up when its turn came wakes the next one at once', async () => {
    const name = uniqueName('fair');
    const lease = await redis.locks().getFairLock(name).acquire();
    const first = redis.locks();
    const controller = new AbortController();
    const giving = first.getFairLock(name).acquire({ signal: controller.signal });
    giving.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    let acquiredAt = 0;
    const second = redis
      .locks()
      .getFairLock(name)
      .withLock(() => {
        acquiredAt = performance.now();
      });
    second.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 2, 'two waiters queued');
    // The holder's lease ends without a release message (it expires): the head alone is told nothing.
    await redis.admin.del(name);
    controller.abort(new Error('gave up'));
    const abortedAt = performance.now();
    await expect(giving).rejects.toThrow('gave up');
    await second;
    // Told at once by the one giving up: the next would otherwise wait for a re-check, its 30 s lease's
    // third (10 s) at the soonest.
    expect(acquiredAt - abortedAt).toBeLessThan(2000);
    void lease.release().catch(() => undefined);
  });

  it('a crashed waiter stops blocking the queue within about watchdogTimeout, without a retry loop', async () => {
    const name = uniqueName('fair');
    const watchdogTimeout = 900;
    const lease = await redis.locks().getFairLock(name).acquire();
    // The crashed waiter: its client is gone without close(), its entry stays.
    const crashedRedis = redis.client();
    const dead = createLockClient(crashedRedis, { watchdogTimeout });
    void dead
      .getFairLock(name)
      .acquire()
      .catch(() => undefined);
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    dropClient(crashedRedis);
    const live = redis.locks({ watchdogTimeout });
    let acquiredAt = 0;
    const waiting = live.getFairLock(name).withLock(() => {
      acquiredAt = performance.now();
    });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 2, 'two waiters queued');
    const releasedAt = performance.now();
    await lease.release();
    const before = await evalshaCalls();
    await waiting;
    const waited = acquiredAt - releasedAt;
    // The dead head's entry ran out within watchdogTimeout of its last refresh (a second of slack for a
    // loaded machine; a dead entry kept would block the line for good).
    expect(waited).toBeLessThan(watchdogTimeout + 1000);
    // The live waiter asked again about once per third of watchdogTimeout (300 ms) while it waited, not in
    // a loop: the few calls of the release and the grant, and one ask per 300 ms waited.
    expect((await evalshaCalls()) - before).toBeLessThanOrEqual(4 + Math.ceil(waited / 300));
    onTestFinished(() => dead.close());
  });

  it('keeps a live waiter queued however long the holder keeps the lock (Redisson #3004)', async () => {
    const name = uniqueName('fair');
    // Short enough that the hold below outlasts three waiter leases in a few seconds, long enough that a
    // loaded machine's stall does not cost the holder or the waiter their lease.
    const watchdogTimeout = 1500;
    const holder = redis.locks({ watchdogTimeout });
    const lease = await holder.getFairLock(name).acquire();
    const order: string[] = [];
    const a = redis
      .locks({ watchdogTimeout })
      .getFairLock(name)
      .withLock(() => {
        order.push('a');
      });
    a.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    // The holder keeps the lock for more than three waiter leases (the watchdog renews it).
    await sleep(3 * watchdogTimeout);
    const b = redis
      .locks({ watchdogTimeout })
      .getFairLock(name)
      .withLock(() => {
        order.push('b');
      });
    b.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await queueOf(name)).length === 2, 'two waiters queued');
    await lease.release();
    await Promise.all([a, b]);
    expect(order).toEqual(['a', 'b']);
  });

  it('Redisson fair waiters and ours are served in one FIFO order, each release waking the other side', async () => {
    const name = uniqueName('fair');
    const lease = await redis.locks().getFairLock(name).acquire();
    const order: string[] = [];
    const java1 = new RedissonFairLock(redis.admin, name);
    const java2 = new RedissonFairLock(redis.admin, name);
    const javaRun = async (lock: RedissonFairLock, label: string): Promise<void> => {
      // Redisson's tryLock(5 s, 30 s): the wait given is also what its acquisition takes off later deadlines.
      await lock.lock(30_000, 5000);
      order.push(label);
      await sleep(20);
      expect(await lock.unlock()).toBe(1);
    };
    const j1 = javaRun(java1, 'java1');
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    const ours = redis
      .locks()
      .getFairLock(name)
      .withLock(async () => {
        order.push('ours');
        await sleep(20);
      });
    await until(async () => (await queueOf(name)).length === 2, 'two waiters queued');
    const j2 = javaRun(java2, 'java2');
    await until(async () => (await queueOf(name)).length === 3, 'three waiters queued');
    await lease.release();
    await Promise.all([j1, ours, j2]);
    expect(order).toEqual(['java1', 'ours', 'java2']);
    expect(await queueOf(name)).toEqual([]);
  });

  it('answers a resent acquire or release from its memo instead of counting twice', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = fairLockKeys('', uniqueName('fair'), onCluster);
    const acquireKeys = [
      keys.lockKey,
      keys.queueKey,
      keys.timeoutKey,
      keys.holdKey,
      keys.fenceKey,
      keys.legacyFenceKey,
    ];
    const acquire = (id: string): Promise<unknown> =>
      scripts.run('fair-lock/acquire', acquireKeys, [10_000, id, '', 1000, '0', '', 'c:1']);
    await acquire('a1');
    expect(await acquire('a2')).toEqual(await acquire('a2'));
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('2');
    const release = (id: string): Promise<unknown> => scripts.fairRelease(keys, 'one', ['c:1'], { requestId: id });
    expect(await release('r1')).toMatchObject({ remaining: 1 });
    expect(await release('r1')).toMatchObject({ remaining: 1 });
    expect(await release('r2')).toMatchObject({ remaining: 0 });
    // The release that freed the lock, resent, is answered as the success it was.
    expect(await release('r2')).toMatchObject({ remaining: 0 });
    // ... and names the waiter now first in line to wake again (the first reply, which named it, may be what
    // was lost).
    await redis.admin.rpush(keys.queueKey, 'x:w1');
    await redis.admin.zadd(keys.timeoutKey, (await serverNow(redis.admin)) + 60_000, 'x:w1');
    const resent = await scripts.run(
      'fair-lock/release',
      [keys.lockKey, keys.queueKey, keys.timeoutKey, keys.holdKey, keys.releaseMemoPrefix + 'r2'],
      [10_000, 'one', '', 'PUBLISH', 'c:1'],
    );
    expect(resent).toEqual([0, 1, 'x:w1']);
    expect(releaseReply([-1, 0]).remaining).toBe(-1);
    expect(await redis.admin.exists(keys.lockKey)).toBe(0);
  });

  it('close() leaves no hold, no queue entry and no subscription behind', async () => {
    const name = uniqueName('fair');
    const holder = redis.locks();
    await holder.getFairLock(name).acquire();
    const waiter = redis.locks();
    const waiting = waiter.getFairLock(name).acquire();
    const outcome = waiting.catch((error: unknown) => error);
    await until(async () => (await queueOf(name)).length === 1, 'one waiter queued');
    const channel = `${fairLockKeys('', name, onCluster).channel}:${waiter.clientId}:w0`;
    await until(async () => (await channelSubscribers(redis.admin, channel)) === 1, 'the waiter subscribed');
    await waiter.close();
    expect(await outcome).toBeInstanceOf(LockClientClosedError);
    await holder.close();
    expect(await queueOf(name)).toEqual([]);
    expect(await timeoutsOf(name)).toBe(0);
    expect(await redis.admin.exists(name)).toBe(0);
    await until(async () => (await channelSubscribers(redis.admin, channel)) === 0, 'no subscriber left');
  });

  it('withLock whose hold was lost while fn ran rejects with LockLostError carrying the result', async () => {
    const locks = redis.locks();
    const lock = locks.getFairLock(uniqueName('fair'));
    const error = await lock
      .withLock(async () => {
        await lock.forceUnlock();
        return 42;
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).result).toBe(42);
  });

  // The fair lock model, seed 330828998: the watchdog renewed a fair hold's lock key but not its hold key, so
  // the hold's memo ran out after the first lease and the purge of a hold lost at its deadline (which names
  // that memo) missed: Redis kept a hold its client had declared lost.
  it('the watchdog keeps the hold key with the hold: a hold lost after renewals is purged', async () => {
    // Renewed every 500 ms: a stall has to last about a second to lose the hold before the check below.
    const locks = redis.locks({ watchdogTimeout: 1500 });
    const name = uniqueName('fair');
    const { holdKey } = fairLockKeys('', name, onCluster);
    const lease = await locks.getFairLock(name).acquire();
    await sleep(3500);
    expect(lease.signal.aborted).toBe(false);
    expect(await redis.admin.pttl(holdKey)).toBeGreaterThan(0);
    // Redis keeps the hold past its local deadline (a stall inside the drift allowance): only the purge,
    // which names the hold's memo, removes the lock key before its 30 s.
    await redis.admin.pexpire(name, 30_000);
    await redis.admin.pexpire(holdKey, 30_000);
    busyWait(1700);
    await until(() => lease.signal.aborted, 'the hold lost at its deadline', 5000);
    await until(async () => (await redis.admin.exists(name)) === 0, 'the lost hold purged', 5000);
  });
});
