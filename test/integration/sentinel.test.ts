// T14: the lock through the client under test (REDIS_CLIENT) in Sentinel mode: an ioredis or iovalkey Redis
// with `sentinels`, or a node-redis createSentinel; with the master SIGKILLed under a steady workload.
// Sentinel promotes the replica (a few seconds with down-after 1000 ms); callers may see errors until
// then, and must not afterwards: work resumes within a bound and the last operation succeeds (or only ran
// out of its wait time: a non-fair lock bounds no wait under contention).
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis as Redis5, type RedisOptions } from 'ioredis';
import { Redis as Redis6 } from 'ioredis6';
import { Redis as ValkeyRedis } from 'iovalkey';
import * as nodeRedis6 from 'redis';
import * as nodeRedis5 from 'redis5';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLockClient,
  LockNotReplicatedError,
  type LockClient,
  type LockClientOptions,
  type RedisClient,
} from '../../src/index.js';
import { overlaps, type Section } from '../support/checkers.js';
import { clientKind } from '../support/clients.js';
import { commandCalls, newRedis, uniqueName, until, untilQuiet } from '../support/fixture.js';
import { recordFigures } from '../support/figures.js';
import { startRedisSentinel, type TestSentinel } from '../support/redis-sentinel.js';

const RedisClass = (clientKind === 'ioredis6'
  ? Redis6
  : clientKind === 'iovalkey'
    ? ValkeyRedis
    : Redis5) as unknown as typeof Redis5;
const nodeRedis = clientKind === 'node-redis5' ? (nodeRedis5 as unknown as typeof nodeRedis6) : nodeRedis6;

let topology: TestSentinel | undefined;
const cleanup: (() => unknown)[] = [];

beforeAll(async () => {
  topology = await startRedisSentinel();
}, 60_000);
afterAll(async () => {
  for (const step of cleanup.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
  await topology?.stop();
}, 30_000);

function started(): TestSentinel {
  if (!topology) throw new Error('the Sentinel topology is not started');
  return topology;
}

/** A client under test in Sentinel mode that rides out a failover: it retries forever, quickly. */
function sentinelRedis(sentinel: TestSentinel = started()): RedisClient {
  if (clientKind.startsWith('node-redis')) {
    // node-redis follows the sentinels' +switch-master itself, and sends a command that met READONLY (a
    // demoted master) again on the new master; its node connections reconnect every 100 ms.
    const client = nodeRedis.createSentinel({
      name: sentinel.masterName,
      sentinelRootNodes: sentinel.sentinels.map(({ host, port }) => ({ host, port })),
      nodeClientOptions: { socket: { reconnectStrategy: () => 100 } },
    });
    client.on('error', () => undefined);
    // Connected by its user; commands sent meanwhile wait for it.
    const connected = client.connect().then(
      () => true,
      () => false,
    );
    cleanup.push(async () => {
      if (await connected) await client.destroy();
    });
    return client;
  }
  const options: RedisOptions = {
    sentinels: sentinel.sentinels.map(({ host, port }) => ({ host, port })),
    name: sentinel.masterName,
    sentinelRetryStrategy: () => 100,
    retryStrategy: () => 100,
    enableOfflineQueue: true,
    // A node demoted to replica answers writes with READONLY: reconnect (to the new master) and resend.
    reconnectOnError: (error) => (error.message.startsWith('READONLY') ? 2 : false),
  };
  const redis = new RedisClass(options);
  redis.on('error', () => undefined);
  cleanup.push(() => redis.quit().catch(() => redis.disconnect()));
  return redis;
}

function lockClient(sentinel?: TestSentinel, options: LockClientOptions = { watchdogTimeout: 2000 }): LockClient {
  const locks = createLockClient(sentinelRedis(sentinel), options);
  cleanup.push(() => locks.close());
  return locks;
}

interface Failure {
  /** When the failed call began. */
  readonly startedAt: number;
  readonly at: number;
  readonly worker: string;
  readonly error: string;
}

describe('T14: Sentinel failover', () => {
  it('keeps working through a failover', async () => {
    const sentinel = started();
    const name = uniqueName('t14');
    const clients = [lockClient(), lockClient()];
    const options = { waitTime: 2000, leaseTime: 2000 };
    const acquisitions: number[] = [];
    const sections: (Section & { at: number })[] = [];
    const failures: Failure[] = [];
    const last = new Map<string, string>();
    let counter = 0;
    let stopping = false;
    // Connected first (a command without a waitTime waits for that): the workload's 2 s waitTime is for the
    // lock, and a loaded machine can take longer to find the master through the sentinels.
    await Promise.all(clients.map((locks) => locks.getLock(name).isLocked()));

    const workers = clients.map(async (locks, i) => {
      const worker = `w${i}`;
      const lock = locks.getLock(name);
      while (!stopping) {
        const startedAt = performance.now();
        try {
          await lock.withLock(async (_signal, lease) => {
            const at = performance.now();
            acquisitions.push(at);
            const enter = process.hrtime.bigint();
            const seen = counter;
            await sleep(1);
            counter = seen + 1;
            sections.push({ owner: worker, enter, exit: process.hrtime.bigint(), token: lease.fencingToken, at });
          }, options);
          last.set(worker, 'ok');
        } catch (error) {
          failures.push({ startedAt, at: performance.now(), worker, error: String(error) });
          last.set(worker, String(error));
          await sleep(50); // no hot loop while commands fail fast
        }
      }
    });

    try {
      // Steady state first.
      await expect.poll(() => acquisitions.length, { timeout: 10_000, interval: 50 }).toBeGreaterThan(100);
      const failuresBefore = failures.length;
      const oldMaster = await sentinel.currentMaster();
      expect(oldMaster.port).toBe(sentinel.master.port);

      const killedAt = performance.now();
      await sentinel.master.kill();
      const promoted = await sentinel.waitForFailover(oldMaster.port, 30_000);
      const promotedAt = performance.now();
      expect(promoted.port).toBe(sentinel.replica.port);

      // Replies already on their way when the master died may land just after the kill; a fresh grant
      // cannot come before the promotion (down-after alone is 1000 ms).
      const firstAfter = (): number | undefined => acquisitions.find((at) => at > killedAt + 100);
      await expect.poll(firstAfter, { timeout: 20_000, interval: 50 }).toBeDefined();
      const resumedAt = firstAfter() ?? Infinity;
      // Keep the workload going well past promotion + 2 s, and for a good number of acquisitions.
      const quietFrom = promotedAt + 2000;
      await expect
        .poll(() => acquisitions.filter((at) => at > quietFrom + 1000).length, { timeout: 20_000, interval: 50 })
        .toBeGreaterThan(100);

      stopping = true;
      await Promise.all(workers);
      // The last operation of each worker, and one more on each client, succeed. A non-fair lock bounds no
      // wait under contention, though: on a loaded machine one of two clients taking turns can wait past its
      // 2 s (the other takes the lock again after each of its own releases), so a wait that ran out is no
      // failover failure; anything else is.
      const failedOtherwise = (error: string): boolean => !error.startsWith('LockAcquireTimeoutError');
      expect([...last.values()].filter((outcome) => outcome !== 'ok' && failedOtherwise(outcome))).toEqual([]);
      for (const locks of clients) {
        expect(await locks.getLock(name).withLock(() => 'done', options)).toBe('done');
      }

      // A call begun just before the clients reached the new master may still time out (waitTime 2 s) a
      // moment after quietFrom: late are the failures of calls begun after it.
      const late = failures.filter((f) => f.startedAt > quietFrom);
      const duringFailover = failures.filter((f) => f.at > killedAt && f.startedAt <= quietFrom);
      const afterKill = sections.filter((s) => s.at > killedAt);
      const figures = {
        killToPromotionMs: Math.round(promotedAt - killedAt),
        killToFirstAcquisitionMs: Math.round(resumedAt - killedAt),
        errorsDuringFailover: duringFailover.length,
        errorsLate: late.length,
        errorsBeforeKill: failuresBefore,
        acquisitions: acquisitions.length,
        overlapsAfterKill: overlaps(afterKill).length,
        lostIncrements: sections.length - counter,
      };
      console.log(
        `T14 ${clientKind}: kill→promotion ${figures.killToPromotionMs} ms, ` +
          `kill→first acquisition ${figures.killToFirstAcquisitionMs} ms, ` +
          `errors during failover ${figures.errorsDuringFailover}` +
          (duringFailover.length > 0
            ? ` (${duringFailover.map((f) => `+${Math.round(f.at - killedAt)} ms ${f.worker} ${f.error}`).join(' | ')})`
            : '') +
          `, late errors ${figures.errorsLate}, acquisitions ${figures.acquisitions}, ` +
          `overlaps after kill ${figures.overlapsAfterKill}, lost increments ${figures.lostIncrements}`,
      );
      recordFigures('T14 sentinel failover', figures);

      expect(failuresBefore).toBe(0);
      expect(resumedAt - killedAt).toBeLessThan(15_000);
      expect(late.filter((f) => failedOtherwise(f.error))).toEqual([]);
      // ...and rarely: a wait that runs out more often than once in 20 operations is not barging but a stall.
      const afterQuiet = acquisitions.filter((at) => at > quietFrom).length;
      expect(late.length).toBeLessThanOrEqual(Math.max(2, Math.floor(afterQuiet / 20)));
    } finally {
      stopping = true;
      await Promise.all(workers);
    }
  }, 90_000);
});

/** A fresh topology for one test (a failover uses it up), stopped when the test ends. */
async function withTopology(test: (sentinel: TestSentinel) => Promise<void>): Promise<void> {
  const sentinel = await startRedisSentinel();
  try {
    await test(sentinel);
  } finally {
    for (const step of cleanup.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
    await sentinel.stop();
  }
}

const TRIALS = 20;

describe('T14: syncReplicas against the failover risk', () => {
  it('refuses every grant the cut-off replica cannot acknowledge; without it a failover loses a grant', async () => {
    await withTopology(async (sentinel) => {
      const synced = lockClient(sentinel, { syncReplicas: { replicas: 1, timeout: 200 } });
      const plain = lockClient(sentinel, {});
      const other = lockClient(sentinel, {});
      const master = newRedis(sentinel.master);
      master.on('error', () => undefined); // it is killed below
      cleanup.push(() => master.disconnect());
      // Cut the replica off: paused, and its link dropped by the master, so that nothing written from now on
      // reaches it (a paused replica would otherwise still find it in its socket buffer on resuming).
      sentinel.replica.pause();
      await master.client('KILL', 'TYPE', 'replica');

      let refused = 0;
      const name = uniqueName('t14');
      for (let i = 0; i < TRIALS; i++) {
        // A wait time that a loaded machine (and the first trial's discovery of the master) cannot run out:
        // a refused grant rejects at once, whatever is left of it.
        const error: unknown = await synced
          .getLock(`${name}:${i}`)
          .acquire({ waitTime: 5000 })
          .catch((e: unknown) => e);
        if (error instanceof LockNotReplicatedError) refused++;
        expect(await master.exists(`${name}:${i}`)).toBe(0);
      }
      expect(refused).toBe(TRIALS);

      // The canary: the same grant without syncReplicas stands on the master alone, and the failover loses it.
      const first = await plain.getLock(name).acquire({ leaseTime: 30_000 });
      await sentinel.master.kill();
      sentinel.replica.resume();
      await sentinel.waitForFailover(sentinel.master.port, 30_000);
      const second = await other.getLock(name).acquire({ waitTime: 10_000, leaseTime: 30_000 });
      const doubleGrant = !first.signal.aborted && !second.signal.aborted;
      // Fencing still orders them: a token is never below the server clock in microseconds, and the
      // failover took seconds.
      const tokensRise = second.fencingToken > first.fencingToken;
      // The first holder finds out when it releases: its hold is not on the new master.
      await expect(first.release()).rejects.toMatchObject({ code: 'LOCK_NOT_HELD' });
      await second.release();
      recordFigures('T14 syncReplicas, replica cut off', {
        refusedWithSync: `${refused}/${TRIALS}`,
        keysLeft: 0,
        doubleGrantWithoutSync: doubleGrant,
        tokensRose: tokensRise,
      });
      expect(doubleGrant).toBe(true);
      expect(tokensRise).toBe(true);
    });
  }, 90_000);

  it('keeps a grant the replica acknowledged through the failover: no double grant', async () => {
    await withTopology(async (sentinel) => {
      const synced = lockClient(sentinel, { syncReplicas: { replicas: 1, timeout: 1000 } });
      const other = lockClient(sentinel, {});
      const name = uniqueName('t14');
      let doubleGrants = 0;
      const leases = [];
      for (let i = 0; i < TRIALS; i++) leases.push(await synced.getLock(`${name}:${i}`).acquire({ leaseTime: 30_000 }));
      await sentinel.master.kill();
      await sentinel.waitForFailover(sentinel.master.port, 30_000);
      for (let i = 0; i < TRIALS; i++) {
        const taken = await other
          .getLock(`${name}:${i}`)
          .acquire({ waitTime: 200 })
          .then(
            () => true,
            () => false,
          );
        if (taken) doubleGrants++;
      }
      // The holders' releases reach the promoted replica, where their grants are.
      for (const lease of leases) await lease.release();
      // Every token drawn after the failover is above every token acknowledged before it.
      let tokensRose = 0;
      for (const [i, lease] of leases.entries()) {
        const next = await other.getLock(`${name}:${i}`).acquire({ waitTime: 1000 });
        if (next.fencingToken > lease.fencingToken) tokensRose++;
        await next.release();
      }
      recordFigures('T14 syncReplicas, replica healthy', {
        grantsAcrossFailover: TRIALS,
        doubleGrants,
        tokensRoseAfterFailover: `${tokensRose}/${TRIALS}`,
      });
      expect(doubleGrants).toBe(0);
      expect(tokensRose).toBe(TRIALS);
    });
  }, 90_000);
});

describe('T14: syncReplicas when the connection drops mid-WAIT', () => {
  it('refuses a grant whose WAIT the dropped connection cut off, and leaves no hold', async () => {
    await withTopology(async (sentinel) => {
      const synced = lockClient(sentinel, { syncReplicas: { replicas: 1, timeout: 3000 } });
      const master = newRedis(sentinel.master);
      cleanup.push(() => master.disconnect());
      const name = uniqueName('t14');
      // Connected, and grants confirmed while the replica acknowledges.
      expect(await synced.getLock(`${name}:warm`).withLock(() => 'ok', { waitTime: 10_000 })).toBe('ok');
      // Paused, not cut off: the master still counts the replica as connected, so a WAIT on a connection that
      // wrote nothing (which a client sends again after a reconnect) answers 1 at once.
      sentinel.replica.pause();
      try {
        const acquiring = synced
          .getLock(name)
          .acquire({ waitTime: 10_000 })
          .then(
            (lease) => ({ lease }),
            (error: unknown) => ({ error }),
          );
        // Granted, and WAIT blocked on the paused replica: the lock client's connection waits in WAIT.
        let waiting: string | undefined;
        await until(async () => {
          const clients = String(await master.client('LIST')).split('\n');
          waiting = /\bid=(\d+)\b/.exec(clients.find((line) => /\bcmd=wait\b/.test(line)) ?? '')?.[1];
          return waiting !== undefined;
        }, 'WAIT sent');
        await master.client('KILL', 'ID', String(waiting));
        const outcome = await acquiring;
        if ('lease' in outcome) cleanup.push(() => outcome.lease.release());
        expect(outcome).toMatchObject({ error: expect.any(LockNotReplicatedError) as unknown });
        // Undone on the master: nobody holds it.
        expect(await master.exists(name)).toBe(0);
      } finally {
        sentinel.replica.resume();
      }
      // Grants are confirmed again once the replica is back.
      expect(await synced.getLock(name).withLock(() => 'again', { waitTime: 10_000 })).toBe('again');
    });
  }, 90_000);
});

describe('T15: waiting through a blip of the subscriber connection', () => {
  it('a release sent while the subscriber reconnects is not slept through (issue 38.3)', async () => {
    // node-redis' sentinel resubscribed on its own pub/sub connection without a word, and a waiter slept until
    // its deadline with the lock free. The kill and the release go in one pipeline: the server has sent the
    // release before the subscriber could reconnect, so only the notice of the reconnect can wake the waiter.
    const sentinel = started();
    const locks = lockClient();
    const master = newRedis(await sentinel.currentMaster());
    master.on('error', () => undefined);
    cleanup.push(() => master.quit().catch(() => master.disconnect()));
    for (let round = 0; round < 3; round++) {
      const name = uniqueName('t14-blip');
      const channel = `redisson_lock__channel:{${name}}`;
      await master.hset(name, 'foreign:1', '1');
      await master.pexpire(name, 30_000);
      let acquiredAt = 0;
      const waiting = locks.getLock(name).withLock(
        () => {
          acquiredAt = performance.now();
        },
        { waitTime: 10_000 },
      );
      waiting.catch(() => undefined); // awaited below
      await expect
        .poll(async () => Number(((await master.pubsub('NUMSUB', channel)) as [string, string])[1]), {
          timeout: 10_000,
          interval: 20,
        })
        .toBe(1);
      const releasedAt = performance.now();
      await master.pipeline().client('KILL', 'TYPE', 'pubsub').del(name).publish(channel, '0').exec();
      await waiting;
      // A reconnect's re-check comes within a second or so; the deadline is 10 s away.
      expect(acquiredAt - releasedAt).toBeLessThan(3000);
    }
  }, 60_000);

  it('a waiter parked through a failover is woken by the release on the new master', async () => {
    // The subscriber's connection is to the master: it follows the sentinel's MASTER_CHANGE to the new one.
    await withTopology(async (sentinel) => {
      const locks = lockClient(sentinel);
      const master = newRedis(sentinel.master);
      master.on('error', () => undefined); // it is killed below
      cleanup.push(() => master.disconnect());
      const name = uniqueName('t14-follow');
      const channel = `redisson_lock__channel:{${name}}`;
      await master.hset(name, 'foreign:1', '1');
      await master.pexpire(name, 60_000);
      // Replicated before the master dies, so that the hold survives the failover.
      await master.wait(1, 5000);
      let acquiredAt = 0;
      const waiting = locks.getLock(name).withLock(
        () => {
          acquiredAt = performance.now();
        },
        { waitTime: 60_000 },
      );
      waiting.catch(() => undefined); // awaited below
      await until(() => locks.waits().some((w) => w.subscription === 'active'), 'the waiter subscribed');
      await sentinel.master.kill();
      const promoted = newRedis(await sentinel.waitForFailover(sentinel.master.port, 30_000));
      promoted.on('error', () => undefined);
      cleanup.push(() => promoted.quit().catch(() => promoted.disconnect()));
      await expect
        .poll(async () => Number(((await promoted.pubsub('NUMSUB', channel)) as [string, string])[1]), {
          timeout: 20_000,
          interval: 50,
        })
        .toBe(1);
      await until(() => locks.waits().some((w) => w.subscription === 'active'), 'the waiter subscribed again');
      // Parked on the subscription after the re-check that the move caused (the hold is still there): no
      // script call for 1.5 s, where a wait that is not subscribed re-checks every second. That re-check goes
      // out on the user's connection, which reconnects on its own schedule and can reach the new master well
      // after the subscriber did: it is done once it has reached the new master and the calls have settled.
      const scriptCalls = async (): Promise<number> => {
        const calls = await commandCalls(promoted);
        return (calls['evalsha'] ?? 0) + (calls['eval'] ?? 0);
      };
      await until(async () => (await scriptCalls()) > 0, 'the re-check on the new master');
      const before = await untilQuiet(scriptCalls, 'script calls');
      await sleep(1500);
      expect(await scriptCalls()).toBe(before);
      expect(acquiredAt).toBe(0);
      const releasedAt = performance.now();
      await promoted.pipeline().del(name).publish(channel, '0').exec();
      await waiting;
      // Woken by the message.
      expect(acquiredAt - releasedAt).toBeLessThan(2000);
    });
  }, 90_000);
});
