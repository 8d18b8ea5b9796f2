/**
 * The reference model of the model-based lock test: who holds which lock with which count, how long its
 * lease may last, and what each holder must believe. It is driven by observation where the real system is
 * nondeterministic (timing, faults): an outcome is first checked against everything the model allows,
 * then adopted. After every step `settle()` waits until the system is determinate (no lease about to run
 * out, faults judged, free locks handed to their waiters) and `check()` compares Redis, the library's
 * local view (lease signals, lockLost events, getHoldCount in the flows) and the model.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { LockAcquireTimeoutError, LockClientClosedError, LockLostError, LockNotHeldError } from '../../src/index.js';
import {
  leaseLabel,
  now,
  settlesWithin,
  traceLog,
  tracing,
  type AcquireOp,
  type Actor,
  type ClientHandle,
  type Frame,
  type Job,
  type LockSnapshot,
  type LostRecord,
  type Op,
  type World,
  WATCHDOG_TIMEOUTS,
} from './world.js';

/** A Redis expiry may come this much before the model's earliest bound (ms clock granularity, scheduling). */
const EARLY = 25;
/** ...or this much after its latest bound. */
const LATE = 60;
/** Settle also waits out lease ends due this soon, so that the check after it sees a still picture. */
const QUIET = 150;
/** How close to its model expiry a fixed lease may already be gone from Redis when queried (see its use). */
const EXPIRY_EDGE_MS = 50;

/** Timers of a loaded event loop fire late: slack for "the holder must have been told by then". */
export const LOCAL_MARGIN = 600;
/** A hold whose holder was told it is lost must be gone from Redis this soon after. */
const PURGE_MS = 250;
/** An owner field nobody believes in (a grant given back late) must go this soon. */
const ORPHAN_GRACE_MS = 400;
/** A reply can take this long on a loaded 2-core machine (a bounded wait on a free lock may run out first). */
const SLOW_REPLY_MS = 1000;
/** A free lock must reach one of its waiters this soon (the longest lease a waiter may sleep out + 1 s). */
export const HANDOFF_MS = 5000;
/** Fair lock: a queue entry's deadline lies at most the waiter lease (watchdogTimeout) ahead, and this. */
const ENTRY_MARGIN_MS = 100;
/** Bounded calls (waitTime) must return this soon after waitTime. */
export const BOUND_MARGIN = 1000;
/** ... and under a stalled server (README: "a stalled Redis cannot stretch it"). */
export const STALLED_BOUND_MARGIN = 350;

/**
 * MODEL_IGNORE=id,id: checks to skip while hunting for another problem (ids: listener-flow, purge,
 * renewed-fixed, close-leftover, wait-bound, stale-reentry, ttl-bound; `close` leaves close() out).
 */
const ignoredChecks = new Set((process.env['MODEL_IGNORE'] ?? '').split(',').filter(Boolean));
export const ignored = (id: string): boolean => ignoredChecks.has(id);

export class Violation extends Error {
  override readonly name = 'ModelViolation';
}

export type HoldStatus = 'live' | 'deleted' | 'lost' | 'released';

/** One owner's hold on one lock, as the model knows it. */
export class Hold {
  static #next = 1;
  readonly id = Hold.#next++;
  readonly lock: number;
  readonly actor: Actor;
  readonly client: ClientHandle;
  readonly ownerFlow: number;
  readonly field: string;
  readonly grantedAt: number;
  token: bigint | undefined;
  count = 0;
  /** Acquisitions in watchdog mode still held: the watchdog renews the lock while there is one. */
  watchdogEntries = 0;
  /** While not renewed: the key expires within [expLo, expHi] (local monotonic ms). */
  expLo = -Infinity;
  expHi = -Infinity;
  /** The earliest the library's local deadline of a fixed lease may come (send time + lease - drift). */
  deadlineLo = -Infinity;
  /**
   * live: in Redis, believed; deleted: gone from Redis, the holder not told yet; lost: the holder was
   * told (signal aborted / lockLost / LockNotHeldError); released: released normally.
   */
  status: HoldStatus = 'live';
  /** A fault made its fate unknown: judge it by observation after this time. */
  observeAt: number | undefined;
  /** The holder must be told by then. */
  toldBy: number | undefined;
  toldAt: number | undefined;
  /** How it ended (for messages). */
  why = '';
  /** Dropped by close(): no lockLost event may name it. */
  closed = false;
  /** Redis was seen without it after it was lost. */
  purged = false;
  readonly leases: Frame[] = [];

  constructor(lock: number, actor: Actor, client: ClientHandle, ownerFlow: number, grantedAt: number) {
    this.lock = lock;
    this.actor = actor;
    this.client = client;
    this.ownerFlow = ownerFlow;
    this.field = `${client.clientId}:${ownerFlow}`;
    this.grantedAt = grantedAt;
  }

  get renewing(): boolean {
    return this.watchdogEntries > 0;
  }

  describe(names: readonly string[]): string {
    const lease = this.renewing ? 'renewed' : `expires in [${fmt(this.expLo - now())}, ${fmt(this.expHi - now())}] ms`;
    return `hold#${this.id} ${this.actor.name}@${this.client.label} flow ${this.ownerFlow} on ${names[this.lock] ?? '?'} x${this.count} ${this.status}${this.why ? ` (${this.why})` : ''}, ${lease}`;
  }
}

const fmt = (ms: number): string => (Number.isFinite(ms) ? ms.toFixed(0) : String(ms));

/**
 * A hold of the played Redisson client (Java, test/support/redisson.ts) on one lock: taken and given back
 * through Redisson's scripts, always with a fixed lease (Java's watchdog is not played), so only its lease,
 * its unlock or a fault (DEL, PEXPIRE) may take it away; never one of our scripts.
 */
export class JavaHold {
  readonly lock: number;
  readonly field: string;
  count = 1;
  /** Redis expires the key within [expLo, expHi] (local monotonic ms): the latest grant's send and reply + lease. */
  expLo: number;
  expHi: number;
  status: 'live' | 'gone' | 'released' = 'live';
  why = '';
  /** When an unlock of it was sent (our waiter it wakes may be adopted before the unlock's reply). */
  releasingAt: number | undefined;
  /** When it stopped being live. */
  endedAt: number | undefined;
  /**
   * The latest expiry it ever had: a waiter of ours sleeps until the TTL it saw, and nothing announces a
   * lease that Redisson's re-entry or unlock shortened, nor a deletion.
   */
  sleptUntil: number;

  constructor(lock: number, field: string, expLo: number, expHi: number) {
    this.lock = lock;
    this.field = field;
    this.expLo = expLo;
    this.expHi = expHi;
    this.sleptUntil = expHi;
  }

  /** Redisson set its lease anew (re-entry, or an unlock that left a count). */
  setLease(expLo: number, expHi: number): void {
    this.sleptUntil = Math.max(this.sleptUntil, this.expHi);
    this.expLo = expLo;
    this.expHi = expHi;
  }

  describe(names: readonly string[]): string {
    return `Java ${this.field.slice(0, 8)} on ${names[this.lock] ?? '?'} x${this.count} ${this.status}${this.why ? ` (${this.why})` : ''}, expires in [${fmt(this.expLo - now())}, ${fmt(this.expHi - now())}] ms`;
  }
}

export function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

export function describeOp(op: Op): string {
  switch (op.kind) {
    case 'tryLock':
      return `tryLock(L${op.lock}, wait ${op.wait}, ${leaseLabel(op.lease)})`;
    case 'lock':
      return `lock(L${op.lock}, ${leaseLabel(op.lease)})`;
    case 'acquire':
    case 'withLock':
      return `${op.kind}(L${op.lock}, wait ${op.wait ?? '∞'}, ${leaseLabel(op.lease)})`;
    default:
      return op.kind;
  }
}

const isAcquireOp = (op: Op): op is AcquireOp => 'lease' in op;

export class Model {
  readonly world: World;
  /** Every hold of the run, in grant order. */
  readonly history: Hold[] = [];
  /** Every hold of the played Redisson client, in grant order (JavaCommand). */
  readonly java: JavaHold[] = [];
  /** Jobs whose outcome the model has not adopted yet. */
  readonly inflight: Job[] = [];
  /** When each lock last became free in the model. */
  readonly freeSince: number[];
  readonly lastToken: (bigint | undefined)[];
  readonly #orphanSince = new Map<string, number>();
  /** `<lock>|<field>` of a live hold that Redis counts higher than its flows took, since when (see #settle). */
  readonly #excessSince = new Map<string, number>();
  /** Set while a composite fault command runs: every outcome is judged loosely. */
  faultActive = false;
  readonly notes: string[] = [];

  constructor(world: World) {
    this.world = world;
    this.freeSince = world.names.map(() => now());
    this.lastToken = world.names.map(() => undefined);
  }

  violation(message: string): Violation {
    const log = tracing ? `\n  trace:\n${traceLog.slice(-80).join('\n')}` : '';
    return new Violation(`${message}\n  model: ${this.describeHolds()}${log}`);
  }

  describeHolds(): string {
    const active = this.history.filter((h) => h.status !== 'released' && !(h.status === 'lost' && h.purged));
    const described = [
      ...active.map((h) => h.describe(this.world.names)),
      ...this.liveJava().map((j) => j.describe(this.world.names)),
    ];
    return described.length === 0 ? 'no holds' : described.join('; ');
  }

  describeSnapshot(snapshot: LockSnapshot): string {
    if (!snapshot.exists) return 'key absent';
    return `${[...snapshot.owners].map(([field, count]) => `${this.describeField(field)}=${count}`).join(', ') || 'no owner field'} pttl ${snapshot.pttl}`;
  }

  describeField(field: string): string {
    for (const client of [...this.world.clients, ...this.world.retired]) {
      const prefix = `${client.clientId}:`;
      if (field.startsWith(prefix)) {
        const flow = Number(field.slice(prefix.length));
        const actor = this.world.actors.find((a) => a.slot === client.slot && a.chain().includes(flow));
        return `${actor?.name ?? '?'}@${client.label}:${flow}`;
      }
    }
    return field;
  }

  /** MODEL_IGNORE=close-leftover: fields of closed clients are left out of the comparisons. */
  #ignorable(field: string): boolean {
    return ignored('close-leftover') && this.world.retired.some((c) => field.startsWith(`${c.clientId}:`));
  }

  liveHolds(lock: number): Hold[] {
    return this.history.filter((h) => h.lock === lock && h.status === 'live');
  }

  /** The played Redisson client's live holds (of `lock`, or of every lock). */
  liveJava(lock?: number): JavaHold[] {
    return this.java.filter((j) => j.status === 'live' && (lock === undefined || j.lock === lock));
  }

  /** Holds that may still have a field in Redis (live, or lost but not yet seen purged). */
  #tracked(): Hold[] {
    return this.history.filter(
      (h) => h.status === 'live' || h.status === 'deleted' || (h.status === 'lost' && !h.purged),
    );
  }

  /** The nearest hold of `chain` (innermost flow first) on `lock` that Redis may still have. */
  chainHold(client: ClientHandle, lock: number, chain: readonly number[], live = true): Hold | undefined {
    for (const flow of [...chain].reverse()) {
      const hold = this.history.findLast(
        (h) =>
          h.client === client &&
          h.lock === lock &&
          h.ownerFlow === flow &&
          (h.status === 'live' || (!live && h.status === 'lost' && !h.purged)),
      );
      if (hold) return hold;
    }
    return undefined;
  }

  /** Certainly still in Redis at `t` (no lease end, no fault in between). */
  aliveThrough(hold: Hold, t: number): boolean {
    if (hold.status !== 'live' || hold.observeAt !== undefined) return false;
    if (hold.renewing) return true;
    // The library declares a fixed lease lost at its local deadline (send time + lease - drift), which may
    // come before Redis's expiry (a grant that waited behind a stalled server), and purges it from Redis then.
    return Math.min(hold.expLo, hold.deadlineLo) - EARLY > t;
  }

  /** A release by the holder's actor was sent before `t` and is not adopted yet. */
  #releasing(hold: Hold, t: number): boolean {
    return this.inflight.some((job) => job.op.kind === 'release' && job.actor === hold.actor && job.startedAt <= t);
  }

  /** The key has left Redis (its lease ran out, or it was deleted, during a call). */
  #gone(hold: Hold, at: number, why: string): void {
    if (hold.status !== 'live') return;
    hold.status = 'deleted';
    hold.why = why;
    hold.observeAt = undefined;
    // The holder's local deadline never lies after the Redis expiry; a renewed hold learns it at the next renewal.
    const localDeadline = hold.renewing ? at + hold.client.period : Math.max(at, hold.expHi);
    hold.toldBy = Math.min(hold.toldBy ?? Infinity, localDeadline + LOCAL_MARGIN);
    this.#becameFree(hold.lock, at);
  }

  #told(hold: Hold, at: number, why: string): void {
    if (hold.status === 'lost' || hold.status === 'released') return;
    const wasLive = hold.status === 'live';
    hold.status = 'lost';
    hold.toldAt = at;
    hold.observeAt = undefined;
    if (!hold.why) hold.why = why;
    if (wasLive) this.#becameFree(hold.lock, at);
  }

  #becameFree(lock: number, at: number): void {
    if (this.liveHolds(lock).length === 0 && this.liveJava(lock).length === 0)
      this.freeSince[lock] = Math.max(this.freeSince[lock] ?? 0, at);
  }

  /** Java's hold left Redis (its lease ran out, a fault deleted it) or was unlocked. */
  javaEnded(hold: JavaHold, at: number, status: 'gone' | 'released', why: string): void {
    if (hold.status !== 'live') return;
    hold.status = status;
    hold.why = why;
    hold.endedAt = at;
    // An unlock that frees the lock announces it; an expiry or a deletion does not, and our waiters may
    // sleep out the longest TTL they could have seen.
    this.#becameFree(hold.lock, status === 'released' ? at : Math.max(at, hold.sleptUntil, hold.expHi));
  }

  /**
   * Java's tryLock of `lock` for `leaseMs`, sent at `sentAt`, answered at `at`: a grant (or re-entry) must
   * respect every hold of ours certainly alive then, and on a fair lock every live waiter of ours in line; a
   * refusal of the plain lock needs a holder or a racer.
   */
  javaTried(lock: number, field: string, leaseMs: number, granted: boolean, sentAt: number, at: number): void {
    const what = `Java tryLock(L${lock}, ${leaseMs}ms)`;
    const mine = this.liveJava(lock).find((j) => j.field === field);
    if (!granted) {
      if (mine && at + EARLY < mine.expLo) throw this.violation(`${what} refused its own live hold's re-entry`);
      if (mine) this.javaEnded(mine, sentAt, 'gone', 'its lease ran out');
      if (this.world.kind === 'fair' || this.history.some((h) => h.observeAt !== undefined)) return;
      const blockers = this.history.filter(
        (h) =>
          h.lock === lock &&
          ((h.status === 'live' && !this.#goneBefore(h, sentAt)) ||
            (h.status === 'lost' && !h.purged && (h.toldAt ?? 0) + PURGE_MS > sentAt) ||
            h.status === 'deleted'),
      );
      const racers = this.inflight.some((j) => isAcquireOp(j.op) && j.op.lock === lock);
      if (blockers.length === 0 && !racers) throw this.violation(`${what} refused a free lock`);
      return;
    }
    for (const other of this.liveHolds(lock)) {
      if (this.#releasing(other, at)) continue;
      if (this.aliveThrough(other, at))
        throw this.violation(
          `${what} was granted while ${other.describe(this.world.names)} certainly held it: two holders`,
        );
      this.#gone(other, sentAt, 'its lease ran out: Java was granted the lock');
    }
    // A re-entry of Java's own hold overtakes nobody.
    if (this.world.kind === 'fair' && !mine) {
      for (const other of this.inflight) {
        const o = other.op;
        if (!isAcquireOp(o) || o.lock !== lock || other.settled || other.faulted || other.aborted) continue;
        if (other.client.closed || other.queuedAt === undefined) continue;
        const wait = o.kind === 'lock' ? undefined : o.wait;
        if (wait !== undefined && other.startedAt + wait < at + 200) continue;
        throw this.violation(
          `${what} was granted while ${other.actor.name}@${other.client.label} ${describeOp(o)} waits in line: a fair lock overtook a waiter`,
        );
      }
    }
    if (mine) {
      mine.count++;
      // Redisson's re-entry sets the lease anew (PEXPIRE lease), which may shorten it.
      mine.setLease(sentAt + leaseMs, at + leaseMs);
      return;
    }
    this.java.push(new JavaHold(lock, field, sentAt + leaseMs, at + leaseMs));
  }

  /**
   * Java's unlock of `hold`, sent at `sentAt`, answered `reply` at `at` (nil: nothing held; 0: still held,
   * its lease set to `unlockLeaseMs`; 1: freed). A hold certainly alive must be found with its count: none of
   * our scripts may take it away.
   */
  javaUnlocked(hold: JavaHold, reply: number | null, sentAt: number, at: number, unlockLeaseMs: number): void {
    const what = `Java unlock of ${hold.describe(this.world.names)}`;
    const alive = hold.status === 'live' && at + EARLY < hold.expLo;
    const expected = hold.count > 1 ? 0 : 1;
    if (alive && reply !== expected) throw this.violation(`${what} answered ${String(reply)}, not ${expected}`);
    if (hold.status !== 'live') return;
    if (reply === null || (reply === 1 && hold.count > 1)) {
      this.javaEnded(hold, at, 'gone', 'its lease ran out before its unlock');
      return;
    }
    hold.count--;
    if (hold.count === 0) this.javaEnded(hold, at, 'released', 'unlocked');
    else {
      // Redisson's unlock sets its internalLockLeaseTime anew while a count remains.
      hold.setLease(sentAt + unlockLeaseMs, at + unlockLeaseMs);
    }
  }

  /** When the holder was told it lost `hold`: an aborted lease signal or a lockLost event naming it. */
  observeTold(hold: Hold): number | undefined {
    let at: number | undefined;
    for (const frame of hold.leases) {
      if (frame.abortedAt !== undefined) at = Math.min(at ?? Infinity, frame.abortedAt);
    }
    const name = this.world.names[hold.lock];
    for (const event of hold.client.lost) {
      if (event.name !== name || event.at < hold.grantedAt - 5) continue;
      if (hold.token !== undefined && event.token !== hold.token) continue;
      event.matched = true;
      at = Math.min(at ?? Infinity, event.at);
    }
    return at;
  }

  /**
   * Before close() drops `hold` (live, or already gone from Redis unknown to its client): a lockLost it
   * emitted at or after a fixed lease's deadline is that lease's end, not close()'s doing: emitted before close() (no settle ran in between to adopt it), or while close()
   * ran, by a release in flight whose reply found the hold gone (the watchdog is stopped by then). Returns
   * whether it took that in.
   */
  toldByLeaseEnd(hold: Hold): boolean {
    if ((hold.status !== 'live' && hold.status !== 'deleted') || hold.renewing) return false;
    const event = this.#lostEventOf(hold);
    if (!event || event.at < hold.deadlineLo - EARLY) return false;
    event.matched = true;
    this.#told(hold, event.at, 'its lease ran out');
    return true;
  }

  /**
   * Before close() drops `hold`, whose fate a fault had left unknown when close() began (a sleeping server, a
   * stall): it may have been lost in the fault, which a release in flight reports when its reply finds the
   * hold gone, while close() runs (the watchdog is stopped by then). Returns whether it took that in.
   */
  toldAfterFault(hold: Hold): boolean {
    if (hold.status !== 'live' && hold.status !== 'deleted') return false;
    const event = this.#lostEventOf(hold);
    if (!event) return false;
    event.matched = true;
    this.#told(hold, event.at, 'lost in a fault');
    return true;
  }

  /** A lockLost event of `hold`'s client not yet matched that names it (its token, once known). */
  #lostEventOf(hold: Hold): LostRecord | undefined {
    const name = this.world.names[hold.lock];
    return hold.client.lost.find(
      (e) =>
        !e.matched &&
        e.name === name &&
        e.at >= hold.grantedAt - 5 &&
        (hold.token === undefined || e.token === hold.token),
    );
  }

  /** lockLost events of `client` that no lost hold explains. */
  unexplainedLost(client: ClientHandle): LostRecord[] {
    return client.lost.filter((event) => !event.matched);
  }

  /** Every live hold's fate is unknown until `until` (after a stall of the event loop or the server). */
  markFault(until: number): void {
    for (const hold of this.history) {
      if (hold.status === 'live') hold.observeAt = until;
    }
    for (const job of this.inflight) job.faulted = true;
  }

  /**
   * An unmodeled stall of `ms` (the lag monitor in world.ts): judged as a fault that ends at `until`, without
   * shortening a fault already open; a holder that must be told is given the stall's length on top.
   */
  markStall(until: number, ms: number): void {
    for (const hold of this.history) {
      if (hold.status === 'live') hold.observeAt = Math.max(hold.observeAt ?? -Infinity, until);
      if (hold.status === 'deleted' && hold.toldBy !== undefined) hold.toldBy += ms;
    }
    for (const job of this.inflight) job.faulted = true;
    this.notes.push(`unmodeled stall of ${fmt(ms)} ms`);
  }

  /** Waits up to `ms` for `promise`, adopting other jobs' outcomes meanwhile (a grant must not go unseen). */
  async waitFor(promise: Promise<unknown>, ms: number): Promise<boolean> {
    const end = now() + ms;
    for (;;) {
      if (await settlesWithin(promise, Math.min(25, end - now()))) return true;
      if (now() >= end) return false;
      await this.adoptFinished();
    }
  }

  post(actor: Actor, op: Op): Job {
    const job = actor.post(op);
    job.faulted = this.faultActive;
    this.inflight.push(job);
    return job;
  }

  /** Adopts every settled job, oldest outcome first. */
  async adoptFinished(): Promise<void> {
    for (;;) {
      const settled = this.inflight.filter((job) => job.settled);
      if (settled.length === 0) return;
      settled.sort((a, b) => (a.outcome?.at ?? 0) - (b.outcome?.at ?? 0));
      const job = settled[0];
      if (!job) return;
      this.inflight.splice(this.inflight.indexOf(job), 1);
      job.adopted = true;
      if (isAcquireOp(job.op)) await this.#adoptAcquisition(job, job.op);
      else if (job.op.kind === 'release') await this.#adoptRelease(job);
    }
  }

  async #adoptAcquisition(job: Job, op: AcquireOp): Promise<void> {
    const outcome = job.outcome;
    if (!outcome) return;
    const success = outcome.ok && (op.kind !== 'tryLock' || outcome.value === true);
    const what = `${job.actor.name}@${job.client.label} ${describeOp(op)}`;
    const frame = job.frame;
    if (success && !frame) throw new Error(`harness: ${what} succeeded without a frame`);
    if (job.client.closed) {
      // close() ended it: a late success is a hold that close() dropped (Close judges Redis).
      if (frame) {
        const hold = new Hold(op.lock, job.actor, job.client, frame.flow, outcome.at);
        hold.status = 'lost';
        hold.closed = true;
        hold.purged = true;
        hold.why = 'granted while its client closed';
        frame.hold = hold;
        if (frame.lease) hold.leases.push(frame);
        this.history.push(hold);
      } else if (!this.#expectedFailure(job, op, outcome.error, outcome)) {
        throw this.violation(`${what} failed with ${describeError(outcome.error)} while its client closed`);
      }
      return;
    }
    if (!success || !frame) {
      if (!this.#expectedFailure(job, op, outcome.error, outcome)) {
        throw this.violation(`${what} failed with ${describeError(outcome.error)}`);
      }
      this.#judgeFailure(job, op, what);
      return;
    }

    const snapshot = await this.world.snapshot(op.lock);
    const chain = frame.kind === 'scoped' ? [...job.chain, frame.flow] : [...job.chain];
    const fieldOf = (flow: number): string => `${job.client.clientId}:${flow}`;
    let owner = [...chain].reverse().find((flow) => snapshot.owners.has(fieldOf(flow)));
    let count = owner === undefined ? 0 : (snapshot.owners.get(fieldOf(owner)) ?? 0);
    /** Redis confirmed the grant; otherwise its fixed lease may have run out before the model got to it. */
    const verified = owner !== undefined;
    if (owner === undefined) {
      if (!job.faulted && (op.lease === -1 || now() + EARLY < outcome.at + op.lease)) {
        throw this.violation(
          `${what} succeeded ${fmt(now() - outcome.at)} ms ago, but Redis has no field of its flows ${chain.join('>')}: ${this.describeSnapshot(snapshot)}`,
        );
      }
      const chainLive = this.chainHold(job.client, op.lock, chain);
      owner = chainLive?.ownerFlow ?? chain.at(-1) ?? -1;
      count = chainLive ? chainLive.count + 1 : 1;
    }
    const current = chain.at(-1);
    const existing = this.history.findLast(
      (h) => h.client === job.client && h.lock === op.lock && h.ownerFlow === owner && h.status !== 'released',
    );
    let hold: Hold;
    let fresh: boolean;
    if (existing?.status === 'live' && count === existing.count + 1) {
      const told = this.observeTold(existing);
      if (told !== undefined && told < job.startedAt && !ignored('stale-reentry')) {
        throw this.violation(
          `${what} re-entered ${existing.describe(this.world.names)} (Redis: ${this.describeSnapshot(snapshot)}) ` +
            `although its holder was told ${fmt(job.startedAt - told)} ms before that it had lost it: a stale hold left in Redis counts on`,
        );
      }
      hold = existing;
      fresh = false;
      hold.count = count;
      if (frame.lease && hold.token !== undefined && frame.lease.fencingToken !== hold.token) {
        throw this.violation(
          `${what} re-entered ${hold.describe(this.world.names)} but its lease has fencing token ${frame.lease.fencingToken}, not ${hold.token}`,
        );
      }
    } else if (count === 1 && owner === current) {
      fresh = true;
      for (const other of this.liveHolds(op.lock)) {
        // A release of it still in flight may have run in Redis first (its caller hears later than this
        // grant's: the library settles a release after its own bookkeeping): adopted next, not judged here.
        if (this.#releasing(other, outcome.at)) continue;
        if (this.aliveThrough(other, outcome.at)) {
          throw this.violation(
            `${what} was granted (Redis: ${this.describeSnapshot(snapshot)}) while ${other.describe(this.world.names)} certainly held it: two holders`,
          );
        }
        this.#gone(other, outcome.at, 'its lease ran out: another flow was granted the lock');
      }
      for (const java of this.liveJava(op.lock)) {
        if (java.releasingAt !== undefined && java.releasingAt <= outcome.at) continue;
        if (outcome.at + EARLY < java.expLo)
          throw this.violation(
            `${what} was granted (Redis: ${this.describeSnapshot(snapshot)}) while ${java.describe(this.world.names)} certainly held it: two holders`,
          );
        this.javaEnded(java, outcome.at, 'gone', 'its lease ran out: a flow of ours was granted the lock');
      }
      if (this.world.kind === 'fair') this.#judgeArrivalOrder(job, op, outcome.at, what);
      if (existing && existing.status === 'deleted') {
        // The library replaces its stale record of this owner and tells its holder.
        existing.toldBy = Math.min(existing.toldBy ?? Infinity, outcome.at + LOCAL_MARGIN);
      }
      hold = new Hold(op.lock, job.actor, job.client, owner, outcome.at);
      hold.count = 1;
      // A lean hold records its token in Redis only at its first renewal (lua/lock/acquire.lua).
      const fence = verified ? await this.world.fence(op.lock, hold.field) : undefined;
      hold.token = frame.token ?? fence;
      if (frame.token !== undefined && fence !== undefined && frame.token !== fence) {
        throw this.violation(`${what}: the client has fencing token ${frame.token}, but its hold records ${fence}`);
      }
      const last = this.lastToken[op.lock];
      if (hold.token !== undefined && last !== undefined && hold.token <= last) {
        throw this.violation(`${what}: fencing token ${hold.token} does not rise above ${last}`);
      }
      this.lastToken[op.lock] = hold.token;
      this.history.push(hold);
    } else {
      const model = existing ? existing.describe(this.world.names) : 'no hold of that owner';
      throw this.violation(
        `${what} succeeded with ${this.describeField(fieldOf(owner))}=${count} in Redis; the model has ${model}` +
          (existing && existing.status !== 'live'
            ? ': the flow re-entered a hold that was already lost (stale hold left in Redis)'
            : ''),
      );
    }
    frame.hold = hold;
    if (frame.lease) hold.leases.push(frame);
    this.#applyLease(hold, op.lease, fresh, job, outcome.at, verified ? snapshot : undefined, what);
    // Granted under a fault (late, or with little lease left): its fate is judged by observation, a
    // watchdog period after the adoption (steps are finished, and adopted, after their fault ended).
    if (job.faulted) hold.observeAt = Math.max(hold.observeAt ?? 0, now() + hold.client.period + 300);
  }

  /**
   * Fair lock: a fresh grant overtook no waiter that was seen in line before it began and still waits,
   * alive (neither aborted, nor closed, nor about to give up). Faults and stalls during either wait excuse
   * it (an entry may have run out and been queued again).
   */
  #judgeArrivalOrder(job: Job, op: AcquireOp, at: number, what: string): void {
    if (job.faulted) return;
    for (const other of this.inflight) {
      const o = other.op;
      if (other === job || !isAcquireOp(o) || o.lock !== op.lock || other.faulted || other.aborted) continue;
      if (other.client.closed || (other.outcome && other.outcome.at <= at)) continue;
      const wait = o.kind === 'lock' ? undefined : o.wait;
      if (wait === 0 || (wait !== undefined && other.startedAt + wait < at + 200)) continue;
      if (other.queuedAt === undefined || other.queuedAt >= job.startedAt) continue;
      throw this.violation(
        `${what} was granted while ${other.actor.name}@${other.client.label} ${describeOp(o)}, in line since ` +
          `${fmt(job.startedAt - other.startedAt)} ms before it, still waits: a fair lock overtook a waiter`,
      );
    }
  }

  /**
   * Fair lock: every queue entry's deadline is within the waiter lease of now (none outlives its waiter).
   * Marks the waits seen in line: a wait whose client has no other wait of this lock owns that client's
   * entry (waiter ids are `<clientId>:w<n>`).
   */
  async #checkFairQueue(lock: number): Promise<void> {
    const sentAt = now();
    const queue = await this.world.fairQueue(lock);
    if (!queue) return;
    const waits = this.inflight.filter(
      (j) => !j.settled && isAcquireOp(j.op) && j.op.lock === lock && !(j.op.kind === 'tryLock' && j.op.wait === 0),
    );
    for (const wait of waits) {
      if (wait.queuedAt !== undefined || waits.some((other) => other !== wait && other.client === wait.client))
        continue;
      if (queue.ids.some((id) => id.startsWith(`${wait.client.clientId}:w`))) wait.queuedAt = sentAt;
    }
    const bound = Math.max(...WATCHDOG_TIMEOUTS) + ENTRY_MARGIN_MS;
    for (const [id, deadline] of queue.deadlines) {
      if (deadline > queue.serverNow + bound) {
        throw this.violation(
          `L${lock}: queue entry ${id} lives ${fmt(deadline - queue.serverNow)} ms more, beyond the waiter lease (${bound} ms)`,
        );
      }
    }
  }

  /** Records the lease of a new acquisition of `hold` and checks the PTTL Redis shows right after it. */
  #applyLease(
    hold: Hold,
    lease: number,
    fresh: boolean,
    job: Job,
    at: number,
    snapshot: LockSnapshot | undefined,
    what: string,
  ): void {
    const W = hold.client.watchdogTimeout;
    if (lease !== -1) hold.deadlineLo = Math.max(hold.deadlineLo, job.startedAt + lease - driftOf(lease));
    if (!snapshot) {
      // Not seen in Redis (it may have run out already): take the model's prediction.
      if (lease === -1) hold.watchdogEntries++;
      else {
        hold.expLo = fresh ? job.startedAt + lease : Math.max(hold.expLo, job.startedAt + lease);
        hold.expHi = Math.max(hold.expHi, at + lease);
      }
      return;
    }
    if (snapshot.pttl < 0) {
      throw this.violation(`${what}: the lock has PTTL ${snapshot.pttl} right after the grant`);
    }
    if (lease === -1) hold.watchdogEntries++;
    const observedLo = snapshot.sentAt + snapshot.pttl;
    const observedHi = snapshot.at + snapshot.pttl + 1;
    if (hold.renewing) {
      const bound = Math.max(W, lease, hold.expHi - snapshot.sentAt);
      if (snapshot.pttl > bound + 5 && !ignored('ttl-bound')) {
        throw this.violation(`${what}: PTTL ${snapshot.pttl} right after the grant exceeds the lease (${bound} ms)`);
      }
      if (lease !== -1) {
        hold.expLo = Math.max(hold.expLo, job.startedAt + lease);
        hold.expHi = Math.max(hold.expHi, at + lease);
      }
      return;
    }
    const predictedLo = fresh ? job.startedAt + lease : Math.max(hold.expLo, job.startedAt + lease);
    const predictedHi = fresh ? at + lease : Math.max(hold.expHi, at + lease);
    if ((observedLo > predictedHi + 2 && !ignored('ttl-bound')) || observedHi < predictedLo - EARLY) {
      throw this.violation(
        `${what}: PTTL ${snapshot.pttl} right after the grant; the model expects the key to expire in [${fmt(predictedLo - snapshot.sentAt)}, ${fmt(predictedHi - snapshot.sentAt)}] ms`,
      );
    }
    hold.expLo = Math.max(predictedLo, observedLo);
    hold.expHi = Math.min(predictedHi, observedHi);
  }

  #expectedFailure(job: Job, op: AcquireOp, error: unknown, outcome: { ok: boolean; value?: unknown }): boolean {
    if (op.kind === 'tryLock' && outcome.ok && outcome.value === false) return true;
    if ((op.kind === 'acquire' || op.kind === 'withLock') && op.wait !== undefined) {
      if (error instanceof LockAcquireTimeoutError) return true;
    }
    if (job.aborted && error === job.controller.signal.reason) return true;
    return error instanceof LockClientClosedError && job.client.closed;
  }

  /** A failed acquisition: was the lock possibly unavailable for the whole call? */
  #judgeFailure(job: Job, op: AcquireOp, what: string): void {
    const outcome = job.outcome;
    // A re-entry given up on (its wait ran out, it was aborted) may still run in Redis after the call
    // returned: it lengthens the TTL to its lease (a re-entry never shortens one; in watchdog mode, the
    // watchdogTimeout), and its give-back drops the count but not the TTL. The fault it waited behind is
    // over when this runs, so it ran by now.
    const held = this.chainHold(job.client, op.lock, job.chain);
    if (held) held.expHi = Math.max(held.expHi, now() + (op.lease === -1 ? job.client.watchdogTimeout : op.lease));
    if (!outcome || job.faulted || job.aborted) return;
    const reentry = this.chainHold(job.client, op.lock, job.chain);
    if (reentry) {
      if (this.aliveThrough(reentry, outcome.at)) {
        throw this.violation(`${what} failed although its flow holds the lock: ${reentry.describe(this.world.names)}`);
      }
      return;
    }
    const blockers = this.history.filter(
      (h) =>
        h.lock === op.lock &&
        ((h.status === 'live' && !this.#goneBefore(h, job.startedAt)) ||
          (h.status === 'lost' && !h.purged && (h.toldAt ?? 0) + PURGE_MS > job.startedAt)),
    );
    const java = this.java.some(
      (j) => j.lock === op.lock && (j.status === 'live' || (j.endedAt ?? -Infinity) > job.startedAt),
    );
    const racers = java || this.inflight.some((j) => j !== job && isAcquireOp(j.op) && j.op.lock === op.lock);
    // A short waitTime may run out before the first attempt's reply on a loaded 2-core machine (the grant is
    // then given back): judged are a single attempt (it waits for its reply), a give-up before the waitTime,
    // and waits long enough (SLOW_REPLY_MS) that a reply that late would be a fault of its own.
    const wait = op.kind === 'tryLock' ? op.wait : op.kind === 'lock' ? undefined : op.wait;
    const ranOut = wait !== undefined && wait > 0 && wait < SLOW_REPLY_MS && outcome.at - job.startedAt >= wait - EARLY;
    if (blockers.length === 0 && !racers && !ranOut) {
      throw this.violation(`${what} failed on a free lock`);
    }
  }

  /** The hold had certainly left Redis by `t`. */
  #goneBefore(hold: Hold, t: number): boolean {
    return !hold.renewing && hold.observeAt === undefined && hold.expHi + LATE < t;
  }

  async #adoptRelease(job: Job): Promise<void> {
    const outcome = job.outcome;
    const frame = job.popped;
    if (!outcome || !frame) throw new Error(`harness: release job of ${job.actor.name} without frame or outcome`);
    const hold = frame.hold;
    const name = `L${frame.lock}`;
    const what = `${job.actor.name}@${job.client.label} release of ${frame.kind} ${name} (${leaseLabel(frame.spec)})`;
    const target = frame.kind === 'imperative' ? this.chainHold(job.client, frame.lock, job.chain, false) : hold;
    if (job.client.closed || frame.client.closed) {
      // Raced with close(): a release that went through is a normal release; Close judges the rest.
      if (outcome.ok && target && target.status !== 'released') {
        target.count--;
        if (target.count <= 0) {
          target.status = 'released';
          target.why = 'released while its client closed';
        }
      }
      return;
    }
    if (outcome.ok) {
      if ((!target || target.status !== 'live') && job.faulted && hold?.status === 'deleted') {
        // The model inferred the hold gone when a grant finished in the same tick as this release: the
        // release came first in Redis.
        hold.count--;
        if (hold.count <= 0) {
          hold.status = 'released';
          hold.why = 'released (in the same tick as a grant after a fault)';
        }
        return;
      }
      if (!target || !(target.status === 'live' || (frame.kind === 'imperative' && target.status === 'lost'))) {
        throw this.violation(
          `${what} succeeded, but the model has ${target ? target.describe(this.world.names) : 'no hold for it'}`,
        );
      }
      const snapshot = await this.world.snapshot(frame.lock);
      const left = snapshot.owners.get(target.field) ?? 0;
      if (target.status === 'live' && this.aliveThrough(target, now()) && left !== target.count - 1) {
        throw this.violation(
          `${what}: Redis has ${this.describeSnapshot(snapshot)} after it, expected ${target.count - 1} hold(s) left for ${target.describe(this.world.names)}`,
        );
      }
      target.count--;
      if (frame.spec === -1 && target.watchdogEntries > 0) {
        target.watchdogEntries--;
        if (target.watchdogEntries === 0 && target.count > 0) {
          // Renewal stops: the last renewal may have set the full watchdogTimeout just before.
          target.expHi = Math.max(target.expHi, outcome.at + target.client.watchdogTimeout + LATE);
          target.why = 'watchdog-mode re-entry released';
        }
      }
      if (target.count <= 0) {
        target.status = 'released';
        target.why = 'released';
        this.#becameFree(target.lock, outcome.at);
      }
      return;
    }
    const error = outcome.error;
    // A withLock whose hold was lost while its body ran rejects with LockLostError (LockNotHeldError before).
    const expected = error instanceof LockNotHeldError || (frame.kind === 'scoped' && error instanceof LockLostError);
    if (!expected) throw this.violation(`${what} failed with ${describeError(error)}`);
    if (target?.status === 'live') {
      if (this.aliveThrough(target, outcome.at)) {
        const snapshot = await this.world.snapshot(frame.lock);
        throw this.violation(
          `${what} threw LockNotHeldError although the hold is live (Redis: ${this.describeSnapshot(snapshot)}): ${target.describe(this.world.names)}`,
        );
      }
      this.#gone(target, outcome.at, 'ran out before its release');
    }
    // The failed release told the holder (the library drops its record with the lease signal aborted).
    if (hold && hold.status === 'deleted') this.#told(hold, outcome.at, 'its release found it gone');
    if (target && target !== hold && target.status === 'deleted')
      this.#told(target, outcome.at, 'its release found it gone');
  }

  /**
   * Waits until the system is determinate, judging what happens meanwhile: leases about to end, holds
   * whose fate a fault left open, holders that must be told, grants given back, free locks with waiters.
   */
  async settle(): Promise<void> {
    for (let round = 0; ; round++) {
      await this.#settle();
      // An owner field nobody believes in may show up after the last look (a grant given back late), or an
      // unmodeled stall came meanwhile: settle again, which gives it its grace.
      if (await this.check()) return;
      if (round >= 5) throw this.violation('Redis keeps changing under a settled model');
    }
  }

  async #settle(): Promise<void> {
    const started = now();
    let waitingFor = '';
    for (;;) {
      if (now() - started > 30_000)
        throw this.violation(`settle did not converge within 30 s, waiting for: ${waitingFor}`);
      await this.adoptFinished();
      const until: number[] = [];
      const reasons: string[] = [];
      const wait = (at: number, reason: string): void => {
        until.push(at);
        reasons.push(reason);
      };
      const snapshots = await Promise.all(this.world.names.map((_, lock) => this.world.snapshot(lock)));
      const t = now();
      const liveFields = new Set(this.history.filter((h) => h.status === 'live').map((h) => `${h.lock}|${h.field}`));
      const statusBefore = this.history.map((h) => h.status).join();
      for (const hold of this.#tracked()) {
        const snapshot = snapshots[hold.lock];
        if (!snapshot) continue;
        // A newer live hold of the same flow has the same owner field: the field is that one's then.
        const inRedis =
          snapshot.owners.has(hold.field) && (hold.status === 'live' || !liveFields.has(`${hold.lock}|${hold.field}`));
        const told = this.observeTold(hold);
        const names = this.world.names;
        if (hold.status === 'live') {
          if (hold.observeAt !== undefined) {
            if (t < hold.observeAt) {
              wait(hold.observeAt, `fault outcome of hold#${hold.id}`);
              continue;
            }
            hold.observeAt = undefined;
            if (told !== undefined) this.#told(hold, told, 'lost during a fault');
            else if (!inRedis) this.#gone(hold, t, 'gone from Redis after a fault');
            continue;
          }
          if (told !== undefined) {
            // Lost locally without a fault: only a fixed lease at its deadline may be.
            if (hold.renewing || told < hold.deadlineLo - EARLY) {
              throw this.violation(
                `the holder of ${hold.describe(names)} was told it lost the lock ${fmt(t - told)} ms ago without a fault ` +
                  `(Redis: ${this.describeSnapshot(snapshot)})`,
              );
            }
            this.#told(hold, told, 'its lease ran out');
            continue;
          }
          if (hold.renewing) {
            if (!inRedis) {
              throw this.violation(
                `watchdog-mode ${hold.describe(names)} vanished from Redis without a fault (Redis: ${this.describeSnapshot(snapshot)})`,
              );
            }
            continue;
          }
          if (t > hold.expHi + LATE) {
            if (inRedis && ignored('renewed-fixed')) continue;
            if (inRedis) {
              // Only a read sent after the latest expiry proves the key outlived its lease; one sent before
              // it whose reply came late (a loaded machine) proves nothing: look again.
              if (snapshot.sentAt <= hold.expHi + LATE) {
                wait(t, `lease end of hold#${hold.id} (seen by a read sent before it)`);
                continue;
              }
              throw this.violation(
                `${hold.describe(names)} is still in Redis ${fmt(snapshot.sentAt - hold.expHi)} ms after its lease must have ended ` +
                  `(Redis: ${this.describeSnapshot(snapshot)}): a fixed lease was renewed`,
              );
            }
            this.#gone(hold, hold.expHi, 'its lease ran out');
          } else if (t + QUIET >= Math.min(hold.expLo, hold.deadlineLo) - EARLY) {
            if (!inRedis) this.#gone(hold, t, 'its lease ran out');
            else wait(hold.expHi + LATE + 1, `lease end of hold#${hold.id}`);
          } else if (!inRedis) {
            throw this.violation(
              `${hold.describe(names)} vanished from Redis before its lease could end (Redis: ${this.describeSnapshot(snapshot)})`,
            );
          }
          continue;
        }
        if (hold.status === 'deleted') {
          if (told !== undefined) {
            this.#told(hold, told, hold.why);
          } else if (hold.toldBy !== undefined && t > hold.toldBy) {
            throw this.violation(
              `the holder of ${hold.describe(names)} was not told it lost the lock within ${fmt(hold.toldBy - (hold.grantedAt > 0 ? t : 0))} ms of the deadline`,
            );
          } else {
            wait(hold.toldBy ?? t + 50, `holder of hold#${hold.id} to be told`);
          }
          if (inRedis) {
            throw this.violation(`${hold.describe(names)} is back in Redis: ${this.describeSnapshot(snapshot)}`);
          }
          continue;
        }
        // lost: the holder was told; Redis must drop it soon (a lost hold is purged, or has run out).
        if (!inRedis) {
          hold.purged = true;
        } else if (snapshot.sentAt > (hold.toldAt ?? t) + PURGE_MS && !ignored('purge')) {
          // Judged by when the read was sent: a reply read late says nothing about the time after the send.
          throw this.violation(
            `${hold.describe(names)}: its holder was told it lost the lock ${fmt(snapshot.sentAt - (hold.toldAt ?? t))} ms before a read found it, ` +
              `but Redis still has it (${this.describeSnapshot(snapshot)}): the stale hold was not purged`,
          );
        } else {
          wait((hold.toldAt ?? t) + PURGE_MS + 1, `purge of hold#${hold.id}`);
        }
      }
      // Java's holds: only their lease, their unlock or a fault takes them away, never one of our scripts.
      for (const java of this.liveJava()) {
        const snapshot = snapshots[java.lock];
        if (!snapshot) continue;
        const inRedis = snapshot.owners.has(java.field);
        if (t > java.expHi + LATE) {
          if (!inRedis) this.javaEnded(java, java.expHi, 'gone', 'its lease ran out');
          else if (snapshot.sentAt <= java.expHi + LATE) wait(t, `lease end of ${java.describe(this.world.names)}`);
          else
            throw this.violation(
              `${java.describe(this.world.names)} is still in Redis ${fmt(snapshot.sentAt - java.expHi)} ms after its lease must have ended ` +
                `(Redis: ${this.describeSnapshot(snapshot)}): a Java hold was renewed`,
            );
        } else if (t + QUIET >= java.expLo - EARLY) {
          if (!inRedis) this.javaEnded(java, t, 'gone', 'its lease ran out');
          else wait(java.expHi + LATE + 1, `lease end of ${java.describe(this.world.names)}`);
        } else if (!inRedis) {
          throw this.violation(
            `${java.describe(this.world.names)} vanished from Redis before its lease could end (Redis: ${this.describeSnapshot(snapshot)})`,
          );
        }
      }
      // A hold changed state: look again before anything else is judged.
      if (this.history.map((h) => h.status).join() !== statusBefore) continue;
      // What Redis may show for a moment only must go within ORPHAN_GRACE_MS of when it was first seen (`since`
      // keeps that per `<lock>|<field>`), judged by when the read was sent (its reply may come late).
      const seen = new Map([this.#orphanSince, this.#excessSince].map((since) => [since, new Set<string>()]));
      const graced = (
        since: Map<string, number>,
        key: string,
        sentAt: number,
        what: (ms: number) => string,
        reason: string,
      ): void => {
        seen.get(since)?.add(key);
        const first = since.get(key) ?? t;
        since.set(key, first);
        if (sentAt - first > ORPHAN_GRACE_MS) throw this.violation(what(sentAt - first));
        wait(first + ORPHAN_GRACE_MS + 1, reason);
      };
      // Owner fields nobody believes in (a grant given back late, an undone acquire).
      const known = new Set([...this.#tracked(), ...this.liveJava()].map((h) => `${h.lock}|${h.field}`));
      snapshots.forEach((snapshot, lock) => {
        for (const field of snapshot.owners.keys()) {
          const key = `${lock}|${field}`;
          if (known.has(key) || this.#ignorable(field)) continue;
          graced(
            this.#orphanSince,
            key,
            snapshot.sentAt,
            (ms) =>
              `L${lock}: Redis has ${this.describeField(field)} (${this.describeSnapshot(snapshot)}), which no flow believes it holds, for ${fmt(ms)} ms`,
            `orphan ${this.describeField(field)}`,
          );
        }
      });
      // A live hold that Redis counts higher than its flows took: a re-entry given up on (aborted, its wait
      // over) ran in Redis, and its give-back follows its reply; otherwise the count stays for nobody to release.
      for (const hold of this.history) {
        const count = snapshots[hold.lock]?.owners.get(hold.field);
        if (hold.status !== 'live' || count === undefined || count <= hold.count) continue;
        graced(
          this.#excessSince,
          `${hold.lock}|${hold.field}`,
          snapshots[hold.lock]?.sentAt ?? t,
          (ms) =>
            `${hold.describe(this.world.names)}: Redis counts ${count} for ${fmt(ms)} ms, its flows took ${hold.count}: a count nobody releases`,
          `give-back of an extra count of hold#${hold.id}`,
        );
      }
      for (const [since, keys] of seen) {
        for (const key of [...since.keys()]) if (!keys.has(key)) since.delete(key);
      }
      // Free locks go to a waiter; re-entry never waits.
      for (let lock = 0; lock < this.world.names.length; lock++) {
        const waiting = this.inflight.filter((job) => !job.settled && isAcquireOp(job.op) && job.op.lock === lock);
        if (waiting.length === 0) continue;
        const live = this.liveHolds(lock);
        for (const job of waiting) {
          const reentry = live.find((h) => h.client === job.client && job.chain.includes(h.ownerFlow));
          if (reentry && t - job.startedAt > HANDOFF_MS) {
            throw this.violation(
              `${job.actor.name} ${describeOp(job.op)} still waits after ${fmt(t - job.startedAt)} ms although its flow holds the lock`,
            );
          }
        }
        if (live.length > 0 || this.liveJava(lock).length > 0) continue;
        const first = Math.min(...waiting.map((job) => job.startedAt));
        const deadline = Math.max(this.freeSince[lock] ?? 0, first) + HANDOFF_MS;
        if (t > deadline) {
          const snapshot = snapshots[lock];
          throw this.violation(
            `L${lock} has been free for ${fmt(t - (this.freeSince[lock] ?? 0))} ms (Redis: ${snapshot ? this.describeSnapshot(snapshot) : '?'}), ` +
              `but none of its waiters (${waiting.map((j) => `${j.actor.name} ${describeOp(j.op)}`).join(', ')}) got it`,
          );
        }
        wait(Math.min(deadline, t + 25), `a waiter of L${lock}`);
      }
      if (until.length === 0) break;
      waitingFor = reasons.join(', ');
      await sleep(Math.min(50, Math.max(5, Math.min(...until) - now())));
    }
  }

  /**
   * Compares Redis, the library's local view and the model; call when settled. Resolves to false (nothing
   * judged) when Redis has an owner field the model does not know: settle() then gives it its grace.
   */
  async check(): Promise<boolean> {
    const names = this.world.names;
    // An unmodeled stall marked since settling (markStall) leaves holds to be judged by observation first.
    const stalled = (): boolean => this.history.some((h) => h.status === 'live' && h.observeAt !== undefined);
    for (let lock = 0; lock < names.length; lock++) {
      if (stalled()) return false;
      const snapshot = await this.world.snapshot(lock);
      if (stalled()) return false;
      await this.#checkFairQueue(lock);
      const live = this.liveHolds(lock);
      const java = this.liveJava(lock);
      if (live.length + java.length > 1) throw this.violation(`L${lock}: two live holds in the model`);
      const expected = new Map([...live, ...java].map((h) => [h.field, h.count]));
      const actual = new Map([...snapshot.owners].filter(([field]) => !this.#ignorable(field)));
      // Of this lock: a flow holding another lock has the same owner field, and its grant of this one may
      // be in Redis before its reply is adopted.
      const known = new Set([...this.#tracked().filter((h) => h.lock === lock), ...java].map((h) => h.field));
      if ([...actual.keys()].some((field) => !known.has(field) && !this.#orphanSince.has(`${lock}|${field}`))) {
        return false;
      }
      // A fixed lease at its edge (the library purges it at its local deadline, up to its drift before Redis
      // would expire it) may be gone by the time this read was sent on a loaded machine: settle again, which
      // judges its end.
      if (
        live.some(
          (h) =>
            !h.renewing && !actual.has(h.field) && snapshot.sentAt + QUIET >= Math.min(h.expLo, h.deadlineLo) - EARLY,
        )
      )
        return false;
      const same =
        expected.size === actual.size && [...expected].every(([field, count]) => actual.get(field) === count);
      // An extra count of a live hold that showed up after the last look (a give-back on its way): settle
      // again, which gives it its grace.
      const extra = (field: string, count: number): boolean =>
        (actual.get(field) ?? 0) > count &&
        live.some((h) => h.field === field) &&
        !this.#excessSince.has(`${lock}|${field}`);
      if (!same && expected.size === actual.size && [...expected].every(([f, c]) => actual.get(f) === c || extra(f, c)))
        return false;
      if (!same) {
        throw this.violation(
          `L${lock}: Redis has ${this.describeSnapshot(snapshot)}, the model expects ${
            [...live, ...java].map((h) => `${this.describeField(h.field)}=${h.count}`).join(', ') || 'the key absent'
          }`,
        );
      }
      const hold = live[0];
      const javaHold = java[0];
      if (javaHold) {
        // Redisson's lease: set by its latest grant, never renewed by us.
        if (snapshot.pttl <= 0 || snapshot.pttl > javaHold.expHi - snapshot.sentAt + 5)
          throw this.violation(
            `L${lock}: PTTL ${snapshot.pttl} of ${javaHold.describe(names)}; allowed (0, ${fmt(javaHold.expHi - snapshot.sentAt)}]`,
          );
        continue;
      }
      if (!hold) {
        if (snapshot.exists && actual.size === snapshot.owners.size)
          throw this.violation(`L${lock}: the key exists without an owner: ${this.describeSnapshot(snapshot)}`);
        continue;
      }
      const W = hold.client.watchdogTimeout;
      const bound = Math.max(hold.renewing ? W : 0, hold.expHi - snapshot.sentAt);
      if (snapshot.pttl <= 0 || (snapshot.pttl > bound + 5 && !ignored('ttl-bound'))) {
        throw this.violation(
          `L${lock}: PTTL ${snapshot.pttl} of ${hold.describe(names)}; allowed (0, ${fmt(bound)}]` +
            (hold.renewing ? '' : ': a fixed lease must never be renewed'),
        );
      }
    }
    // What the holders believe.
    for (const hold of this.history) {
      for (const frame of hold.leases) {
        const aborted = frame.lease?.signal.aborted ?? false;
        // A fixed lease's local deadline comes up to the drift allowance (1 % + 2 ms) before Redis's expiry,
        // or earlier still after a grant a sleeping server delayed (send time + lease - drift): its signal
        // may abort from then on.
        const endingNow =
          !hold.renewing && Math.min(hold.expLo - driftOf(frame.spec), hold.deadlineLo) - now() <= EARLY;
        if (hold.status === 'live' && aborted && !endingNow) {
          throw this.violation(
            `a lease of live ${hold.describe(names)} has its signal aborted: ${describeError(frame.abortReason)}`,
          );
        }
        if (hold.status === 'lost' && !aborted && !hold.closed) {
          throw this.violation(`a lease of lost ${hold.describe(names)} still has its signal not aborted`);
        }
        if (aborted && !(frame.abortReason instanceof LockLostError)) {
          throw this.violation(
            `a lease signal of ${hold.describe(names)} aborted with ${describeError(frame.abortReason)}, not a LockLostError`,
          );
        }
        if (frame.abortedInFlow !== undefined && !ignored('listener-flow')) {
          throw this.violation(
            `the abort listener of a lease of ${hold.describe(names)} ran inside flow ${frame.abortedInFlow} (${describeError(frame.abortReason)}); listeners must run outside any flow`,
          );
        }
      }
    }
    for (const client of [...this.world.clients, ...this.world.retired]) {
      for (const event of client.lost) {
        if (event.flow !== undefined && !ignored('listener-flow')) {
          throw this.violation(
            `a lockLost listener of ${client.label} ran inside flow ${event.flow} (${event.name}: ${event.message}); listeners must run outside any flow`,
          );
        }
        if (event.matched) continue;
        const hold = this.history.find(
          (h) => h.client === client && this.world.names[h.lock] === event.name && h.token === event.token,
        );
        if (!hold || hold.status === 'released' || hold.closed) {
          throw this.violation(
            `${client.label} emitted lockLost for ${hold ? hold.describe(names) : `an unknown hold (token ${event.token})`}: ${event.message}`,
          );
        }
      }
    }
    // getHoldCount inside each idle flow agrees with the model.
    for (const actor of this.world.actors) {
      if (actor.busy) continue;
      for (let lock = 0; lock < names.length; lock++) {
        const job = actor.post({ kind: 'holdCount', lock });
        if (!(await settlesWithin(job.done, 5000))) throw this.violation(`${actor.name} getHoldCount(L${lock}) hangs`);
        const outcome = job.outcome;
        const held = this.chainHold(actor.client, lock, actor.chain());
        const expected = held?.count ?? 0;
        // A fixed lease this close to its end may be gone by the time Redis answers (or Redis, whose clock
        // is cached per event-loop turn, may count it from a time a stall made stale), and so may one this
        // close to its local deadline (send time + lease - drift, which a grant delayed by a sleeping server
        // puts well before Redis's expiry), where the library purges it: either answer is right.
        const atEdge =
          held !== undefined && !held.renewing && Math.min(held.expLo, held.deadlineLo) - now() < EXPIRY_EDGE_MS;
        if (atEdge && outcome?.ok && outcome.value === 0) continue;
        // A wait of this actor that was granted after this settle adopted what had finished (the holder's lease
        // ran out meanwhile) counts already: the next adoption judges that grant, exclusion included.
        const unadopted = this.inflight.some(
          (j) => j.actor === actor && j.settled && isAcquireOp(j.op) && j.op.lock === lock && j.outcome?.ok,
        );
        if (unadopted && outcome?.ok && typeof outcome.value === 'number' && outcome.value > expected) continue;
        if (!outcome?.ok || outcome.value !== expected) {
          throw this.violation(
            `${actor.name}: getHoldCount(L${lock}) in its flow is ${outcome?.ok ? String(outcome.value) : describeError(outcome?.error)}, the model expects ${expected}`,
          );
        }
      }
    }
    // Prune what is over.
    for (const hold of this.history) {
      if (hold.status === 'lost' && !hold.purged) {
        const snapshot = await this.world.snapshot(hold.lock);
        const newer = this.liveHolds(hold.lock).some((h) => h.field === hold.field);
        if (newer || !snapshot.owners.has(hold.field)) hold.purged = true;
      }
    }
    return true;
  }
}

/** The library's drift allowance subtracted from a lease for its local deadline (README: 1% + 2 ms). */
function driftOf(lease: number): number {
  return Math.floor(lease * 0.01) + 2;
}
