// Count-down latch across processes (issue 11): C1 (8 processes await(), another process counts down to zero:
// all wake soon after the last countDown), C2 (the subscriber connections are killed shortly before the last
// countDown: all wake soon after the later of their reconnect and the countDown). "Soon": by the message or
// the reconnect's re-check, never by a timer (WAKE_MS); the wake times themselves are figures.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { latchKeys } from '../../../src/redis/keys.js';
import { percentile } from '../../support/checkers.js';
import { fixturePath, Worker, type WorkerMessage } from '../../support/workers.js';
import { uniqueName, until } from '../../support/fixture.js';
import { onGlide } from '../../support/clients.js';
import { recordFigures, soak } from '../../support/figures.js';
import { useFaultServers } from '../../support/fault-servers.js';
import type { SemaphoreWorkerConfig } from '../../fixtures/semaphore-worker.ts';

const WAITERS = 8;
/**
 * Every waiter is awake this long after the latch opened (or it could know). A waiter that missed the "0" and
 * did not re-check at its reconnect would wait for its 1 s re-check (UNSUBSCRIBED_WAIT_MS) or for ever; an
 * idle machine wakes all within about 60 ms (the figures), a loaded one has been seen past 200 ms.
 */
const WAKE_MS = 800;
/**
 * C1's bound on the last wake. Nothing but the "0" message wakes a waiter there (no subscriber drops, so no
 * re-check): one that missed it would sleep through its whole wait, and the 10 s wait for its wake fails. So
 * this bound only says how late a loaded machine delivers the message and schedules the woken process:
 * 955 ms seen at a load average of 11 on 2 cores (three test files at a time and a second suite beside).
 */
const C1_WAKE_MS = 3000;
/** The median wake: by the message or the reconnect's re-check, tens of ms; a 1 s timer's would be ~500 ms. */
const WAKE_P50_MS = 200;
/** C2: how long the killed subscribers are kept from reconnecting. */
const AWAY_MS = 50;
const script = fixturePath('semaphore-worker.ts');

const servers = useFaultServers();

const ms = (from: bigint, to: bigint): number => Number(to - from) / 1e6;
const max = (values: readonly number[]): number => values.reduce((a, b) => Math.max(a, b), -Infinity);

type Woke = WorkerMessage & { result: boolean; called: bigint; at: bigint };
type Counted = WorkerMessage & { called: bigint; at: bigint };
type SubscriberEvent = WorkerMessage & { event: 'ready' | 'close'; at: bigint };

/** WAITERS waiter processes and one counter process C (all ready), killed after the test if still running. */
async function start(): Promise<{ waiters: Worker[]; counter: Worker }> {
  const ids = [...Array.from({ length: WAITERS }, (_, i) => `W${i}`), 'C'];
  const started = ids.map((id) => {
    const config: SemaphoreWorkerConfig = { id, url: servers.lock.url, watchdogTimeout: 30_000 };
    return new Worker(config, script);
  });
  servers.cleanup(() => Promise.all(started.map((worker) => worker.kill())));
  await Promise.all(started.map((worker) => worker.next('ready')));
  return { waiters: started.slice(0, WAITERS), counter: started[WAITERS]! };
}

/** Processes subscribed to the latch's channel. */
async function subscribers(name: string): Promise<number> {
  const [, count] = (await servers.admin.pubsub('NUMSUB', latchKeys('', name).channel)) as [string, number | string];
  return Number(count);
}

/** C arms latch `name` with `count`; every waiter calls await() without waitTime and is subscribed. */
async function arm(name: string, count: number, waiters: readonly Worker[], counter: Worker) {
  counter.send({ cmd: 'trySetCount', ref: name, name, count });
  expect(await counter.next('set', { ref: name })).toMatchObject({ ok: true });
  for (const waiter of waiters) waiter.send({ cmd: 'await', ref: name, name });
  await until(async () => (await subscribers(name)) === waiters.length, `all ${waiters.length} waiters subscribed`);
}

async function countDown(counter: Worker, name: string): Promise<Counted> {
  counter.send({ cmd: 'countDown', ref: name, name });
  return counter.next<Counted>('counted', { ref: name });
}

async function closeAll(workers: readonly Worker[]): Promise<void> {
  expect(await Promise.all(workers.map((worker) => worker.close()))).toEqual(workers.map(() => 0));
}

describe('C1: 8 processes await() a latch of 3 that a 9th process counts down (5 x SOAK rounds)', () => {
  it(`nobody wakes before the last countDown, and all wake soon after its completion`, async () => {
    const { waiters, counter } = await start();
    const rounds = 5 * soak;
    const latencies: number[] = [];
    const early: string[] = [];
    const results: boolean[] = [];
    for (let round = 0; round < rounds; round++) {
      const name = uniqueName('c1');
      await arm(name, 3, waiters, counter);
      await countDown(counter, name);
      await countDown(counter, name);
      // The count is 1: nobody may be awake yet, however long they wait.
      await sleep(100);
      early.push(
        ...waiters.filter((w) => w.messages.some((m) => m.type === 'woke' && m['ref'] === name)).map((w) => w.id),
      );
      const last = await countDown(counter, name);
      const woke = await Promise.all(waiters.map((waiter) => waiter.next<Woke>('woke', { ref: name }, 10_000)));
      results.push(...woke.map((w) => w.result));
      early.push(...woke.filter((w) => w.at < last.called).map((w) => w.id));
      latencies.push(...woke.map((w) => ms(last.at, w.at)));
      expect(await servers.admin.exists(name)).toBe(0);
    }
    recordFigures('C1 latch, 8 waiters', {
      wakes: latencies.length,
      wakeP50Ms: percentile(latencies, 50),
      wakeP99Ms: percentile(latencies, 99),
      wakeMaxMs: max(latencies),
      early: early.length,
    });
    expect(results).toEqual(latencies.map(() => true));
    expect(early).toEqual([]);
    expect(percentile(latencies, 50)).toBeLessThanOrEqual(WAKE_P50_MS);
    expect(max(latencies)).toBeLessThanOrEqual(C1_WAKE_MS);
    await closeAll([...waiters, counter]);
  });
});

// Timed against each waiter's subscriber reconnect, which the workers learn from the client's connection events:
// GLIDE has none (faults/glide.test.ts drops a GLIDE waiter's subscriber under a release instead).
describe.skipIf(onGlide)(
  'C2: the subscriber connections are killed (CLIENT KILL TYPE pubsub) shortly before the last countDown',
  () => {
    it(`all wake soon after the later of their reconnect and the countDown`, async () => {
      const { waiters, counter } = await start();
      // Kill this long before the countDown: the "0" is published while every subscriber is away (0, 10, 30),
      // while they come back (60), or once they are back (150). New connections are refused for AWAY_MS after
      // the kill, so that this holds whatever the client's reconnect delay (node-redis reconnects at once,
      // ioredis after 50 ms).
      const offsets = Array.from({ length: soak }, () => [0, 10, 30, 60, 150]).flat();
      const latencies: number[] = [];
      const sinceCountDown: number[] = [];
      let missed = 0;
      let notKilled = 0;
      const results: boolean[] = [];
      for (const offset of offsets) {
        const name = uniqueName('c2');
        await arm(name, 2, waiters, counter);
        await countDown(counter, name);
        const admit = await servers.refuseConnections();
        const killedAt = process.hrtime.bigint();
        const killed = Number(await servers.admin.client('KILL', 'TYPE', 'pubsub'));
        const admitted = sleep(AWAY_MS).then(admit);
        await sleep(offset);
        const last = await countDown(counter, name);
        await admitted;
        const woke = await Promise.all(waiters.map((waiter) => waiter.next<Woke>('woke', { ref: name }, 10_000)));
        results.push(...woke.map((w) => w.result));
        for (const [index, waiter] of waiters.entries()) {
          const back = waiter.messages.find(
            (m): m is SubscriberEvent =>
              m.type === 'subscriber' && m['event'] === 'ready' && (m['at'] as bigint) > killedAt,
          );
          const at = woke[index]!.at;
          if (!back) {
            notKilled++;
            continue;
          }
          // Reconnected after the "0" went out: this waiter can only have learned it by its re-check.
          if (back.at > last.at) missed++;
          latencies.push(ms(back.at > last.at ? back.at : last.at, at));
          sinceCountDown.push(ms(last.at, at));
        }
        expect(killed).toBe(WAITERS);
        expect(await servers.admin.exists(name)).toBe(0);
        // Every subscriber back and subscribed before the next round's kill.
        await until(
          () =>
            Promise.resolve(
              waiters.every((w) =>
                w.messages.some(
                  (m) => m.type === 'subscriber' && m['event'] === 'ready' && (m['at'] as bigint) > killedAt,
                ),
              ),
            ),
          'every subscriber reconnected',
        );
      }
      recordFigures('C2 latch, pubsub killed before the last countDown', {
        wakes: latencies.length,
        missedZeroMessage: missed,
        wakeAfterLaterP50Ms: percentile(latencies, 50),
        wakeAfterLaterMaxMs: max(latencies),
        wakeAfterCountDownMaxMs: max(sinceCountDown),
      });
      expect(notKilled).toBe(0);
      expect(results).toEqual(offsets.flatMap(() => waiters.map(() => true)));
      // The re-check after a reconnect is what this scenario is about: it must have been needed.
      expect(missed).toBeGreaterThanOrEqual(WAITERS);
      expect(percentile(latencies, 50)).toBeLessThanOrEqual(WAKE_P50_MS);
      expect(max(latencies)).toBeLessThanOrEqual(WAKE_MS);
      await closeAll([...waiters, counter]);
    });
  },
);
