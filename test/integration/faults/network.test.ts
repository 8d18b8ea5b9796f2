// T7 (lost replies and resent commands), T10 (handoff latency, no thundering herd), T11 (pub/sub loss).
// The lock clients and the workers run on the client under test (`REDIS_CLIENT`); `admin` is ioredis 5.
import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisOptions } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLockClient, type LockClient } from '../../../src/index.js';
import { handoffGaps, leftovers, overlaps, percentile, type Section } from '../../support/checkers.js';
import { newTestClient, onGlide, onNodeRedis } from '../../support/clients.js';
import { commandCalls, newRedis, uniqueName, type Redis, until } from '../../support/fixture.js';
import { recordFigures, soak } from '../../support/figures.js';
import { TcpProxy } from '../../support/proxy.js';
import { startRedisServer, type LocalRedis } from '../../support/redis-server.js';
import { startWorkers } from '../../support/workers.js';

// A test that starts worker processes gets 120 s: on a loaded machine their start alone can take 20 s.
let lockServer: LocalRedis;
let admin: Redis;
const cleanup: (() => unknown)[] = [];

beforeAll(async () => {
  lockServer = await startRedisServer();
  admin = newRedis(lockServer);
});
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
});
afterAll(async () => {
  admin.disconnect();
  await lockServer.stop();
});

/**
 * A lock client on a new client under test to `port` (reconnecting after 20 ms). `ioredisOptions` apply to an
 * ioredis or iovalkey client only (node-redis has no such options).
 */
function clientVia(
  port: number,
  ioredisOptions: Pick<RedisOptions, 'autoResendUnfulfilledCommands' | 'commandTimeout'> = {},
  watchdogTimeout = 1000,
): LockClient {
  const redis = newTestClient({ topology: 'standalone', host: '127.0.0.1', port }, { reconnectMs: 20 });
  // ioredis reads these options when it sends a command or loses its connection, so setting them on the
  // new client's options is as good as passing them to its constructor.
  if (!onNodeRedis && !onGlide) Object.assign((redis.client as Redis).options, ioredisOptions);
  const locks = createLockClient(redis.client, { watchdogTimeout });
  cleanup.push(async () => {
    await locks.close();
    await redis.close();
  });
  return locks;
}

/** The hold count of the one owner of lock `name` in Redis (0: nobody holds it). */
async function holdCount(name: string): Promise<number> {
  const fields = await admin.hgetall(name);
  const holder = Object.keys(fields).find((f) => /^[^:]+-[^:]+:\d+$/.test(f) || /:\d+$/.test(f));
  return holder ? Number(fields[holder]) : 0;
}

describe('T7: the reply of an acquire or a release is lost (the connection is cut after the script ran)', () => {
  // ioredis (and iovalkey) send the command again after the reconnect; node-redis rejects a written command
  // whose connection broke, and the library's script runner sends it again (once): the same outcome.
  it('the command is sent again (by ioredis, or by the library on node-redis): hold counts stay right and nothing is left renewing', async () => {
    const proxy = await TcpProxy.start(lockServer.port);
    cleanup.push(() => proxy.close());
    const locks = clientVia(proxy.port);
    const name = uniqueName('t7');
    const lock = locks.getLock(name);
    const count = (): Promise<number> => holdCount(name);
    await locks.run(async () => {
      await lock.tryLock(); // connect first: the drop must hit a script reply
      await lock.unlock();

      proxy.dropNextReplies(1);
      expect(await lock.tryLock()).toBe(true); // fresh acquire, reply lost, resent
      expect(await count()).toBe(1);
      proxy.dropNextReplies(1);
      expect(await lock.tryLock()).toBe(true); // re-entry, reply lost, resent
      expect(await count()).toBe(2);
      proxy.dropNextReplies(1);
      await lock.unlock(); // decrement, reply lost, resent
      expect(await count()).toBe(1);
      proxy.dropNextReplies(1);
      await lock.unlock(); // final release, reply lost, resent: still a success
      expect(await admin.exists(name)).toBe(0);
    });
    recordFigures('T7 resend', { finalHoldCount: await count(), keyLeft: await admin.exists(name) });
  });

  // An ioredis option: on node-redis and GLIDE the library always sends a lost call again (the test above).
  it.skipIf(onNodeRedis || onGlide)(
    'without resends (ioredis: autoResendUnfulfilledCommands off), an acquire whose reply was lost leaves no hold behind',
    async () => {
      const proxy = await TcpProxy.start(lockServer.port);
      cleanup.push(() => proxy.close());
      // Without resends ioredis never settles a command whose connection dropped: commandTimeout ends it
      // (every command's, the warm-up's and the undo's too: long enough for a loaded machine).
      // A 30 s lease: the key can only go soon by the undo, not by its lease running out.
      const locks = clientVia(proxy.port, { autoResendUnfulfilledCommands: false, commandTimeout: 1500 }, 30_000);
      const name = uniqueName('t7');
      const lock = locks.getLock(name);
      await locks.run(async () => {
        await lock.tryLock();
        await lock.unlock();
        proxy.dropNextReplies(1);
        await expect(lock.tryLock()).rejects.toThrow();
      });
      // The script ran, but its caller never heard of it: the undo gives it back (within seconds, far
      // below the 30 s lease that would otherwise remove it).
      const failedAt = performance.now();
      await until(async () => (await admin.exists(name)) === 0, 'the unheard acquire undone', 5000);
      recordFigures('T7 resend, autoResend off', { keyGoneAfterMs: performance.now() - failedAt });
    },
  );
});

async function runHandoffs(
  name: string,
  processes: number,
  flows: number,
  total: number,
  during?: () => () => void,
): Promise<{ sections: Section[]; scriptCalls: number; seconds: number }> {
  const before = await commandCalls(admin);
  const start = performance.now();
  const workers = startWorkers(
    Array.from({ length: processes }, (_, i) => ({
      mode: 'handoffs' as const,
      id: `p${i}`,
      lockUrl: lockServer.url,
      name,
      flows,
      count: total,
      sleepMs: 2,
      leaseTime: 30_000,
    })),
  );
  cleanup.push(() => Promise.all(workers.map((worker) => worker.kill())));
  const stop = during?.();
  const sections: Section[] = [];
  try {
    await Promise.all(
      workers.map(async (worker) => {
        const done = await worker.next<{ id: string; type: string; sections: Section[] }>('done', 120_000);
        for (const s of done.sections) sections.push({ owner: worker.id, enter: s.enter, exit: s.exit });
        expect(await worker.exited).toBe(0);
      }),
    );
  } finally {
    stop?.();
  }
  const after = await commandCalls(admin);
  const scriptCalls = (after['evalsha'] ?? 0) - (before['evalsha'] ?? 0) + (after['eval'] ?? 0) - (before['eval'] ?? 0);
  return { sections, scriptCalls, seconds: (performance.now() - start) / 1000 };
}

describe('T10: 5 processes x 10 waiters, 1000 handoffs', () => {
  it('hands off in p50 <= 50 ms, p99 <= 500 ms, max <= 5 s, with <= 2 x processes script calls per handoff', async () => {
    const name = uniqueName('t10');
    const processes = soak > 1 ? 8 : 5;
    const run = await runHandoffs(name, processes, 10, 1000 * soak);
    const gaps = handoffGaps(run.sections);
    const handoffs = run.sections.length - 1;
    const figures = {
      handoffs,
      p50Ms: percentile(gaps, 50),
      p99Ms: percentile(gaps, 99),
      maxMs: Math.max(...gaps),
      scriptCallsPerHandoff: run.scriptCalls / handoffs,
      seconds: run.seconds,
    };
    recordFigures('T10 handoffs', figures);
    expect(overlaps(run.sections)).toEqual([]);
    expect(handoffs).toBeGreaterThanOrEqual(1000 * soak);
    // Speed is a recorded figure; these bounds tell a handoff woken by the release message from one left to
    // the 30 s lease (a lost wake-up), with room for 6 processes scheduled on a loaded machine.
    expect(figures.p50Ms).toBeLessThanOrEqual(50);
    expect(figures.p99Ms).toBeLessThanOrEqual(500);
    expect(figures.maxMs).toBeLessThanOrEqual(5000);
    expect(figures.scriptCallsPerHandoff).toBeLessThanOrEqual(2 * processes);
    expect(await leftovers(admin, name)).toEqual({ keys: [], channels: [] });
  }, 120_000);
});

describe('T11: pub/sub loss', () => {
  it('(a) subscriber connections killed every 200 ms: every waiter still gets the lock, no long stalls', async () => {
    const name = uniqueName('t11a');
    let kills = 0;
    const run = await runHandoffs(name, 3, 5, 300 * soak, () => {
      const timer = setInterval(() => {
        kills++;
        admin.client('KILL', 'TYPE', 'pubsub').catch(() => undefined);
      }, 200);
      return () => {
        clearInterval(timer);
      };
    });
    const gaps = handoffGaps(run.sections);
    recordFigures('T11a CLIENT KILL TYPE pubsub every 200 ms', {
      handoffs: run.sections.length - 1,
      kills,
      p99Ms: percentile(gaps, 99),
      maxMs: Math.max(...gaps),
    });
    expect(kills).toBeGreaterThan(0);
    expect(overlaps(run.sections)).toEqual([]);
    // A lost wake-up is repaired by the retry after the subscriber reconnects, or by a pending subscription's
    // 1 s re-check (a waiter that came while its subscriber was away), not by the 30 s lease.
    expect(Math.max(...gaps)).toBeLessThanOrEqual(3000);
  }, 120_000);

  it('(b) a release never published (DEL by a third party): waiters get the lock by its TTL + 800 ms', async () => {
    const name = uniqueName('t11b');
    const holderRedis = newRedis(lockServer);
    cleanup.push(() => {
      holderRedis.disconnect();
    });
    await holderRedis.hset(name, 'foreign:1', '1');
    // Long enough for 3 new clients to connect, try and subscribe on a loaded machine before the DEL.
    await holderRedis.pexpire(name, 3000);
    const waiters = [clientVia(lockServer.port), clientVia(lockServer.port), clientVia(lockServer.port)];
    const acquiredAt: number[] = [];
    const waiting = waiters.map((locks) =>
      locks.getLock(name).withLock(
        async () => {
          acquiredAt.push(performance.now());
          await sleep(5);
        },
        { leaseTime: 5000 },
      ),
    );
    for (const p of waiting) p.catch(() => undefined); // awaited below
    // Every waiter tried once (and saw the TTL) and listens: only its retry at the TTL can get it in.
    await until(() => waiters.every((locks) => locks.waits()[0]?.subscription === 'active'), 'all 3 waiting');
    const expiresAt = performance.now() + (await admin.pttl(name));
    await admin.del(name); // freed silently: no release message
    await Promise.all(waiting);
    const firstAfterExpiryMs = (acquiredAt[0] ?? Infinity) - expiresAt;
    recordFigures('T11b silent DEL', { firstAcquiredAfterTtlMs: firstAfterExpiryMs, waiters: acquiredAt.length });
    expect(acquiredAt).toHaveLength(3);
    // A waiter that ignored the TTL would never wake (no message comes); 800 ms leaves room for load.
    expect(firstAfterExpiryMs).toBeLessThanOrEqual(800);
  });
});
