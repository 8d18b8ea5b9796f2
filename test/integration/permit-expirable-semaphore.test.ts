import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  LockAcquireTimeoutError,
  LockClientClosedError,
  LockLostError,
  PermitNotHeldError,
  type PermitLease,
} from '../../src/index.js';
import { semaphoreKeys } from '../../src/redis/keys.js';
import { LockScripts, MEMO_MS } from '../../src/redis/scripts.js';
import {
  channelSubscribers,
  elapsedSince,
  onCluster,
  shardedChannels,
  serverNow,
  uniqueName,
  until,
  useRedis,
} from '../support/fixture.js';
import { TcpProxy } from '../support/proxy.js';
import { RedissonPermitExpirableSemaphore, RedissonSemaphore } from '../support/redisson.js';

const redis = useRedis();

const keysOf = (name: string) => semaphoreKeys('', name, onCluster);

/** The lease end Redis has for `permitId` (epoch ms), or null when the permit is not out. */
async function leaseEnd(name: string, permitId: string): Promise<number | null> {
  const score = await redis.admin.zscore(keysOf(name).timeoutKey, Buffer.from(permitId, 'hex'));
  return score === null ? null : Number(score);
}

function track<T>(promise: Promise<T>): { done: boolean; value?: T; error?: unknown } {
  const state: { done: boolean; value?: T; error?: unknown } = { done: false };
  promise.then(
    (value) => Object.assign(state, { done: true, value }),
    (error: unknown) => Object.assign(state, { done: true, error }),
  );
  return state;
}

describe('RPermitExpirableSemaphore', () => {
  it("keeps each permit in Redisson's sorted set under a 16-byte id, with its lease end", async () => {
    const locks = redis.locks({ watchdogTimeout: 10_000 });
    const name = uniqueName('pes');
    const ps = locks.getPermitExpirableSemaphore(name);
    expect(await ps.trySetPermits(2)).toBe(true);
    const first = await ps.acquire();
    expect(first.permitId).toMatch(/^[0-9a-f]{32}$/);
    const now = await serverNow(redis.admin);
    const end = await leaseEnd(name, first.permitId);
    expect(end).toBeGreaterThan(now + 9000);
    expect(end).toBeLessThanOrEqual(now + 10_000);
    expect(await redis.admin.zcard(keysOf(name).timeoutKey)).toBe(1);
    const second = await ps.tryAcquire({ leaseTime: 5000 });
    expect(second).toBeDefined();
    expect(await ps.tryAcquire()).toBeUndefined();
    expect(await ps.availablePermits()).toBe(0);
    expect(await redis.admin.get(name)).toBe('0');
    await expect(ps.acquire({ waitTime: 100 })).rejects.toThrow(LockAcquireTimeoutError);
    await first.release();
    await first.release(); // idempotent
    await expect(ps.release(first.permitId)).rejects.toThrow(PermitNotHeldError);
    // Any client may give a permit back by its id.
    await redis
      .locks()
      .getPermitExpirableSemaphore(name)
      .release(second?.permitId ?? '');
    expect(second?.signal.aborted).toBe(false);
    expect(await ps.availablePermits()).toBe(2);
    expect(await redis.admin.zcard(keysOf(name).timeoutKey)).toBe(0);
    const result = await ps.withPermit(async (signal, permit) => {
      expect(signal.aborted).toBe(false);
      expect(await leaseEnd(name, permit.permitId)).not.toBeNull();
      return 'done';
    });
    expect(result).toBe('done');
    expect(await ps.availablePermits()).toBe(2);
  });

  it('answers a resent release from its memo, and a release of a permit not held with -1 every time', async () => {
    const name = uniqueName('pes');
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, releaseMemoPrefix, wakeChannel } = keysOf(name);
    const scripts = new LockScripts(redis.adapter());
    const publish = shardedChannels ? 'SPUBLISH' : 'PUBLISH';
    const held = Buffer.from('00112233445566778899aabbccddeeff', 'hex');
    await redis.admin.set(lockKey, 0);
    await redis.admin.zadd(timeoutKey, (await serverNow(redis.admin)) + 60_000, held);
    const release = (permitId: Buffer, memo: string) =>
      scripts.run(
        'permit-expirable-semaphore/release',
        [lockKey, timeoutKey, queueKey, deadlinesKey, channel, releaseMemoPrefix + memo, wakeChannel],
        [permitId, MEMO_MS, publish],
      );
    expect(await release(held, 'r1')).toBe(1);
    expect(await release(held, 'r1')).toBe(1);
    expect(await redis.admin.get(lockKey)).toBe('1');
    // Not held (released already, by another request): refused, and a resend is refused too, not answered
    // from a memo as if it had released something.
    expect(await release(held, 'r2')).toBe(-1);
    expect(await release(held, 'r2')).toBe(-1);
    expect(await redis.admin.exists(releaseMemoPrefix + 'r2')).toBe(0);
    expect(await redis.admin.get(lockKey)).toBe('1');
  });

  it('renews permits taken without leaseTime while their holder lives', async () => {
    const name = uniqueName('pes');
    // Renewed every 500 ms: 2.3 leases unrenewed would lose it, while a stall has to last about a second to.
    const ps = redis.locks({ watchdogTimeout: 1500 }).getPermitExpirableSemaphore(name);
    await ps.trySetPermits(1);
    const permit = await ps.acquire();
    await sleep(3500);
    expect(permit.signal.aborted).toBe(false);
    expect(await leaseEnd(name, permit.permitId)).toBeGreaterThan(await serverNow(redis.admin));
    expect(await ps.tryAcquire()).toBeUndefined();
    await permit.release();
    expect(await ps.availablePermits()).toBe(1);
  });

  it('reclaims a permit whose fixed lease ran out and wakes its waiters without a release', async () => {
    const name = uniqueName('pes');
    const ps = redis.locks().getPermitExpirableSemaphore(name);
    await ps.trySetPermits(1);
    const permit = await ps.acquire({ leaseTime: 300 });
    const start = performance.now();
    const waiter = track(redis.locks().getPermitExpirableSemaphore(name).acquire({ waitTime: 5000 }));
    await until(() => permit.signal.aborted, 'the 300 ms permit lost');
    expect(permit.signal.reason).toBeInstanceOf(LockLostError);
    await until(() => waiter.done, 'the waiter took the permit');
    expect(waiter.error).toBeUndefined();
    expect(elapsedSince(start)).toBeLessThan(1000);
    const error: unknown = await permit.release().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PermitNotHeldError);
    expect((error as PermitNotHeldError).cause).toBeInstanceOf(LockLostError);
    await (waiter.value as PermitLease).release();
  });

  it.runIf(!onCluster)(
    "gives a dead holder's permit back within about watchdogTimeout, to a waiter elsewhere",
    async () => {
      const name = uniqueName('pes');
      const proxy = await TcpProxy.start(redis.server.port);
      onTestFinished(() => proxy.close());
      // The holder talks to Redis through the proxy; stopping it is a process that froze or died.
      const holder = redis.locks({ watchdogTimeout: 600 }, { port: proxy.port, noRetry: true });
      await holder.getPermitExpirableSemaphore(name).trySetPermits(1);
      const permit = await holder.getPermitExpirableSemaphore(name).acquire();
      const waiter = track(redis.locks().getPermitExpirableSemaphore(name).acquire({ waitTime: 5000 }));
      await sleep(100);
      const start = performance.now();
      proxy.stop();
      await until(() => waiter.done, 'the waiter took the dead holder’s permit');
      expect(waiter.error).toBeUndefined();
      expect(elapsedSince(start)).toBeLessThan(600 + 800);
      await until(() => permit.signal.aborted, 'the cut-off holder noticed its loss');
      await (waiter.value as PermitLease).release();
      proxy.cutAll();
    },
  );

  it.runIf(!onCluster)(
    'gives back a grant that arrives after its own lease could have ended, and asks again',
    async () => {
      const name = uniqueName('pes');
      const proxy = await TcpProxy.start(redis.server.port);
      onTestFinished(() => proxy.close());
      const ps = redis.locks({}, { port: proxy.port }).getPermitExpirableSemaphore(name);
      await ps.trySetPermits(1);
      const before = await serverNow(redis.admin);
      // The grant's reply takes 300 ms to come back: the 100 ms lease may be over when it is read.
      proxy.latency = { toServer: 0, toClient: 300 };
      const pending = ps.acquire({ leaseTime: 100, waitTime: 5000 });
      // Granted in Redis: its reply, written before the reply to this check, has been read by the proxy (and
      // delayed) by the time this check is answered. A fixed sleep could end before, on a loaded machine.
      await until(async () => (await redis.admin.zcard(keysOf(name).timeoutKey)) === 1, 'the grant ran', 5000);
      proxy.latency = { toServer: 0, toClient: 0 };
      const lease = await pending;
      // Not the late grant (given back; its lease ended about `before` + 100) but a fresh one, asked for only
      // once the late reply came in, 300 ms after `before` at the earliest. (Compared with the server's clock
      // before the acquire, not after it: reading the lease end back takes no part in the bound.)
      expect(await leaseEnd(name, lease.permitId)).toBeGreaterThanOrEqual(before + 300);
      expect(await redis.admin.zcard(keysOf(name).timeoutKey)).toBe(1);
      await lease.release().catch(() => undefined);
    },
  );

  it('gives back the permits of its leases on close()', async () => {
    const name = uniqueName('pes');
    const locks = redis.locks();
    const ps = locks.getPermitExpirableSemaphore(name);
    await ps.trySetPermits(2);
    const leases = [await ps.acquire(), await ps.acquire({ leaseTime: 60_000 })];
    expect(await redis.admin.get(name)).toBe('0');
    const blocked = expect(ps.acquire()).rejects.toThrow(LockClientClosedError);
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
      'the waiter subscribed',
    );
    await locks.close();
    await blocked;
    expect(leases.every((lease) => lease.signal.aborted)).toBe(true);
    expect(await redis.admin.get(name)).toBe('2');
    expect(await redis.admin.zcard(keysOf(name).timeoutKey)).toBe(0);
    // The subscriber connection is closed; the server notices a moment later (on a loaded machine, later still).
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 0,
      'the server dropped the closed subscriber connection',
      5000,
    );
  });

  it('reports a permit lost while withPermit ran, with what the function returned', async () => {
    const name = uniqueName('pes');
    const ps = redis.locks().getPermitExpirableSemaphore(name);
    await ps.trySetPermits(1);
    const error: unknown = await ps
      .withPermit(
        async (signal) => {
          await until(() => signal.aborted, 'the 200 ms permit lost');
          return 'finished';
        },
        { leaseTime: 200 },
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).result).toBe('finished');
  });

  describe('with Redisson (played through its protocol)', () => {
    it('shares permits and ids both ways, and each side’s release wakes the other’s waiter', async () => {
      const name = uniqueName('pes');
      const java = new RedissonPermitExpirableSemaphore(redis.admin, name);
      expect(java.timeoutKey).toBe(keysOf(name).timeoutKey);
      const ps = redis.locks().getPermitExpirableSemaphore(name);
      await ps.trySetPermits(2);
      const javaPermit = await java.tryAcquire(-1);
      expect(javaPermit).toMatch(/^[0-9a-f]{32}$/);
      const ours = await ps.acquire();
      expect(await java.tryAcquire(-1)).toBeUndefined();
      expect(await ps.availablePermits()).toBe(0);
      // A Java release wakes our waiter.
      const waiter = track(redis.locks().getPermitExpirableSemaphore(name).acquire());
      await until(
        async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
        'our waiter subscribed',
      );
      expect(await java.tryRelease(javaPermit ?? '')).toBe(true);
      await until(() => waiter.done, 'the Java release woke our waiter');
      expect(waiter.error).toBeUndefined();
      // Java releases our permit by its id, we release Java's by its id.
      expect(await java.tryRelease(ours.permitId)).toBe(true);
      expect(ours.signal.aborted).toBe(false);
      const again = await java.tryAcquire(60_000);
      await ps.release(again ?? '');
      // Our release wakes a Java waiter (the semaphores share RSemaphore's channel and wait loop).
      const javaWaiting = new RedissonSemaphore(redis.admin, name);
      const probe = javaWaiting.acquire(1, 5000);
      await until(
        async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
        'the Java waiter subscribed',
      );
      await (waiter.value as PermitLease).release();
      expect(await probe).toBe(true);
      // A Java permit whose lease ended is reclaimed by our next call.
      await redis.admin.set(name, 1);
      expect(await java.tryAcquire(50)).toBeDefined();
      await sleep(100);
      expect(await ps.availablePermits()).toBe(1);
    });
  });
});

describe('releasing a permit twice (issue 37, item 7): the locks’ rule', () => {
  it("a lease's release() is idempotent; release(permitId) rejects once the permit is gone", async () => {
    const locks = redis.locks();
    const semaphore = locks.getPermitExpirableSemaphore(uniqueName('twice'));
    await semaphore.trySetPermits(2);
    const lease = await semaphore.acquire({ leaseTime: 10_000 });
    await lease.release();
    await lease.release(); // the first outcome again, nothing sent
    await lease[Symbol.asyncDispose]();
    expect(await semaphore.availablePermits()).toBe(2);
    const byId = await semaphore.acquire({ leaseTime: 10_000 });
    await semaphore.release(byId.permitId);
    await expect(semaphore.release(byId.permitId)).rejects.toBeInstanceOf(PermitNotHeldError);
    expect(await semaphore.availablePermits()).toBe(2);
  });
});
