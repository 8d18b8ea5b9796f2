/**
 * The model-based test of RPermitExpirableSemaphore: six actors on two lock clients take permits (each
 * acquisition takes exactly one: the API has no multi-permit acquire, so no need can be stuck behind a
 * smaller one) under watchdog-renewed or short fixed leases (300, 800, 1500 ms), hold them, give them back
 * by lease or by id (from either client), interleaved with faults. After every command Redis (the count,
 * Redisson's `{name}:timeout` sorted set of permits out with their lease ends, the permit queue and its
 * deadlines, read in one MULTI on an admin connection, with the server's TIME) and what every caller was
 * told are judged against a model:
 *
 * - conservation, at every read: count + permits out (the sorted set) = the total the model set
 *   (trySetPermits, addPermits, a DEL or PEXPIRE of the count or of the sorted set), exactly: every script
 *   moves a permit between the two atomically, so a grant in flight or a release changes no sum. Permits
 *   set aside for woken queued waiters are in the count; a permit out whose lease ended (score <= the
 *   server's time) is as good as available (every script that takes permits reclaims it first): the
 *   effective available count is the count plus those;
 * - every permit an actor was told it holds is out, under its id, with a lease end (server time) within the
 *   acquisition's span + its leaseTime (a fixed lease), or within watchdogTimeout of now (watchdog mode);
 *   a permit released with success is out no more (the next read); once stable, every live permit out is
 *   one an actor holds (a grant in flight or being undone only until then);
 * - expired leases come back: the holder of a fixed lease is told (its signal aborts with a LockLostError)
 *   no earlier than the lease could end (the acquisition's start + leaseTime, less the library's drift of
 *   1% + 2 ms) unless a fault intervened, and no later than RETURN_MS after it must have ended (the grant's
 *   reply + leaseTime, or the end of the latest fault if later); a lost permit (or one of a closed client)
 *   leaves the sorted set within GIVE_BACK_MS of its loss: given back at once, the count has it (when a
 *   fault since may have cut that give-back off, it may instead stay past its lease end there, where any
 *   script that takes permits reclaims it first). So a fixed lease's permit is back in the count by the
 *   grant's reply + leaseTime + RETURN_MS + GIVE_BACK_MS, counted from the end of the latest fault if
 *   later. A watchdog-mode permit is never lost without a fault since its grant;
 * - a release of a live permit succeeds (by lease, by id, from either client): live = not told lost, its
 *   client open, no fault since a watchdog-mode grant, or a fixed lease that cannot end within RACE_MS; a
 *   release of a permit that ended (lease over, lost, released already, deleted by a fault) rejects with
 *   PermitNotHeldError and changes nothing (conservation), except a lease's second release(), which is
 *   idempotent (resolves as the first did); lease.release() of a lost permit names the LockLostError as its
 *   cause. withPermit resolves to what fn returned when its permit lived through fn, and otherwise rejects
 *   with a LockLostError carrying fn's result; fn gets the permit's own signal;
 * - stable within STABLE_MS after every command (and its faults): every waiting actor has its entry in the
 *   queue and no entry is left of one that stopped, and no queued waiter could take a permit from the
 *   effective available count (liveness: the waiters a release or an expiry serves are woken and take);
 * - no waiter overtaken: a queued waiter granted while one ahead of it in the queue still waits (between two
 *   stable states with no fault between them); a newcomer granted beyond what the queued waiters leave it,
 *   counting every permit that could have expired by its grant (and the one a release racing it frees:
 *   ReleaseCommand's racer), or refused what they leave it from a stable state; a free semaphore grants at
 *   once;
 * - what each caller is told: permit ids are 32 lowercase hex digits, never seen before; a tryAcquire or a
 *   bounded acquire/withPermit gives up (undefined, LockAcquireTimeoutError) no earlier than its waitTime;
 *   an unbounded one never gives up; only an abort or close() rejects a wait otherwise; close() settles
 *   every wait of its client, aborts the signals of its permits and gives them back; availablePermits()
 *   plus the live permits is at most the total.
 *
 * - a played Redisson client (Java) takes permits through Redisson's tryAcquire (outside our queue, a fixed
 *   lease or none) and gives them back through its tryRelease, whose message our queued waiters must hear
 *   (the stable state's liveness); our scripts never take a live Java permit away: its tryRelease succeeds
 *   while its lease runs (no fault since), and fails once the lease ended or a fault deleted it; a Java
 *   permit whose lease ended is as good as available to our waiters (they sleep until that lease end).
 *
 * Liveness at the end of a run: after the Java permits are given back, the faults stop and the total is set to 1, six unbounded waiters take
 * the permit in turn, each granted within STABLE_MS of the previous holder's release or, for the holders of
 * a 400 ms lease who never release, of the end of that lease; afterwards the permit is available, nothing
 * is out and the queue is gone.
 */
import fc from 'fast-check';
import {
  LockAcquireTimeoutError,
  LockLostError,
  PermitNotHeldError,
  type PermitLease,
  type RPermitExpirableSemaphore,
} from '../../src/index.js';
import { driftMs } from '../../src/machinery/watchdog.js';
import { semaphoreKeys, type SemaphoreKeys } from '../../src/redis/keys.js';
import type { Redis } from '../support/fixture.js';
import { RedissonPermitExpirableSemaphore } from '../support/redisson.js';
import {
  ACTORS,
  actorArb,
  describeError,
  EARLY_MS,
  faultCommands,
  fmt,
  KeyFaultCommand,
  ModelHarness,
  pollUntil,
  PrimitiveWorld,
  SETTLE_MS,
  slotArb,
  WaitJob,
  type PrimitiveActor,
  type PrimitiveClient,
} from './primitive.js';
import { countSkipped, countStep, newStats } from './runner.js';
import {
  AT_ONCE_MS,
  CountCommand,
  hitCount,
  hitKey,
  judgeRefused,
  INITIAL_PERMITS,
  liveQueue,
  matchWaiters,
  NewcomerCommand,
  needs,
  overtaking,
  queuedNeeds,
  servableEntry,
  serverTimeOf,
  setUp,
  WATCH_MS,
} from './semaphore.js';
import { now, settlesWithin, WATCHDOG_TIMEOUTS, type ServerInfo } from './world.js';

export const stats = newStats();

type Pes = RPermitExpirableSemaphore;
type Actor = PrimitiveActor<Pes>;

/**
 * How long after a command (and the end of its faults) the state may take to become stable: a waiter
 * refreshes its entry every third of watchdogTimeout (300 ms at most here); an entry left by a failed leave
 * lives watchdogTimeout (900 ms); a grant the library gives back (late, aborted) is undone in one round trip
 * or its lease (at most 1500 ms) ends; a killed subscriber reconnects in well under a second; the rest is
 * margin for a loaded 2-core machine (a wrong state never becomes stable: the margin costs nothing).
 */
const STABLE_MS = 6000;
/**
 * The holder of a fixed lease is told it ended within this after the lease must have ended (the grant's
 * reply + leaseTime) or the latest fault ended: its watchdog's timer fires at the lease's end (lateness of
 * the event loop over 150 ms is an unmodeled stall, judged as a fault). It rules out a permit given back
 * only when some other script happens to look (Redisson's lazy reclaim) or a holder never told.
 */
const RETURN_MS = 1000;
/**
 * A permit that ended (lost, its client closed) is given back within this (one round trip from its holder,
 * on a loaded machine) unless a fault intervened: it rules out a permit left for the next script to reclaim.
 */
const GIVE_BACK_MS = 2000;
/** A release sent this long before a fixed lease can end reaches Redis before it does (a loaded machine). */
const RACE_MS = 500;
/** Clock granularity between the server's TIME (ms, wall clock) and this process's monotonic clock. */
const CLOCK_MS = 5;
/** The lease of the end's liveness holders that never release (their permit comes back at its end). */
const END_LEASE_MS = 400;
/** Redisson's score of a permit without a lease (never written by this library). */
const NO_LEASE = 922337203685477;

const PERMIT_ID = /^[0-9a-f]{32}$/;

type AcquireKind = 'try' | 'tryWait' | 'acquire' | 'acquireWait' | 'withPermit' | 'withPermitWait';
const BOUNDED: ReadonlySet<AcquireKind> = new Set(['tryWait', 'acquireWait', 'withPermitWait']);

const leaseLabel = (leaseMs: number): string => (leaseMs === -1 ? 'watchdog' : `lease ${leaseMs}ms`);

/** What one acquisition learns in the background (filled by the call, which starts before the job's fields). */
interface Box {
  lease?: PermitLease;
  /** When the lease's signal aborted (the permit lost), by this process's clock. */
  lostAt?: number;
  /** A bounded acquire/withPermit rejected with LockAcquireTimeoutError. */
  timedOut?: boolean;
  /** withPermit: whether fn got the permit's own signal, and how to end fn (with its result). */
  sameSignal?: boolean;
  finish?: ((result: string) => void) | undefined;
  /** withPermit's own settlement (after fn ended). */
  scoped?: Promise<{ readonly value?: unknown; readonly error?: unknown }>;
}

function acquireCall(
  kind: AcquireKind,
  leaseMs: number,
  wait: number | undefined,
  box: Box,
): (ps: Pes, signal: AbortSignal) => Promise<boolean> {
  const got = (lease: PermitLease | undefined): boolean => {
    if (!lease) return false;
    box.lease = lease;
    if (lease.signal.aborted) box.lostAt = now();
    else lease.signal.addEventListener('abort', () => (box.lostAt = now()), { once: true });
    return true;
  };
  const timedOut = (error: unknown): boolean => {
    if (!(error instanceof LockAcquireTimeoutError) || wait === undefined) throw error;
    box.timedOut = true;
    return false;
  };
  return (ps, signal) => {
    const options = {
      signal,
      ...(leaseMs === -1 ? {} : { leaseTime: leaseMs }),
      ...(wait === undefined ? {} : { waitTime: wait }),
    };
    if (kind === 'try') return ps.tryAcquire({ ...options, waitTime: 0 }).then(got);
    if (kind === 'tryWait') return ps.tryAcquire(options).then(got);
    if (kind === 'acquire' || kind === 'acquireWait') return ps.acquire(options).then(got, timedOut);
    return new Promise<boolean>((resolve, reject) => {
      box.scoped = ps
        .withPermit((fnSignal, permit) => {
          box.sameSignal = fnSignal === permit.signal;
          resolve(got(permit));
          return new Promise<string>((finish) => (box.finish = finish));
        }, options)
        .then(
          (value: unknown) => ({ value }),
          (error: unknown) => ({ error }),
        );
      void box.scoped.then(({ error }) => {
        if (box.lease) return;
        if (error === undefined) reject(new Error('withPermit resolved without running fn'));
        try {
          resolve(timedOut(error));
        } catch (rejection) {
          reject(rejection);
        }
      });
    });
  };
}

/** One acquisition of one permit by an actor. */
class PesJob extends WaitJob<Pes> {
  readonly kind: AcquireKind;
  /** Every acquisition takes one permit (for matching with its queue entry). */
  readonly permits = 1;
  /** -1: watchdog mode. */
  readonly leaseMs: number;
  readonly box: Box;
  /** Its entry in the permit queue, once seen there. */
  entry: string | undefined;

  constructor(actor: Actor, kind: AcquireKind, leaseMs: number, wait: number | undefined) {
    const box: Box = {};
    const waitLabel = wait === undefined ? '' : `, wait ${wait}ms`;
    super(actor, `${kind}(${leaseLabel(leaseMs)}${waitLabel})`, wait, acquireCall(kind, leaseMs, wait, box));
    this.kind = kind;
    this.leaseMs = leaseMs;
    this.box = box;
  }

  get unbounded(): boolean {
    return this.kind === 'acquire' || this.kind === 'withPermit';
  }
}

const pesJob = (actor: Actor): PesJob | undefined => (actor.last instanceof PesJob ? actor.last : undefined);

/**
 * A permit an actor was told it holds. held: the model counts it out; released: given back with success
 * (out no more); ended: its lease ended, it was lost or its client closed (out no more, or past its lease
 * end, within STABLE_MS); gone: a fault deleted it from the sorted set (its total is gone with it).
 */
interface Permit {
  readonly id: string;
  readonly actor: Actor;
  readonly job: PesJob;
  readonly client: PrimitiveClient<Pes>;
  readonly lease: PermitLease;
  readonly leaseMs: number;
  readonly grantedAt: number;
  /** The model's fault count at the grant. */
  readonly faults: number;
  state: 'held' | 'released' | 'ended' | 'gone';
  /** How it was given back with success ('lease': a second lease.release() resolves too). */
  releasedVia?: 'lease' | 'id';
  /** Its lease end was judged against its acquisition. */
  seen: boolean;
  /** Its state became 'ended' since this time, at this fault count. */
  endedAt?: number;
  endedFaults?: number;
}

/** A permit of the played Redisson client: its lease (-1: none, Redisson's no-lease score). */
interface JavaPermit {
  readonly leaseMs: number;
  /** When its tryAcquire was sent and answered (this process's clock): its lease ends in between + leaseMs. */
  readonly sentAt: number;
  readonly grantedAt: number;
  /** A fault deleted it from the sorted set (its tryRelease must fail). */
  gone: boolean;
}

/** What the admin connection read of the semaphore, in one MULTI. */
interface Snapshot {
  readonly count: number;
  /** The permits out: id (hex) -> lease end (server time, epoch ms). */
  readonly out: ReadonlyMap<string, number>;
  /** Live queue entries (a deadline after the server's time), in queue order. */
  readonly queue: readonly string[];
  /** Every entry of the list, live or not. */
  readonly listed: number;
  readonly serverNow: number;
  /** When the MULTI was sent and its reply read (this process's clock). */
  readonly sentAt: number;
  readonly at: number;
}

/** Permits out whose lease ended by the server's time: any script gives them back first. */
const expiredOut = (snap: Snapshot): number => [...snap.out.values()].filter((end) => end <= snap.serverNow).length;
/** What a taker finds: the count and the permits out whose lease ended. */
const effective = (snap: Snapshot): number => snap.count + expiredOut(snap);

class PesWorld extends PrimitiveWorld<Pes> {
  readonly semKeys: SemaphoreKeys;

  constructor(server: ServerInfo, admin: Redis, name: string) {
    const keys = semaphoreKeys('', name);
    super(server, admin, name, [keys.lockKey, keys.timeoutKey, keys.queueKey, keys.deadlinesKey], (locks) =>
      locks.getPermitExpirableSemaphore(name),
    );
    this.semKeys = keys;
  }

  async snapshot(): Promise<Snapshot> {
    const { lockKey, timeoutKey, queueKey, deadlinesKey } = this.semKeys;
    const sentAt = now();
    const replies = await this.admin
      .multi()
      .get(lockKey)
      .zrangeBuffer(timeoutKey, 0, -1, 'WITHSCORES')
      .lrange(queueKey, 0, -1)
      .zrange(deadlinesKey, 0, -1, 'WITHSCORES')
      .time()
      .exec();
    const at = now();
    const value = replies?.[0]?.[1] as string | null;
    const members = (replies?.[1]?.[1] ?? []) as Buffer[];
    const out = new Map<string, number>();
    for (let i = 0; i + 1 < members.length; i += 2)
      out.set(members[i]?.toString('hex') ?? '', Number(members[i + 1]?.toString()));
    const serverNow = serverTimeOf(replies?.[4]?.[1]);
    const list = (replies?.[2]?.[1] ?? []) as string[];
    const queue = liveQueue(list, (replies?.[3]?.[1] ?? []) as string[], serverNow);
    return { count: value === null ? 0 : Number(value), out, queue, listed: list.length, serverNow, sentAt, at };
  }
}

/** The model and the system under test of one generated sequence (fast-check's model and real). */
export class PesHarness extends ModelHarness<Pes, PesWorld> {
  /** The permits the user set: count + permits out, at every read. */
  total = INITIAL_PERMITS;
  /** Every permit an actor was told it holds, by id. */
  readonly permits = new Map<string, Permit>();
  /** The permits the played Redisson client took and has not given back, by id (JavaCommand). */
  readonly java = new Map<string, JavaPermit>();
  /** The latest read of Redis, and when each permit out there that nobody was told of was first read. */
  #lastRead: Snapshot | undefined;
  readonly #untold = new Map<string, number>();
  /** Faults so far (a loss or a refusal since a grant is excused by one). */
  faults = 0;
  /** When the latest fault (or unmodeled stall) was recorded. */
  lastFaultAt = -Infinity;
  /** The last stable state, and whether the queue's order may have changed since (a fault, a stall). */
  stable: Snapshot | undefined;
  orderExcused = false;

  private constructor(world: PesWorld) {
    super(world, stats);
  }

  static async create(server: ServerInfo, admin: Redis, name: string): Promise<PesHarness> {
    const world = new PesWorld(server, admin, name);
    const h = new PesHarness(world);
    await setUp(h, world);
    return h;
  }

  faulted(): void {
    this.orderExcused = true;
    this.faults++;
    this.lastFaultAt = now();
  }

  protected describeModel(): string {
    const actors = this.world.actors
      .map((a) => `${a.name}: held ${a.held}${a.busy ? `, waits ${String(a.last)}` : ''}`)
      .join('; ');
    const permits = [...this.permits.values()]
      .filter((p) => p.state !== 'released')
      .map((p) => `${p.id.slice(0, 8)} ${p.actor.name} ${leaseLabel(p.leaseMs)} ${p.state}`)
      .join(', ');
    const java = [...this.java].map(([id, p]) => `${id.slice(0, 8)} ${leaseLabel(p.leaseMs)}${p.gone ? ' gone' : ''}`);
    return `total ${this.total}; ${actors}; permits: ${permits}; Java: ${java.join(', ') || 'none'}${this.#describeRead()}`;
  }

  /**
   * The latest read's permits out, each with its lease end and, for one nobody was told of, how long it has
   * been out: a grant renewed or re-made tells itself apart from one left to run out.
   */
  #describeRead(): string {
    const snap = this.#lastRead;
    if (!snap) return '';
    const out = [...snap.out].map(([id, end]) => {
      const ends = end === NO_LEASE ? 'no lease' : `ends in ${fmt(end - snap.serverNow)} ms`;
      const since = this.#untold.get(id);
      return `${id.slice(0, 8)} ${ends}${since === undefined ? '' : `, untold for ${fmt(snap.at - since)} ms`}`;
    });
    return `; out in Redis ${fmt(now() - snap.at)} ms ago: ${out.join(', ') || 'none'}`;
  }

  /** The permits of `actor` a release may name (held or not), oldest first. */
  permitsOf(actor: Actor): Permit[] {
    return [...this.permits.values()].filter((p) => p.actor === actor);
  }

  #recount(): void {
    for (const actor of this.world.actors) actor.held = 0;
    for (const p of this.permits.values()) if (p.state === 'held') p.actor.held++;
  }

  /** The latest a fixed lease can end, by this process's clock: the grant's reply + leaseTime. */
  static endsBy(p: Permit): number {
    return p.grantedAt + p.leaseMs;
  }

  /** The earliest the holder may be told a fixed lease ended: the acquisition's start + leaseTime - drift. */
  static endsFrom(p: Permit): number {
    return p.job.startedAt + p.leaseMs - driftMs(p.leaseMs);
  }

  /** Whether a release of `p` sent at `at` must find it held (see the file's comment). */
  mustHold(p: Permit, at: number): boolean {
    if (p.state !== 'held' || p.job.box.lostAt !== undefined || p.client.closed) return false;
    if (p.leaseMs === -1) return p.faults === this.faults;
    return at + RACE_MS < PesHarness.endsFrom(p);
  }

  /** Takes in what settled acquisitions were told, and the permits lost since, judging each. */
  adopt(): void {
    for (const actor of this.world.actors) {
      const job = pesJob(actor);
      if (!job?.outcome || job.adopted) continue;
      job.adopted = true;
      const { value: granted, error, at } = job.outcome;
      const lease = job.box.lease;
      if (granted && lease) {
        this.#granted(job, lease, at);
        continue;
      }
      this.judgeEnded(job);
      if (error !== undefined) continue;
      if (job.unbounded) throw this.violation(`${actor.name} ${String(job)} gave up without a permit`);
      if (job.kind !== 'try' && job.kind !== 'tryWait' && !job.box.timedOut)
        throw this.violation(`${actor.name} ${String(job)} ended without a permit or a timeout`);
      this.note(`${actor.name} ${String(job)} refused after ${fmt(at - job.startedAt)} ms`);
    }
    for (const p of this.permits.values()) {
      if (p.state !== 'held' && p.state !== 'gone') continue;
      const lostAt = p.job.box.lostAt;
      if (lostAt === undefined) continue;
      this.#judgeLoss(p, lostAt);
      if (p.state === 'held') this.#end(p, `lost after ${fmt(lostAt - p.grantedAt)} ms`);
    }
    this.#recount();
  }

  #granted(job: PesJob, lease: PermitLease, at: number): void {
    const { actor } = job;
    const who = `${actor.name} ${String(job)}`;
    if (!PERMIT_ID.test(lease.permitId)) throw this.violation(`${who} got permit id ${lease.permitId}`);
    if (this.permits.has(lease.permitId)) throw this.violation(`${who} got permit ${lease.permitId} a second time`);
    if (lease.name !== this.world.name) throw this.violation(`${who} got a permit of "${lease.name}"`);
    if (job.kind.startsWith('withPermit') && job.box.sameSignal !== true)
      throw this.violation(`${who}: fn did not get the permit's signal`);
    this.permits.set(lease.permitId, {
      id: lease.permitId,
      actor,
      job,
      client: job.client,
      lease,
      leaseMs: job.leaseMs,
      grantedAt: at,
      // A fault recorded after the grant settled (before this adoption) counts as one since the grant.
      faults: this.lastFaultAt >= at ? this.faults - 1 : this.faults,
      state: 'held',
      seen: false,
    });
    this.note(
      `${actor.name} granted ${lease.permitId.slice(0, 8)} (${String(job)}) after ${fmt(at - job.startedAt)} ms`,
    );
  }

  #end(p: Permit, why: string): void {
    p.state = 'ended';
    p.endedAt = now();
    p.endedFaults = this.faults;
    this.note(`${p.actor.name}'s ${p.id.slice(0, 8)} ended: ${why}`);
  }

  /** A permit's signal aborted at `lostAt`: with a LockLostError, at a time its lease allows. */
  #judgeLoss(p: Permit, lostAt: number): void {
    const who = `${p.actor.name}'s permit ${p.id.slice(0, 8)} (${leaseLabel(p.leaseMs)})`;
    const reason: unknown = p.lease.signal.reason;
    if (!(reason instanceof LockLostError))
      throw this.violation(`${who}: its signal aborted with ${describeError(reason)}`);
    if (p.client.closed || p.faults !== this.faults || p.state === 'gone') return;
    if (p.leaseMs === -1)
      throw this.violation(`${who} lost without a fault after ${fmt(lostAt - p.grantedAt)} ms: ${reason.message}`);
    if (lostAt < PesHarness.endsFrom(p) - EARLY_MS)
      throw this.violation(
        `${who} lost ${fmt(lostAt - p.job.startedAt)} ms after its acquisition began, before its lease could end`,
      );
    const by = Math.max(PesHarness.endsBy(p), this.calmFrom) + RETURN_MS;
    if (lostAt > by)
      throw this.violation(`${who}: its holder was told ${fmt(lostAt - PesHarness.endsBy(p))} ms after it ended`);
  }

  /** Judges a read: what must hold at every read throws; what may not hold yet is returned (a reason). */
  #unstable(snap: Snapshot): string | undefined {
    this.#lastRead = snap;
    const sum = snap.count + snap.out.size;
    if (sum !== this.total)
      throw this.violation(
        `conservation: ${snap.count} available + ${snap.out.size} out = ${sum}, not the total ${this.total}`,
      );
    // The server's time of a moment `t` of this process's clock lies within [t + offLow, t + offHigh].
    const offLow = snap.serverNow - snap.at - CLOCK_MS;
    const offHigh = snap.serverNow - snap.sentAt + CLOCK_MS;
    let waitFor: string | undefined;
    for (const p of this.permits.values()) {
      const end = snap.out.get(p.id);
      const who = `${p.actor.name}'s ${p.id.slice(0, 8)} (${leaseLabel(p.leaseMs)})`;
      if (p.state === 'released' && end !== undefined) throw this.violation(`${who} is still out after its release`);
      if (p.state === 'held' && p.job.box.lostAt === undefined) {
        if (p.leaseMs !== -1 && snap.at > Math.max(PesHarness.endsBy(p), this.calmFrom) + RETURN_MS)
          throw this.violation(`${who}: its holder was not told within ${RETURN_MS} ms that its lease ended`);
        if (end === undefined) {
          waitFor ??= `${who} is not out, and its holder was not told`;
          continue;
        }
        if (!p.seen) this.#judgeLeaseEnd(p, end, snap, offLow, offHigh);
      }
      // Given back at once by its holder (or by close()); left past its lease end for any script to reclaim
      // only when a fault since may have cut the give-back off.
      if (p.state === 'ended' && end !== undefined && (end > snap.serverNow || p.endedFaults === this.faults)) {
        const since = Math.min(p.job.box.lostAt ?? Infinity, p.endedAt ?? Infinity);
        if (p.endedFaults === this.faults && snap.sentAt > Math.max(since, this.calmFrom) + GIVE_BACK_MS)
          throw this.violation(`${who} was not given back within ${GIVE_BACK_MS} ms of its end`);
        waitFor ??= `${who} ended ${fmt(snap.at - since)} ms ago and is still out`;
      }
    }
    if (waitFor !== undefined) return waitFor;
    for (const [id, end] of snap.out) {
      if (end <= snap.serverNow) continue;
      const java = this.java.get(id);
      if (java?.gone) throw this.violation(`Java's permit ${id.slice(0, 8)}, deleted by a fault, is out again`);
      if (java) continue;
      const p = this.permits.get(id);
      if (!p) {
        if (!this.#untold.has(id)) this.#untold.set(id, snap.at);
        return `permit ${id.slice(0, 8)} is out with no holder told (a grant in flight or being undone)`;
      }
      if (p.state === 'gone') throw this.violation(`permit ${id.slice(0, 8)}, deleted by a fault, is out again`);
    }
    const available = effective(snap);
    const servable = servableEntry(snap.queue, available);
    if (servable !== undefined) return `queued ${servable} could take a permit (${available} available)`;
    const owners = matchWaiters(
      this.world.actors
        .map(pesJob)
        .filter((job): job is PesJob => job !== undefined && job.waiting && job.kind !== 'try'),
      snap.queue,
    );
    if (typeof owners === 'string') return owners;
    if (snap.listed !== snap.queue.length) return `${snap.listed - snap.queue.length} dead entries still listed`;
    for (const [entry, job] of owners) job.entry = entry;
    return undefined;
  }

  /** The lease end Redis has for a permit first seen: the one asked for (server time). */
  #judgeLeaseEnd(p: Permit, end: number, snap: Snapshot, offLow: number, offHigh: number): void {
    p.seen = true;
    const who = `${p.actor.name}'s ${p.id.slice(0, 8)} (${leaseLabel(p.leaseMs)})`;
    if (end === NO_LEASE) throw this.violation(`${who} is out without a lease`);
    if (p.leaseMs === -1) {
      const watchdog = WATCHDOG_TIMEOUTS[p.client.slot] ?? 600;
      if (end > snap.serverNow + watchdog + CLOCK_MS)
        throw this.violation(`${who}: its lease ends ${fmt(end - snap.serverNow)} ms from now, > ${watchdog} ms`);
      return;
    }
    const from = p.job.startedAt + offLow + p.leaseMs;
    const to = p.grantedAt + offHigh + p.leaseMs;
    if (end < from || end > to)
      throw this.violation(
        `${who}: its lease ends ${fmt(end - snap.serverNow)} ms from now, outside ` +
          `[${fmt(from - snap.serverNow)}, ${fmt(to - snap.serverNow)}] (its acquisition's span + its lease)`,
      );
  }

  /**
   * Polls until the state is stable (see the file's comment), at most STABLE_MS after the command and its
   * faults, judging every read; then judges the queue's order against the last stable state.
   */
  async settle(): Promise<Snapshot> {
    const snap = await this.settleOn(
      STABLE_MS,
      () => this.adopt(),
      () => this.world.snapshot(),
      (state) => this.#unstable(state),
    );
    this.#judgeOrder(snap);
    this.stable = snap;
    this.orderExcused = false;
    return snap;
  }

  /** A waiter granted while one ahead of it in the last stable queue still waits: overtaken. */
  #judgeOrder(snap: Snapshot): void {
    const before = this.stable;
    if (!before || this.orderExcused) return;
    const granted = new Set(
      this.world.actors
        .map(pesJob)
        .filter((job) => job?.entry !== undefined && job.outcome?.value === true)
        .map((job) => job?.entry),
    );
    const overtaken = overtaking(before.queue, snap.queue, granted);
    if (overtaken !== undefined) throw this.violation(overtaken);
  }

  clientClosed(client: PrimitiveClient<Pes>): void {
    for (const p of this.permits.values()) {
      if (p.client !== client || p.state !== 'held') continue;
      if (!p.lease.signal.aborted)
        throw this.violation(`${p.actor.name}'s ${p.id.slice(0, 8)}: its signal did not abort on close()`);
      // fn of a withPermit still runs: its end is judged by the next release of the permit.
      this.#end(p, 'its client closed');
    }
    this.#recount();
  }

  /**
   * Gives `p` back (`how`: its lease's release(), release(id) on its client or on the other one; a
   * withPermit's permit: fn returns) and judges what the caller is told against what the model knows.
   */
  async release(p: Permit, how: 'lease' | 'id' | 'other'): Promise<void> {
    const who = `${p.actor.name}'s ${p.id.slice(0, 8)} (${leaseLabel(p.leaseMs)}, ${p.state})`;
    this.adopt();
    const at = now();
    const faults = this.faults;
    const must = this.mustHold(p, at);
    const lost = p.job.box.lostAt !== undefined;
    const { finish, scoped } = p.job.box;
    if (finish && scoped) {
      p.job.box.finish = undefined;
      const result = `fn of ${p.id.slice(0, 8)}`;
      this.note(`${who}: fn returns`);
      finish(result);
      if (!(await settlesWithin(scoped, SETTLE_MS)))
        throw this.violation(`${who}: withPermit did not settle within ${SETTLE_MS} ms of fn's return`);
      const settled = await scoped;
      if (settled.error === undefined) {
        if (settled.value !== result) throw this.violation(`${who}: withPermit resolved to ${String(settled.value)}`);
        if (p.state !== 'held' || lost) throw this.violation(`${who}: withPermit resolved, its permit lost`);
        p.state = 'released';
        p.releasedVia = 'lease';
      } else {
        const error = settled.error;
        if (!(error instanceof LockLostError) || error.result !== result)
          throw this.violation(`${who}: withPermit rejected with ${describeError(error)}`);
        if (must && this.faults === faults)
          throw this.violation(`${who}: withPermit rejected with a live permit: ${describeError(error)}`);
        if (p.state === 'held') this.#end(p, 'withPermit told it was lost');
      }
      this.#recount();
      return;
    }
    const client = how === 'other' ? this.world.clients[1 - p.client.slot] : p.client;
    if (!client || client.closed) return;
    this.note(`${who}: release by ${how === 'lease' ? 'lease' : `id on ${client.label}`}`);
    let error: unknown;
    try {
      await (how === 'lease' ? p.lease.release() : client.primitive.release(p.id));
    } catch (caught) {
      error = caught ?? new Error('rejected with nothing');
    }
    if (error === undefined) {
      // A lease's second release() resolves as its first did (idempotent).
      if (p.state === 'released' && how === 'lease' && p.releasedVia === 'lease') return;
      if (p.state !== 'held' || lost) throw this.violation(`${who}: release (${how}) succeeded on a permit not held`);
      p.state = 'released';
      p.releasedVia = how === 'lease' ? 'lease' : 'id';
      this.note(`${who} released`);
      this.#recount();
      return;
    }
    if (!(error instanceof PermitNotHeldError) || error.permitId !== p.id)
      throw this.violation(`${who}: release (${how}) rejected with ${describeError(error)}`);
    if (must && this.faults === faults) throw this.violation(`${who}: release (${how}) of a live permit refused`);
    if (how === 'lease' && (lost || p.state === 'ended') && !(error.cause instanceof LockLostError))
      throw this.violation(`${who}: lease.release() of a lost permit names no LockLostError`);
    this.note(`${who}: release (${how}) refused: not held`);
    if (p.state === 'held') this.#end(p, 'a release found it not held');
    this.#recount();
  }

  /**
   * The played Redisson client gives its permit `id` back through Redisson's tryRelease, judged: it
   * succeeds while the lease runs (our scripts never take a live Java permit), fails once the lease ended
   * by the server's clock or a fault deleted the permit.
   */
  async javaRelease(id: string): Promise<void> {
    const p = this.java.get(id);
    if (!p) return;
    this.java.delete(id);
    const who = `Java's ${id.slice(0, 8)} (${leaseLabel(p.leaseMs)}${p.gone ? ', deleted by a fault' : ''})`;
    const faults = this.faults;
    const sentAt = now();
    const released = await new RedissonPermitExpirableSemaphore(this.world.admin, this.world.name).tryRelease(id);
    this.note(`${who} tryRelease -> ${released}`);
    if (p.gone && released) throw this.violation(`${who}: tryRelease succeeded`);
    if (p.gone || this.faults !== faults || this.lastFaultAt >= p.sentAt) return;
    const liveThrough = p.leaseMs === -1 ? Infinity : p.sentAt + p.leaseMs;
    if (!released && sentAt + RACE_MS < liveThrough)
      throw this.violation(
        `${who}: tryRelease failed ${fmt(sentAt - p.grantedAt)} ms after its grant, its lease running`,
      );
    if (released && sentAt > p.grantedAt + p.leaseMs + CLOCK_MS && p.leaseMs !== -1)
      throw this.violation(
        `${who}: tryRelease succeeded ${fmt(sentAt - p.grantedAt)} ms after its grant, its lease over`,
      );
  }

  /** Ends the run: aborts the waits, gives everything back, then checks liveness and what is left. */
  async finish(): Promise<void> {
    const { world } = this;
    await this.abortWaits();
    this.adopt();
    for (const p of this.permits.values()) {
      if (p.state === 'held' || p.job.box.finish) await this.release(p, 'lease');
    }
    for (const id of [...this.java.keys()]) await this.javaRelease(id);
    await this.settle();
    // Liveness once the faults stopped: one permit, six unbounded waiters; the holders of a fixed lease of
    // END_LEASE_MS never release (their permit comes back at its end), the others release when granted.
    const ps = world.clients[0]?.primitive;
    if (!ps) throw new Error('no client');
    if (this.total !== 1) await ps.addPermits(1 - this.total);
    this.note(`addPermits(${1 - this.total}): total 1`);
    this.total = 1;
    await this.settle();
    const jobs = world.actors.map((actor) => {
      const job = new PesJob(actor, 'acquire', actor.index % 2 === 1 ? END_LEASE_MS : -1, undefined);
      actor.last = job;
      return job;
    });
    let freedAt = now();
    for (let served = 0; served < jobs.length; served++) {
      const next = Promise.race(jobs.filter((j) => !j.adopted).map((j) => j.done.then(() => j)));
      const by = Math.max(freedAt, this.calmFrom) + STABLE_MS;
      if (!(await settlesWithin(next, Math.max(0, by - now()))))
        throw this.violation(`liveness: no waiter granted within ${STABLE_MS} ms of the permit's return`);
      const job = await next;
      this.adopt();
      const holder = [...this.permits.values()].find((p) => p.job === job);
      if (!holder) throw this.violation(`liveness: ${job.actor.name}'s wait ended without its permit`);
      if (holder.leaseMs === -1) {
        await this.release(holder, 'lease');
        freedAt = now();
      } else {
        // Its holder is told when it ends (judged as any loss); the next waiter takes it then.
        freedAt = PesHarness.endsBy(holder);
      }
    }
    await pollUntil(
      this,
      () => Math.max(freedAt, this.calmFrom) + STABLE_MS,
      () => {
        this.adopt();
        const held = [...this.permits.values()].find((p) => p.state === 'held');
        return Promise.resolve(held ? `${held.actor.name}'s lease not ended yet` : undefined);
      },
    );
    const snap = await this.settle();
    if (effective(snap) !== 1) throw this.violation(`${effective(snap)} permits available at the end, not 1`);
    const { queueKey, deadlinesKey, timeoutKey } = world.semKeys;
    const [list, deadlines, out] = await Promise.all([
      world.admin.lrange(queueKey, 0, -1),
      world.admin.zrange(deadlinesKey, 0, -1, 'WITHSCORES'),
      world.admin.zcard(timeoutKey),
    ]);
    if (list.length + deadlines.length > 0)
      throw this.violation(
        `the permit queue is left on the server with nobody waiting: list [${list.join(', ')}], ` +
          `deadlines [${deadlines.join(', ')}]`,
      );
    if (out > 0) throw this.violation(`${out} permits are still out at the end, every holder gone`);
    await this.closeClients();
  }
}

type PesCommand = fc.AsyncCommand<PesHarness, PesHarness>;

class AcquireCommand extends NewcomerCommand<Pes, Snapshot, PesHarness, PesJob> {
  constructor(
    actor: number,
    override readonly kind: AcquireKind,
    readonly leaseMs: number,
    readonly wait: number | undefined,
  ) {
    super(actor, kind);
  }

  by(actor: number): AcquireCommand {
    return new AcquireCommand(actor, this.kind, this.leaseMs, this.wait);
  }

  protected make(actor: Actor): PesJob {
    return new PesJob(actor, this.kind, this.leaseMs, this.wait);
  }

  protected free(stable: Snapshot): boolean {
    return effective(stable) - needs(stable.queue) >= 1;
  }

  /**
   * A newcomer from a stable state: granted only what the queued waiters that cannot leave meanwhile leave
   * it of the permits that were available, could have expired by its grant (watchdog-mode permits held
   * apart) or were `freed` meanwhile (a release racing it); granted at once when the waiters (all of them)
   * leave it one of those available then.
   */
  judgeNewcomer(h: PesHarness, stable: Snapshot, job: PesJob, freed = 0): void {
    const jobs = new Map(h.world.actors.map((a) => [pesJob(a)?.entry, pesJob(a)]));
    const queued = queuedNeeds(stable.queue, (entry) => {
      const owner = jobs.get(entry);
      return owner !== undefined && owner.unbounded && !owner.aborted && !owner.client.closed;
    });
    const { outcome } = job;
    if (outcome?.value) {
      // The server's time at the grant is at most the read's + (the grant - the read's send).
      const by = stable.serverNow + (outcome.at - stable.sentAt) + CLOCK_MS;
      // A watchdog-mode permit still held is renewed; a lost one was given back from its loss on (the signal
      // aborts before the give-back is sent); the holder of a fixed lease gives it back from endsFrom (its
      // acquisition's start + leaseTime - drift), which may come before the server's lease end.
      const couldEnd = ([id, end]: [string, number]): boolean => {
        const p = h.permits.get(id);
        const lostAt = p?.job.box.lostAt;
        if (lostAt !== undefined) return lostAt <= outcome.at || end <= by;
        if (p?.state === 'held' && p.leaseMs === -1) return false;
        return end <= by || (p !== undefined && p.leaseMs !== -1 && PesHarness.endsFrom(p) <= outcome.at);
      };
      const couldExpire = [...stable.out].filter(couldEnd).length;
      if (stable.count + couldExpire + freed - queued.certain < 1)
        throw h.violation(
          `newcomer ${job.actor.name} ${String(job)} granted with ${stable.count} available, ${couldExpire} ` +
            `leases that could have ended, ${freed} released meanwhile and ${queued.certain} kept for waiters ahead`,
        );
    }
    const judged = !BOUNDED.has(job.kind) || (job.wait ?? 0) >= 1500;
    judgeRefused(h, job, judged, effective(stable), queued.all, 1);
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} ${this.kind}(${leaseLabel(this.leaseMs)}${this.wait !== undefined ? `, wait ${this.wait}ms` : ''})`;
  }
}

/**
 * A release of one of an actor's permits (or of the next actor's that has any; held, or one that ended: a
 * stale release), by lease or by id; with a racer, an acquisition started as the release is sent (a
 * newcomer that must not take the permit a queued waiter is woken for).
 */
class ReleaseCommand implements PesCommand {
  constructor(
    readonly actor: number,
    readonly pick: number,
    readonly how: 'lease' | 'id' | 'other',
    readonly racer: AcquireCommand | undefined,
  ) {}

  #target(h: PesHarness): Permit | undefined {
    // The actor named, or the next one that has permits.
    const { actors } = h.world;
    const actor = actors
      .map((_, i) => actors[(this.actor + i) % actors.length])
      .find((a) => a !== undefined && h.permitsOf(a).length > 0);
    if (!actor) return undefined;
    const permits = h.permitsOf(actor);
    // Mostly a held permit; a stale one when the pick says so or none is held.
    const held = permits.filter((p) => p.state === 'held' || p.job.box.finish);
    const pool = held.length > 0 && this.pick % 4 !== 3 ? held : permits.slice(-4);
    return pool[this.pick % Math.max(pool.length, 1)];
  }

  check(h: PesHarness): boolean {
    return this.#target(h) !== undefined;
  }

  async run(h: PesHarness): Promise<void> {
    h.adopt();
    const p = this.#target(h);
    if (!p) {
      countSkipped(stats);
      return;
    }
    // Counted by how, and by what the permit is: held, expired (a fixed lease that ended), ended otherwise
    // (lost, its client closed), released already, gone (a fault deleted it).
    const expired = p.state === 'ended' && p.leaseMs !== -1 && now() > PesHarness.endsBy(p);
    const what = p.state === 'held' ? '' : ` ${expired ? 'expired' : p.state}`;
    countStep(stats, `release ${p.job.box.finish ? 'withPermit' : this.how}${what}`, 'step');
    const racer = this.racer?.check(h) ? this.racer : undefined;
    const { stable, orderExcused } = h;
    const releasing = h.release(p, this.how);
    if (!racer) {
      await releasing;
      await h.settle();
      return;
    }
    countStep(stats, racer.kind, 'inner');
    const job = racer.start(h);
    await releasing;
    await settlesWithin(job.done, racer.kind === 'try' ? AT_ONCE_MS : WATCH_MS);
    h.adopt();
    if (stable && !orderExcused && !h.orderExcused) racer.judgeNewcomer(h, stable, job, 1);
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'}+ release #${this.pick} by ${this.how}${this.racer ? ` racing ${String(this.racer)}` : ''}`;
  }
}

/**
 * A played Redisson client (test/support/redisson.ts) on the same semaphore: tryAcquire of one permit with
 * a fixed lease or none, through Redisson's script (outside our queue: it may take a permit our woken waiter
 * was to take, which must then wait on), or tryRelease of one it holds (PesHarness.javaRelease judges it), whose
 * message our queued waiters must hear.
 */
class JavaCommand implements PesCommand {
  constructor(
    readonly what: 'tryAcquire' | 'tryRelease',
    readonly leaseMs: number,
    readonly pick: number,
  ) {}

  check(h: PesHarness): boolean {
    return this.what === 'tryAcquire' || h.java.size > 0;
  }

  async run(h: PesHarness): Promise<void> {
    h.adopt();
    if (this.what === 'tryRelease') {
      const ids = [...h.java.keys()];
      const id = ids[this.pick % Math.max(ids.length, 1)];
      if (id === undefined) {
        countSkipped(stats);
        return;
      }
      countStep(stats, 'Java tryRelease', 'step');
      await h.javaRelease(id);
    } else {
      countStep(stats, 'Java tryAcquire', 'step');
      const sentAt = now();
      const id = await new RedissonPermitExpirableSemaphore(h.world.admin, h.world.name).tryAcquire(this.leaseMs);
      h.note(`Java tryAcquire(${leaseLabel(this.leaseMs)}) -> ${id?.slice(0, 8) ?? 'refused'}`);
      if (id !== undefined) h.java.set(id, { leaseMs: this.leaseMs, sentAt, grantedAt: now(), gone: false });
    }
    await h.settle();
  }

  toString(): string {
    return this.what === 'tryAcquire'
      ? `Java tryAcquire(${leaseLabel(this.leaseMs)})`
      : `Java tryRelease #${this.pick}`;
  }
}

/** addPermits(delta) or availablePermits() by client A or B. */
class PesCountCommand extends CountCommand<Pes, PesHarness, 'available'> {
  protected async other(h: PesHarness, ps: Pes): Promise<void> {
    h.adopt();
    const at = now();
    const held = [...h.permits.values()].filter((p) => h.mustHold(p, at)).length;
    const available = await ps.availablePermits();
    if (available + held > h.total)
      throw h.violation(`availablePermits() ${available} + ${held} live permits > total ${h.total}`);
  }
}

/**
 * DEL or PEXPIRE 1 of the count (its permits are gone from the total), of the permits out (they are gone
 * from the total, and their holders will find out) or of the permit queue's keys.
 */
class DeleteKeyCommand extends KeyFaultCommand<Pes, PesHarness> {
  override check(h: PesHarness): boolean {
    // A PEXPIRE of the count or the permits out: only when no script can move a permit between the two in
    // the millisecond before the key is gone (a permit moved then would be lost to the model's arithmetic,
    // not to the library): nobody waits, and every permit is a watchdog-mode one held (renewals touch only
    // the scores), none ended with a give-back in flight.
    if (this.how !== 'pexpire' || (this.key !== 'count' && this.key !== 'timeout')) return true;
    if (h.world.actors.some((a) => a.busy) || h.java.size > 0) return false;
    return [...h.permits.values()].every(
      (p) =>
        p.state === 'released' ||
        p.state === 'gone' ||
        (p.state === 'held' && p.leaseMs === -1 && p.job.box.lostAt === undefined),
    );
  }

  protected async hit(h: PesHarness): Promise<void> {
    const { admin, semKeys: keys } = h.world;
    const expire = this.how === 'pexpire';
    if (this.key === 'count') {
      h.total -= await hitCount(h.world, keys.lockKey, this.how);
      return;
    }
    if (this.key === 'timeout') {
      const multi = admin.multi().zrangeBuffer(keys.timeoutKey, 0, -1);
      const replies = await (expire ? multi.pexpire(keys.timeoutKey, 1) : multi.del(keys.timeoutKey)).exec();
      if (expire) await h.world.expireNow(keys.timeoutKey);
      const ids = ((replies?.[0]?.[1] ?? []) as Buffer[]).map((id) => id.toString('hex'));
      h.total -= ids.length;
      for (const id of ids) {
        const p = h.permits.get(id);
        if (p && p.state !== 'released') p.state = 'gone';
        const java = h.java.get(id);
        if (java) java.gone = true;
      }
      return;
    }
    await hitKey(h.world, this.key === 'queue' ? keys.queueKey : keys.deadlinesKey, this.how);
  }
}

const leaseArb = fc.constantFrom(-1, -1, 300, 800, 1500);
const acquireArb: fc.Arbitrary<AcquireCommand> = fc
  .tuple(
    actorArb,
    fc.constantFrom<AcquireKind>('try', 'tryWait', 'acquire', 'acquireWait', 'withPermit', 'withPermitWait'),
    leaseArb,
    fc.constantFrom(50, 300, 1500),
  )
  .map(
    ([actor, kind, leaseMs, wait]) => new AcquireCommand(actor, kind, leaseMs, BOUNDED.has(kind) ? wait : undefined),
  );
const releaseArb = fc
  .tuple(
    actorArb,
    fc.nat(11),
    fc.constantFrom('lease' as const, 'lease' as const, 'id' as const, 'other' as const),
    fc.option(acquireArb, { nil: undefined, freq: 2 }),
  )
  .map(([actor, pick, how, racer]) => new ReleaseCommand(actor, pick, how, racer));

/** Operations three times as often as each kind of fault. */
export const permitExpirableSemaphoreCommands: fc.Arbitrary<PesCommand>[] = [
  acquireArb,
  acquireArb,
  acquireArb,
  releaseArb,
  releaseArb,
  releaseArb,
  fc
    .tuple(
      fc.constantFrom('tryAcquire' as const, 'tryRelease' as const, 'tryRelease' as const),
      fc.constantFrom(-1, 300, 800, 1500),
      fc.nat(7),
    )
    .map(([what, leaseMs, pick]) => new JavaCommand(what, leaseMs, pick)),
  fc
    .tuple(slotArb, fc.constantFrom('add' as const, 'available' as const), fc.constantFrom(-1, 1, 2))
    .map(([slot, what, delta]) => new PesCountCommand(slot, what, delta)),
  fc
    .tuple(
      fc.constantFrom('count' as const, 'timeout' as const, 'queue' as const, 'deadlines' as const),
      fc.constantFrom('del' as const, 'pexpire' as const),
    )
    .map(([key, how]) => new DeleteKeyCommand(key, how)),
  ...faultCommands<Pes, PesHarness>(acquireArb),
];
