/**
 * The model-based test of RSemaphore: six actors on two lock clients take and give back permits of one
 * semaphore, beside a played Redisson client (Java) taking and giving back permits through Redisson's own
 * scripts, interleaved with faults, and after every command Redis (the count, the permit queue and its
 * deadlines, read on an admin connection) and what every actor was told are judged against a model:
 *
 * - conservation: available + held by the actors and Java = the total the model set (trySetPermits, addPermits,
 *   drainPermits, a DEL of the count), at every step; grants whose caller has not heard yet (in flight, or
 *   being given back after a timeout, an abort or close()) may take permits only until the state is stable;
 * - stable within STABLE_MS after every command (after its faults): the count is conserved exactly, every
 *   waiting actor has its entry in the queue and no entry is left of one that stopped, and no queued waiter
 *   could take its permits (the waiters a release serves are woken and take them: liveness);
 * - no waiter overtaken: a queued waiter granted while one ahead of it in the queue still waits (between two
 *   stable states with no fault between them); a newcomer granted beyond what the queued waiters leave it,
 *   or refused what they leave it, from a stable state; a free semaphore grants at once;
 * - what each caller is told: a tryAcquire with waitTime gives up no earlier than its waitTime; only an
 *   abort or close() rejects a wait; close() settles every wait of its client and its grants in flight are
 *   given back (conservation); a release always succeeds.
 *
 * Liveness at the end of a run: after the faults stop, six unbounded waiters for one permit each, served by
 * one permit released as each is granted, are each granted within STABLE_MS of the previous release.
 */
import fc from 'fast-check';
import type { RSemaphore } from '../../src/index.js';
import { permitPlace, semaphoreKeys, type SemaphoreKeys } from '../../src/redis/keys.js';
import type { Redis } from '../support/fixture.js';
import { RedissonSemaphore } from '../support/redisson.js';
import {
  ACTORS,
  actorArb,
  describeError,
  faultCommands,
  KeyFaultCommand,
  fmt,
  PrimitiveWorld,
  slotArb,
  WaitJob,
  ModelHarness,
  type InnerStep,
  type PrimitiveActor,
  type PrimitiveHarness,
} from './primitive.js';
import { countStep, newStats } from './runner.js';
import { now, settlesWithin, type ServerInfo } from './world.js';

export const stats = newStats();

/** The permits the semaphore starts with (trySetPermits). */
export const INITIAL_PERMITS = 3;
/** The most permits the model lets addPermits set. */
const MAX_PERMITS = 5;
/**
 * How long after a command (and the end of its faults) the state may take to become stable. Its parts: a
 * waiter refreshes its entry every third of watchdogTimeout (300 ms at most here); an entry left by a failed
 * leave call lives watchdogTimeout (900 ms); a killed subscriber reconnects in well under a second; the rest
 * is margin for a loaded 2-core machine (a wrong state never becomes stable: the margin costs nothing).
 */
const STABLE_MS = 6000;
/** A free semaphore grants a newcomer within this (one round trip, on a loaded machine). */
export const AT_ONCE_MS = 3000;
/** How long a waiting step is watched before the command ends (it then waits in the background). */
export const WATCH_MS = 120;

type AcquireKind = 'try' | 'tryWait' | 'acquire';

type Actor = PrimitiveActor<RSemaphore>;

/** One acquisition by an actor. */
class SemJob extends WaitJob<RSemaphore> {
  readonly kind: AcquireKind;
  readonly permits: number;
  /** Its entry in the permit queue, once seen there. */
  entry: string | undefined;

  constructor(actor: Actor, kind: AcquireKind, permits: number, wait: number | undefined) {
    super(actor, `${kind}(${permits}${wait !== undefined ? `, ${wait}ms` : ''})`, wait, (semaphore, signal) =>
      kind === 'try'
        ? semaphore.tryAcquire({ permits, signal })
        : kind === 'tryWait'
          ? semaphore.tryAcquire({ permits, waitTime: wait ?? 0, signal })
          : semaphore.acquire({ permits, signal }).then(() => true),
    );
    this.kind = kind;
    this.permits = permits;
  }
}

const semJob = (actor: Actor): SemJob | undefined => (actor.last instanceof SemJob ? actor.last : undefined);

/** What the admin connection read of the semaphore, in one MULTI. */
interface Snapshot {
  readonly available: number;
  /** Live queue entries (a deadline after the server's time), in queue order. */
  readonly queue: readonly string[];
  /** Every entry of the list, live or not. */
  readonly listed: number;
  readonly at: number;
}

// The permit queue (both semaphores share it): entries "<need>|<clientId>|<n>", in a list, each with a
// deadline in a sorted set (lua/includes/permit-queue.lua).
export const entryNeed = (entry: string): number => Number(entry.split('|')[0]);
export const entryClient = (entry: string): string => entry.split('|')[1] ?? '';
export const entryNumber = (entry: string): number => Number(entry.split('|')[2]);
export const needs = (entries: readonly string[]): number => entries.reduce((sum, entry) => sum + entryNeed(entry), 0);

/** The server's time in ms from a TIME reply read in a MULTI. */
export function serverTimeOf(reply: unknown): number {
  const [seconds = '0', micros = '0'] = (reply ?? []) as string[];
  return Number(seconds) * 1000 + Number(micros) / 1000;
}

/** The live entries of the permit queue (a deadline after `serverNow`), in queue order, from LRANGE and ZRANGE. */
export function liveQueue(list: readonly string[], scores: readonly string[], serverNow: number): string[] {
  const deadlines = new Map<string, number>();
  for (let i = 0; i + 1 < scores.length; i += 2) deadlines.set(scores[i] ?? '', Number(scores[i + 1]));
  return list.flatMap((place) => {
    const { entry, deadline = deadlines.get(entry) } = permitPlace(place);
    return (deadline ?? -Infinity) > serverNow ? [entry] : [];
  });
}

/** What matching a waiter with its queue entry needs of it. */
export interface QueuedWaiter {
  readonly startedAt: number;
  readonly permits: number;
  readonly client: { readonly locks: { readonly clientId: string } };
  readonly actor: { readonly name: string };
  toString(): string;
}

/**
 * Matches every waiter with its entry in `queue` (by client and need, in order of arrival: entries of a client
 * are numbered in the order its waits began); a reason when a waiter has no entry or an entry no waiter.
 */
export function matchWaiters<J extends QueuedWaiter>(
  waiters: readonly J[],
  queue: readonly string[],
): Map<string, J> | string {
  const waiting = [...waiters].sort((a, b) => a.startedAt - b.startedAt);
  const entries = [...queue].sort((a, b) => entryNumber(a) - entryNumber(b));
  const owners = new Map<string, J>();
  for (const job of waiting) {
    const entry = entries.find(
      (e) => !owners.has(e) && entryClient(e) === job.client.locks.clientId && entryNeed(e) === job.permits,
    );
    if (entry === undefined) return `${job.actor.name} ${String(job)} has no entry in the queue`;
    owners.set(entry, job);
  }
  const ghost = entries.find((e) => !owners.has(e));
  if (ghost !== undefined) return `queue entry ${ghost} has no waiter`;
  return owners;
}

/** The first queued waiter that could take its permits from `available` (none may, once stable). */
export function servableEntry(queue: readonly string[], available: number): string | undefined {
  let ahead = 0;
  for (const entry of queue) {
    if (available - ahead >= entryNeed(entry)) return entry;
    ahead += entryNeed(entry);
  }
  return undefined;
}

/** A waiter of the queue `before` granted (its entry in `granted`) while one ahead of it is still in `after`. */
export function overtaking(
  before: readonly string[],
  after: readonly string[],
  granted: ReadonlySet<string | undefined>,
): string | undefined {
  const still = new Set(after);
  for (let i = 0; i < before.length; i++) {
    const ahead = before[i] ?? '';
    if (!still.has(ahead)) continue;
    for (const behind of before.slice(i + 1)) {
      if (granted.has(behind)) return `queued ${behind} was granted while ${ahead} ahead still waits`;
    }
  }
  return undefined;
}

class SemWorld extends PrimitiveWorld<RSemaphore> {
  readonly semKeys: SemaphoreKeys;

  constructor(server: ServerInfo, admin: Redis, name: string) {
    const keys = semaphoreKeys('', name);
    super(server, admin, name, [keys.lockKey, keys.queueKey, keys.deadlinesKey], (locks) => locks.getSemaphore(name));
    this.semKeys = keys;
  }

  async snapshot(): Promise<Snapshot> {
    const { lockKey, queueKey, deadlinesKey } = this.semKeys;
    const replies = await this.admin
      .multi()
      .get(lockKey)
      .lrange(queueKey, 0, -1)
      .zrange(deadlinesKey, 0, -1, 'WITHSCORES')
      .time()
      .exec();
    const value = replies?.[0]?.[1] as string | null;
    const list = (replies?.[1]?.[1] ?? []) as string[];
    const scores = (replies?.[2]?.[1] ?? []) as string[];
    const queue = liveQueue(list, scores, serverTimeOf(replies?.[3]?.[1]));
    return { available: value === null ? 0 : Number(value), queue, listed: list.length, at: now() };
  }
}

/** The model and the system under test of one generated sequence (fast-check's model and real). */
export class SemHarness extends ModelHarness<RSemaphore, SemWorld> {
  /** The permits the user set (available + held by the actors, once stable). */
  total = INITIAL_PERMITS;
  /** The last stable state, and whether the queue's order may have changed since (a fault, a stall). */
  stable: Snapshot | undefined;
  orderExcused = false;

  private constructor(world: SemWorld) {
    super(world, stats);
  }

  static async create(server: ServerInfo, admin: Redis, name: string): Promise<SemHarness> {
    const world = new SemWorld(server, admin, name);
    const h = new SemHarness(world);
    await setUp(h, world);
    return h;
  }

  faulted(): void {
    this.orderExcused = true;
  }

  protected describeModel(): string {
    const actors = this.world.actors
      .map((a) => `${a.name}: held ${a.held}${a.busy ? `, waits ${String(a.last)}` : ''}`)
      .join('; ');
    return `total ${this.total}; ${actors}`;
  }

  /** Permits held by the played Redisson client (JavaCommand). */
  javaHeld = 0;

  get held(): number {
    return this.world.actors.reduce((sum, a) => sum + a.held, this.javaHeld);
  }

  /** Takes in what settled acquisitions were told, judging each. */
  adopt(): void {
    for (const actor of this.world.actors) {
      const job = semJob(actor);
      if (!job?.outcome || job.adopted) continue;
      job.adopted = true;
      const { value: granted, error, at } = job.outcome;
      if (granted) {
        actor.held += job.permits;
        this.note(`${actor.name} granted ${job.permits} (${String(job)})`);
        continue;
      }
      this.judgeEnded(job);
      if (error !== undefined) continue;
      if (job.kind === 'acquire') throw this.violation(`${actor.name} acquire() resolved without permits`);
      this.note(`${actor.name} ${String(job)} refused after ${fmt(at - job.startedAt)} ms`);
    }
  }

  /** Permits taken in Redis and not yet told (in flight), from a snapshot read after adopt(). */
  #unaccounted(snap: Snapshot): number {
    const missing = this.total - snap.available - this.held;
    if (missing < 0)
      throw this.violation(
        `more permits than the total: ${snap.available} available + ${this.held} held > ${this.total}`,
      );
    return missing;
  }

  /**
   * Polls until the state is stable (see the file's comment), at most STABLE_MS after the command and its
   * faults, judging conservation on every read; then judges the queue's order against the last stable state.
   */
  async settle(): Promise<Snapshot> {
    const snap = await this.settleOn(
      STABLE_MS,
      () => this.adopt(),
      () => this.world.snapshot(),
      (state) => this.#unstable(state, this.#unaccounted(state)),
    );
    this.#judgeOrder(snap);
    this.stable = snap;
    this.orderExcused = false;
    return snap;
  }

  #unstable(snap: Snapshot, missing: number): string | undefined {
    if (missing > 0) {
      const waiting = this.world.actors.filter((a) => a.busy);
      return `${missing} permits taken and not told (${waiting.length} waiting, ${snap.available} available)`;
    }
    const servable = servableEntry(snap.queue, snap.available);
    if (servable !== undefined) return `queued ${servable} could take its permits`;
    // A single attempt still in flight (started inside a fault) may take permits at any moment.
    const attempt = this.world.actors.map(semJob).find((job) => job?.waiting === true && job.kind === 'try');
    if (attempt !== undefined) return `${attempt.actor.name} ${String(attempt)} in flight`;
    // Every waiting actor has its entry, and each entry a waiting actor.
    const owners = matchWaiters(
      this.world.actors
        .map(semJob)
        .filter((job): job is SemJob => job !== undefined && job.waiting && job.kind !== 'try'),
      snap.queue,
    );
    if (typeof owners === 'string') return owners;
    if (snap.listed !== snap.queue.length) return `${snap.listed - snap.queue.length} dead entries still listed`;
    for (const [entry, job] of owners) job.entry = entry;
    return undefined;
  }

  /** A waiter granted while one ahead of it in the last stable queue still waits: overtaken. */
  #judgeOrder(snap: Snapshot): void {
    const before = this.stable;
    if (!before || this.orderExcused) return;
    const granted = new Set(
      this.world.actors
        .map(semJob)
        .filter((job) => job?.entry !== undefined && job.outcome?.value === true)
        .map((job) => job?.entry),
    );
    const overtaken = overtaking(before.queue, snap.queue, granted);
    if (overtaken !== undefined) throw this.violation(overtaken);
  }

  /** Ends the run: aborts the waits, gives everything back, then checks liveness and what is left. */
  async finish(): Promise<void> {
    const { world } = this;
    await this.abortWaits();
    for (const actor of world.actors) await this.release(actor, actor.held);
    await this.javaRelease(this.javaHeld);
    await this.settle();
    // Liveness once the faults stopped: one permit, six unbounded waiters, each released as it is granted.
    const semaphore = world.clients[0]?.primitive;
    if (!semaphore) throw new Error('no client');
    if (this.total !== 1) await semaphore.addPermits(1 - this.total);
    this.total = 1;
    const jobs = world.actors.map((actor) => {
      const job = new SemJob(actor, 'acquire', 1, undefined);
      actor.last = job;
      return job;
    });
    for (let served = 0; served < jobs.length; served++) {
      const next = Promise.race(jobs.filter((j) => !j.adopted).map((j) => j.done.then(() => j)));
      if (!(await settlesWithin(next, STABLE_MS)))
        throw this.violation(`liveness: no waiter granted within ${STABLE_MS} ms of the permit's release`);
      this.adopt();
      const holder = world.actors.find((a) => a.held > 0);
      if (!holder) throw this.violation('liveness: a wait ended without its permit');
      await this.release(holder, holder.held);
    }
    const snap = await this.settle();
    if (snap.available !== 1) throw this.violation(`${snap.available} permits available at the end, not 1`);
    const { queueKey, deadlinesKey } = world.semKeys;
    const [list, deadlines] = await Promise.all([
      world.admin.lrange(queueKey, 0, -1),
      world.admin.zrange(deadlinesKey, 0, -1, 'WITHSCORES'),
    ]);
    if (list.length + deadlines.length > 0)
      throw this.violation(
        `the permit queue is left on the server with nobody waiting: list [${list.join(', ')}], ` +
          `deadlines [${deadlines.join(', ')}]`,
      );
    await this.closeClients();
  }

  /** The played Redisson client gives `permits` back through Redisson's script (its message must wake ours). */
  async javaRelease(permits: number): Promise<void> {
    if (permits <= 0) return;
    this.javaHeld -= permits;
    this.note(`Java release(${permits})`);
    await new RedissonSemaphore(this.world.admin, this.world.name).release(permits);
  }

  async release(actor: Actor, permits: number): Promise<void> {
    if (permits <= 0) return;
    actor.held -= permits;
    this.note(`${actor.name} release(${permits})`);
    try {
      await actor.client.primitive.release(permits);
    } catch (error) {
      throw this.violation(`${actor.name} release(${permits}) failed: ${describeError(error)}`);
    }
  }
}

/**
 * Readies a semaphore's world: client A sets INITIAL_PERMITS, client B's trySetPermits is refused (they are
 * set); the harness settles on that.
 */
export async function setUp(
  h: { violation(message: string): Error; settle(): Promise<unknown> },
  world: {
    ready(): Promise<void>;
    readonly clients: readonly { readonly primitive: { trySetPermits(permits: number): Promise<boolean> } }[];
  },
): Promise<void> {
  await world.ready();
  if (!(await world.clients[0]?.primitive.trySetPermits(INITIAL_PERMITS))) throw h.violation('trySetPermits refused');
  if (await world.clients[1]?.primitive.trySetPermits(1)) throw h.violation('a second trySetPermits was taken');
  await h.settle();
}

/** What a newcomer's command needs of a semaphore's harness (both semaphores' models). */
export interface NewcomerHarness<P, S> extends PrimitiveHarness<P> {
  /** The last stable state, and whether the queue's order may have changed since (a fault, a stall). */
  readonly stable: S | undefined;
  readonly orderExcused: boolean;
  /** Takes in what settled acquisitions were told, judging each. */
  adopt(): void;
}

/**
 * An acquisition by one actor, watched for WATCH_MS (a wait goes on in the background), or AT_ONCE_MS when
 * it is a single attempt or the last stable state leaves it what it asks; then judged as a newcomer against
 * that state when no fault came between.
 */
export abstract class NewcomerCommand<P, S, H extends NewcomerHarness<P, S>, J extends WaitJob<P>>
  implements fc.AsyncCommand<H, H>, InnerStep<H>
{
  constructor(
    readonly actor: number,
    readonly kind: string,
  ) {}

  abstract by(actor: number): NewcomerCommand<P, S, H, J>;
  /** The acquisition, as `actor`'s current call. */
  protected abstract make(actor: PrimitiveActor<P>): J;
  /** Whether `stable` leaves this newcomer what it asks. */
  protected abstract free(stable: S): boolean;
  abstract judgeNewcomer(h: H, stable: S, job: J): void;
  abstract toString(): string;

  check(h: H): boolean {
    const actor = h.world.actors[this.actor];
    return actor !== undefined && !actor.busy && !actor.unadopted;
  }

  start(h: H): J {
    return h.world.begin(h, this.actor, (actor) => this.make(actor));
  }

  async run(h: H): Promise<void> {
    countStep(h.stats, this.kind, 'step');
    const stable = h.stable;
    const free = stable !== undefined && this.free(stable);
    const job = this.start(h);
    await settlesWithin(job.done, this.kind === 'try' || free ? AT_ONCE_MS : WATCH_MS);
    h.adopt();
    if (stable && !h.orderExcused) this.judgeNewcomer(h, stable, job);
    await h.settle();
  }
}

/**
 * The needs queued ahead of a newcomer: all of them, and those whose waiters cannot leave meanwhile (`certain`:
 * an unbounded wait, not aborted, its client open).
 */
export function queuedNeeds(
  queue: readonly string[],
  certain: (entry: string) => boolean,
): { readonly all: number; readonly certain: number } {
  return {
    all: needs(queue),
    certain: needs(queue.filter(certain)),
  };
}

/**
 * A newcomer refused (or not granted within AT_ONCE_MS) while `available` less the queued needs left it its
 * `permits`. `judged`: a short waitTime may run out before a reply on a loaded machine, so only longer waits
 * are judged.
 */
export function judgeRefused(
  h: { violation(message: string): Error },
  job: WaitJob<unknown>,
  judged: boolean,
  available: number,
  needAll: number,
  permits: number,
): void {
  const { outcome } = job;
  if (!judged || available - needAll < permits || outcome?.value || job.aborted) return;
  if (!outcome) throw h.violation(`free permits: ${String(job)} not granted within ${AT_ONCE_MS} ms`);
  throw h.violation(
    `${String(job)} refused after ${fmt(outcome.at - job.startedAt)} ms with ${available} available ` +
      `and ${needAll} queued needs`,
  );
}

type SemCommand = fc.AsyncCommand<SemHarness, SemHarness>;

class AcquireCommand extends NewcomerCommand<RSemaphore, Snapshot, SemHarness, SemJob> {
  constructor(
    actor: number,
    override readonly kind: AcquireKind,
    readonly permits: number,
    readonly wait: number | undefined,
  ) {
    super(actor, kind);
  }

  by(actor: number): AcquireCommand {
    return new AcquireCommand(actor, this.kind, this.permits, this.wait);
  }

  protected make(actor: Actor): SemJob {
    return new SemJob(actor, this.kind, this.permits, this.wait);
  }

  protected free(stable: Snapshot): boolean {
    return stable.available - needs(stable.queue) >= this.permits;
  }

  /**
   * A newcomer from a stable state: granted only what the queued waiters that cannot leave meanwhile leave
   * it; granted at once when the waiters (all of them) leave it enough.
   */
  judgeNewcomer(h: SemHarness, stable: Snapshot, job: SemJob): void {
    const jobs = new Map(h.world.actors.map((a) => [semJob(a)?.entry, semJob(a)]));
    const queued = queuedNeeds(stable.queue, (entry) => {
      const owner = jobs.get(entry);
      return owner !== undefined && owner.kind === 'acquire' && !owner.aborted && !owner.client.closed;
    });
    if (job.outcome?.value && stable.available - queued.certain < job.permits)
      throw h.violation(
        `newcomer ${job.actor.name} ${String(job)} granted with ${stable.available} available and ` +
          `${queued.certain} kept for waiters ahead`,
      );
    const judged = job.kind !== 'tryWait' || (job.wait ?? 0) >= 1500;
    judgeRefused(h, job, judged, stable.available, queued.all, job.permits);
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} ${this.kind}(${this.permits}${this.wait !== undefined ? `, ${this.wait}ms` : ''})`;
  }
}

class ReleaseCommand implements SemCommand {
  constructor(
    readonly actor: number,
    readonly permits: number,
  ) {}

  check(h: SemHarness): boolean {
    return (h.world.actors[this.actor]?.held ?? 0) > 0;
  }

  async run(h: SemHarness): Promise<void> {
    const actor = h.world.actors[this.actor];
    if (!actor) return;
    countStep(stats, 'release', 'step');
    await h.release(actor, Math.min(this.permits, actor.held));
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} release(${this.permits})`;
  }
}

/** What a count command needs of a semaphore's harness: the total the user set. */
export interface CountHarness<P> extends PrimitiveHarness<P> {
  total: number;
}

/**
 * addPermits(delta) by client A or B (keeping the total within 0..MAX_PERMITS), or another call on the count
 * (`what`Permits()) that a subclass runs and judges; the harness settles after it.
 */
export abstract class CountCommand<
  P extends { addPermits(delta: number): Promise<void> },
  H extends CountHarness<P>,
  W extends string,
> implements fc.AsyncCommand<H, H> {
  constructor(
    readonly slot: number,
    readonly what: 'add' | W,
    readonly delta: number,
  ) {}

  /** Runs and judges `what` (anything but add) on `primitive`. */
  protected abstract other(h: H, primitive: P): Promise<void>;

  check(h: H): boolean {
    if (this.what !== 'add') return true;
    const total = h.total + this.delta;
    return total >= 0 && total <= MAX_PERMITS;
  }

  async run(h: H): Promise<void> {
    const client = h.world.clients[this.slot];
    if (!client) return;
    countStep(h.stats, this.what, 'step');
    if (this.what === 'add') {
      await client.primitive.addPermits(this.delta);
      h.total += this.delta;
    } else await this.other(h, client.primitive);
    h.note(`${client.label} ${String(this)} (total ${h.total})`);
    await h.settle();
  }

  toString(): string {
    const who = 'AB'[this.slot] ?? '?';
    return this.what === 'add' ? `${who} addPermits(${this.delta})` : `${who} ${this.what}Permits()`;
  }
}

/**
 * A played Redisson client (test/support/redisson.ts) on the same semaphore: tryAcquire(n) through Redisson's
 * script (outside our queue: it may take what our waiters wait for, and the model counts what it holds), or
 * release(n) through Redisson's, whose message our queued waiters must hear (the settle's liveness).
 */
class JavaCommand implements SemCommand {
  constructor(
    readonly what: 'tryAcquire' | 'release',
    readonly permits: number,
  ) {}

  check(h: SemHarness): boolean {
    return this.what === 'tryAcquire' || h.javaHeld > 0;
  }

  async run(h: SemHarness): Promise<void> {
    countStep(stats, `Java ${this.what}`, 'step');
    if (this.what === 'release') await h.javaRelease(Math.min(this.permits, h.javaHeld));
    else {
      const taken = await new RedissonSemaphore(h.world.admin, h.world.name).tryAcquire(this.permits);
      if (taken) h.javaHeld += this.permits;
      h.note(`Java tryAcquire(${this.permits}) -> ${taken}`);
    }
    await h.settle();
  }

  toString(): string {
    return `Java ${this.what}(${this.permits})`;
  }
}

/** addPermits(delta), drainPermits() or availablePermits() by client A or B. */
class SemCountCommand extends CountCommand<RSemaphore, SemHarness, 'drain' | 'available'> {
  protected async other(h: SemHarness, semaphore: RSemaphore): Promise<void> {
    if (this.what === 'drain') {
      const drained = await semaphore.drainPermits();
      if (drained < 0) throw h.violation(`drainPermits returned ${drained}`);
      h.total -= drained;
      return;
    }
    h.adopt();
    const held = h.held;
    const available = await semaphore.availablePermits();
    if (available + held > h.total)
      throw h.violation(`availablePermits() ${available} + ${held} held > total ${h.total}`);
  }
}

/** DEL or PEXPIRE 1 of the count (its permits are gone from the total) or of the permit queue's keys. */
class DeleteKeyCommand extends KeyFaultCommand<RSemaphore, SemHarness> {
  override check(h: SemHarness): boolean {
    // The count's PEXPIRE: only with nobody waiting (a grant between the read and the expiry would be lost
    // to the model's arithmetic, not to the library).
    return !(this.key === 'count' && this.how === 'pexpire' && h.world.actors.some((a) => a.busy));
  }

  protected async hit(h: SemHarness): Promise<void> {
    const keys = h.world.semKeys;
    if (this.key === 'count') h.total -= await hitCount(h.world, keys.lockKey, this.how);
    else await hitKey(h.world, this.key === 'queue' ? keys.queueKey : keys.deadlinesKey, this.how);
  }
}

/** What a key fault needs of a world: the admin connection, and a PEXPIRE 1 that waits for the key to go. */
interface KeyWorld {
  readonly admin: Redis;
  expireNow(key: string): Promise<void>;
}

/** DEL (GETDEL) or PEXPIRE 1 of a semaphore's count; resolves to the permits it had. */
export async function hitCount(world: KeyWorld, key: string, how: 'del' | 'pexpire'): Promise<number> {
  const value =
    how === 'del'
      ? ((await world.admin.call('GETDEL', key)) as string | null)
      : ((await world.admin.multi().get(key).pexpire(key, 1).exec())?.[0]?.[1] as string | null);
  if (how === 'pexpire') await world.expireNow(key);
  return value === null ? 0 : Number(value);
}

/** DEL or PEXPIRE 1 of a key (one of the permit queue's). */
export async function hitKey(world: KeyWorld, key: string, how: 'del' | 'pexpire'): Promise<void> {
  if (how === 'del') await world.admin.del(key);
  else await world.expireNow(key);
}

const permitsArb = fc.integer({ min: 1, max: 3 });
const acquireArb: fc.Arbitrary<AcquireCommand> = fc
  .tuple(
    actorArb,
    fc.constantFrom<AcquireKind>('try', 'tryWait', 'acquire'),
    permitsArb,
    fc.constantFrom(50, 300, 1500),
  )
  .map(
    ([actor, kind, permits, wait]) => new AcquireCommand(actor, kind, permits, kind === 'tryWait' ? wait : undefined),
  );
const releaseArb = fc.tuple(actorArb, permitsArb).map(([actor, permits]) => new ReleaseCommand(actor, permits));

/** Operations three times as often as each kind of fault. */
export const semaphoreCommands: fc.Arbitrary<SemCommand>[] = [
  acquireArb,
  acquireArb,
  acquireArb,
  releaseArb,
  releaseArb,
  releaseArb,
  fc
    .tuple(fc.constantFrom('tryAcquire' as const, 'release' as const), permitsArb)
    .map(([what, permits]) => new JavaCommand(what, permits)),
  fc
    .tuple(slotArb, fc.constantFrom('add' as const, 'drain' as const, 'available' as const), fc.constantFrom(-1, 1, 2))
    .map(([slot, what, delta]) => new SemCountCommand(slot, what, delta)),
  fc
    .tuple(
      fc.constantFrom('count' as const, 'queue' as const, 'deadlines' as const),
      fc.constantFrom('del' as const, 'pexpire' as const),
    )
    .map(([key, how]) => new DeleteKeyCommand(key, how)),
  ...faultCommands<RSemaphore, SemHarness>(acquireArb),
];
