// Fair lock (RFairLock) across processes: F1 (exclusion and FIFO order), F2 (pub/sub kills and SCRIPT FLUSH),
// F3 (SIGKILLed holder), F4 (SIGKILLed queued waiter), F5 (Redis restarted under a holder and a queue).
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import {
  fifoViolations,
  handoffGaps,
  leftovers,
  overlaps,
  percentile,
  tokensRise,
  type QueueSnapshot,
  type Section,
} from '../../support/checkers.js';
import { newRedis, uniqueName, type Redis, until } from '../../support/fixture.js';
import { recordFigures, soak } from '../../support/figures.js';
import { startRedisServer, type LocalRedis } from '../../support/redis-server.js';
import { LATE_MS, useFaultServers } from '../../support/fault-servers.js';
import { startWorkers, Worker, type WorkerConfig } from '../../support/workers.js';
import type { SectionReport } from '../../fixtures/lock-worker.ts';
import { fairLockKeys } from '../../../src/redis/keys.js';

const L = 1500; // the workers' watchdogTimeout: lease, and how long a silent waiter keeps its place
const R = L / 3; // renewal period, and the longest a live waiter goes without refreshing its place

// A test that starts worker processes gets 120 s: on a loaded machine their start alone can take 20 s.
const servers = useFaultServers({ resource: true });

const queueKey = (name: string): string => fairLockKeys('', name).queueKey;
const fenceKey = (name: string): string => fairLockKeys('', name).fenceKey;
const ms = (from: bigint, to: bigint): number => Number(to - from) / 1e6;

/** Worker processes, killed after the test if they are still running. */
function workers(configs: readonly WorkerConfig[]): Worker[] {
  const started = startWorkers(configs);
  servers.cleanup(() => Promise.all(started.map((worker) => worker.kill())));
  return started;
}

/** `processes` fair-lock counter workers on `server`, one waiting flow each (the FIFO check needs that). */
function fairCounters(
  server: LocalRedis,
  name: string,
  processes: number,
  perProcess: number,
  extra: Partial<WorkerConfig> = {},
): Worker[] {
  return workers(
    Array.from({ length: processes }, (_, i) => ({
      mode: 'counter' as const,
      kind: 'fair' as const,
      id: `f${i}`,
      lockUrl: server.url,
      resourceUrl: servers.resource.url,
      name,
      count: perProcess,
      sleepMs: 2,
      watchdogTimeout: L,
      ...extra,
    })),
  );
}

/** A fair-lock `hold` worker (acquires once, then obeys unlock/write/close). */
function fairHolder(server: LocalRedis, name: string, id: string, watchdogTimeout = L): Worker {
  return workers([
    {
      mode: 'hold',
      kind: 'fair',
      id,
      lockUrl: server.url,
      resourceUrl: servers.resource.url,
      name,
      watchdogTimeout,
    },
  ])[0]!;
}

interface Run {
  sections: (Section & SectionReport)[];
  /** Client id -> worker id, to read waiter ids in queue snapshots. */
  owners: Map<string, string>;
  accepted: number;
  counter: number;
  failures: number;
  exitCodes: (number | null)[];
  seconds: number;
}

/** Waits for every counter worker's report and exit. */
async function collect(name: string, counters: readonly Worker[], start: number): Promise<Run> {
  const run: Run = { sections: [], owners: new Map(), accepted: 0, counter: 0, failures: 0, exitCodes: [], seconds: 0 };
  await Promise.all(
    counters.map(async (worker) => {
      const done = await worker.next<{
        id: string;
        type: string;
        sections: SectionReport[];
        clientId: string;
        failures: number;
      }>('done', 120_000);
      run.owners.set(done.clientId, worker.id);
      run.failures += done.failures;
      for (const s of done.sections) {
        run.sections.push({ ...s, owner: worker.id });
        if (s.accepted) run.accepted++;
      }
      run.exitCodes.push(await worker.exited);
    }),
  );
  run.counter = Number(await servers.resourceAdmin.get(`counter:${name}`));
  run.seconds = (performance.now() - start) / 1000;
  return run;
}

/**
 * Reads the queue and the fencing counter in one MULTI every few ms until stopped (for fifoViolations);
 * errors (a restarting server) just skip a snapshot.
 */
function watchQueue(redis: Redis, name: string): { stop: () => Promise<QueueSnapshot[]> } {
  const snapshots: QueueSnapshot[] = [];
  const state = { stopped: false };
  const loop = (async () => {
    while (!state.stopped) {
      try {
        const replies = await redis.multi().lrange(queueKey(name), 0, -1).get(fenceKey(name)).exec();
        const queue = replies?.[0]?.[1] as string[] | undefined;
        const fence = replies?.[1]?.[1] as string | null | undefined;
        if (queue) snapshots.push({ queue, fence: BigInt(fence ?? 0) });
      } catch {
        // The server is away: no snapshot this time.
      }
      await sleep(5);
    }
  })();
  return {
    stop: async () => {
      state.stopped = true;
      await loop;
      return snapshots;
    },
  };
}

/** The invariants every fair-lock run keeps: one holder at a time, no lost update, tokens fenced and rising. */
function expectExclusive(run: Run, total: number): void {
  expect(run.exitCodes.every((code) => code === 0)).toBe(true);
  expect(run.sections).toHaveLength(total);
  expect(overlaps(run.sections)).toEqual([]);
  expect(run.counter).toBe(total);
  expect(tokensRise(run.sections)).toBe(true);
  expect(run.accepted).toBe(total);
}

describe('F1: 8 processes x 150 fair-lock sections on one counter (soak: 16 x 150 x SOAK)', () => {
  it('counts exactly, never overlaps, fences in order, and grants in queue order', async () => {
    const name = uniqueName('f1');
    const processes = soak > 1 ? 16 : 8;
    const perProcess = 150 * soak;
    const watcher = watchQueue(servers.admin, name);
    const start = performance.now();
    // A 10 s lease: nothing here is about leases, and a worker stalled for L on a loaded machine would lose its
    // hold mid-section (renewal deadline) and fail the run.
    const counters = fairCounters(servers.lock, name, processes, perProcess, { watchdogTimeout: 10_000 });
    const run = await collect(name, counters, start);
    const snapshots = await watcher.stop();
    const violations = fifoViolations(snapshots, run.sections, run.owners);
    // Snapshots with two or more waiters in line are what the order check stands on.
    const queued = snapshots.filter((s) => s.queue.length >= 2);
    const gaps = handoffGaps(run.sections);
    recordFigures('F1 fair counter', {
      sections: run.sections.length,
      counter: run.counter,
      overlaps: overlaps(run.sections).length,
      fencedAccepted: run.accepted,
      orderViolations: violations.length,
      queueSnapshots: queued.length,
      meanQueueLength: queued.reduce((sum, s) => sum + s.queue.length, 0) / Math.max(1, queued.length),
      handoffP50Ms: percentile(gaps, 50),
      handoffP99Ms: percentile(gaps, 99),
      seconds: run.seconds,
    });
    expectExclusive(run, processes * perProcess);
    expect(queued.length).toBeGreaterThan(20);
    expect(violations).toEqual([]);
    expect(await leftovers(servers.admin, name)).toEqual({ keys: [], channels: [] });
  }, 120_000);
});

describe('F2: pub/sub connections killed every 150 ms and SCRIPT FLUSH every 50 ms', () => {
  it('keeps the F1 invariants and the queue order; a lost wake-up stalls the line for seconds at most', async () => {
    const name = uniqueName('f2');
    const processes = 8;
    const perProcess = 30 * soak;
    let kills = 0;
    let flushes = 0;
    const killer = setInterval(() => {
      kills++;
      servers.admin.client('KILL', 'TYPE', 'pubsub').catch(() => undefined);
    }, 150);
    const flusher = setInterval(() => {
      flushes++;
      servers.admin.script('FLUSH').catch(() => undefined);
    }, 50);
    const watcher = watchQueue(servers.admin, name);
    let run: Run;
    try {
      // A 4.5 s lease (a refresh every 1.5 s): nothing here is about leases, and a worker stalled for 1.5 s on a
      // loaded machine would lose its hold mid-section.
      const counters = fairCounters(servers.lock, name, processes, perProcess, { watchdogTimeout: 4500 });
      run = await collect(name, counters, performance.now());
    } finally {
      clearInterval(killer);
      clearInterval(flusher);
    }
    const snapshots = await watcher.stop();
    const violations = fifoViolations(snapshots, run.sections, run.owners);
    const gaps = handoffGaps(run.sections);
    recordFigures('F2 fair, pubsub kills + SCRIPT FLUSH', {
      sections: run.sections.length,
      counter: run.counter,
      overlaps: overlaps(run.sections).length,
      orderViolations: violations.length,
      kills,
      flushes,
      handoffP50Ms: percentile(gaps, 50),
      handoffP99Ms: percentile(gaps, 99),
      handoffMaxMs: Math.max(...gaps),
      seconds: run.seconds,
    });
    expect(kills).toBeGreaterThan(3);
    expect(flushes).toBeGreaterThan(10);
    expectExclusive(run, processes * perProcess);
    expect(violations).toEqual([]);
    // The head's fallback is its refresh (every 1.5 s here); a stuck line would be unbounded. 3 s leaves room
    // for 9 processes, kills and flushes on a loaded machine.
    expect(Math.max(...gaps)).toBeLessThanOrEqual(3000);
  }, 120_000);
});

describe('F3: the holder is SIGKILLed while 4 processes wait in line', () => {
  it('the first in line gets the lock within about L (L + R) of the kill; then F1 invariants and order', async () => {
    const name = uniqueName('f3');
    const holder = fairHolder(servers.lock, name, 'H');
    const held = await holder.next<{ id: string; type: string; token: bigint }>('acquired');
    const watcher = watchQueue(servers.admin, name);
    const start = performance.now();
    const counters = fairCounters(servers.lock, name, 4, 25 * soak);
    // 30 s: this includes starting 4 processes on a loaded machine.
    await until(async () => (await servers.admin.llen(queueKey(name))) === 4, 'all 4 counter workers queued', 30_000);
    await sleep(200);
    const killedAt = process.hrtime.bigint();
    await holder.kill();
    const run = await collect(name, counters, start);
    const snapshots = await watcher.stop();
    const violations = fifoViolations(snapshots, run.sections, run.owners);
    const firstEnter = run.sections.reduce((min, s) => (s.enter < min ? s.enter : min), run.sections[0]!.enter);
    const freeAfterMs = ms(killedAt, firstEnter);
    recordFigures('F3 fair, SIGKILLed holder', {
      freeAfterKillMs: freeAfterMs,
      sections: run.sections.length,
      overlaps: overlaps(run.sections).length,
      orderViolations: violations.length,
    });
    expect(freeAfterMs).toBeGreaterThan(0);
    // The dead holder's lease ran from its last renewal (at most R before the kill): about L. The first in
    // line gets in by its retry at the TTL it saw; without it the line would stay stuck.
    expect(freeAfterMs).toBeLessThanOrEqual(L + R + LATE_MS);
    expectExclusive(run, 4 * 25 * soak);
    expect(run.sections.every((s) => s.token > held.token)).toBe(true);
    expect(violations).toEqual([]);
  }, 120_000);
});

describe('F4: a waiter first in line is SIGKILLed', () => {
  it('its place blocks the line for at most about L: the next waiter gets the lock within L + R of the kill', async () => {
    const name = uniqueName('f4');
    const holder = fairHolder(servers.lock, name, 'H');
    await holder.next('acquired');
    const doomed = fairHolder(servers.lock, name, 'W');
    const { clientId } = await doomed.next<{ id: string; type: string; clientId: string }>('waiting');
    await until(
      async () => (await servers.admin.lindex(queueKey(name), 0))?.startsWith(`${clientId}:`) === true,
      'W queued',
    );
    const watcher = watchQueue(servers.admin, name);
    const start = performance.now();
    const counters = fairCounters(servers.lock, name, 4, 25 * soak);
    await until(
      async () => (await servers.admin.llen(queueKey(name))) === 5,
      'W and 4 counter workers queued',
      30_000, // includes starting 4 processes
    );
    // First in line when it dies (read before the kill: a slow exit could outlast its place's deadline).
    expect(await servers.admin.lindex(queueKey(name), 0)).toMatch(new RegExp(`^${clientId}:w\\d+$`));
    const killedAt = process.hrtime.bigint();
    await doomed.kill();
    const releasedAt = process.hrtime.bigint();
    holder.send({ cmd: 'unlock' });
    expect(await holder.next('unlock')).toMatchObject({ ok: true });
    // The dead entry leaves the queue when a live waiter finds its deadline passed (at most L after its
    // latest refresh, which was at most R before the kill).
    let goneAt = 0n;
    await until(async () => {
      const queue = await servers.admin.lrange(queueKey(name), 0, -1);
      if (queue.some((id) => id.startsWith(`${clientId}:`))) return false;
      goneAt = process.hrtime.bigint();
      return true;
    }, 'the dead entry purged');
    const run = await collect(name, counters, start);
    const snapshots = await watcher.stop();
    const violations = fifoViolations(snapshots, run.sections, run.owners);
    const firstEnter = run.sections.reduce((min, s) => (s.enter < min ? s.enter : min), run.sections[0]!.enter);
    const blockedMs = ms(releasedAt, firstEnter);
    recordFigures('F4 fair, SIGKILLed waiter first in line', {
      blockedAfterReleaseMs: blockedMs,
      nextGrantAfterKillMs: ms(killedAt, firstEnter),
      entryGoneAfterKillMs: ms(killedAt, goneAt),
      sections: run.sections.length,
      orderViolations: violations.length,
    });
    // About L: the dead entry's deadline (its last refresh was at most R before the kill); a live waiter
    // that never purged it would block the line for good.
    expect(ms(killedAt, firstEnter)).toBeLessThanOrEqual(L + R + LATE_MS);
    expect(ms(killedAt, goneAt)).toBeLessThanOrEqual(L + R + LATE_MS);
    expectExclusive(run, 4 * 25 * soak);
    expect(violations).toEqual([]);
    expect(await leftovers(servers.admin, name)).toEqual({ keys: [], channels: [] });
  }, 120_000);
});

/** F5's holder's watchdogTimeout. */
const H_LEASE = 4500;

describe('F5: Redis restarted without persistence while a fair lock is held and 4 processes wait in line', () => {
  it('the holder learns it lost from its next renewal, the line recovers, tokens never go backwards', async () => {
    // A server of its own: the restart must not disturb the other scenarios' lock server.
    const server = await startRedisServer();
    servers.cleanup(() => server.stop());
    const serverAdmin = newRedis(server, { retryStrategy: () => 50 });
    serverAdmin.on('error', () => undefined);
    servers.cleanup(() => serverAdmin.disconnect());
    const name = uniqueName('f5');
    // Order is not promised across the restart (the queue is lost; waiters take their places back in the
    // order they retry, each at the head): violations after it are only reported.
    const watcher = watchQueue(serverAdmin, name);
    const start = performance.now();
    // The counters run until told to stop, once the line has recovered: with a fixed count they could finish
    // every section before the holder's process started (a loaded machine starts processes slowly).
    const counters = fairCounters(server, name, 4, 0, { sleepMs: 5, tolerateFaults: true, durationMs: 90_000 });
    const sectionsDone = async (): Promise<number> => Number(await servers.resourceAdmin.get(`counter:${name}`));
    // Some sections before the restart, so that tokens from before it exist to compare with.
    await until(async () => (await sectionsDone()) >= 20, '20 sections done', 30_000); // includes 4 process starts
    // H's own lease is longer (renewed every R_H = 1.5 s of 4.5 s): the kill, the restart and H's reconnect
    // then have at least 3 s before H's deadline, so its next renewal reaches the restarted server and finds
    // the lock gone, however slowly a loaded machine restarts the server.
    const holder = fairHolder(server, name, 'H', H_LEASE);
    const held = await holder.next<{ id: string; type: string; token: bigint }>('acquired');
    await sleep(200);
    const killedAt = process.hrtime.bigint();
    await server.kill();
    await server.restart();
    const restartedAt = process.hrtime.bigint();
    const aborted = await holder.next<{ id: string; type: string; at: bigint; reason?: string }>('aborted', 10_000);
    // The line recovers: 20 sections after the holder learned it lost (it still holds nothing in Redis).
    const atLoss = await sectionsDone();
    await until(async () => (await sectionsDone()) >= atLoss + 20, '20 sections after the restart', 20_000);
    for (const counter of counters) counter.send({ cmd: 'stop' });
    const run = await collect(name, counters, start);
    const violations = fifoViolations(await watcher.stop(), run.sections, run.owners);
    holder.send({ cmd: 'write' });
    const write = await holder.next('write');
    holder.send({ cmd: 'unlock' });
    const unlock = await holder.next('unlock');
    const before = run.sections.filter((s) => s.token < held.token);
    // The workers may reconnect before restart() has seen the server answer: "after" starts at the kill.
    const after = run.sections.filter((s) => s.enter > killedAt);
    const firstAfter = after.reduce((min, s) => (s.enter < min ? s.enter : min), after[0]?.enter ?? restartedAt);
    recordFigures('F5 fair, restart without persistence', {
      holderToldAfterRestartMs: ms(restartedAt, aborted.at),
      lineRecoveredAfterRestartMs: ms(restartedAt, firstAfter),
      sectionsBefore: before.length,
      sectionsAfter: after.length,
      overlaps: overlaps(run.sections).length,
      failures: run.failures,
      orderViolations: violations.length,
      orderViolationsBeforeRestart: violations.filter((v) => v.waitingToken < held.token).length,
      lateWriteAccepted: Boolean(write['accepted']),
    });
    // Told by the renewal that found the lock gone (within R_H of the restart plus a reconnect, the figure
    // says how long), not by its lease deadline running out (H_LEASE after the last renewal).
    expect(aborted.reason).toBe('the watchdog found it held by another owner or gone');
    expect(ms(restartedAt, aborted.at)).toBeLessThanOrEqual(H_LEASE / 3 + 1000);
    expect(after.length).toBeGreaterThan(0);
    expect(ms(restartedAt, firstAfter)).toBeLessThanOrEqual(2000);
    // Nobody else held the lock at the restart (the holder did), so no counter section lost its hold.
    expect(run.sections.filter((s) => s.lostAt !== undefined || s.releaseError !== undefined)).toEqual([]);
    expect(before.length + after.length).toBe(run.sections.length);
    expect(run.sections.filter((s) => s.token > held.token).every((s) => s.enter > killedAt)).toBe(true);
    expectExclusive(run, run.counter);
    // Up to the restart the line kept its order (grants before the holder's came before the restart).
    expect(violations.filter((v) => v.waitingToken < held.token)).toEqual([]);
    expect(write['accepted']).toBe(false);
    expect(unlock).toMatchObject({ ok: false, code: 'LOCK_NOT_HELD' });
  }, 120_000);
});
