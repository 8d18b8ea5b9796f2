/**
 * The checker of one scenario: the clients' histories, the faults the harness injected, and what the
 * database accepted. It finds
 * (a) out-of-order accepted writes (a resource's accepted tokens, in the order the database accepted them,
 *     must rise strictly) and lost updates (each resource's write counter must equal the accepted writes the
 *     clients saw, give or take writes whose reply never came back because their client was killed);
 * (b) every pair of overlapping holds (local intervals: granted .. release sent or told lost) of one
 *     resource, each with the fault that allowed it, or none (unexplained: a bug);
 * (c) holds that ended without a release and were not told lost (only a killed client may), and for each
 *     partitioned holder how long before the server-side expiry it was told;
 * (d) the stale writes the database rejected.
 */
import type { ClientEvent, LockKind } from './lock-client.ts';

export type FaultKind = 'partition' | 'pause' | 'kill' | 'redis-restart' | 'failover';

export interface Fault {
  readonly kind: FaultKind;
  /** The client it hit (all but redis-restart and failover, which hit every client). */
  readonly client?: string;
  readonly start: number;
  end: number;
  /** partition: the resource the client held when cut off, and when Redis would drop that hold. */
  res?: string;
  serverExpiry?: number;
}

export interface Hold {
  readonly client: string;
  readonly res: string;
  readonly kind: LockKind;
  readonly watchdog: boolean;
  readonly token: bigint;
  readonly start: number;
  end: number;
  endedBy: 'release' | 'lost' | 'killed' | 'open';
  /** When the client was told lost (the signal aborted), also after it sent a release. */
  lostAt?: number;
  releaseOk?: boolean;
}

/**
 * Why two holds overlapped: a fault, or `stall`: the first holder was cut off, and its own lease timer fired
 * after the server's expiry (its event loop stalled longer than the drift allowance: a pause of its own), or
 * `unexplained` (a bug).
 */
export type OverlapCause = FaultKind | 'stall' | 'unexplained';

export interface Overlap {
  readonly first: Hold;
  readonly second: Hold;
  readonly cause: OverlapCause;
}

export interface AcceptedRow {
  readonly seq: number;
  readonly name: string;
  readonly token: bigint;
}

export interface ScenarioFigures {
  readonly scenario: string;
  readonly clients: number;
  readonly acquires: number;
  readonly granted: number;
  readonly failedAcquires: number;
  readonly faults: number;
  readonly overlaps: Partial<Record<OverlapCause, number>>;
  readonly lostSignals: number;
  readonly untoldEnds: number;
  readonly minMarginMs: number | undefined;
  readonly writes: number;
  readonly staleRejected: number;
  readonly outOfOrder: number;
  readonly lostUpdates: number;
}

export interface CheckResult {
  readonly figures: ScenarioFigures;
  readonly holds: Hold[];
  readonly overlaps: Overlap[];
  readonly untold: Hold[];
  readonly margins: { fault: Fault; marginMs: number | undefined }[];
  readonly problems: string[];
}

export function holdsOf(events: readonly ClientEvent[], faults: readonly Fault[]): Hold[] {
  const holds: Hold[] = [];
  const open = new Map<string, Hold>();
  const byToken = new Map<string, Hold>();
  for (const e of [...events].sort((a, b) => a.t - b.t)) {
    const current = open.get(e.client);
    if (e.type === 'ok') {
      const hold: Hold = {
        client: e.client,
        res: e.res!,
        kind: e.kind!,
        watchdog: e.watchdog!,
        token: BigInt(e.token!),
        start: e.t,
        end: Infinity,
        endedBy: 'open',
      };
      holds.push(hold);
      open.set(e.client, hold);
      byToken.set(`${e.client}/${e.token!}`, hold);
    } else if (e.type === 'lost') {
      const hold = byToken.get(`${e.client}/${e.token!}`);
      if (hold) {
        hold.lostAt ??= e.t;
        if (hold.endedBy === 'open') {
          hold.end = e.t;
          hold.endedBy = 'lost';
          open.delete(e.client);
        }
      }
    } else if (e.type === 'release-invoke' && current) {
      current.end = e.t;
      current.endedBy = 'release';
      open.delete(e.client);
    } else if (e.type === 'release-ok') {
      const hold = byToken.get(`${e.client}/${e.token!}`);
      if (hold) hold.releaseOk = true;
    }
  }
  for (const hold of open.values()) {
    const kill = faults.find((f) => f.kind === 'kill' && f.client === hold.client && f.start >= hold.start);
    if (kill) {
      hold.end = kill.start;
      hold.endedBy = 'killed';
    }
  }
  return holds;
}

/** The fault that let `second` be granted while `first` still believed it held. */
function causeOf(first: Hold, faults: readonly Fault[]): OverlapCause {
  for (const f of faults) {
    const during = f.start <= first.end && f.end >= first.start;
    if (!during) continue;
    if (f.kind === 'redis-restart' || f.kind === 'failover') return f.kind;
    if (f.client !== first.client) continue;
    // A partition promises no overlap as long as the holder's timer fires in time.
    if (
      f.kind === 'partition' &&
      f.serverExpiry !== undefined &&
      first.lostAt !== undefined &&
      first.lostAt > f.serverExpiry
    )
      return 'stall';
    return f.kind;
  }
  return 'unexplained';
}

export function check(
  scenario: string,
  clients: number,
  events: readonly ClientEvent[],
  faults: readonly Fault[],
  accepted: readonly AcceptedRow[],
  counters: ReadonlyMap<string, number>,
): CheckResult {
  const problems: string[] = [];
  const holds = holdsOf(events, faults);

  // (a) the database's order and count.
  let outOfOrder = 0;
  const newest = new Map<string, bigint>();
  const dbCount = new Map<string, number>();
  for (const row of [...accepted].sort((a, b) => a.seq - b.seq)) {
    const before = newest.get(row.name);
    if (before !== undefined && row.token <= before) {
      outOfOrder++;
      problems.push(`${row.name}: token ${row.token} accepted after ${before}`);
    }
    newest.set(row.name, row.token);
    dbCount.set(row.name, (dbCount.get(row.name) ?? 0) + 1);
  }
  const seen = new Map<string, number>();
  const unanswered = new Map<string, number>();
  const writeInvokes = new Map<string, number>();
  for (const e of events) {
    if (e.type === 'write' && e.accepted === true) seen.set(e.res!, (seen.get(e.res!) ?? 0) + 1);
    if (e.type === 'write-invoke') writeInvokes.set(e.res!, (writeInvokes.get(e.res!) ?? 0) + 1);
    if (e.type === 'write' || e.type === 'write-fail') unanswered.set(e.res!, (unanswered.get(e.res!) ?? 0) - 1);
  }
  for (const [res, n] of writeInvokes) unanswered.set(res, (unanswered.get(res) ?? 0) + n);
  let lostUpdates = 0;
  for (const [name, counter] of counters) {
    const clientSaw = seen.get(name) ?? 0;
    const log = dbCount.get(name) ?? 0;
    const maybe = unanswered.get(name) ?? 0;
    if (counter !== log) problems.push(`${name}: counter ${counter} but ${log} accepted rows`);
    if (counter < clientSaw) {
      lostUpdates += clientSaw - counter;
      problems.push(`${name}: clients saw ${clientSaw} accepted writes, the counter says ${counter}`);
    } else if (counter > clientSaw + maybe) {
      problems.push(`${name}: counter ${counter} exceeds the ${clientSaw} accepted writes (+${maybe} unanswered)`);
    }
  }

  // (b) overlaps, each with its cause.
  const overlaps: Overlap[] = [];
  const sorted = [...holds].sort((a, b) => a.start - b.start);
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length; j++) {
      const a = sorted[i]!;
      const b = sorted[j]!;
      if (b.start >= a.end) continue;
      if (a.res !== b.res || a.client === b.client) continue;
      overlaps.push({ first: a, second: b, cause: causeOf(a, faults) });
    }
  }
  for (const o of overlaps.filter((x) => x.cause === 'unexplained')) {
    problems.push(
      `unexplained overlap on ${o.first.res}: ${o.first.client} (token ${o.first.token}, ${o.first.start.toFixed(1)}..${o.first.end.toFixed(1)}) and ${o.second.client} (token ${o.second.token}, from ${o.second.start.toFixed(1)})`,
    );
  }

  // (c) every hold that ended without a release was told lost (or its client was killed): by construction of
  // the intervals, a hold ends at its release, its loss or its kill. What remains to see is a release that
  // failed (Redis did not answer: the hold stays until it expires) and whose lease never said lost.
  const untold = holds.filter((h) => h.endedBy === 'release' && !h.releaseOk && h.lostAt === undefined);
  const margins = faults
    .filter((f) => f.kind === 'partition' && f.serverExpiry !== undefined)
    .map((fault) => {
      const hold = holds.find(
        (h) => h.client === fault.client && h.res === fault.res && h.start <= fault.start && h.end >= fault.start,
      );
      const marginMs = hold?.lostAt === undefined ? undefined : fault.serverExpiry! - hold.lostAt;
      return { fault, marginMs };
    });

  const defined = margins.map((m) => m.marginMs).filter((m): m is number => m !== undefined);
  const byCause: Partial<Record<OverlapCause, number>> = {};
  for (const o of overlaps) byCause[o.cause] = (byCause[o.cause] ?? 0) + 1;
  const figures: ScenarioFigures = {
    scenario,
    clients,
    acquires: events.filter((e) => e.type === 'invoke').length,
    granted: holds.length,
    failedAcquires: events.filter((e) => e.type === 'fail').length,
    faults: faults.length,
    overlaps: byCause,
    lostSignals: events.filter((e) => e.type === 'lost').length,
    untoldEnds: untold.length,
    minMarginMs: defined.length ? Math.min(...defined) : undefined,
    writes: events.filter((e) => e.type === 'write').length,
    staleRejected: events.filter((e) => e.type === 'write' && e.accepted === false).length,
    outOfOrder,
    lostUpdates,
  };
  return { figures, holds, overlaps, untold, margins, problems };
}
