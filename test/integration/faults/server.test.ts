// T8 (cancellation storm), T13 (eviction), T15 (restart without persistence), T19 (hostile names).
// The lock clients run on the client under test (`REDIS_CLIENT`); `admin` and the noise writer are ioredis 5.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { createLockClient, type LockClient, type LockLostEvent } from '../../../src/index.js';
import { redissonPrefixName } from '../../../src/redis/keys.js';
import { leftovers } from '../../support/checkers.js';
import { idleTestClient, newTestClient, type TestClient } from '../../support/clients.js';
import { newRedis, uniqueName, type Redis, until } from '../../support/fixture.js';
import { recordFigures, soak } from '../../support/figures.js';
import { startRedisServer, type LocalRedis } from '../../support/redis-server.js';

const cleanup: (() => unknown)[] = [];
/** LockLostError's reason when a renewal found the lock gone: what tells a renewal's finding from the deadline. */
const RENEWAL_REJECTED = 'the watchdog found it held by another owner or gone';
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
});

async function server(args: string[] = []): Promise<{ server: LocalRedis; admin: Redis }> {
  const started = await startRedisServer(args);
  const admin = newRedis(started);
  admin.on('error', () => undefined);
  cleanup.push(async () => {
    admin.disconnect();
    await started.stop();
  });
  return { server: started, admin };
}

/** An ioredis client that is disconnected after the test (errors while the server restarts are expected). */
function redisOn(on: LocalRedis): Redis {
  const redis = newRedis(on, { retryStrategy: () => 50 });
  redis.on('error', () => undefined);
  cleanup.push(() => {
    redis.disconnect();
  });
  return redis;
}

/** A client under test (reconnecting every 50 ms), closed after the test. */
function testClientOn(on: LocalRedis): TestClient {
  const redis = newTestClient({ topology: 'standalone', host: on.host, port: on.port }, { reconnectMs: 50 });
  cleanup.push(() => redis.close());
  return redis;
}

function client(on: LocalRedis, options: { watchdogTimeout?: number; keyPrefix?: string } = {}): LockClient {
  const locks = createLockClient(testClientOn(on).client, { watchdogTimeout: 1000, ...options });
  cleanup.push(() => locks.close());
  return locks;
}

function libraryTimers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

describe('T8: a storm of aborted acquires and releases', () => {
  it('leaves no key, no watchdog timer, no wait timer and no subscription', async () => {
    const { server: s, admin } = await server();
    const name = uniqueName('t8');
    const timersBefore = libraryTimers();
    const clients = [client(s), client(s), client(s), client(s)];
    let acquired = 0;
    let aborted = 0;
    const until = performance.now() + 3000 * soak;
    await Promise.all(
      clients.map(async (locks) => {
        const lock = locks.getLock(name);
        for (let round = 0; performance.now() < until; round++) {
          const controller = new AbortController();
          // Most acquires are aborted within 5 ms, anywhere in their wait; every fourth may wait up to 2 s, so
          // that grants and releases run through the storm however slow a loaded machine makes a round trip
          // (with 5 ms for all of them, one run granted none).
          const timer = setTimeout(() => controller.abort(), round % 4 === 0 ? 2000 : Math.random() * 5);
          try {
            const lease = await lock.acquire({ signal: controller.signal });
            acquired++;
            await lease.release();
          } catch {
            aborted++;
          } finally {
            clearTimeout(timer);
          }
        }
        for (let i = 0; i < 100; i++) {
          await lock.acquire({ signal: AbortSignal.abort() }).catch(() => aborted++);
        }
      }),
    );
    await sleep(3 * 1000);
    const left = await leftovers(admin, name);
    const numsub = (await admin.pubsub('NUMSUB', `redisson_lock__channel:{${name}}`)) as [string, number | string];
    const timersAfter = libraryTimers();
    recordFigures('T8 cancellation storm', {
      acquired,
      aborted,
      keysLeft: left.keys.length,
      timersAfter,
      timersBefore,
    });
    expect(acquired).toBeGreaterThan(0);
    expect(aborted).toBeGreaterThan(400);
    expect(left).toEqual({ keys: [], channels: [] });
    expect(Number(numsub[1])).toBe(0);
    expect(timersAfter).toBeLessThanOrEqual(timersBefore);
  });
});

describe.each(['volatile-ttl', 'volatile-lru', 'allkeys-lru'])('T13: maxmemory-policy %s', (policy) => {
  it('warns once at start-up; an evicted holder is told; tokens never go backwards', async () => {
    const { server: s, admin } = await server(['--maxmemory', '4mb', '--maxmemory-policy', policy]);
    const warnings: string[] = [];
    const onWarning = (warning: Error & { code?: string }): void => {
      if (warning.code === 'FLOWLOCK_EVICTION_POLICY') warnings.push(warning.message);
    };
    process.on('warning', onWarning);
    cleanup.push(() => process.off('warning', onWarning));
    // A watchdog that a loaded machine cannot make miss its deadline: the key must go by eviction only.
    const locks = client(s, { watchdogTimeout: 3000 });
    const name = uniqueName('t13');
    const lost: LockLostEvent[] = [];
    locks.on('lockLost', (event) => lost.push(event));
    const lease = await locks.getLock(name).acquire();
    await locks.getLock(uniqueName('t13-other')).withLock(() => undefined);
    await sleep(50);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(policy);

    // Noise: 1 KB values (with a TTL for volatile-* policies) until the lock key is evicted.
    const noise = redisOn(s);
    const value = 'x'.repeat(1024);
    let evictedAt = 0;
    for (let i = 0; i < 40_000 && evictedAt === 0; i++) {
      await noise.set(`noise:${i}`, value, 'EX', 3600);
      if (i % 50 === 0 && (await admin.exists(name)) === 0) evictedAt = performance.now();
    }
    const evicted = Number(/evicted_keys:(\d+)/.exec(await admin.info('stats'))?.[1] ?? 0);
    if (evictedAt > 0) {
      await new Promise((resolve) => {
        if (lease.signal.aborted) resolve(undefined);
        else lease.signal.addEventListener('abort', resolve);
      });
    }
    const toldAfterMs = evictedAt > 0 ? performance.now() - evictedAt : NaN;
    await noise.flushall();
    const next = await locks.getLock(name).acquire();
    recordFigures(`T13 ${policy}`, {
      warnings: warnings.length,
      evictedKeys: evicted,
      lockEvicted: evictedAt > 0,
      toldAfterMs,
    });
    expect(evicted).toBeGreaterThan(0);
    if (evictedAt > 0) {
      expect(lost.map((e) => e.name)).toContain(name);
      // Told by the next renewal (every 1000 ms), which found the key gone, not by the lease deadline (3 s):
      // within one renewal period, plus a late timer and a round trip on a loaded machine.
      expect(lost.find((e) => e.name === name)?.error.reason).toBe(RENEWAL_REJECTED);
      expect(toldAfterMs).toBeLessThanOrEqual(1000 + 700);
    }
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
  });
});

describe('T15: Redis restarted without persistence while a lock is held', () => {
  it('the holder learns it lost, waiters recover, and fencing tokens never go backwards', async () => {
    const { server: s } = await server();
    // The holder renews every 1.5 s of a 4.5 s lease: its next renewal after the restart finds the lock gone
    // well before its own deadline, however slowly the server restarts on a loaded machine.
    const holderLease = 4500;
    const holder = client(s, { watchdogTimeout: holderLease });
    const waiter = client(s);
    const name = uniqueName('t15');
    const tokens: bigint[] = [];
    for (let i = 0; i < 20; i++) {
      await holder.getLock(name).withLock((_signal, lease) => {
        tokens.push(lease.fencingToken);
      });
    }
    const lease = await holder.getLock(name).acquire();
    const lost = new Promise<number>((resolve) => {
      lease.signal.addEventListener('abort', () => {
        resolve(performance.now());
      });
    });
    const waiting = waiter.getLock(name).acquire();
    waiting.catch(() => undefined); // awaited below
    await sleep(100);
    await s.kill();
    await s.restart();
    const restartedAt = performance.now();
    const lostAt = await lost;
    const next = await waiting;
    const recoveredAt = performance.now();
    recordFigures('T15 restart without persistence', {
      holderToldAfterRestartMs: lostAt - restartedAt,
      waiterRecoveredAfterRestartMs: recoveredAt - restartedAt,
      tokenBefore: String(lease.fencingToken),
      tokenAfter: String(next.fencingToken),
    });
    // Told by its next renewal (within a period of the restart, plus a reconnect), which found the lock gone.
    expect(lease.signal.reason).toMatchObject({ code: 'LOCK_LOST', reason: RENEWAL_REJECTED });
    expect(lostAt - restartedAt).toBeLessThanOrEqual(holderLease / 3 + 1000);
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    expect(next.fencingToken).toBeGreaterThan(tokens.at(-1) ?? 0n);
    await next.release();
  });
});

describe('T19: hostile names', () => {
  const hostile = [
    'braces{x}',
    '{}',
    '}{',
    'a}b',
    '{tag}rest',
    'glob*?[a-z]',
    'new\nline',
    'nul\u0000byte',
    'unicode-🔒-ünï',
    '../../etc',
    'a:b',
    ':c',
    'x'.repeat(512),
  ];

  it('never collide, keep one slot per lock, never pattern-subscribe; over-long names fail before I/O', async () => {
    const { server: s, admin } = await server();
    const locks = client(s);
    const prefixA = client(s, { keyPrefix: 'a' });
    const prefixAB = client(s, { keyPrefix: 'a:b' });
    const leases = await Promise.all(hostile.map((name) => locks.getLock(name).acquire()));
    // Tenant pair ('a', 'b:c') vs ('a:b', 'c'): different locks although the concatenations agree.
    const tenant1 = await prefixA.getLock(':b:c').acquire({ waitTime: 0 });
    const tenant2 = await prefixAB
      .getLock(':c')
      .acquire({ waitTime: 0 })
      .catch((e: unknown) => e);
    expect(tenant2).toBeInstanceOf(Error); // same key `a:b:c`: the same lock, so they do exclude each other
    await tenant1.release();
    const keys = new Set<string>();
    for (const name of hostile) keys.add(name);
    expect(keys.size).toBe(hostile.length);
    for (const name of hostile) expect(await admin.exists(name)).toBe(1);
    const waiters = hostile.map((name) => locks.getLock(name).withLock(() => undefined));
    for (const waiter of waiters) waiter.catch(() => undefined); // awaited below
    // Redisson's prefixName: no braces added to a name that holds a `{` already.
    const expected = hostile.map((name) => redissonPrefixName('redisson_lock__channel', name));
    let channels: string[] = [];
    await until(async () => {
      channels = (await admin.pubsub('CHANNELS')) as string[];
      return expected.every((channel) => channels.includes(channel));
    }, 'all 13 waiters subscribed').catch(() => undefined); // the expect below names what is missing
    expect(Number(await admin.pubsub('NUMPAT'))).toBe(0);
    for (const channel of expected) expect(channels).toContain(channel);
    await Promise.all(leases.map((lease) => lease.release()));
    await Promise.all(waiters);
    for (const name of hostile) expect((await leftovers(admin, name)).keys).toEqual([]);

    // A client that has not connected (ioredis: lazyConnect; node-redis: connect() not called) stays so.
    const idle = idleTestClient({ topology: 'standalone', host: s.host, port: s.port });
    cleanup.push(() => idle.close());
    const offline = createLockClient(idle.client);
    expect(() => offline.getLock('x'.repeat(513))).toThrow(RangeError);
    expect(() => offline.getLock('é'.repeat(300))).toThrow(RangeError);
    expect(idle.untouched()).toBe(true);
    await offline.close();
  });

  it('10 000 distinct names acquired and released leave no lock keys', async () => {
    const { server: s, admin } = await server();
    // A 30 s lease: 500 holds at a time must not be lost to a missed renewal on a loaded machine, and a key
    // left behind must not expire away before it is looked for.
    const locks = client(s, { watchdogTimeout: 30_000 });
    const base = uniqueName('t19');
    const names = Array.from({ length: 10_000 }, (_, i) => `${base}:${i}`);
    for (let i = 0; i < names.length; i += 500) {
      await Promise.all(names.slice(i, i + 500).map((name) => locks.getLock(name).withLock(() => undefined)));
    }
    const keys = await admin.keys(`${base}:*`);
    recordFigures('T19 10 000 names', { lockKeysLeft: keys.length });
    expect(keys).toEqual([]);
  });
});

describe('a stalled server and waitTime', () => {
  it('waitTime does not cut the first attempt short: the free lock is taken once the server answers', async () => {
    const { server: s, admin } = await server();
    const locks = client(s, { watchdogTimeout: 30_000 });
    const name = uniqueName('stall');
    const pause = admin.call('CLIENT', 'PAUSE', '1500', 'WRITE');
    await pause;
    const start = performance.now();
    const got = await locks.run(async () => {
      const lock = locks.getLock(name);
      const taken = await lock.tryLock(300);
      if (taken) await lock.unlock();
      return taken;
    });
    const elapsed = performance.now() - start;
    recordFigures('waitTime under CLIENT PAUSE 1500', { returnedAfterMs: elapsed, got });
    // A wait never does worse than none: tryLock() would have waited for this reply too (docs/guide/waiting.md).
    expect(got).toBe(true);
    // Its one attempt's reply, after the pause, not a second attempt or the holder-less wait's end.
    expect(elapsed).toBeGreaterThanOrEqual(1000);
    expect(elapsed).toBeLessThan(1500 + 1500);
    expect(await admin.exists(name)).toBe(0);
  });

  it('an attempt abandoned by an abort, whose command then fails, is undone if it ran (no orphan hold)', async () => {
    const { server: s, admin } = await server();
    // Commands time out after 800 ms (their connection stays up): ioredis' commandTimeout, node-redis'
    // command timeout; GLIDE's requestTimeout.
    const redis = newTestClient(
      { topology: 'standalone', host: s.host, port: s.port },
      {
        ioredis: { commandTimeout: 800 },
        nodeRedis: { commandOptions: { timeout: 800 } },
        glide: { requestTimeout: 800 },
      },
    );
    const locks = createLockClient(redis.client, { watchdogTimeout: 30_000 });
    cleanup.push(async () => {
      await locks.close();
      await redis.close();
    });
    const name = uniqueName('orphan');
    await admin.hset(name, 'foreign:1', '1');
    // The waiter's attempt at the TTL's end (1 s) comes during the pause, which a stall of up to 800 ms
    // before it still lets begin first.
    await admin.pexpire(name, 1000);
    const controller = new AbortController();
    const waiting = locks.run(() => locks.getLock(name).tryLock({ waitTime: 10_000, signal: controller.signal }));
    waiting.catch(() => undefined); // awaited below
    await sleep(200);
    await admin.call('CLIENT', 'PAUSE', '2500', 'WRITE');
    // The abort comes while that attempt waits on the paused server: the call ends at once.
    await sleep(1200);
    controller.abort();
    await expect(waiting).rejects.toThrow();
    await sleep(2500 - 1200 + 300);
    // The pause is over: the attempt ran (or not) and an orphan hold is undone within seconds; with a 30 s
    // lease nothing else would remove it this soon. A wait, not a snapshot: the undo's round trips are slow
    // on a loaded machine.
    await until(async () => (await admin.exists(name)) === 0, 'no orphan hold', 5000);
  });
});
