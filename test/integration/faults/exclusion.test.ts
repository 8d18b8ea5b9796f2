// T1 (counter exclusion), T12 (script-cache loss during T1), T20 (workers exit after close, nothing left).
// The workers' lock clients run on the client under test (`REDIS_CLIENT`).
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { overlaps, leftovers, tokensRise, type Section } from '../../support/checkers.js';
import { uniqueName } from '../../support/fixture.js';
import { recordFigures, soak } from '../../support/figures.js';
import { useFaultServers } from '../../support/fault-servers.js';
import { startWorkers, type Worker } from '../../support/workers.js';

// A test that starts worker processes gets 120 s: on a loaded machine their start alone can take 20 s.
const servers = useFaultServers({ resource: true });

interface CounterRun {
  sections: Section[];
  accepted: number;
  counter: number;
  exitDelaysMs: number[];
  exitCodes: (number | null)[];
  elapsedMs: number;
}

async function runCounter(name: string, processes: number, perProcess: number): Promise<CounterRun> {
  const start = performance.now();
  const workers = startWorkers(
    Array.from({ length: processes }, (_, i) => ({
      mode: 'counter' as const,
      id: `w${i}`,
      lockUrl: servers.lock.url,
      resourceUrl: servers.resource.url,
      name,
      count: perProcess,
      sleepMs: 2,
    })),
  );
  servers.cleanup(() => Promise.all(workers.map((worker) => worker.kill())));
  const sections: Section[] = [];
  let accepted = 0;
  const exitDelaysMs: number[] = [];
  const exitCodes: (number | null)[] = [];
  const finished = Promise.all(
    workers.map(async (worker) => {
      const done = await worker.next<{ id: string; type: string; sections: (Section & { accepted: boolean })[] }>(
        'done',
        120_000,
      );
      const doneAt = performance.now();
      for (const s of done.sections) {
        sections.push({ owner: worker.id, enter: s.enter, exit: s.exit, token: s.token });
        if (s.accepted) accepted++;
      }
      exitCodes.push(await worker.exited);
      exitDelaysMs.push(performance.now() - doneAt);
    }),
  );
  finished.catch(() => undefined);
  await Promise.race([finished, stalled(name, workers, finished)]);
  const counter = Number(await servers.resourceAdmin.get(`counter:${name}`));
  return { sections, accepted, counter, exitDelaysMs, exitCodes, elapsedMs: performance.now() - start };
}

/**
 * How long the shared counter may stand still before a run counts as stalled. The clock starts before the
 * workers do, and 8 processes starting on a loaded machine can take 20 s before the first section.
 */
const STALL_MS = 30_000;

/**
 * Rejects, with what every unfinished worker says it is doing and the lock's state, once the counter of run
 * `name` stood still for STALL_MS (instead of the test's timeout saying nothing); settles when `finished` does.
 */
async function stalled(name: string, workers: readonly Worker[], finished: Promise<unknown>): Promise<never> {
  const state = { finished: false };
  void finished.then(
    () => (state.finished = true),
    () => (state.finished = true),
  );
  let last = '';
  let movedAt = performance.now();
  while (!state.finished) {
    await sleep(250);
    const now = String(await servers.resourceAdmin.get(`counter:${name}`));
    if (now !== last) {
      last = now;
      movedAt = performance.now();
    } else if (performance.now() - movedAt > STALL_MS) {
      const waiting = workers.filter((w) => !w.messages.some((m) => m.type === 'done'));
      for (const worker of waiting) worker.send({ cmd: 'status' });
      const statuses = await Promise.all(waiting.map((w) => w.next('status', 2000).catch(String)));
      const lock = { hash: await servers.admin.hgetall(name), pttl: await servers.admin.pttl(name) };
      throw new Error(`stalled at counter ${last} for ${STALL_MS} ms: ${JSON.stringify({ statuses, lock })}`);
    }
  }
  return new Promise<never>(() => undefined);
}

describe('T1: 8 processes x 200 critical sections on one counter (soak: 16 x 200 x SOAK)', () => {
  it('counts exactly, never overlaps, and fences in order; workers exit soon after close, before any library timer (T20)', async () => {
    const name = uniqueName('t1');
    const processes = soak > 1 ? 16 : 8;
    const perProcess = 200 * soak;
    const run = await runCounter(name, processes, perProcess);
    const total = processes * perProcess;
    const found = overlaps(run.sections);
    recordFigures('T1 counter exclusion', {
      sections: run.sections.length,
      counter: run.counter,
      overlaps: found.length,
      fencedAccepted: run.accepted,
      seconds: run.elapsedMs / 1000,
      maxExitAfterCloseMs: Math.max(...run.exitDelaysMs),
    });
    expect(run.exitCodes).toEqual(Array.from({ length: processes }, () => 0));
    expect(run.sections).toHaveLength(total);
    expect(run.counter).toBe(total);
    expect(found).toEqual([]);
    expect(tokensRise(run.sections)).toBe(true);
    expect(run.accepted).toBe(total);
    // Below LINGER_MS (2 s), the shortest library timer that could keep a process alive if it lost its
    // unref(); 8 processes exiting at once on a loaded machine need the rest.
    expect(Math.max(...run.exitDelaysMs)).toBeLessThan(1800);
    expect(await leftovers(servers.admin, name)).toEqual({ keys: [], channels: [] });
  }, 120_000);
});

describe('T12: SCRIPT FLUSH every 100 ms during T1', () => {
  it('keeps the T1 invariants and no NOSCRIPT reaches a caller', async () => {
    const name = uniqueName('t12');
    let flushes = 0;
    const flusher = setInterval(() => {
      flushes++;
      servers.admin.script('FLUSH').catch(() => undefined);
    }, 100);
    let run: CounterRun;
    try {
      run = await runCounter(name, 4, 150 * soak);
    } finally {
      clearInterval(flusher);
    }
    const total = 4 * 150 * soak;
    recordFigures('T12 script flush', {
      sections: run.sections.length,
      counter: run.counter,
      overlaps: overlaps(run.sections).length,
      flushes,
    });
    expect(flushes).toBeGreaterThan(3);
    expect(run.exitCodes).toEqual([0, 0, 0, 0]);
    expect(run.counter).toBe(total);
    expect(overlaps(run.sections)).toEqual([]);
    expect(tokensRise(run.sections)).toBe(true);
  }, 120_000);
});
