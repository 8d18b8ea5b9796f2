/**
 * The commands of the model-based lock test. An operation ("step": tryLock, lock, acquire, withLock,
 * release, abort, close) is started and then finished, so that a fault command can start steps, inject
 * its fault while they are in flight, and finish them afterwards. Every command ends with the model's
 * settle-and-check. Their toString() is what a shrunk counterexample prints.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { LockClientClosedError, LockLostError, LockNotHeldError, LocksNotReleasedError } from '../../src/index.js';
import {
  describeError,
  describeOp,
  ignored,
  BOUND_MARGIN,
  HANDOFF_MS,
  LOCAL_MARGIN,
  Model,
  type JavaHold,
  STALLED_BOUND_MARGIN,
} from './model.js';
import {
  ACTOR_NAMES,
  ACTORS_PER_CLIENT,
  busyWait,
  CONNECTION_FAULT_NAMES,
  CONNECTION_FAULTS,
  LONGEST_LEASE_MS,
  RECONNECT_ALLOWANCE_MS,
  now,
  settlesWithin,
  trace,
  turn,
  type AcquireOp,
  type Actor,
  type ClientHandle,
  type ConnectionFault,
  type Job,
  type LockKind,
  type ServerInfo,
  World,
} from './world.js';
import type { Redis } from '../support/fixture.js';
import { RedissonFairLock, RedissonLock, redissonOwner } from '../support/redisson.js';
import { countSkipped, countStep, newStats, type Stats } from './runner.js';

export const stats: Stats = newStats();

/**
 * The lease Java's unlock sets when a hold count remains: Redisson's internalLockLeaseTime, its
 * lockWatchdogTimeout (30 s by default; this played Java service configures 2 s, so that a run is not held up).
 */
const JAVA_UNLOCK_LEASE_MS = 2000;

const count = (kind: string, what: 'step' | 'inner' | 'none' = 'none'): void => countStep(stats, kind, what);

/** The model and the system under test of one generated sequence (fast-check's model and real). */
export class Harness {
  readonly world: World;
  readonly model: Model;

  private constructor(world: World) {
    this.world = world;
    this.model = new Model(world);
    // A stall nobody injected (GC, a loaded machine) is a fault the model did not plan: judged as one.
    world.onStall = (ms) => {
      if (!stats.shrinking) stats.stalls++;
      this.model.markStall(this.faultSettleAt(), ms);
    };
  }

  static async create(
    server: ServerInfo,
    admin: Redis,
    names: readonly string[],
    kind: LockKind = 'lock',
  ): Promise<Harness> {
    return new Harness(await World.create(server, admin, names, kind));
  }

  /** The played Redisson client's thread: one owner id for the run (JavaCommand). */
  readonly javaOwner = redissonOwner();

  /** Java's tryLock of `lock` without a wait, for `leaseMs`, through Redisson's script: whether it got it. */
  async javaTryLock(lock: number, leaseMs: number): Promise<boolean> {
    const { admin, names, kind } = this.world;
    const name = names[lock] ?? '';
    if (kind === 'fair') return new RedissonFairLock(admin, name, this.javaOwner).tryLock(leaseMs);
    return (await new RedissonLock(admin, name, this.javaOwner).tryLock(leaseMs)) === null;
  }

  /** Java's unlock of `hold` through Redisson's script, judged by the model. */
  async javaUnlock(hold: JavaHold): Promise<void> {
    const { admin, names, kind } = this.world;
    const name = names[hold.lock] ?? '';
    const sentAt = now();
    hold.releasingAt = sentAt;
    const reply = await (
      kind === 'fair'
        ? new RedissonFairLock(admin, name, this.javaOwner)
        : new RedissonLock(admin, name, this.javaOwner)
    ).unlock(JAVA_UNLOCK_LEASE_MS);
    hold.releasingAt = undefined;
    this.model.javaUnlocked(hold, reply, sentAt, now(), JAVA_UNLOCK_LEASE_MS);
  }

  get maxPeriod(): number {
    return Math.max(...this.world.clients.map((c) => c.period));
  }

  /** After a fault: every live hold is judged by observation once the watchdogs had a period to notice. */
  faultSettleAt(): number {
    return now() + this.maxPeriod + 300;
  }

  /** Ends the run cleanly, judging as it goes: aborts waits, releases every frame, then checks hygiene. */
  async finish(): Promise<void> {
    const { model, world } = this;
    await model.adoptFinished();
    for (const actor of world.actors) {
      const job = actor.last;
      if (job && !job.settled && job.isAcquire) {
        job.aborted = true;
        job.controller.abort();
        if (!(await model.waitFor(job.done, 3000))) throw model.violation(`${actor.name}: an aborted wait hangs`);
      }
    }
    await model.settle();
    for (const actor of world.actors) {
      while (actor.frames.length > 0) {
        const job = model.post(actor, { kind: 'release' });
        if (!(await model.waitFor(job.done, 5000))) throw model.violation(`${actor.name}: a release hangs`);
        await model.adoptFinished();
      }
    }
    for (const java of model.liveJava()) {
      while (java.status === 'live') await this.javaUnlock(java);
    }
    await model.settle();
    // Liveness once the faults stopped: six unbounded waiters on L0 (in watchdog mode), each granted within
    // HANDOFF_MS of the previous release and releasing at once.
    const waiters = world.actors.map((actor) => model.post(actor, { kind: 'lock', lock: 0, lease: -1 }));
    for (;;) {
      const holders = waiters.filter((job) => job.settled && job.actor.frames.length > 0);
      for (const job of holders) {
        const release = model.post(job.actor, { kind: 'release' });
        if (!(await model.waitFor(release.done, 5000))) throw model.violation(`${job.actor.name}: a release hangs`);
        await model.adoptFinished();
      }
      // Released one acquisition each; a flow that re-entered (it held L0 already) releases again.
      if (holders.length > 0) continue;
      const pending = waiters.filter((job) => !job.settled);
      if (pending.length === 0) break;
      if (!(await model.waitFor(Promise.race(pending.map((job) => job.done)), HANDOFF_MS)))
        throw model.violation(`liveness: no waiter of L0 granted within ${HANDOFF_MS} ms of the previous release`);
      await model.adoptFinished();
    }
    if (waiters.some((job) => job.outcome?.ok !== true))
      throw model.violation('liveness: an unbounded lock() of L0 ended without the lock');
    await model.settle();
    for (let lock = 0; lock < world.names.length; lock++) {
      if (model.liveHolds(lock).length > 0) throw model.violation(`L${lock} still held after every frame was released`);
    }
    const quietBy = now() + 2000;
    while ((await world.subscribers()) > 0) {
      if (now() > quietBy) {
        // Which connections: a subscriber's age and last command tell whose it is.
        const subscribed = String(await world.admin.client('LIST'))
          .split('\n')
          .filter((line) => /\bs?sub=[1-9]/.test(line));
        throw model.violation(
          `a lock channel is still subscribed with nobody waiting:\n    ${subscribed.join('\n    ')}`,
        );
      }
      await sleep(50);
    }
    const keys = await world.leftoverKeys();
    if (keys.length > 0) throw model.violation(`keys left on the server: ${keys.join(', ')}`);
    await model.settle();
    for (const client of world.clients) {
      client.closed = true;
      await client.locks.close();
      const events = model.unexplainedLost(client);
      if (events.length > 0)
        throw model.violation(`${client.label} emitted lockLost at close(): ${events[0]?.message ?? ''}`);
    }
    if (world.harnessErrors.length > 0) throw new Error(`harness: ${world.harnessErrors.join('; ')}`);
  }
}

interface FinishContext {
  /** Event-loop stall that overlapped the step (timers could not fire). */
  readonly stallMs: number;
  /** Server stall (DEBUG SLEEP) that overlapped the step. */
  readonly sleepMs: number;
}

const CALM: FinishContext = { stallMs: 0, sleepMs: 0 };
/** How late past the expiry close() reported a hold it left may still be seen in Redis (expiry, load). */
const EXPIRY_MARGIN_MS = 1000;
/**
 * What Redis may take to answer close()'s releases on this loaded machine (a fair lock's wake after its
 * release, GLIDE's extra hop): a failure with no more of the timeout left than this is not judged.
 */
const LEFT_FOR_REPLIES_MS = 250;
/** How much longer than the stalls this process saw close() may say it was held up before its releases. */
const HELD_UP_MARGIN_MS = 100;
const MAX_FRAMES = 6;

/** An operation that can run alone or inside a fault command. */
export abstract class Step {
  /** Whether it can run now; `inner`: inside a fault, where nothing unadopted may be built upon. */
  abstract applicable(h: Harness, inner: boolean): boolean;
  abstract start(h: Harness): Promise<void>;
  abstract finish(h: Harness, context: FinishContext): Promise<void>;
  abstract toString(): string;
  /** Forgets what the previous run left in this (reused) instance. */
  abstract reset(): void;
}

abstract class ActorStep extends Step {
  readonly actor: number;
  job: Job | undefined;

  constructor(actor: number) {
    super();
    this.actor = actor;
  }

  actorOf(h: Harness): Actor {
    const actor = h.world.actors[this.actor];
    if (!actor) throw new Error(`no actor ${this.actor}`);
    return actor;
  }

  idle(h: Harness, inner: boolean): boolean {
    const actor = this.actorOf(h);
    return !actor.busy && (!inner || !actor.last || actor.last.adopted);
  }

  get actorName(): string {
    return ACTOR_NAMES[this.actor] ?? `actor${this.actor}`;
  }

  reset(): void {
    this.job = undefined;
  }
}

/** tryLock, lock, acquire or withLock by one flow. */
export class AcquireStep extends ActorStep {
  readonly op: AcquireOp;

  constructor(actor: number, op: AcquireOp) {
    super(actor);
    this.op = op;
  }

  applicable(h: Harness, inner: boolean): boolean {
    return this.idle(h, inner) && this.actorOf(h).frames.length < MAX_FRAMES;
  }

  start(h: Harness): Promise<void> {
    this.job = h.model.post(this.actorOf(h), this.op);
    return Promise.resolve();
  }

  async finish(h: Harness, context: FinishContext): Promise<void> {
    const job = this.job;
    if (!job) return;
    const op = this.op;
    const wait = op.kind === 'tryLock' ? op.wait : op.kind === 'lock' ? undefined : op.wait;
    if (wait === undefined) {
      // Unbounded: give it a moment; if it waits on, settle() judges it (a free lock must reach a waiter).
      await h.model.waitFor(job.done, 150 + context.stallMs + context.sleepMs);
    } else {
      // waitTime bounds waiting for a holder; an attempt sent before the deadline is awaited to its reply, which
      // a sleeping server delays (docs/guide/waiting.md): the call returns by the deadline plus that reply.
      const margin = context.sleepMs > 0 && wait > 0 ? STALLED_BOUND_MARGIN : BOUND_MARGIN;
      // Timers fire late by as much as this process ran late without an injected fault (the lag monitor).
      const lag = h.world.lagSince(job.startedAt);
      const bound = wait + margin + context.stallMs + lag + context.sleepMs;
      await h.model.waitFor(job.done, job.startedAt + bound - now());
      const took = (job.outcome?.at ?? now()) - job.startedAt;
      if (took > bound && !ignored('wait-bound')) {
        throw h.model.violation(
          `${this.toString()} returned after ${took.toFixed(0)} ms${job.settled ? '' : ' (still running)'}; ` +
            `waitTime ${wait} ms and one reply bound the call (allowed ${bound.toFixed(0)} ms${context.sleepMs > 0 ? `, the server slept ${context.sleepMs} ms` : ''}${lag > 0 ? `, this process ran ${lag.toFixed(0)} ms late` : ''})`,
        );
      }
    }
    await h.model.adoptFinished();
  }

  toString(): string {
    return `${this.actorName}.${describeOp(this.op)}`;
  }
}

/** Releases the flow's newest frame: unlock(), lease.release() or the end of a withLock body. */
export class ReleaseStep extends ActorStep {
  applicable(h: Harness, inner: boolean): boolean {
    return this.idle(h, inner) && this.actorOf(h).frames.length > 0;
  }

  start(h: Harness): Promise<void> {
    this.job = h.model.post(this.actorOf(h), { kind: 'release' });
    return Promise.resolve();
  }

  async finish(h: Harness, context: FinishContext): Promise<void> {
    const job = this.job;
    if (!job) return;
    if (!(await h.model.waitFor(job.done, 3000 + context.stallMs + context.sleepMs))) {
      throw h.model.violation(`${this.toString()} hangs`);
    }
    await h.model.adoptFinished();
  }

  toString(): string {
    return `${this.actorName}.release()`;
  }
}

/** Aborts the flow's pending acquisition through its AbortSignal. */
export class AbortStep extends ActorStep {
  applicable(h: Harness): boolean {
    const last = this.actorOf(h).last;
    return last !== undefined && !last.settled && last.isAcquire && !last.aborted;
  }

  start(h: Harness): Promise<void> {
    const job = this.actorOf(h).last;
    this.job = job;
    if (job) {
      job.aborted = true;
      job.controller.abort();
    }
    return Promise.resolve();
  }

  async finish(h: Harness, context: FinishContext): Promise<void> {
    const job = this.job;
    if (!job) return;
    // An abort ends the wait at once, without waiting for Redis (a late grant is given back).
    if (!(await h.model.waitFor(job.done, 1500 + context.stallMs))) {
      throw h.model.violation(`${this.toString()}: the aborted ${describeOp(job.op)} still runs after 1.5 s`);
    }
    await h.model.adoptFinished();
  }

  toString(): string {
    return `${this.actorName}.abort()`;
  }
}

/** close() of a lock client (mid-flight when inside a fault or next to other steps), then a fresh client. */
export class CloseStep extends Step {
  readonly slot: number;
  #closing: Promise<unknown> | undefined;
  #client: ClientHandle | undefined;
  #startedAt = 0;
  /** How long close() took to settle (ms). */
  #tookMs = 0;
  #liveAtStart: bigint[] = [];

  constructor(slot: number) {
    super();
    this.slot = slot;
  }

  applicable(): boolean {
    return !ignored('close');
  }

  reset(): void {
    this.#closing = undefined;
    this.#client = undefined;
    this.#liveAtStart = [];
  }

  start(h: Harness): Promise<void> {
    const client = h.world.clients[this.slot];
    if (!client) throw new Error(`no client ${this.slot}`);
    this.#client = client;
    this.#startedAt = now();
    this.#liveAtStart = h.model.history
      .filter((hold) => hold.client === client && hold.status === 'live' && hold.observeAt === undefined)
      .flatMap((hold) => (hold.token === undefined ? [] : [hold.token]));
    // From now on its holds may leave Redis at any moment (close() releases them).
    for (const hold of h.model.history) {
      if (hold.client === client && hold.status === 'live') hold.observeAt = Infinity;
    }
    client.closed = true;
    // As a user does: quit the connection as soon as close() settled (README: nothing more is sent then).
    const quit = (failure: unknown): Promise<unknown> => client.connection.quit().then(() => failure);
    this.#closing = client.locks
      .close()
      .then(
        () => undefined,
        (error: unknown) => error,
      )
      .then((failure) => {
        this.#tookMs = now() - this.#startedAt;
        return quit(failure);
      });
    return Promise.resolve();
  }

  async finish(h: Harness, context: FinishContext): Promise<void> {
    const client = this.#client;
    const closing = this.#closing;
    if (!client || !closing) return;
    const { model, world } = h;
    if (!(await model.waitFor(closing, 10_000 + context.sleepMs + context.stallMs))) {
      throw model.violation(`${this.toString()}: close() did not resolve within 10 s`);
    }
    const failure = await closing;
    const stalledMs = context.stallMs + world.lagSince(this.#startedAt);
    // The client reaches Redis through the test proxy (slot 1), which runs in this process: a stall that took
    // all but a little of close()'s timeout held its calls back on their way, as a network that stalls would.
    const proxyStalled =
      world.endpointFor(this.slot) !== world.server && stalledMs >= client.watchdogTimeout - LEFT_FOR_REPLIES_MS;
    if (
      failure instanceof LocksNotReleasedError &&
      (context.sleepMs > 0 || this.#heldUp(failure, stalledMs, proxyStalled))
    ) {
      await this.#untilExpired(h, client, failure, proxyStalled ? Date.now() + LONGEST_LEASE_MS : 0);
    } else if (failure !== undefined) {
      throw model.violation(`${this.toString()}: close() rejected: ${describeError(failure)}`);
    } else if (proxyStalled) {
      // An attempt in flight whose reply the stall held back past the timeout may still be granted after close()
      // resolved: its grant leaves Redis within its lease.
      await this.#untilExpired(h, client, undefined, Date.now() + LONGEST_LEASE_MS);
    }
    // QUIT went out as close() resolved and is answered after everything the library sent before it, so
    // Redis must show none of the client's holds now. (How long close() took tells a give-back that waited out
    // the timeout, as one waiting for the pub/sub mode's detection did, from one never sent.)
    for (let lock = 0; lock < world.names.length; lock++) {
      const snapshot = await world.snapshot(lock);
      const left = [...snapshot.owners.keys()].filter((field) => field.startsWith(`${client.clientId}:`));
      if (left.length > 0 && !ignored('close-leftover')) {
        throw model.violation(
          `after ${client.label}.close() resolved (in ${Math.round(this.#tookMs)} ms of its ${client.watchdogTimeout} ms timeout), L${lock} still has ${left.map((f) => model.describeField(f)).join(', ')} (${model.describeSnapshot(snapshot)})`,
        );
      }
    }
    // Every wait it had ended with LockClientClosedError (or won before), promptly.
    for (const job of model.inflight.filter((j) => j.client === client)) {
      if (!(await model.waitFor(job.done, 2000))) {
        throw model.violation(`${job.actor.name} ${describeOp(job.op)} still runs 2 s after ${client.label}.close()`);
      }
    }
    // A release in flight when close() began is answered by Redis, not dropped by close(): its reply (freed,
    // or found gone past the lease's end) decides the hold's fate, so it is awaited before holds are judged.
    for (const actor of world.actors.filter((a) => a.slot === this.slot)) {
      const job = actor.last;
      if (job?.op.kind !== 'release' || job.settled) continue;
      if (!(await settlesWithin(job.done, 3000 + context.sleepMs + context.stallMs))) {
        throw model.violation(`${actor.name}: a release in flight at ${client.label}.close() hangs`);
      }
    }
    await model.adoptFinished();
    const at = now();
    for (const hold of model.history) {
      if (hold.client !== client || hold.status === 'released') continue;
      // A hold under a fault when close() began is not in #liveAtStart (its fate was unknown then).
      const inFault = hold.token === undefined || !this.#liveAtStart.includes(hold.token);
      if (hold.status !== 'lost' && !model.toldByLeaseEnd(hold) && !(inFault && model.toldAfterFault(hold))) {
        hold.status = 'lost';
        hold.closed = true;
        hold.toldAt = at;
        hold.why = 'its client was closed';
      }
      hold.purged = true;
      for (const frame of hold.leases) {
        if (!(frame.lease?.signal.aborted ?? true)) {
          throw model.violation(
            `after ${client.label}.close(), a lease of ${hold.describe(world.names)} is not aborted`,
          );
        }
        if (!(frame.abortReason instanceof LockLostError)) {
          throw model.violation(
            `close() aborted a lease with ${describeError(frame.abortReason)}, not a LockLostError`,
          );
        }
      }
    }
    for (const event of client.lost) {
      if (!event.matched && event.at >= this.#startedAt && this.#liveAtStart.includes(event.token)) {
        throw model.violation(`${client.label} emitted lockLost for a hold that close() dropped: ${event.message}`);
      }
    }
    for (let lock = 0; lock < world.names.length; lock++) {
      if (model.liveHolds(lock).length === 0) model.freeSince[lock] = Math.max(model.freeSince[lock] ?? 0, at);
    }
    // Its flows drop their frames: imperative unlock() throws LockClientClosedError, leases LockNotHeldError.
    for (const actor of world.actors.filter((a) => a.slot === this.slot)) {
      while (actor.frames.length > 0) {
        const top = actor.frames.at(-1);
        const job = actor.post({ kind: 'release' });
        if (!(await settlesWithin(job.done, 3000))) throw model.violation(`${actor.name}: release after close() hangs`);
        const error = job.outcome?.error;
        const expected =
          top?.kind === 'imperative'
            ? error instanceof LockClientClosedError
            : error instanceof LockNotHeldError || (top?.kind === 'scoped' && error instanceof LockLostError);
        if (!expected) {
          throw model.violation(
            `${actor.name}: releasing a ${top?.kind ?? '?'} frame after close() gave ${job.outcome?.ok ? 'success' : describeError(error)}, ` +
              `expected ${top?.kind === 'imperative' ? 'LockClientClosedError' : 'LockNotHeldError'}`,
          );
        }
      }
    }
    await world.replaceClient(this.slot);
  }

  /**
   * Whether `failure` is what a stall of this process (`stalledMs`: the injected one and what the lag monitor
   * saw since close() began) explains. Either the releases went out late into the timeout, no later than the
   * stall accounts for, with too little of it left for Redis to answer; or the client reaches Redis through
   * the test proxy (slot 1), which runs in this process: a stall holds its releases back on their way, as a
   * network that stalls would, and the library rightly says Redis did not answer, once the stall took all but
   * a little of the timeout. Any other reason given after a stall is a violation.
   */
  #heldUp(failure: LocksNotReleasedError, stalledMs: number, proxyStalled: boolean): boolean {
    if (stalledMs === 0) return false;
    const { message } = failure;
    const late = /went out (\d+) ms into it/.exec(message);
    const timeout = / (\d+) ms timeout/.exec(message);
    if (late && timeout) {
      const sentAfterMs = Number(late[1]);
      return sentAfterMs <= stalledMs + HELD_UP_MARGIN_MS && Number(timeout[1]) - sentAfterMs <= LEFT_FOR_REPLIES_MS;
    }
    return proxyStalled && /Redis did not answer within \d+ ms/.test(message);
  }

  /**
   * Redis slept through close()'s timeout, or a stall of this process ate it: the holds it names are this
   * client's, and each leaves Redis by the time the error gives (its lease runs out, or the release still
   * queued runs when Redis wakes), and whatever else the client has there by `atLeastUntil` (a grant the
   * stall held back). Without `failure`: close() resolved, and only the latter applies.
   */
  async #untilExpired(
    h: Harness,
    client: ClientHandle,
    failure: LocksNotReleasedError | undefined,
    atLeastUntil = 0,
  ): Promise<void> {
    const { model, world } = h;
    const named = failure?.holds ?? [];
    const stranger = named.find(
      (hold) => !hold.owner.startsWith(`${client.clientId}:`) || !world.names.includes(hold.name),
    );
    if (failure && stranger) {
      throw model.violation(
        `${this.toString()}: close() named a hold that is not ${client.label}'s: ${failure.message}`,
      );
    }
    const by = Math.max(atLeastUntil, ...named.map((hold) => hold.expiresBy.getTime())) + EXPIRY_MARGIN_MS;
    const why = failure
      ? `the expiry close() gave (${failure.message})`
      : 'the lease of an attempt the stall held back';
    for (;;) {
      const left: string[] = [];
      for (let lock = 0; lock < world.names.length; lock++) {
        const snapshot = await world.snapshot(lock);
        for (const field of snapshot.owners.keys()) {
          if (field.startsWith(`${client.clientId}:`)) left.push(`L${lock}: ${model.describeField(field)}`);
        }
      }
      if (left.length === 0) return;
      if (Date.now() > by) {
        throw model.violation(`${this.toString()}: ${left.join(', ')} still in Redis after ${why}`);
      }
      await sleep(20);
    }
  }

  toString(): string {
    return `${'AB'[this.slot] ?? '?'}.close()`;
  }
}

type HarnessCommand = fc.AsyncCommand<Harness, Harness>;

/** A step on its own. */
class StepCommand implements HarnessCommand {
  readonly step: Step;

  constructor(step: Step) {
    this.step = step;
  }

  check(h: Readonly<Harness>): boolean {
    return this.step.applicable(h, false);
  }

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    this.step.reset();
    count(this.step.constructor.name, 'step');
    await h.model.adoptFinished();
    if (!this.step.applicable(h, false)) return;
    await this.step.start(h);
    await this.step.finish(h, CALM);
    await h.model.settle();
  }

  toString(): string {
    return this.step.toString();
  }
}

/** Starts `steps` one after another (each sent before the next), then the fault, then finishes them. */
abstract class CompositeCommand implements HarnessCommand {
  readonly steps: readonly Step[];

  constructor(steps: readonly Step[]) {
    this.steps = steps;
  }

  check(): boolean {
    return true;
  }

  abstract run(h: Harness): Promise<void>;
  abstract toString(): string;

  protected async startSteps(h: Harness): Promise<Step[]> {
    const started: Step[] = [];
    for (const step of this.steps) {
      step.reset();
      if (!step.applicable(h, true)) {
        countSkipped(stats);
        continue;
      }
      count(step.constructor.name, 'inner');
      await step.start(h);
      started.push(step);
      await turn();
    }
    return started;
  }

  protected async finishSteps(h: Harness, steps: readonly Step[], context: FinishContext): Promise<void> {
    for (const step of steps) await step.finish(h, context);
  }

  protected inner(): string {
    return this.steps.map(String).join(', ');
  }
}

/** Steps started back to back, racing each other (judged loosely, like faults). */
class TogetherCommand extends CompositeCommand {
  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    count('Together', 'step');
    await h.model.adoptFinished();
    h.model.faultActive = true;
    try {
      const started = await this.startSteps(h);
      await this.finishSteps(h, started, CALM);
    } finally {
      h.model.faultActive = false;
    }
    await h.model.settle();
  }

  toString(): string {
    return `together(${this.inner()})`;
  }
}

/** Several commands in a row (a scenario shape that independent random choices rarely produce). */
class SequenceCommand implements HarnessCommand {
  readonly label: string;
  readonly commands: readonly HarnessCommand[];

  constructor(label: string, commands: readonly HarnessCommand[]) {
    this.label = label;
    this.commands = commands;
  }

  check(): boolean {
    return true;
  }

  async run(h: Harness): Promise<void> {
    count(this.label);
    for (const command of this.commands) {
      if (command.check(h)) await command.run(h, h);
    }
  }

  toString(): string {
    return `${this.label}[${this.commands.map(String).join('; ')}]`;
  }
}

/**
 * A fault injected while the steps are in flight: the model judges them loosely meanwhile, then waits
 * until the system is determinate again.
 */
abstract class FaultCommand extends CompositeCommand {
  readonly ms: number;

  constructor(ms: number, steps: readonly Step[]) {
    super(steps);
    this.ms = ms;
  }

  /** The step kind counted in the statistics, and the name in the printed sequence. */
  protected abstract readonly kind: string;
  protected abstract readonly title: string;
  /** What the steps' judges are told about the fault. */
  protected abstract readonly context: FinishContext;
  /** Starts the steps with the fault around them; resolves, once the fault is over, to the steps started. */
  protected abstract inject(h: Harness): Promise<readonly Step[]>;

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    count(this.kind, 'step');
    await h.model.adoptFinished();
    h.model.faultActive = true;
    try {
      h.model.markFault(Infinity);
      const started = await this.inject(h);
      await this.finishSteps(h, started, this.context);
    } finally {
      h.model.faultActive = false;
    }
    h.model.markFault(h.faultSettleAt());
    await h.model.settle();
  }

  toString(): string {
    return `${this.title}(${this.ms}ms${this.steps.length > 0 ? `, during: ${this.inner()}` : ''})`;
  }
}

/** Blocks the event loop for `ms` while the steps are in flight. */
class StallCommand extends FaultCommand {
  protected readonly kind = 'Stall';
  protected readonly title = 'stallEventLoop';
  protected get context(): FinishContext {
    return { stallMs: this.ms, sleepMs: 0 };
  }

  protected async inject(h: Harness): Promise<readonly Step[]> {
    const started = await this.startSteps(h);
    busyWait(this.ms);
    return started;
  }
}

/** `DEBUG SLEEP` on the server while the steps are in flight. */
class ServerSleepCommand extends FaultCommand {
  protected readonly kind = 'ServerSleep';
  protected readonly title = 'serverSleep';
  protected get context(): FinishContext {
    return { stallMs: 0, sleepMs: this.ms };
  }

  protected async inject(h: Harness): Promise<readonly Step[]> {
    const sleeping = await h.world.serverSleep(this.ms);
    const started = await this.startSteps(h);
    await sleeping.done;
    h.world.faultInFlight = undefined;
    return started;
  }
}

/** A connection fault (world.ts, ConnectionFault) while the steps go out. */
class ConnectionFaultCommand extends FaultCommand {
  readonly how: ConnectionFault;

  constructor(how: ConnectionFault, steps: readonly Step[]) {
    super(how === 'flush' ? 0 : RECONNECT_ALLOWANCE_MS, steps);
    this.how = how;
  }

  protected get kind(): string {
    return CONNECTION_FAULT_NAMES[this.how];
  }
  protected readonly title = 'connectionFault';
  /** A reconnect delays replies like a short server stall. */
  protected get context(): FinishContext {
    return { stallMs: 0, sleepMs: this.ms };
  }

  protected async inject(h: Harness): Promise<readonly Step[]> {
    // A kill cuts the connection of the first step's client (A's when no step names an actor).
    const first = this.steps.find((step): step is ActorStep => step instanceof ActorStep);
    const victim = h.world.clients[first ? Math.floor(first.actor / ACTORS_PER_CLIENT) : 0];
    if (!victim) return [];
    return h.world.connectionFault(this.how, victim.connection, () => this.startSteps(h));
  }

  override toString(): string {
    return `${CONNECTION_FAULT_NAMES[this.how]}(${this.steps.length > 0 ? `during: ${this.inner()}` : ''})`;
  }
}

/**
 * Blocks the event loop for `ms` right after client `slot`'s watchdog sent a renewal (the renewal runs in
 * Redis during the stall, its reply is read after the watchdog's timer), then runs `then` 15 ms later.
 */
class StallAfterRenewalCommand implements HarnessCommand {
  readonly slot: number;
  readonly ms: number;
  readonly then: Step | undefined;

  constructor(slot: number, ms: number, then: Step | undefined) {
    this.slot = slot;
    this.ms = ms;
    this.then = then;
  }

  check(h: Readonly<Harness>): boolean {
    const client = h.world.clients[this.slot];
    return h.model.history.some((hold) => hold.client === client && hold.status === 'live' && hold.renewing);
  }

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    count('StallAfterRenewal', 'step');
    await h.model.adoptFinished();
    const client = h.world.clients[this.slot];
    if (!client) return;
    const fired = new Promise<void>((resolve) => {
      client.renewHook = () => {
        h.model.markFault(Infinity);
        busyWait(this.ms);
        resolve();
      };
    });
    if (!(await h.model.waitFor(fired, client.period * 2 + 1000))) {
      client.renewHook = undefined;
      countSkipped(stats);
      await h.model.settle();
      return;
    }
    await sleep(15);
    if (this.then) {
      this.then.reset();
      h.model.faultActive = true;
      try {
        if (this.then.applicable(h, true)) {
          count(this.then.constructor.name, 'inner');
          await this.then.start(h);
          await this.then.finish(h, CALM);
        } else {
          countSkipped(stats);
        }
      } finally {
        h.model.faultActive = false;
      }
    }
    h.model.markFault(h.faultSettleAt());
    await h.model.settle();
  }

  toString(): string {
    return `stallAfterRenewal(${'AB'[this.slot] ?? '?'}, ${this.ms}ms${this.then ? `, then: ${this.then.toString()}` : ''})`;
  }
}

/** DEL of the lock key, or PEXPIRE 1 ms, from an admin connection. */
class DeleteKeyCommand implements HarnessCommand {
  readonly lock: number;
  readonly how: 'del' | 'pexpire';

  constructor(lock: number, how: 'del' | 'pexpire') {
    this.lock = lock;
    this.how = how;
  }

  check(): boolean {
    return true;
  }

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    count(this.how === 'del' ? 'DEL' : 'PEXPIRE', 'step');
    await h.model.adoptFinished();
    const key = h.world.keys[this.lock]?.lockKey ?? '';
    if (this.how === 'del') await h.world.admin.del(key);
    else if (await this.#missed(h, key)) {
      trace('   missed: a holder set a lease anew within its millisecond, and Redis kept every hold');
      await h.model.settle();
      return;
    }
    const at = now();
    for (const hold of h.model.liveHolds(this.lock)) {
      hold.status = 'deleted';
      hold.why = this.how === 'del' ? 'DEL' : 'PEXPIRE 1';
      // A renewed hold learns it at its next renewal; a fixed lease only at its deadline (nothing checks it).
      const deadline = hold.renewing ? at + hold.client.period : Math.max(at, hold.expHi);
      hold.toldBy = deadline + LOCAL_MARGIN;
      h.model.freeSince[this.lock] = at;
    }
    for (const java of h.model.liveJava(this.lock))
      h.model.javaEnded(java, at, 'gone', this.how === 'del' ? 'DEL' : 'PEXPIRE 1');
    await h.model.settle();
  }

  /**
   * PEXPIRE `key` 1, then reads it until its millisecond has passed. A renewal or a re-entry that Redis ran
   * within that millisecond sets a lease anew, and the hash stays with every hold in it (found beside a CPU
   * hog on GLIDE's Cluster: a renewal queued right behind the PEXPIRE kept the hold, which the model had
   * counted as deleted). Whether every live hold's field is still there with at least its count tells that
   * apart from a key that expired and was taken anew (by a waiter: a hash of its own field alone).
   */
  async #missed(h: Harness, key: string): Promise<boolean> {
    await h.world.admin.pexpire(key, 1);
    let snapshot = await h.world.snapshot(this.lock);
    while (snapshot.exists && snapshot.pttl >= 0 && snapshot.pttl <= 1) {
      await sleep(2);
      snapshot = await h.world.snapshot(this.lock);
    }
    const holds = [...h.model.liveHolds(this.lock), ...h.model.liveJava(this.lock)];
    return (
      snapshot.exists && holds.length > 0 && holds.every((hold) => (snapshot.owners.get(hold.field) ?? 0) >= hold.count)
    );
  }

  toString(): string {
    return this.how === 'del' ? `DEL L${this.lock}` : `PEXPIRE L${this.lock} 1`;
  }
}

/** CLIENT KILL TYPE pubsub: every subscriber connection drops (ioredis reconnects). */
class KillSubscribersCommand implements HarnessCommand {
  check(): boolean {
    return true;
  }

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    count('KillSubscribers', 'step');
    await h.model.adoptFinished();
    await h.world.admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await h.model.settle();
  }

  toString(): string {
    return 'CLIENT KILL TYPE pubsub';
  }
}

/**
 * The played Redisson client (test/support/redisson.ts) on L0 or L1: tryLock without a wait and with a fixed
 * lease through Redisson's script (RedissonLock's, or RedissonFairLock's, which never queues), or unlock
 * through Redisson's, whose message must wake our waiters (the settle's handoff bound). The model judges
 * both (javaTried, javaUnlocked): no two holders, a fair lock's waiters in line not overtaken, Java's hold
 * never taken away or renewed by our scripts.
 */
class JavaCommand implements HarnessCommand {
  readonly lock: number;
  readonly what: 'tryLock' | 'unlock';
  readonly leaseMs: number;

  constructor(lock: number, what: 'tryLock' | 'unlock', leaseMs: number) {
    this.lock = lock;
    this.what = what;
    this.leaseMs = leaseMs;
  }

  check(): boolean {
    return true;
  }

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    await h.model.adoptFinished();
    if (this.what === 'unlock') {
      // Of the lock named, else of the other one.
      const open = h.model.java.filter((j) => j.status !== 'released');
      const hold = open.findLast((j) => j.lock === this.lock) ?? open.at(-1);
      if (!hold) {
        countSkipped(stats);
        return;
      }
      count(`Java unlock${hold.status === 'live' ? '' : ' (gone)'}`, 'step');
      await h.javaUnlock(hold);
      // Java was told (IllegalMonitorStateException, or its unlock): it unlocks a gone hold once.
      if (hold.status === 'gone') hold.status = 'released';
    } else {
      const sentAt = now();
      const granted = await h.javaTryLock(this.lock, this.leaseMs);
      count(`Java tryLock ${granted ? 'granted' : 'refused'}`, 'step');
      h.model.javaTried(this.lock, h.javaOwner, this.leaseMs, granted, sentAt, now());
    }
    await h.model.settle();
  }

  toString(): string {
    return this.what === 'unlock'
      ? `Java unlock(L${this.lock}, else L${1 - this.lock})`
      : `Java tryLock(L${this.lock}, ${this.leaseMs}ms)`;
  }
}

/** Lets time pass (leases run out, the watchdog renews). */
class PauseCommand implements HarnessCommand {
  readonly ms: number;

  constructor(ms: number) {
    this.ms = ms;
  }

  check(): boolean {
    return true;
  }

  async run(h: Harness): Promise<void> {
    trace(`== ${this.toString()}`);
    count('Pause', 'step');
    await h.model.waitFor(sleep(this.ms), this.ms + 1000);
    await h.model.settle();
  }

  toString(): string {
    return `pause(${this.ms}ms)`;
  }
}

// ---- arbitraries ----

/** Java's longest lease: beyond HANDOFF_MS (see JavaCommand's arbitrary). */
const JAVA_LONG_LEASE_MS = 8000;
const actorArb = fc.integer({ min: 0, max: ACTOR_NAMES.length - 1 });
const lockArb = fc.integer({ min: 0, max: 1 });
const slotArb = fc.integer({ min: 0, max: 1 });
/** Watchdog mode, or a fixed lease of 400-2000 ms. */
const leaseArb = fc.oneof(fc.constant(-1), fc.integer({ min: 400, max: LONGEST_LEASE_MS }));
const shortWaitArb = fc.integer({ min: 20, max: 300 });

const tryLockArb = fc
  .tuple(actorArb, lockArb, fc.oneof(fc.constant(0), shortWaitArb), leaseArb)
  .map(([actor, lock, wait, lease]) => new AcquireStep(actor, { kind: 'tryLock', lock, wait, lease }));
const lockArbitrary = fc
  .tuple(actorArb, lockArb, leaseArb)
  .map(([actor, lock, lease]) => new AcquireStep(actor, { kind: 'lock', lock, lease }));
const scopedArb = (kind: 'acquire' | 'withLock'): fc.Arbitrary<Step> =>
  fc
    .tuple(actorArb, lockArb, fc.option(shortWaitArb, { nil: undefined }), leaseArb)
    .map(([actor, lock, wait, lease]) => new AcquireStep(actor, { kind, lock, wait, lease }));
const releaseArb = actorArb.map((actor) => new ReleaseStep(actor));
const abortArb = actorArb.map((actor) => new AbortStep(actor));
const closeArb = slotArb.map((slot) => new CloseStep(slot));

const acquireKindArb = fc.constantFrom('tryLock' as const, 'lock' as const, 'acquire' as const, 'withLock' as const);
const acquireOpArb = (lock: number): fc.Arbitrary<AcquireOp> =>
  fc
    .tuple(acquireKindArb, leaseArb, fc.option(shortWaitArb, { nil: undefined }))
    .map(([kind, lease, wait]) =>
      kind === 'tryLock'
        ? { kind, lock, wait: wait ?? 0, lease }
        : kind === 'lock'
          ? { kind, lock, lease }
          : { kind, lock, wait, lease },
    );

/** One flow acquiring one lock two or three times (re-entry with mixed lease modes), then maybe releasing. */
const reentryArb = fc
  .tuple(actorArb, lockArb)
  .chain(([actor, lock]) =>
    fc.tuple(
      fc.constant(actor),
      fc.array(acquireOpArb(lock), { minLength: 2, maxLength: 3 }),
      fc.integer({ min: 0, max: 2 }),
      fc.option(fc.integer({ min: 100, max: 500 }), { nil: undefined, freq: 3 }),
    ),
  )
  .map(([actor, ops, releases, sleepMs]) => {
    // Sometimes the last acquisition runs while Redis sleeps (a re-entry given up on, or granted late).
    const steps: HarnessCommand[] = ops.map((op, i) =>
      sleepMs !== undefined && i === ops.length - 1
        ? new ServerSleepCommand(sleepMs, [new AcquireStep(actor, op)])
        : new StepCommand(new AcquireStep(actor, op)),
    );
    const release = Array.from({ length: releases }, () => new StepCommand(new ReleaseStep(actor)));
    return new SequenceCommand('reentry', [...steps, ...release]);
  });

/** A holder, a waiter on one client, and a newcomer on that client with a short wait while Redis sleeps. */
const queuedNewcomerArb = fc
  .tuple(lockArb, slotArb, fc.integer({ min: 0, max: 2 }), shortWaitArb, fc.integer({ min: 100, max: 500 }))
  .map(([lock, slot, holder, wait, ms]) => {
    const local = [0, 1, 2].map((i) => slot * 3 + i);
    const others = [0, 1, 2].map((i) => (1 - slot) * 3 + i);
    const holderActor = others[holder] ?? 0;
    return new SequenceCommand('queuedNewcomer', [
      new StepCommand(new AcquireStep(holderActor, { kind: 'lock', lock, lease: -1 })),
      new StepCommand(new AcquireStep(local[0] ?? 0, { kind: 'lock', lock, lease: -1 })),
      new ServerSleepCommand(ms, [new AcquireStep(local[1] ?? 0, { kind: 'tryLock', lock, wait, lease: -1 })]),
    ]);
  });

/**
 * Java takes a lock for JAVA_LONG_LEASE_MS, two of our flows (one per client) queue behind it, Java unlocks:
 * its message must wake them (the settle's handoff bound is shorter than Java's lease).
 */
const javaHandoffArb = fc
  .tuple(lockArb, fc.integer({ min: 0, max: 2 }), fc.integer({ min: 3, max: 5 }), acquireKindArb)
  .map(
    ([lock, a, b, kind]) =>
      new SequenceCommand('Java handoff', [
        new JavaCommand(lock, 'tryLock', JAVA_LONG_LEASE_MS),
        new StepCommand(new AcquireStep(a, { kind: 'lock', lock, lease: -1 })),
        new StepCommand(
          new AcquireStep(
            b,
            kind === 'lock' || kind === 'tryLock'
              ? { kind: 'lock', lock, lease: -1 }
              : { kind, lock, wait: undefined, lease: 1500 },
          ),
        ),
        new JavaCommand(lock, 'unlock', JAVA_LONG_LEASE_MS),
      ]),
  );

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { arbitrary: tryLockArb, weight: 4 },
  { arbitrary: lockArbitrary, weight: 2 },
  { arbitrary: scopedArb('acquire'), weight: 3 },
  { arbitrary: scopedArb('withLock'), weight: 3 },
  { arbitrary: releaseArb, weight: 7 },
  { arbitrary: abortArb, weight: 3 },
);
const innerArb = fc.array(fc.oneof({ arbitrary: stepArb, weight: 6 }, { arbitrary: closeArb, weight: 1 }), {
  minLength: 1,
  maxLength: 3,
});

export const commandArbs: fc.Arbitrary<HarnessCommand>[] = [
  fc.oneof(
    { arbitrary: stepArb.map((step) => new StepCommand(step)), weight: 30 },
    { arbitrary: innerArb.map((steps) => new TogetherCommand(steps)), weight: 2 },
    {
      arbitrary: fc
        .tuple(fc.integer({ min: 50, max: 1500 }), fc.oneof(fc.constant([]), innerArb))
        .map(([ms, steps]) => new StallCommand(ms, steps)),
      weight: 2,
    },
    {
      arbitrary: fc
        .tuple(fc.integer({ min: 100, max: 500 }), innerArb)
        .map(([ms, steps]) => new ServerSleepCommand(ms, steps)),
      weight: 3,
    },
    {
      arbitrary: fc
        .tuple(slotArb, fc.integer({ min: 200, max: 1000 }), fc.option(stepArb, { nil: undefined }))
        .map(([slot, ms, then]) => new StallAfterRenewalCommand(slot, ms, then)),
      weight: 2,
    },
    {
      arbitrary: fc
        .tuple(lockArb, fc.constantFrom('del' as const, 'pexpire' as const))
        .map(([lock, how]) => new DeleteKeyCommand(lock, how)),
      weight: 2,
    },
    {
      arbitrary: fc
        .tuple(fc.constantFrom(...CONNECTION_FAULTS), fc.oneof(fc.constant([]), innerArb))
        .map(([how, steps]) => new ConnectionFaultCommand(how, steps)),
      weight: 3,
    },
    { arbitrary: fc.constant(null).map(() => new KillSubscribersCommand()), weight: 1 },
    {
      arbitrary: fc
        .tuple(
          lockArb,
          fc.constantFrom('tryLock' as const, 'unlock' as const),
          // 8 s: longer than HANDOFF_MS, so that our waiters must hear Java's unlock, not sleep its lease out.
          fc.constantFrom(500, 1500, JAVA_LONG_LEASE_MS),
        )
        .map(([lock, what, leaseMs]) => new JavaCommand(lock, what, leaseMs)),
      weight: 4,
    },
    { arbitrary: closeArb.map((step) => new StepCommand(step)), weight: 1 },
    {
      arbitrary: fc.tuple(stepArb, slotArb).map(([step, slot]) => new TogetherCommand([step, new CloseStep(slot)])),
      weight: 1,
    },
    { arbitrary: fc.integer({ min: 50, max: 1500 }).map((ms) => new PauseCommand(ms)), weight: 3 },
    { arbitrary: reentryArb, weight: 3 },
    { arbitrary: queuedNewcomerArb, weight: 1 },
    { arbitrary: javaHandoffArb, weight: 1 },
  ),
];

/** Smaller command sets for narrowing a problem down (MODEL_SET=basic|ops): no faults. */
export const basicCommandArbs: fc.Arbitrary<HarnessCommand>[] = [
  fc.oneof(
    {
      arbitrary: fc
        .tuple(fc.constantFrom(0, 3), lockArb, fc.oneof(fc.constant(0), shortWaitArb), leaseArb)
        .map(
          ([actor, lock, wait, lease]) =>
            new StepCommand(new AcquireStep(actor, { kind: 'tryLock', lock, wait, lease })),
        ),
      weight: 3,
    },
    { arbitrary: fc.constantFrom(0, 3).map((actor) => new StepCommand(new ReleaseStep(actor))), weight: 2 },
    { arbitrary: fc.integer({ min: 50, max: 1500 }).map((ms) => new PauseCommand(ms)), weight: 1 },
  ),
];

export const opsCommandArbs: fc.Arbitrary<HarnessCommand>[] = [
  fc.oneof(
    { arbitrary: stepArb.map((step) => new StepCommand(step)), weight: 10 },
    { arbitrary: fc.integer({ min: 50, max: 1500 }).map((ms) => new PauseCommand(ms)), weight: 1 },
  ),
];
