// Read-write lock across processes: RW1 (readers beside readers, never beside a writer), RW2 (SIGKILLed
// reader, SIGKILLed writer), RW3 (a writer among continuously overlapping readers is not starved).
import { describe, expect, it } from 'vitest';
import {
  leftovers,
  maxConcurrent,
  percentile,
  rwOverlaps,
  staleReads,
  tokensRise,
  type KindedSection,
} from '../../support/checkers.js';
import { uniqueName, until } from '../../support/fixture.js';
import { recordFigures, soak } from '../../support/figures.js';
import { LATE_MS, useFaultServers } from '../../support/fault-servers.js';
import { startWorkers, Worker, type WorkerConfig } from '../../support/workers.js';
import type { SectionReport } from '../../fixtures/lock-worker.ts';
import { readWriteLockKeys } from '../../../src/redis/keys.js';

const L = 1500; // the workers' watchdogTimeout: a dead holder's lease, read or write
const R = L / 3; // renewal period: a dead holder's last renewal came at most R before its kill

// A test that starts worker processes gets 120 s: on a loaded machine their start alone can take 20 s.
const servers = useFaultServers({ resource: true });

const writersKey = (name: string): string => readWriteLockKeys('', name).writersKey;
const ms = (from: bigint, to: bigint): number => Number(to - from) / 1e6;

interface Run {
  sections: (KindedSection & SectionReport)[];
  counter: number;
  accepted: number;
  exitCodes: (number | null)[];
  seconds: number;
}

/** Processes subscribed to the lock's channel: those with a flow waiting (a failed attempt made). */
async function waitingProcesses(name: string): Promise<number> {
  const [, subscribers] = (await servers.admin.pubsub('NUMSUB', `redisson_rwlock:{${name}}`)) as [
    string,
    number | string,
  ];
  return Number(subscribers);
}

/** Read holds in the lock hash now (its fields other than `mode`, the memo fields `<owner>:acq|rel` and holder info `<owner>:info`). */
async function readHolds(name: string): Promise<number> {
  const fields = await servers.admin.hkeys(name);
  return fields.filter((f) => f !== 'mode' && !/:(acq|rel|info|write)$/.test(f)).length;
}

/** Worker processes, killed after the test if they are still running. */
function workers(configs: readonly WorkerConfig[]): Worker[] {
  const started = startWorkers(configs);
  servers.cleanup(() => Promise.all(started.map((worker) => worker.kill())));
  return started;
}

/** Counter workers on the read-write lock `name` (`kind` rw mixes readers and writers). */
function rwCounters(
  name: string,
  processes: number,
  config: Partial<WorkerConfig> & Pick<WorkerConfig, 'kind'>,
  prefix = 'p',
): Worker[] {
  return workers(
    Array.from({ length: processes }, (_, i) => ({
      mode: 'counter' as const,
      id: `${prefix}${i}`,
      lockUrl: servers.lock.url,
      resourceUrl: servers.resource.url,
      name,
      sleepMs: 10,
      watchdogTimeout: L,
      ...config,
    })),
  );
}

/** A `hold` worker on one side of the read-write lock. */
function holder(name: string, kind: 'read' | 'write'): Worker {
  return workers([
    {
      mode: 'hold',
      kind,
      id: 'H',
      lockUrl: servers.lock.url,
      resourceUrl: servers.resource.url,
      name,
      watchdogTimeout: L,
    },
  ])[0]!;
}

/** Waits for every counter worker's report and exit; each flow of each process is an owner. */
async function collect(name: string, counters: readonly Worker[], start: number): Promise<Run> {
  const run: Run = { sections: [], counter: 0, accepted: 0, exitCodes: [], seconds: 0 };
  await Promise.all(
    counters.map(async (worker) => {
      const done = await worker.next<{ id: string; type: string; sections: SectionReport[] }>('done', 120_000);
      for (const s of done.sections) {
        run.sections.push({ ...s, owner: `${worker.id}:${s.flow}` });
        if (s.accepted) run.accepted++;
      }
      run.exitCodes.push(await worker.exited);
    }),
  );
  run.counter = Number((await servers.resourceAdmin.get(`counter:${name}`)) ?? 0);
  run.seconds = (performance.now() - start) / 1000;
  return run;
}

/**
 * What every run keeps: no reader beside a writer and no two writers, every write counted and fenced in
 * rising order, every reader saw all earlier writes and their latest token.
 */
function expectConsistent(run: Run): void {
  const writes = run.sections.filter((s) => s.kind === 'write');
  expect(run.exitCodes.every((code) => code === 0)).toBe(true);
  expect(rwOverlaps(run.sections)).toEqual([]);
  expect(run.counter).toBe(writes.length);
  expect(tokensRise(writes)).toBe(true);
  expect(run.accepted).toBe(run.sections.length);
  expect(staleReads(run.sections)).toEqual([]);
}

function waits(sections: readonly SectionReport[]): number[] {
  return sections.map((s) => ms(s.requested, s.enter));
}

describe('RW1: 6 processes x 2 flows mix readers (70 %) and writers on one read-write lock', () => {
  it('readers run together but never beside a writer, writers one at a time, no lost or stale update', async () => {
    const name = uniqueName('rw1');
    const processes = soak > 1 ? 12 : 6;
    const perProcess = 100 * soak;
    const start = performance.now();
    const run = await collect(
      name,
      rwCounters(name, processes, { kind: 'rw', readRatio: 0.7, flows: 2, count: perProcess }),
      start,
    );
    const reads = run.sections.filter((s) => s.kind === 'read');
    const writes = run.sections.filter((s) => s.kind === 'write');
    const readers = maxConcurrent(run.sections.filter((s) => s.kind === 'read'));
    recordFigures('RW1 readers and writers', {
      sections: run.sections.length,
      reads: reads.length,
      writes: writes.length,
      counter: run.counter,
      rwOverlaps: rwOverlaps(run.sections).length,
      staleReads: staleReads(run.sections).length,
      maxConcurrentReaders: readers,
      readWaitP50Ms: percentile(waits(reads), 50),
      writeWaitP50Ms: percentile(waits(writes), 50),
      writeWaitMaxMs: Math.max(...waits(writes)),
      seconds: run.seconds,
    });
    expect(run.sections).toHaveLength(processes * perProcess);
    expect(writes.length).toBeGreaterThan(0);
    expectConsistent(run);
    expect(readers).toBeGreaterThanOrEqual(2);
    expect(await leftovers(servers.admin, name)).toEqual({ keys: [], channels: [] });
  }, 120_000);
});

describe('RW2: a holder of the read-write lock is SIGKILLed while 4 processes want it', () => {
  it('a dead reader holds back the waiting writer (and the readers behind it) for at most about L (L + R)', async () => {
    const name = uniqueName('rw2r');
    const reader = holder(name, 'read');
    await reader.next('acquired');
    const start = performance.now();
    // A writer comes first and waits (registered): the readers that come after it wait too, so the reader
    // that dies is alone in the lock, as when the only reading process crashes. Nobody's release will
    // clean up after it: only its lease can.
    const [writer] = rwCounters(name, 1, { kind: 'write', count: 10 * soak }, 'w');
    await until(async () => (await servers.admin.zcard(writersKey(name))) > 0, 'the writer waiting', 30_000); // includes a process start
    const counters = [writer!, ...rwCounters(name, 3, { kind: 'rw', readRatio: 0.5, count: 25 * soak })];
    await until(async () => (await waitingProcesses(name)) === 4, 'all 4 processes waiting', 30_000); // includes process starts
    expect(await readHolds(name)).toBe(1);
    const killedAt = process.hrtime.bigint();
    await reader.kill();
    // Fail in seconds, with the lock's state, rather than at the test's timeout when nobody gets in.
    await until(
      async () =>
        (await servers.admin.hget(name, 'mode')) === 'write' ||
        Number(await servers.resourceAdmin.get(`counter:${name}`)) > 0,
      'a writer took the lock after the reader died',
      L + 3000,
    ).catch(async (error: unknown) => {
      const state = {
        hash: await servers.admin.hgetall(name),
        pttl: await servers.admin.pttl(name),
        keys: await servers.admin.keys(`*${name}*`),
      };
      throw new Error(`${String(error)}; lock state: ${JSON.stringify(state)}`);
    });
    const run = await collect(name, counters, start);
    const writes = run.sections.filter((s) => s.kind === 'write');
    const firstWrite = writes.reduce((min, s) => (s.enter < min ? s.enter : min), writes[0]!.enter);
    const stalled = run.sections.filter((s) => s.requested < killedAt && s.enter > killedAt);
    recordFigures('RW2 SIGKILLed reader', {
      firstWriteAfterKillMs: ms(killedAt, firstWrite),
      lastWaiterInAfterKillMs: Math.max(...stalled.map((s) => ms(killedAt, s.enter))),
      sections: run.sections.length,
      rwOverlaps: rwOverlaps(run.sections).length,
    });
    expect(ms(killedAt, firstWrite)).toBeGreaterThan(0);
    // About L (the dead reader's lease from its last renewal); nothing else would ever free the lock.
    expect(ms(killedAt, firstWrite)).toBeLessThanOrEqual(L + R + LATE_MS);
    expect(stalled).toHaveLength(4);
    // The last of them comes after the sections before it (4 processes, one after the other, on a loaded
    // machine); one left behind the dead holder would wait for good.
    expect(Math.max(...stalled.map((s) => ms(killedAt, s.enter)))).toBeLessThanOrEqual(L + R + 1500);
    expect(run.sections).toHaveLength(10 * soak + 3 * 25 * soak);
    expectConsistent(run);
  }, 120_000);

  it('a dead writer holds back readers and writers for at most about L (L + R)', async () => {
    const name = uniqueName('rw2w');
    const writer = holder(name, 'write');
    const held = await writer.next<{ id: string; type: string; token: bigint }>('acquired');
    const start = performance.now();
    const counters = rwCounters(name, 4, { kind: 'rw', readRatio: 0.5, count: 25 * soak });
    await until(async () => (await waitingProcesses(name)) === 4, 'all 4 processes waiting', 30_000); // includes process starts
    const killedAt = process.hrtime.bigint();
    await writer.kill();
    const run = await collect(name, counters, start);
    const firstEnter = run.sections.reduce((min, s) => (s.enter < min ? s.enter : min), run.sections[0]!.enter);
    const stalled = run.sections.filter((s) => s.requested < killedAt && s.enter > killedAt);
    recordFigures('RW2 SIGKILLed writer', {
      freeAfterKillMs: ms(killedAt, firstEnter),
      lastWaiterInAfterKillMs: Math.max(...stalled.map((s) => ms(killedAt, s.enter))),
      sections: run.sections.length,
      rwOverlaps: rwOverlaps(run.sections).length,
    });
    expect(ms(killedAt, firstEnter)).toBeGreaterThan(0);
    // About L (the dead writer's lease from its last renewal); nothing else would ever free the lock.
    expect(ms(killedAt, firstEnter)).toBeLessThanOrEqual(L + R + LATE_MS);
    expect(stalled).toHaveLength(4);
    expect(Math.max(...stalled.map((s) => ms(killedAt, s.enter)))).toBeLessThanOrEqual(L + R + 1500);
    expect(run.sections).toHaveLength(4 * 25 * soak);
    expectConsistent(run);
    expect(run.sections.filter((s) => s.kind === 'write').every((s) => s.token > held.token)).toBe(true);
  }, 120_000);
});

describe('RW3: one writer among 3 processes x 3 flows of readers that overlap without pause', () => {
  it('the writer is never starved: each write waits < 800 ms beyond the readers’ 40 ms holds', async () => {
    const name = uniqueName('rw3');
    const readHoldMs = 40;
    const start = performance.now();
    const readers = rwCounters(name, 3, { kind: 'read', flows: 3, durationMs: 60_000, sleepMs: readHoldMs }, 'r');
    // Readers in full flow before the writer comes.
    await until(async () => (await readHolds(name)) >= 3, 'readers holding together', 30_000); // includes 3 process starts
    const writes = 20 * soak;
    const [writer] = rwCounters(name, 1, { kind: 'write', count: writes, sleepMs: 2, pauseMs: 100 }, 'w');
    const written = await collect(name, [writer!], start);
    for (const reader of readers) reader.send({ cmd: 'stop' });
    const read = await collect(name, readers, start);
    const run: Run = {
      ...read,
      sections: [...read.sections, ...written.sections],
      accepted: read.accepted + written.accepted,
      exitCodes: [...read.exitCodes, ...written.exitCodes],
    };
    const writeSections = written.sections;
    const readSections = read.sections;
    // A write met contention when it asked while a reader was inside.
    const contended = writeSections.filter((w) =>
      readSections.some((r) => r.enter <= w.requested && w.requested < r.exit),
    );
    const writeWaits = waits(writeSections);
    recordFigures('RW3 writer among continuous readers', {
      writes: writeSections.length,
      contendedWrites: contended.length,
      reads: readSections.length,
      maxConcurrentReaders: maxConcurrent(run.sections.filter((s) => s.kind === 'read')),
      writeWaitP50Ms: percentile(writeWaits, 50),
      writeWaitMaxMs: Math.max(...writeWaits),
      readWaitP50Ms: percentile(waits(readSections), 50),
      readWaitMaxMs: Math.max(...waits(readSections)),
      rwOverlaps: rwOverlaps(run.sections).length,
      seconds: run.seconds,
    });
    expect(writeSections).toHaveLength(writes);
    expect(contended.length).toBeGreaterThanOrEqual(writes / 2);
    expect(maxConcurrent(run.sections.filter((s) => s.kind === 'read'))).toBeGreaterThanOrEqual(3);
    // Starvation would show as waits of seconds (up to the readers' 60 s run). A missed wake-up is retried at
    // the read holds' PTTL (renewed every 500 ms of 1500): at >= 1000 ms, which 800 ms still tells apart.
    expect(percentile(writeWaits, 50)).toBeLessThanOrEqual(readHoldMs + 300);
    expect(Math.max(...writeWaits)).toBeLessThanOrEqual(readHoldMs + 800);
    expectConsistent(run);
  }, 120_000);
});
