/** Writes the benchmark results as RESULTS.md (machine, versions, tables, goals) and one SVG chart per scenario. */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { percentile } from '../test/support/checkers.ts';
import { WIRE_FLOORS } from './floors.ts';

export type ScenarioId = 'a' | 'b' | 'c' | 'd' | 'e' | 'f' | 'g' | 'h' | 'i';

export interface Measurement {
  readonly library: string;
  readonly scenario: ScenarioId;
  readonly acquisitions: number;
  readonly opsPerSecond?: number;
  readonly p50Ms?: number;
  readonly p99Ms?: number;
  readonly roundTripsPerAcquisition?: number;
  readonly serverOpsPerAcquisition?: number;
  /** (a), (b), (i): wall time, this process's CPU and the lock server's CPU per cycle, µs (medians of rounds). */
  readonly wallUsPerAcquisition?: number;
  readonly clientCpuUsPerAcquisition?: number;
  readonly serverCpuUsPerAcquisition?: number;
  /**
   * The same three figures of each round, in round order (every library of a scenario runs once per round),
   * so that two libraries are compared round by round: drift of the machine between rounds cancels.
   */
  readonly perRound?: readonly Readonly<Record<CycleFigure, number>>[];
  readonly handoffP50Ms?: number;
  readonly handoffP99Ms?: number;
  readonly waitP50Ms?: number;
  readonly waitP99Ms?: number;
  readonly maxWaitMs?: number;
  readonly fairness?: number;
  readonly overlaps?: number;
  readonly lostUpdates?: number;
  readonly roundTripsPerPeriod?: number;
  readonly roundTripsPer100LocksPerPeriod?: number;
  readonly cpuMsPerPeriod?: number;
  readonly heldAfterThreePeriods?: boolean;
  /** (f): server operations of one uncontended lock + unlock cycle of the same lock. */
  readonly uncontendedServerOps?: number;
  /** (g): the shared (read) and exclusive (write) acquisitions, apart. */
  readonly readsPerSecond?: number;
  readonly writesPerSecond?: number;
  readonly readWaitP50Ms?: number;
  readonly readWaitP99Ms?: number;
  readonly writeWaitP50Ms?: number;
  readonly writeWaitP99Ms?: number;
  readonly maxConcurrentReaders?: number;
  /** (h): acquire script calls per acquisition (MONITOR pass): 1 is no failed attempt. */
  readonly acquireAttemptsPerAcquisition?: number;
  /** (h): SUBSCRIBE and UNSUBSCRIBE commands per acquisition (MONITOR pass). */
  readonly subscribesPerAcquisition?: number;
  /** (h): the most holders of a permit at once, by the INCR counter on the resource Redis. */
  readonly mostHolders?: number;
  /** (h): the most sections inside at once, by their times on the shared monotonic clock. */
  readonly mostHoldersByClock?: number;
}

export const SCENARIOS: Record<ScenarioId, string> = {
  a: '(a) one flow, lock + unlock in a loop on one key',
  b: '(b) 64 concurrent flows on distinct keys',
  c: '(c) 8 processes contending for one key, 1 ms critical section',
  d: '(d) 200 concurrent flows in one process on one key, 1 ms critical section',
  e: '(e) many locks held at once in watchdog mode for three renewal periods (ours: lease / 3)',
  f: '(f) fair lock: 8 processes contending for one key, 1 ms critical section',
  g: '(g) read-write lock: 8 processes on one key, 90 % reads, 1 ms critical sections',
  h: '(h) semaphore of 3 permits: 8 processes each taking 1 permit in a loop, 1 ms hold',
  i: '(i) OpenTelemetry: (a) for flowlock without and with flowlock/opentelemetry',
};

/**
 * How a library is named in a scenario's table and chart: (f) and (g) compare flowlock's kinds of lock, (h)
 * semaphores.
 */
function nameIn(scenario: ScenarioId, library: string): string {
  if (library === 'flowlock-withlock') return 'flowlock (withLock)';
  if (library === 'flowlock-node-redis') return 'flowlock (node-redis 6)';
  if (library === 'flowlock-glide') return 'flowlock (Valkey GLIDE)';
  if (library === 'flowlock-iovalkey') return 'flowlock (iovalkey)';
  if (library === 'flowlock-otel-off') return 'flowlock, no subscriber';
  if (library === 'flowlock-otel-api') return 'flowlock + instrumentation, no SDK';
  if (library === 'flowlock-otel-sdk') return 'flowlock + instrumentation + SDK';
  if (library === 'flowlock-otel-spans') return 'flowlock + instrumentation + SDK, spans only (no meter provider)';
  if (library === 'ioredis-otel-sdk') return 'flowlock + instrumentation-ioredis (not ours) + SDK';
  if (library === 'flowlock-holder-info-off') return 'flowlock, no subscriber, holderInfo: false';
  if (scenario === 'h') {
    if (library === 'flowlock-semaphore') return 'flowlock RSemaphore';
    if (library === 'flowlock-permit-semaphore') return 'flowlock RPermitExpirableSemaphore';
    if (library === 'redis-semaphore') return 'redis-semaphore Semaphore';
    if (library === 'fifo-ticket-floor') return 'FIFO ticket semaphore (the floor of a fair one)';
    if (library === 'fifo-ticket-floor-confirmed')
      return 'FIFO ticket semaphore, woken waiter confirms (the floor of a fair one whose waiters take their permits)';
    return library;
  }
  if (library === 'set-nx-baseline' && scenario === 'a') return 'SET NX + compare-and-delete (the floor)';
  if (library === 'rlock-layout-floor') return 'RLock layout, nothing else (the floor of the wire)';
  if (library.startsWith('rlock-layout-floor-'))
    return `RLock wire floor on ${library.slice('rlock-layout-floor-'.length)} (goal 2's floor)`;
  if (scenario !== 'f' && scenario !== 'g') return library;
  if (library === 'flowlock') return 'flowlock RLock';
  if (library === 'flowlock-fair') return 'flowlock fair lock';
  if (library === 'flowlock-rwlock') return 'flowlock RReadWriteLock';
  if (library === 'fifo-ticket-floor') return 'FIFO ticket lock (the floor)';
  if (library === 'fifo-ticket-floor-confirmed')
    return 'FIFO ticket lock, woken waiter confirms (the floor of a self-taken handoff)';
  return library;
}

/** The metric each chart shows, and whether more is better. */
const CHART: Record<ScenarioId, { key: keyof Measurement; label: string; higherIsBetter: boolean }> = {
  a: { key: 'opsPerSecond', label: 'lock + unlock cycles per second', higherIsBetter: true },
  b: { key: 'opsPerSecond', label: 'lock + unlock cycles per second', higherIsBetter: true },
  c: { key: 'waitP99Ms', label: 'waiting time p99 (ms)', higherIsBetter: false },
  d: { key: 'waitP99Ms', label: 'waiting time p99 (ms)', higherIsBetter: false },
  e: { key: 'roundTripsPerPeriod', label: 'round trips per renewal period', higherIsBetter: false },
  f: { key: 'opsPerSecond', label: 'acquisitions per second (fairness in the table)', higherIsBetter: true },
  g: { key: 'readsPerSecond', label: 'read acquisitions per second', higherIsBetter: true },
  h: {
    key: 'opsPerSecond',
    label: 'acquisitions per second (waiting and round trips in the table)',
    higherIsBetter: true,
  },
  i: { key: 'opsPerSecond', label: 'lock + unlock cycles per second', higherIsBetter: true },
};

const fmt = (value: number | boolean | undefined, digits = 1): string => {
  if (value === undefined) return '–';
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  if (!Number.isFinite(value)) return '–';
  if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString('en-US');
  return value.toFixed(digits);
};

function version(pkg: string): string {
  try {
    const json = JSON.parse(readFileSync(join('node_modules', pkg, 'package.json'), 'utf8')) as { version: string };
    return json.version;
  } catch {
    return '?';
  }
}

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function chart(scenario: ScenarioId, rows: readonly Measurement[]): string {
  const { key, label, higherIsBetter } = CHART[scenario];
  const values = rows.map((r) => ({ library: nameIn(scenario, r.library), value: Number(r[key] ?? NaN) }));
  const max = Math.max(1e-9, ...values.map((v) => (Number.isFinite(v.value) ? v.value : 0)));
  const barHeight = 26;
  const top = 44;
  const left = 200;
  const width = 720;
  const height = top + values.length * (barHeight + 8) + 16;
  const bars = values
    .map((v, i) => {
      const y = top + i * (barHeight + 8);
      const w = Number.isFinite(v.value) ? Math.max(2, ((width - left - 90) * v.value) / max) : 0;
      const ours = v.library.startsWith('flowlock');
      return [
        `<text x="${left - 8}" y="${y + 18}" text-anchor="end" font-weight="${ours ? 'bold' : 'normal'}">${escapeXml(v.library)}</text>`,
        `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barHeight}" fill="${ours ? '#2f7d32' : '#8a9bb0'}"/>`,
        `<text x="${left + w + 6}" y="${y + 18}">${fmt(v.value)}</text>`,
      ].join('');
    })
    .join('\n  ');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="13">
  <rect width="100%" height="100%" fill="white"/>
  <text x="12" y="20" font-weight="bold">${escapeXml(SCENARIOS[scenario])}</text>
  <text x="12" y="36" fill="#555">${escapeXml(label)}, ${higherIsBetter ? 'higher' : 'lower'} is better</text>
  ${bars}
</svg>
`;
}

function table(scenario: ScenarioId, rows: readonly Measurement[]): string {
  if (scenario === 'f') {
    return [
      '| library | ops/s | fairness | wait p50 ms | wait p99 ms | longest wait ms | round trips / acq | server ops / acq | uncontended server ops / cycle | handoff p50 / p99 ms | overlaps | lost updates |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${nameIn(scenario, r.library)} | ${fmt(r.opsPerSecond, 0)} | ${fmt(r.fairness, 3)} | ${fmt(r.waitP50Ms, 2)} | ${fmt(r.waitP99Ms)} | ${fmt(r.maxWaitMs)} | ${fmt(r.roundTripsPerAcquisition, 2)} | ${fmt(r.serverOpsPerAcquisition, 1)} | ${fmt(r.uncontendedServerOps, 1)} | ${fmt(r.handoffP50Ms, 2)} / ${fmt(r.handoffP99Ms, 2)} | ${fmt(r.overlaps, 0)} | ${fmt(r.lostUpdates, 0)} |`,
      ),
    ].join('\n');
  }
  if (scenario === 'g') {
    return [
      '| library | reads/s | writes/s | read wait p50 / p99 ms | write wait p50 / p99 ms | longest wait ms | most readers at once | round trips / acq | server ops / acq | fairness | overlaps | lost updates |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${nameIn(scenario, r.library)} | ${fmt(r.readsPerSecond, 0)} | ${fmt(r.writesPerSecond, 0)} | ${fmt(r.readWaitP50Ms, 2)} / ${fmt(r.readWaitP99Ms)} | ${fmt(r.writeWaitP50Ms, 2)} / ${fmt(r.writeWaitP99Ms)} | ${fmt(r.maxWaitMs)} | ${fmt(r.maxConcurrentReaders, 0)} | ${fmt(r.roundTripsPerAcquisition, 2)} | ${fmt(r.serverOpsPerAcquisition, 1)} | ${fmt(r.fairness, 3)} | ${fmt(r.overlaps, 0)} | ${fmt(r.lostUpdates, 0)} |`,
      ),
    ].join('\n');
  }
  if (scenario === 'h') {
    return [
      '| library | acquisitions/s | wait p50 ms | wait p99 ms | longest wait ms | round trips / acq | acquire attempts / acq | (un)subscribes / acq | server ops / acq | fairness | most holders at once (counter / clock) | sections over 3 holders |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${nameIn(scenario, r.library)} | ${fmt(r.opsPerSecond, 0)} | ${fmt(r.waitP50Ms, 2)} | ${fmt(r.waitP99Ms)} | ${fmt(r.maxWaitMs)} | ${fmt(r.roundTripsPerAcquisition, 2)} | ${fmt(r.acquireAttemptsPerAcquisition, 2)} | ${fmt(r.subscribesPerAcquisition, 2)} | ${fmt(r.serverOpsPerAcquisition, 1)} | ${fmt(r.fairness, 3)} | ${fmt(r.mostHolders, 0)} / ${fmt(r.mostHoldersByClock, 0)} | ${fmt(r.overlaps, 0)} |`,
      ),
    ].join('\n');
  }
  if (scenario === 'i') {
    const base = rows.find((r) => r.library === 'flowlock-otel-off')?.opsPerSecond;
    return [
      '| set-up | ops/s | vs. no subscriber | µs / cycle | client CPU µs / cycle | lock + unlock p50 ms | lock + unlock p99 ms | round trips / acq | server ops / acq |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${nameIn(scenario, r.library)} | ${fmt(r.opsPerSecond, 0)} | ${fmt((r.opsPerSecond ?? NaN) / (base ?? NaN), 3)} × | ${fmt(r.wallUsPerAcquisition)} | ${fmt(r.clientCpuUsPerAcquisition)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.roundTripsPerAcquisition, 2)} | ${fmt(r.serverOpsPerAcquisition, 1)} |`,
      ),
    ].join('\n');
  }
  if (scenario === 'e') {
    return [
      '| library | locks | round trips / renewal period | per 100 locks / period | client CPU ms / period | still held |',
      '| --- | ---: | ---: | ---: | ---: | --- |',
      ...rows.map(
        (r) =>
          `| ${r.library} | ${fmt(r.acquisitions, 0)} | ${fmt(r.roundTripsPerPeriod)} | ${fmt(r.roundTripsPer100LocksPerPeriod, 2)} | ${fmt(r.cpuMsPerPeriod)} | ${fmt(r.heldAfterThreePeriods)} |`,
      ),
    ].join('\n');
  }
  const contended = scenario === 'c' || scenario === 'd';
  if (scenario === 'a') {
    return [
      '| library | ops/s | µs / cycle | client CPU µs / cycle | server CPU µs / cycle | lock + unlock p50 ms | lock + unlock p99 ms | round trips / acq | server ops / acq |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows.map(
        (r) =>
          `| ${nameIn(scenario, r.library)} | ${fmt(r.opsPerSecond, 0)} | ${fmt(r.wallUsPerAcquisition)} | ${fmt(r.clientCpuUsPerAcquisition)} | ${fmt(r.serverCpuUsPerAcquisition)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.roundTripsPerAcquisition, 2)} | ${fmt(r.serverOpsPerAcquisition, 1)} |`,
      ),
    ].join('\n');
  }
  const header = contended
    ? '| library | ops/s | wait + section p50 ms | wait + section p99 ms | round trips / acq | server ops / acq | handoff p50 / p99 ms | wait p99 ms | longest wait ms | fairness | overlaps | lost updates |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    : '| library | ops/s | lock + unlock p50 ms | lock + unlock p99 ms | round trips / acq | server ops / acq |\n| --- | ---: | ---: | ---: | ---: | ---: |';
  const lines = rows.map((r) => {
    const base = `| ${r.library} | ${fmt(r.opsPerSecond, 0)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.roundTripsPerAcquisition, 2)} | ${fmt(r.serverOpsPerAcquisition, 1)} |`;
    if (!contended) return base;
    return `${base} ${fmt(r.handoffP50Ms, 2)} / ${fmt(r.handoffP99Ms, 2)} | ${fmt(r.waitP99Ms)} | ${fmt(r.maxWaitMs)} | ${fmt(r.fairness, 3)} | ${fmt(r.overlaps, 0)} | ${fmt(r.lostUpdates, 0)} |`;
  });
  return [header, ...lines].join('\n');
}

/** The per-cycle figures measured in (a), (b) and (i). */
export type CycleFigure = 'wallUsPerAcquisition' | 'clientCpuUsPerAcquisition' | 'serverCpuUsPerAcquisition';

/**
 * `combine` of two libraries' `key` figures taken round by round, median over the rounds; from their medians
 * when either has no rounds (a run of one round, or measurements recorded before rounds were kept).
 */
export function paired(
  ours: Measurement,
  theirs: Measurement,
  key: CycleFigure,
  combine: (ours: number, theirs: number) => number,
): number {
  const a = ours.perRound;
  const b = theirs.perRound;
  if (!a || !b || a.length !== b.length || a.length < 2) return combine(ours[key] ?? NaN, theirs[key] ?? NaN);
  // The same median as each library's figures over its rounds (run.ts's mergeRounds).
  return percentile(
    a.map((round, i) => combine(round[key], b[i]?.[key] ?? NaN)),
    50,
  );
}
const ratioOf = (ours: number, theirs: number): number => ours / theirs;

/** The goals of the benchmark issue, as ratios measured in this run. */
/**
 * Server instructions per uncontended cycle (callgrind on the lock server, `scripts/bench-cycle.mjs
 * --instructions`): flowlock's acquire()/release(), its withLock(), and the RLock wire's floor.
 */
export interface CycleInstructions {
  readonly flowlock: number;
  readonly withLock: number;
  readonly wire: number;
}

function goals(
  all: readonly Measurement[],
  instructions?: CycleInstructions,
  repeats: readonly (readonly Measurement[])[] = [],
): string[] {
  const findIn = (measured: readonly Measurement[], scenario: ScenarioId, library: string): Measurement | undefined =>
    measured.find((m) => m.scenario === scenario && m.library === library);
  const find = (scenario: ScenarioId, library: string): Measurement | undefined => findIn(all, scenario, library);
  /**
   * A noisy goal's ratio (`of`) in the run (`ratio`) and in each repeat that measured both sides, and the
   * median of them all, which the verdict judges; `text` gives the repeats' ratios, to follow the run's.
   */
  const repeated = (
    scenario: ScenarioId,
    library: string,
    against: string,
    of: (ours: Measurement, theirs: Measurement) => number,
  ): { ratio: number; median: number; text: string } => {
    const ratios: number[] = [];
    for (const measured of [all, ...repeats]) {
      const ours = findIn(measured, scenario, library);
      const theirs = findIn(measured, scenario, against);
      if (ours && theirs) ratios.push(of(ours, theirs));
    }
    const ratio = ratios[0] ?? NaN;
    if (ratios.length < 2) return { ratio, median: ratio, text: '' };
    const median = percentile(ratios, 50);
    const again = ratios.slice(1).map((r) => `${fmt(r, 2)} ×`);
    return { ratio, median, text: `; repeats ${again.join(', ')}, median of the ${ratios.length} ${fmt(median, 2)} ×` };
  };
  const peers = (scenario: ScenarioId): Measurement[] =>
    all.filter(
      (m) =>
        m.scenario === scenario &&
        !m.library.startsWith('flowlock') &&
        m.library !== 'set-nx-baseline' &&
        !m.library.startsWith('rlock-layout-floor') &&
        !m.library.startsWith('fifo-ticket-floor'),
    );
  const bestPeerWait = (scenario: ScenarioId): number =>
    Math.min(...peers(scenario).map((m) => m.waitP99Ms ?? Infinity));
  const line = (text: string, met: boolean | undefined): string =>
    `- ${met === undefined ? '(not measured)' : met ? 'met' : 'missed'}: ${text}`;
  const out: string[] = [];
  /** A goal "ours ≥ (or ≤) bound × theirs", with both figures (`digits` decimals) beside the ratio. */
  const ratioGoal = (
    subject: string,
    against: string,
    ours: number | undefined,
    theirs: number | undefined,
    bound: number,
    higher: boolean,
    digits: number,
  ): void => {
    const ratio = (ours ?? NaN) / (theirs ?? NaN);
    out.push(
      line(
        `${subject} ${higher ? '≥' : '≤'} ${bound} × ${against}: ${fmt(ratio, 2)} × (${fmt(ours, digits)} vs ${fmt(theirs, digits)})`,
        higher ? ratio >= bound : ratio <= bound,
      ),
    );
  };
  // (a): the uncontended cycle against its floor, SET NX PX + a compare-and-delete script, per cycle.
  const floorA = find('a', 'set-nx-baseline');
  const layout = find('a', 'rlock-layout-floor');
  for (const [library, how] of [
    ['flowlock', 'acquire() + release()'],
    ['flowlock-withlock', 'withLock()'],
  ] as const) {
    const ours = find('a', library);
    if (!ours || !floorA) continue;
    for (const [what, key] of [
      ['wall time', 'wallUsPerAcquisition'],
      ['client CPU', 'clientCpuUsPerAcquisition'],
      ['server CPU', 'serverCpuUsPerAcquisition'],
    ] as const) {
      // Ratios round by round (the median of them): the three ran back to back in each round.
      const ratio = paired(ours, floorA, key, ratioOf);
      // Beside it, the floor of Redisson's RLock wire (a hash, its scripts, the release message and memo):
      // what any lock that Java clients share costs before anything of ours.
      const wire = layout
        ? ` (the RLock-layout floor: ${fmt(layout[key])} µs, ${fmt(paired(layout, floorA, key, ratioOf), 2)} × SET NX; ours ${fmt(paired(ours, layout, key, ratioOf), 2)} × it)`
        : '';
      out.push(
        line(
          `(a) ${how} ${what} per cycle ≤ 1.3 × the SET NX + compare-and-delete floor's: ${fmt(ratio, 2)} × (${fmt(ours[key])} vs ${fmt(floorA[key])} µs)${wire}`,
          ratio <= 1.3,
        ),
      );
    }
  }
  // Issue 41, goals 1 and 2: the same cycle against Redisson's RLock wire (its acquire and release scripts,
  // floors.ts) driven by the same client in the same rounds: on ioredis wall ≤ 1.10 ×, client and server CPU
  // ≤ 1.15 × (acquire()/release() and withLock()); on node-redis 6, iovalkey and GLIDE each figure ≤ 1.15 ×.
  for (const [library, how, client, bounds] of [
    ['flowlock', 'acquire() + release()', 'ioredis', [1.1, 1.15, 1.15]],
    ['flowlock-withlock', 'withLock()', 'ioredis', [1.1, 1.15, 1.15]],
    ['flowlock-node-redis', 'acquire() + release()', 'node-redis 6', [1.15, 1.15, 1.15]],
    ['flowlock-iovalkey', 'acquire() + release()', 'iovalkey', [1.15, 1.15, 1.15]],
    ['flowlock-glide', 'acquire() + release()', 'GLIDE', [1.15, 1.15, 1.15]],
  ] as const) {
    const ours = find('a', library);
    const wire = find('a', WIRE_FLOORS[library]);
    if (!ours || !wire) continue;
    const goal = library.startsWith('flowlock-') && library !== 'flowlock-withlock' ? 2 : 1;
    (['wallUsPerAcquisition', 'clientCpuUsPerAcquisition', 'serverCpuUsPerAcquisition'] as const).forEach((key, i) => {
      const what = ['wall time', 'client CPU', 'server CPU'][i];
      const { ratio, median, text } = repeated('a', library, WIRE_FLOORS[library], (a, b) =>
        paired(a, b, key, ratioOf),
      );
      const bound = bounds[i] ?? NaN;
      out.push(
        line(
          `(41.${goal}) ${how} on ${client}, ${what} per cycle ≤ ${bound} × the RLock wire's on the same client: ${fmt(ratio, 2)} × (${fmt(ours[key])} vs ${fmt(wire[key])} µs)${text}`,
          median <= bound,
        ),
      );
    });
  }
  if (instructions) {
    for (const [how, ours] of [
      ['acquire() + release()', instructions.flowlock],
      ['withLock()', instructions.withLock],
    ] as const) {
      const ratio = ours / instructions.wire;
      out.push(
        line(
          `(41.1) ${how}, server instructions per cycle (callgrind) ≤ 1.3 × the RLock wire's: ${fmt(ratio, 2)} × (${fmt(ours / 1000, 1)}k vs ${fmt(instructions.wire / 1000, 1)}k)`,
          ratio <= 1.3,
        ),
      );
    }
  } else {
    out.push(
      line("(41.1) server instructions per cycle (callgrind) ≤ 1.3 × the RLock wire's (no valgrind)", undefined),
    );
  }
  const d = find('d', 'flowlock');
  if (d) {
    out.push(
      line(
        `(d) round trips per acquisition ≤ 2.5: ${fmt(d.roundTripsPerAcquisition, 2)}`,
        (d.roundTripsPerAcquisition ?? Infinity) <= 2.5,
      ),
    );
    const a = find('a', 'flowlock');
    if (a?.serverOpsPerAcquisition !== undefined && d.serverOpsPerAcquisition !== undefined) {
      const ratio = d.serverOpsPerAcquisition / a.serverOpsPerAcquisition;
      out.push(line(`(d) server ops per acquisition ≤ 1.3 × our uncontended cycle: ${fmt(ratio, 2)} ×`, ratio <= 1.3));
    }
    const best = bestPeerWait('d');
    if (Number.isFinite(best)) {
      const ratio = (d.waitP99Ms ?? Infinity) / best;
      out.push(
        line(
          `(d) waiting-time p99 ≤ ¼ of the best peer's: ${fmt(ratio, 2)} × (${fmt(d.waitP99Ms)} vs ${fmt(best)} ms)`,
          ratio <= 0.25,
        ),
      );
    }
  }
  const c = find('c', 'flowlock');
  if (c) {
    out.push(line(`(c) fairness ≥ 0.9: ${fmt(c.fairness, 3)}`, (c.fairness ?? 0) >= 0.9));
    const best = bestPeerWait('c');
    if (Number.isFinite(best)) {
      const ratio = (c.waitP99Ms ?? Infinity) / best;
      out.push(
        line(
          `(c) waiting-time p99 ≤ ½ of the best peer's: ${fmt(ratio, 2)} × (${fmt(c.waitP99Ms)} vs ${fmt(best)} ms)`,
          ratio <= 0.5,
        ),
      );
    }
  }
  const e = find('e', 'flowlock');
  if (e?.roundTripsPer100LocksPerPeriod !== undefined) {
    out.push(
      line(
        `(e) ≤ 1 round trip per 100 held locks per renewal period: ${fmt(e.roundTripsPer100LocksPerPeriod, 2)}`,
        e.roundTripsPer100LocksPerPeriod <= 1,
      ),
    );
  }
  const f = find('f', 'flowlock-fair');
  if (f) {
    // Against the floor of a fair handoff, a bare FIFO ticket lock in the same run (medians of the rounds).
    const floor = find('f', 'fifo-ticket-floor');
    if (floor) {
      const versus = (
        what: string,
        ours: number | undefined,
        theirs: number | undefined,
        bound: number,
        higher: boolean,
        digits = 2,
      ): void => ratioGoal(`(f) fair lock ${what}`, "the FIFO ticket floor's", ours, theirs, bound, higher, digits);
      versus('ops/s', f.opsPerSecond, floor.opsPerSecond, 0.8, true, 0);
      versus('handoff p50 ms', f.handoffP50Ms, floor.handoffP50Ms, 1.5, false);
      // The floor of a handoff the woken waiter takes itself (one round trip after its wake-up), which
      // Redisson's fair-lock wire imposes: the release cannot hand the lock to a Java waiter.
      const confirmed = find('f', 'fifo-ticket-floor-confirmed');
      if (confirmed) {
        ratioGoal(
          '(f) fair lock handoff p50 ms',
          "the confirmed FIFO floor's (a woken waiter takes the lock with one round trip)",
          f.handoffP50Ms,
          confirmed.handoffP50Ms,
          1.5,
          false,
          2,
        );
      }
      versus('waiting-time p99 ms', f.waitP99Ms, floor.waitP99Ms, 1.5, false);
      out.push(
        line(
          `(f) fair lock round trips per acquisition ≤ 3.5: ${fmt(f.roundTripsPerAcquisition, 2)} (the floor: ${fmt(floor.roundTripsPerAcquisition, 2)})`,
          (f.roundTripsPerAcquisition ?? Infinity) <= 3.5,
        ),
      );
    }
    out.push(line(`(f) fair lock fairness (Jain) ≥ 0.95: ${fmt(f.fairness, 3)}`, (f.fairness ?? 0) >= 0.95));
    if (f.serverOpsPerAcquisition !== undefined && f.uncontendedServerOps !== undefined) {
      const ratio = f.serverOpsPerAcquisition / f.uncontendedServerOps;
      out.push(
        line(
          `(f) fair lock server ops per acquisition ≤ 2 × its uncontended lock + unlock: ${fmt(ratio, 2)} × (${fmt(f.serverOpsPerAcquisition, 1)} vs ${fmt(f.uncontendedServerOps, 1)})`,
          ratio <= 2,
        ),
      );
    }
  }
  // The plain lock under cross-process contention: every process's waiters wake on every release (the wire
  // Java shares), far over 12 server ops per acquisition; the documented way out is the fair lock (docs:
  // "A lock that many processes fight over"), whose advice this run checks: in (f) it beats RLock there.
  const plain = find('f', 'flowlock');
  if (f && plain) {
    out.push(
      line(
        `(f) RLock server ops per acquisition with 8 processes ≤ 12: ${fmt(plain.serverOpsPerAcquisition, 1)}`,
        (plain.serverOpsPerAcquisition ?? Infinity) <= 12,
      ),
    );
    out.push(
      line(
        `(f) the docs' advice holds (the fair lock for a lock many processes fight over): ${fmt(f.opsPerSecond, 0)} vs ${fmt(plain.opsPerSecond, 0)} acquisitions/s, ${fmt(f.serverOpsPerAcquisition, 1)} vs ${fmt(plain.serverOpsPerAcquisition, 1)} server ops / acq, waiting p99 ${fmt(f.waitP99Ms)} vs ${fmt(plain.waitP99Ms)} ms`,
        (f.opsPerSecond ?? 0) > (plain.opsPerSecond ?? Infinity) &&
          (f.serverOpsPerAcquisition ?? Infinity) < (plain.serverOpsPerAcquisition ?? 0),
      ),
    );
  }
  // (h): the semaphores against redis-semaphore's Semaphore, the polling peer.
  const peer = find('h', 'redis-semaphore');
  for (const [library, who] of [
    ['flowlock-semaphore', 'RSemaphore'],
    ['flowlock-permit-semaphore', 'RPermitExpirableSemaphore'],
  ] as const) {
    const ours = find('h', library);
    if (!ours || !peer) continue;
    const versus = (
      what: string,
      key: 'waitP99Ms' | 'maxWaitMs' | 'opsPerSecond' | 'serverOpsPerAcquisition',
      bound: number,
      higher: boolean,
    ): void =>
      ratioGoal(
        `(h) ${who} ${what}`,
        "redis-semaphore's",
        ours[key],
        peer[key],
        bound,
        higher,
        key === 'opsPerSecond' ? 0 : 1,
      );
    versus('waiting-time p99 ms', 'waitP99Ms', 0.5, false);
    versus('longest wait ms', 'maxWaitMs', 0.5, false);
    versus('acquisitions/s', 'opsPerSecond', 0.8, true);
    // Each process (un)subscribes its two channels once, at its start and its end: set-up, not a cost of
    // each acquisition (the longer the pass, the smaller their share). Judged at the goal's precision, two
    // decimals.
    const busy = Number(((ours.roundTripsPerAcquisition ?? NaN) - (ours.subscribesPerAcquisition ?? 0)).toFixed(2));
    out.push(
      line(
        `(h) ${who} round trips per acquisition in a busy process ≤ 3: ${fmt(busy, 2)} (${fmt(ours.roundTripsPerAcquisition, 2)} with each process's (un)subscribes at its start and end; redis-semaphore: ${fmt(peer.roundTripsPerAcquisition, 2)})`,
        busy <= 3,
      ),
    );
    versus('server ops per acquisition', 'serverOpsPerAcquisition', 2, false);
  }
  // The floor of a fair semaphore (a FIFO ticket semaphore: no lease, no crash safety): what serving the
  // waiters in order, each handoff to another process, allows against the peer whose releasing process takes
  // its permit straight back.
  // The confirmed floor: the same, but a woken waiter goes in only after one more round trip, as every waiter
  // of ours takes its permits with its own acquire script (a release that handed them over would hand them
  // to a waiter that died while queued too).
  const ours = find('h', 'flowlock-semaphore');
  for (const [library, what] of [
    ['fifo-ticket-floor', 'FIFO floor'],
    ['fifo-ticket-floor-confirmed', 'confirmed FIFO floor'],
  ] as const) {
    const fairFloor = find('h', library);
    if (!fairFloor || !peer) continue;
    out.push(
      line(
        `(h) the ${what}'s acquisitions/s ≥ 0.8 × redis-semaphore's (can a fair semaphore get there at all): ${fmt((fairFloor.opsPerSecond ?? NaN) / (peer.opsPerSecond ?? NaN), 2)} × (${fmt(fairFloor.opsPerSecond, 0)} vs ${fmt(peer.opsPerSecond, 0)}); RSemaphore ${fmt((ours?.opsPerSecond ?? NaN) / (fairFloor.opsPerSecond ?? NaN), 2)} × this floor, ${fmt(fairFloor.serverOpsPerAcquisition, 1)} server ops / acq`,
        (fairFloor.opsPerSecond ?? 0) >= 0.8 * (peer.opsPerSecond ?? Infinity),
      ),
    );
  }
  // Issue 41's goal 3: each semaphore against the confirmed FIFO floor, the fair semaphore a woken waiter of
  // which takes its permit with one more round trip (as ours do).
  const confirmedFloor = find('h', 'fifo-ticket-floor-confirmed');
  for (const [library, who] of [
    ['flowlock-semaphore', 'RSemaphore'],
    ['flowlock-permit-semaphore', 'RPermitExpirableSemaphore'],
  ] as const) {
    const ours = find('h', library);
    if (!ours || !confirmedFloor) continue;
    const floorName = "the confirmed FIFO floor's";
    const throughput = repeated(
      'h',
      library,
      'fifo-ticket-floor-confirmed',
      (a, b) => (a.opsPerSecond ?? NaN) / (b.opsPerSecond ?? NaN),
    );
    out.push(
      line(
        `(41.3) ${who} acquisitions/s ≥ 0.9 × ${floorName}: ${fmt(throughput.ratio, 2)} × (${fmt(ours.opsPerSecond, 0)} vs ${fmt(confirmedFloor.opsPerSecond, 0)})${throughput.text}`,
        throughput.median >= 0.9,
      ),
    );
    ratioGoal(
      `(41.3) ${who} server ops per acquisition`,
      floorName,
      ours.serverOpsPerAcquisition,
      confirmedFloor.serverOpsPerAcquisition,
      3,
      false,
      1,
    );
  }
  for (const [library, who] of [
    ['flowlock-semaphore', 'RSemaphore'],
    ['flowlock-permit-semaphore', 'RPermitExpirableSemaphore'],
  ] as const) {
    const ours = find('h', library);
    if (ours)
      out.push(
        line(
          `(h) never more than 3 holders at once for ${who}: ${fmt(ours.mostHolders, 0)} by the counter, ${fmt(ours.mostHoldersByClock, 0)} by the clock`,
          ours.overlaps === 0 && (ours.mostHoldersByClock ?? Infinity) <= 3,
        ),
      );
  }
  const off = find('i', 'flowlock-otel-off')?.opsPerSecond;
  const idle = find('i', 'flowlock-otel-api')?.opsPerSecond;
  if (idle !== undefined && off !== undefined) {
    const ratio = idle / off;
    out.push(
      line(
        `(i) FlowlockInstrumentation enabled without an SDK: ops/s ≥ 0.97 × no subscriber: ${fmt(ratio, 3)} ×`,
        ratio >= 0.97,
      ),
    );
  }
  // (i) with the SDK: what our instrumentation adds to a cycle, against what the ioredis instrumentation adds
  // to the same cycle with the same SDK (a user who accepts their Redis client's spans accepts ours).
  const bare = find('i', 'flowlock-otel-off');
  const ourSdk = find('i', 'flowlock-otel-sdk');
  const theirSdk = find('i', 'ioredis-otel-sdk');
  const ourSpans = find('i', 'flowlock-otel-spans');
  for (const [ourVariant, what] of [
    [ourSdk, 'FlowlockInstrumentation + SDK'],
    [ourSpans, 'FlowlockInstrumentation + SDK, spans only,'],
  ] as const) {
    if (!bare || !ourVariant || !theirSdk) continue;
    for (const [measure, key] of [
      ['wall time', 'wallUsPerAcquisition'],
      ['client CPU', 'clientCpuUsPerAcquisition'],
    ] as const) {
      const ours = (ourVariant[key] ?? NaN) - (bare[key] ?? NaN);
      const theirs = (theirSdk[key] ?? NaN) - (bare[key] ?? NaN);
      // Both add to the same bare cycle, so ours adds no more exactly when our cycle takes no longer than
      // theirs: judged round by round (the two ran back to back in each), the median of the differences.
      const difference = paired(ourVariant, theirSdk, key, (a, b) => a - b);
      out.push(
        line(
          `(i) the ${measure} ${what} adds to a cycle ≤ what instrumentation-ioredis + the same SDK adds: +${fmt(ours)} vs +${fmt(theirs)} µs (medians of the rounds); ours − theirs round by round: ${difference > 0 ? '+' : ''}${fmt(difference)} µs (median)`,
          difference <= 0,
        ),
      );
    }
  }
  const withoutInfo = find('i', 'flowlock-holder-info-off')?.opsPerSecond;
  if (off !== undefined && withoutInfo !== undefined) {
    const ratio = off / withoutInfo;
    out.push(line(`(i) holder info costs the serial cycle ≤ 3 %: ops/s ${fmt(ratio, 3)} × without it`, ratio >= 0.97));
  }
  const checked: [ScenarioId, string, string][] = [
    ['c', 'flowlock', 'us'],
    ['d', 'flowlock', 'us'],
    ['f', 'flowlock-fair', 'the fair lock'],
    ['f', 'flowlock', 'RLock'],
    ['g', 'flowlock-rwlock', 'the read-write lock'],
    ['g', 'flowlock', 'RLock'],
  ];
  for (const [scenario, library, who] of checked) {
    const ours = find(scenario, library);
    if (ours)
      out.push(
        line(
          `(${scenario}) overlaps and lost updates are zero for ${who}: ${fmt(ours.overlaps, 0)} / ${fmt(ours.lostUpdates, 0)}`,
          ours.overlaps === 0 && ours.lostUpdates === 0,
        ),
      );
  }
  return out;
}

export function writeReport(
  outDir: string,
  measurements: readonly Measurement[],
  meta: {
    quick: boolean;
    redisVersion: string;
    sizes: Record<string, number>;
    instructions?: CycleInstructions | undefined;
    /** The noisy goals' libraries measured again after the run (run.ts's REPEATED), one list per repeat. */
    repeats?: readonly (readonly Measurement[])[];
  },
): string {
  mkdirSync(join(outDir, 'charts'), { recursive: true });
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  const lines = [
    '# Benchmark results',
    '',
    `Generated by \`npm run bench${meta.quick ? ' -- --quick' : ''}\` on ${new Date().toISOString().slice(0, 10)}: ${cpus().length} × ${cpu}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, redis-server ${meta.redisVersion}, ioredis ${version('ioredis')} (node-redis ${version('redis')} for flowlock (node-redis 6)), all on one machine over loopback.`,
    '',
    `Versions: flowlock ${version('../')} (this tree), redlock ${version('redlock')}, @sesamecare-oss/redlock ${version('@sesamecare-oss/redlock')}, redis-semaphore ${version('redis-semaphore')}, node-redisson ${version('node-redisson')}; set-nx-baseline is \`SET key token NX PX\` + a compare-and-delete script, retrying every 10 ms.`,
    '',
    `Sizes: ${Object.entries(meta.sizes)
      .map(([k, v]) => `${k}=${v}`)
      .join(
        ', ',
      )}. Every library keeps its own defaults except unlimited retries. Leases are 10 s in (a)–(d), (f) and (g); (e) uses each library's auto-renewal with a ${meta.sizes['eWatchdog'] ?? '?'} ms lease, so a renewal period is a third of it.`,
    '',
    'Round trips per acquisition count the commands clients sent (MONITOR, script-internal calls excluded, connection set-up excluded) in a separate pass; server operations per acquisition are `INFO commandstats` deltas, which include the calls made inside scripts; in (c), (f) and (g) both are counted from the common start signal to the last worker’s end, without the worker processes’ start-up, warm-up and shutdown. Handoff gap: from one holder leaving its critical section to the next entering it, on one monotonic clock. Fairness: Jain’s index over acquisitions per process (c, f, g) or per flow (d). Waiting time: from asking for the lock to holding it. (f) runs (c)’s processes and loop with flowlock’s fair lock added; its uncontended cycle is one flow’s lock + unlock in a loop on a key of its own, as in (a). (g): each process draws read or write (90 % reads, the same seeded sequence for every library) and holds the lock 1 ms, reading the counter, or incrementing it like (c) for a write; `flowlock RLock` takes the plain lock for both; overlaps count sections of different processes that overlap while either writes. (h): each of 8 processes (one loop each, as in (c)) takes one permit of a semaphore of 3 in its library’s auto-renewing mode (RSemaphore’s permits have no lease; the expirable semaphore and redis-semaphore renew theirs; ours with `previousLayout: "retired"`, a queued waiter’s deadline in its place in the queue), holds it 1 ms and gives it back; each section counts itself in and out of a counter on the resource Redis (INCR / DECR), and the most holders at once is that counter’s highest value, and also the most sections inside at once on the monotonic clock; acquire attempts count the acquire script calls in the MONITOR pass (redis-semaphore: every script call, its only one in the loop). (i): (a)’s loop for flowlock alone, in one process, alternating in 9 rounds that each start with another variant: with no subscriber on its diagnostics channels; with `FlowlockInstrumentation` from `flowlock/opentelemetry` enabled while no OpenTelemetry SDK is registered (the API’s no-op providers); with the SDK (tracer and meter providers with in-memory exporters behind the batch span processor NodeSDK uses, metrics read every second, the AsyncLocalStorage context manager); with the SDK’s tracer provider only (our spans, no metrics); and, as goal (d)’s yardstick, with `@opentelemetry/instrumentation-ioredis` on the same SDK instead of ours (a span per command, `requireParentSpan` off); “vs. no subscriber” is the ops/s ratio to the first. (a) and (i) also give per cycle the wall time, this process’s CPU time (`process.cpuUsage()`) and the lock server’s CPU time (`INFO cpu`, user + sys), medians of the rounds, and the goal lines compare two of them round by round (the median of the per-round ratios, or in (i) of the per-round differences); the floor of (a) is set-nx-baseline, `SET key token NX PX` + a compare-and-delete script on one connection. Issue 41’s noisy goals, (41.1) and (41.2) against the RLock wire and (41.3) acquisitions/s, are measured twice more after the run (the same rounds, for the libraries they compare only): their lines give the run’s ratio, then the two repeats’, and the verdict is on the median of the three.',
    '',
    '## Goals',
    '',
    ...goals(measurements, meta.instructions, meta.repeats),
    '',
  ];
  for (const scenario of Object.keys(SCENARIOS) as ScenarioId[]) {
    const rows = measurements.filter((m) => m.scenario === scenario);
    if (rows.length === 0) continue;
    writeFileSync(join(outDir, 'charts', `scenario-${scenario}.svg`), chart(scenario, rows));
    lines.push(
      `## ${SCENARIOS[scenario]}`,
      '',
      `![${SCENARIOS[scenario]}](charts/scenario-${scenario}.svg)`,
      '',
      table(scenario, rows),
      '',
    );
  }
  const file = join(outDir, 'RESULTS.md');
  writeFileSync(file, lines.join('\n'));
  return file;
}
