/**
 * The model-based test of RSemaphore: six actors on two lock clients take and give back permits of one
 * semaphore, interleaved with faults, and after every command Redis (the count, the permit queue and its
 * deadlines, read on an admin connection) and what every actor was told are judged against a model:
 *
 * - conservation: available + held by the actors = the total the model set (trySetPermits, addPermits,
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
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { createLockClient, LockClientClosedError, type LockClient, type RSemaphore } from '../../src/index.js';
import { semaphoreKeys, type SemaphoreKeys } from '../../src/redis/keys.js';
import { newRedis, type Redis } from '../support/fixture.js';
import { countSkipped, countStep, newStats } from './runner.js';
import { BaseWorld, busyWait, now, settlesWithin, trace, WATCHDOG_TIMEOUTS, type ServerInfo } from './world.js';

export const stats = newStats();
const count = (kind: string, what: 'step' | 'inner' | 'none' = 'step'): void => countStep(stats, kind, what);

/** The permits the semaphore starts with (trySetPermits). */
const INITIAL_PERMITS = 3;
/** The most permits the model lets addPermits set. */
const MAX_PERMITS = 5;
const ACTORS = ['A0', 'A1', 'A2', 'B0', 'B1', 'B2'] as const;
const ACTORS_PER_CLIENT = 3;
/**
 * How long after a command (and the end of its faults) the state may take to become stable. Its parts: a
 * waiter refreshes its entry every third of watchdogTimeout (300 ms at most here); an entry left by a failed
 * leave call lives watchdogTimeout (900 ms); a killed subscriber reconnects in well under a second; the rest
 * is margin for a loaded 2-core machine (a wrong state never becomes stable: the margin costs nothing).
 */
const STABLE_MS = 6000;
/** A free semaphore grants a newcomer within this (one round trip, on a loaded machine). */
const AT_ONCE_MS = 3000;
/** An aborted wait, or one whose client closed, settles within this. */
const SETTLE_MS = 3000;
/** A tryAcquire may give up this much before its waitTime (timer and clock granularity). */
const EARLY_MS = 15;
/** How long a waiting step is watched before the command ends (it then waits in the background). */
const WATCH_MS = 120;

export class Violation extends Error {
  override readonly name = 'Violation';
}

type AcquireKind = 'try' | 'tryWait' | 'acquire';

interface Outcome {
  readonly granted: boolean;
  readonly error?: unknown;
  readonly at: number;
}

class SemClient {
  readonly slot: number;
  readonly gen: number;
  readonly label: string;
  readonly redis: Redis;
  readonly locks: LockClient;
  readonly semaphore: RSemaphore;
  closed = false;

  constructor(server: ServerInfo, slot: number, gen: number, name: string) {
    this.slot = slot;
    this.gen = gen;
    this.label = `${'AB'[slot] ?? '?'}${gen > 0 ? `#${gen}` : ''}`;
    this.redis = newRedis(server);
    this.redis.on('error', () => undefined);
    this.locks = createLockClient(this.redis, { watchdogTimeout: WATCHDOG_TIMEOUTS[slot] ?? 600 });
    this.semaphore = this.locks.getSemaphore(name);
  }
}

/** One acquisition by an actor. */
class SemJob {
  readonly actor: SemActor;
  readonly kind: AcquireKind;
  readonly permits: number;
  readonly wait: number | undefined;
  readonly client: SemClient;
  readonly controller = new AbortController();
  readonly startedAt = now();
  readonly done: Promise<Outcome>;
  outcome: Outcome | undefined;
  aborted = false;
  adopted = false;
  /** Its entry in the permit queue, once seen there. */
  entry: string | undefined;

  constructor(actor: SemActor, kind: AcquireKind, permits: number, wait: number | undefined) {
    this.actor = actor;
    this.kind = kind;
    this.permits = permits;
    this.wait = wait;
    this.client = actor.client;
    const semaphore = this.client.semaphore;
    const signal = this.controller.signal;
    const call: Promise<boolean> =
      kind === 'try'
        ? semaphore.tryAcquire({ permits, signal })
        : kind === 'tryWait'
          ? semaphore.tryAcquire({ permits, waitTime: wait ?? 0, signal })
          : semaphore.acquire({ permits, signal }).then(() => true);
    this.done = call.then(
      (granted) => this.#finish({ granted, at: now() }),
      (error: unknown) => this.#finish({ granted: false, error, at: now() }),
    );
  }

  #finish(outcome: Outcome): Outcome {
    this.outcome = outcome;
    trace(
      `${this.actor.name} ${this.toString()} -> ${outcome.error ? describe(outcome.error) : String(outcome.granted)}`,
    );
    return outcome;
  }

  /** Whether it still waits (posted, not settled): its permits may be taken in Redis before it hears. */
  get waiting(): boolean {
    return this.outcome === undefined;
  }

  /** When a bounded wait gives up (Infinity: never). */
  get givesUpAt(): number {
    return this.kind === 'acquire' ? Infinity : this.startedAt + (this.wait ?? 0);
  }

  toString(): string {
    return `${this.kind}(${this.permits}${this.wait !== undefined ? `, ${this.wait}ms` : ''})`;
  }
}

class SemActor {
  readonly index: number;
  readonly name: string;
  readonly slot: number;
  readonly world: SemWorld;
  /** Permits this actor was told it holds (granted, not yet released). */
  held = 0;
  last: SemJob | undefined;

  constructor(world: SemWorld, index: number) {
    this.world = world;
    this.index = index;
    this.name = ACTORS[index] ?? `actor${index}`;
    this.slot = Math.floor(index / ACTORS_PER_CLIENT);
  }

  get client(): SemClient {
    const client = this.world.clients[this.slot];
    if (!client) throw new Error(`no client in slot ${this.slot}`);
    return client;
  }

  get busy(): boolean {
    return this.last?.waiting ?? false;
  }
}

/** What the admin connection read of the semaphore, in one MULTI. */
interface Snapshot {
  readonly available: number;
  /** Live queue entries (a deadline after the server's time), in queue order. */
  readonly queue: readonly string[];
  /** Every entry of the list, live or not. */
  readonly listed: number;
  readonly at: number;
}

const fmt = (ms: number): string => ms.toFixed(0);
const describe = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : JSON.stringify(error);
const entryNeed = (entry: string): number => Number(entry.split('|')[0]);
const entryClient = (entry: string): string => entry.split('|')[1] ?? '';
const entryNumber = (entry: string): number => Number(entry.split('|')[2]);
const needs = (entries: readonly string[]): number => entries.reduce((sum, entry) => sum + entryNeed(entry), 0);

class SemWorld extends BaseWorld {
  readonly name: string;
  readonly keys: SemaphoreKeys;
  readonly clients: SemClient[] = [];
  readonly actors: SemActor[] = [];
  readonly retired: SemClient[] = [];

  private constructor(server: ServerInfo, admin: Redis, name: string) {
    super(server, admin);
    this.name = name;
    this.keys = semaphoreKeys('', name);
  }

  static async create(server: ServerInfo, admin: Redis, name: string): Promise<SemWorld> {
    const world = new SemWorld(server, admin, name);
    for (let slot = 0; slot < 2; slot++) world.clients.push(new SemClient(server, slot, 0, name));
    await Promise.all([world.fault, ...world.clients.map((c) => c.redis)].map((r) => r.ping()));
    ACTORS.forEach((_, i) => world.actors.push(new SemActor(world, i)));
    return world;
  }

  async replaceClient(slot: number): Promise<SemClient> {
    const old = this.clients[slot];
    if (!old) throw new Error(`no client in slot ${slot}`);
    this.retired.push(old);
    const fresh = new SemClient(this.server, slot, old.gen + 1, this.name);
    this.clients[slot] = fresh;
    await fresh.redis.ping();
    return fresh;
  }

  async snapshot(): Promise<Snapshot> {
    const { lockKey, queueKey, deadlinesKey } = this.keys;
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
    const [seconds = '0', micros = '0'] = (replies?.[3]?.[1] ?? []) as string[];
    const serverNow = Number(seconds) * 1000 + Number(micros) / 1000;
    const deadlines = new Map<string, number>();
    for (let i = 0; i + 1 < scores.length; i += 2) deadlines.set(scores[i] ?? '', Number(scores[i + 1]));
    const queue = list.filter((entry) => (deadlines.get(entry) ?? -Infinity) > serverNow);
    return { available: value === null ? 0 : Number(value), queue, listed: list.length, at: now() };
  }

  async teardown(): Promise<void> {
    await this.stopMonitoring();
    for (const actor of this.actors) {
      if (actor.last?.waiting) {
        actor.last.controller.abort();
        await settlesWithin(actor.last.done, SETTLE_MS);
      }
    }
    for (const client of [...this.clients, ...this.retired]) {
      await settlesWithin(
        client.locks.close().catch(() => undefined),
        5000,
      );
      await client.redis.quit().catch(() => client.redis.disconnect());
    }
    await this.fault.quit().catch(() => this.fault.disconnect());
    const { lockKey, queueKey, deadlinesKey } = this.keys;
    await this.admin.del(lockKey, queueKey, deadlinesKey).catch(() => undefined);
  }
}

/** The model and the system under test of one generated sequence (fast-check's model and real). */
export class SemHarness {
  readonly world: SemWorld;
  /** The permits the user set (available + held by the actors, once stable). */
  total = INITIAL_PERMITS;
  /** The last stable state, and whether the queue's order may have changed since (a fault, a stall). */
  stable: Snapshot | undefined;
  orderExcused = false;
  /** A fault's end: bounds count from here. */
  calmFrom = 0;
  readonly #log: string[] = [];

  private constructor(world: SemWorld) {
    this.world = world;
    world.onStall = (ms) => {
      if (!stats.shrinking) stats.stalls++;
      this.orderExcused = true;
      this.calmFrom = Math.max(this.calmFrom, now());
      this.note(`unmodeled stall ${ms.toFixed(0)} ms`);
    };
  }

  static async create(server: ServerInfo, admin: Redis, name: string): Promise<SemHarness> {
    const h = new SemHarness(await SemWorld.create(server, admin, name));
    const client = h.world.clients[0];
    if (!(await client?.semaphore.trySetPermits(INITIAL_PERMITS))) throw h.violation('trySetPermits refused');
    if (await h.world.clients[1]?.semaphore.trySetPermits(1)) throw h.violation('a second trySetPermits was taken');
    await h.settle();
    return h;
  }

  note(message: string): void {
    this.#log.push(`${(now() % 100_000).toFixed(0).padStart(6)} ${message}`);
    if (this.#log.length > 60) this.#log.shift();
    trace(message);
  }

  violation(message: string): Violation {
    const actors = this.world.actors
      .map((a) => `${a.name}: held ${a.held}${a.busy ? `, waits ${String(a.last)}` : ''}`)
      .join('; ');
    return new Violation(`${message}\n  total ${this.total}; ${actors}\n  log:\n    ${this.#log.join('\n    ')}`);
  }

  get held(): number {
    return this.world.actors.reduce((sum, a) => sum + a.held, 0);
  }

  /** Takes in what settled jobs were told, judging each. */
  adopt(): void {
    for (const actor of this.world.actors) {
      const job = actor.last;
      if (!job?.outcome || job.adopted) continue;
      job.adopted = true;
      const { granted, error, at } = job.outcome;
      if (granted) {
        actor.held += job.permits;
        this.note(`${actor.name} granted ${job.permits} (${String(job)})`);
        continue;
      }
      if (error !== undefined) {
        const closed = error instanceof LockClientClosedError && job.client.closed;
        if (!job.aborted && !closed) throw this.violation(`${actor.name} ${String(job)} rejected: ${describe(error)}`);
        this.note(`${actor.name} ${String(job)} ended: ${closed ? 'closed' : 'aborted'}`);
        continue;
      }
      if (job.kind === 'acquire') throw this.violation(`${actor.name} acquire() resolved without permits`);
      if (job.kind === 'tryWait' && !job.aborted && at - job.startedAt < (job.wait ?? 0) - EARLY_MS)
        throw this.violation(
          `${actor.name} ${String(job)} gave up after ${(at - job.startedAt).toFixed(0)} ms, before its waitTime`,
        );
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
    await this.world.faultInFlight;
    this.world.faultInFlight = undefined;
    const by = Math.max(now(), this.calmFrom) + STABLE_MS;
    let last = '';
    for (;;) {
      this.adopt();
      const snap = await this.world.snapshot();
      const missing = this.#unaccounted(snap);
      const why = this.#unstable(snap, missing);
      if (why === undefined) {
        this.#judgeOrder(snap);
        this.stable = snap;
        this.orderExcused = false;
        return snap;
      }
      if (why !== last) this.note(`not stable yet: ${why}`);
      last = why;
      if (now() > Math.max(by, this.calmFrom + STABLE_MS))
        throw this.violation(`not stable after ${STABLE_MS} ms: ${why}`);
      await sleep(25);
    }
  }

  #unstable(snap: Snapshot, missing: number): string | undefined {
    if (missing > 0) {
      const waiting = this.world.actors.filter((a) => a.busy);
      return `${missing} permits taken and not told (${waiting.length} waiting, ${snap.available} available)`;
    }
    let ahead = 0;
    for (const entry of snap.queue) {
      if (snap.available - ahead >= entryNeed(entry)) return `queued ${entry} could take its permits`;
      ahead += entryNeed(entry);
    }
    // Every waiting actor has its entry, and each entry a waiting actor (matched by client and need, in
    // order of arrival: entries of a client are numbered in the order its waits began).
    const waiting = this.world.actors
      .map((a) => a.last)
      .filter((job): job is SemJob => job !== undefined && job.waiting && job.kind !== 'try')
      .sort((a, b) => a.startedAt - b.startedAt);
    const entries = [...snap.queue].sort((a, b) => entryNumber(a) - entryNumber(b));
    const owners = new Map<string, SemJob>();
    for (const job of waiting) {
      const entry = entries.find(
        (e) => !owners.has(e) && entryClient(e) === job.client.locks.clientId && entryNeed(e) === job.permits,
      );
      if (entry === undefined) return `${job.actor.name} ${String(job)} has no entry in the queue`;
      owners.set(entry, job);
    }
    const ghost = entries.find((e) => !owners.has(e));
    if (ghost !== undefined) return `queue entry ${ghost} has no waiter`;
    if (snap.listed !== snap.queue.length) return `${snap.listed - snap.queue.length} dead entries still listed`;
    for (const [entry, job] of owners) job.entry = entry;
    return undefined;
  }

  /** A waiter granted while one ahead of it in the last stable queue still waits: overtaken. */
  #judgeOrder(snap: Snapshot): void {
    const before = this.stable;
    if (!before || this.orderExcused) return;
    const still = new Set(snap.queue);
    const granted = new Set(
      this.world.actors
        .map((a) => a.last)
        .filter((job) => job?.entry !== undefined && job.outcome?.granted === true)
        .map((job) => job?.entry),
    );
    for (let i = 0; i < before.queue.length; i++) {
      const ahead = before.queue[i] ?? '';
      if (!still.has(ahead)) continue;
      for (const behind of before.queue.slice(i + 1)) {
        if (granted.has(behind)) throw this.violation(`queued ${behind} was granted while ${ahead} ahead still waits`);
      }
    }
  }

  /** Ends the run: aborts the waits, gives everything back, then checks liveness and what is left. */
  async finish(): Promise<void> {
    const { world } = this;
    for (const actor of world.actors) {
      const job = actor.last;
      if (job?.waiting) {
        job.aborted = true;
        job.controller.abort();
        if (!(await settlesWithin(job.done, SETTLE_MS))) throw this.violation(`${actor.name}: an aborted wait hangs`);
      }
    }
    for (const actor of world.actors) await this.release(actor, actor.held);
    await this.settle();
    // Liveness once the faults stopped: one permit, six unbounded waiters, each released as it is granted.
    const semaphore = world.clients[0]?.semaphore;
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
    const { queueKey, deadlinesKey } = world.keys;
    const left = await world.admin.exists(queueKey, deadlinesKey);
    if (left > 0) throw this.violation('the permit queue is left on the server with nobody waiting');
    for (const client of world.clients) {
      client.closed = true;
      await client.locks.close();
    }
    if (world.harnessErrors.length > 0) throw new Error(`harness: ${world.harnessErrors.join('; ')}`);
  }

  async release(actor: SemActor, permits: number): Promise<void> {
    if (permits <= 0) return;
    actor.held -= permits;
    this.note(`${actor.name} release(${permits})`);
    try {
      await actor.client.semaphore.release(permits);
    } catch (error) {
      throw this.violation(`${actor.name} release(${permits}) failed: ${String(error)}`);
    }
  }
}

type SemCommand = fc.AsyncCommand<SemHarness, SemHarness>;

/** An acquisition by one actor; watched for WATCH_MS (a wait goes on in the background). */
class AcquireCommand implements SemCommand {
  constructor(
    readonly actor: number,
    readonly kind: AcquireKind,
    readonly permits: number,
    readonly wait: number | undefined,
  ) {}

  check(h: SemHarness): boolean {
    return !(h.world.actors[this.actor]?.busy ?? true);
  }

  /** Starts the job; `judged`: from a stable state, judge what a newcomer may be granted. */
  start(h: SemHarness): SemJob {
    const actor = h.world.actors[this.actor];
    if (!actor) throw new Error('no actor');
    const job = new SemJob(actor, this.kind, this.permits, this.wait);
    actor.last = job;
    h.note(`${actor.name} ${String(job)} on ${actor.client.label}`);
    return job;
  }

  async run(h: SemHarness): Promise<void> {
    count(this.kind);
    const stable = h.stable;
    const free = stable !== undefined && stable.available - needs(stable.queue) >= this.permits;
    const job = this.start(h);
    await settlesWithin(job.done, this.kind === 'try' || free ? AT_ONCE_MS : WATCH_MS);
    h.adopt();
    if (stable && !h.orderExcused) this.judgeNewcomer(h, stable, job);
    await h.settle();
  }

  /**
   * A newcomer from a stable state: granted only what the queued waiters that cannot leave meanwhile leave
   * it; granted at once when the waiters (all of them) leave it enough.
   */
  judgeNewcomer(h: SemHarness, stable: Snapshot, job: SemJob): void {
    const jobs = new Map(h.world.actors.map((a) => [a.last?.entry, a.last]));
    let needAll = 0;
    let needCertain = 0;
    for (const entry of stable.queue) {
      needAll += entryNeed(entry);
      const owner = jobs.get(entry);
      if (owner && owner.kind === 'acquire' && !owner.aborted && !owner.client.closed) needCertain += entryNeed(entry);
    }
    const { outcome } = job;
    if (outcome?.granted && stable.available - needCertain < job.permits)
      throw h.violation(
        `newcomer ${job.actor.name} ${String(job)} granted with ${stable.available} available and ` +
          `${needCertain} kept for waiters ahead`,
      );
    // A short waitTime may run out before a reply on a loaded machine: only longer waits are judged here.
    const judged = job.kind !== 'tryWait' || (job.wait ?? 0) >= 1500;
    if (judged && stable.available - needAll >= job.permits && !outcome?.granted && !job.aborted) {
      if (!outcome) throw h.violation(`free permits: ${String(job)} not granted within ${AT_ONCE_MS} ms`);
      throw h.violation(
        `${String(job)} refused after ${fmt(outcome.at - job.startedAt)} ms with ${stable.available} available ` +
          `and ${needAll} queued needs`,
      );
    }
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
    count('release');
    await h.release(actor, Math.min(this.permits, actor.held));
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} release(${this.permits})`;
  }
}

class AbortCommand implements SemCommand {
  constructor(readonly actor: number) {}

  check(h: SemHarness): boolean {
    return h.world.actors[this.actor]?.busy ?? false;
  }

  async run(h: SemHarness): Promise<void> {
    const job = h.world.actors[this.actor]?.last;
    if (!job?.waiting) {
      countSkipped(stats);
      return;
    }
    count('abort');
    job.aborted = true;
    job.controller.abort();
    if (!(await settlesWithin(job.done, SETTLE_MS)))
      throw h.violation(`${job.actor.name}: the aborted ${String(job)} did not settle within ${SETTLE_MS} ms`);
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} abort`;
  }
}

/** addPermits(delta), drainPermits() or availablePermits() by client A or B. */
class CountCommand implements SemCommand {
  constructor(
    readonly slot: number,
    readonly what: 'add' | 'drain' | 'available',
    readonly delta: number,
  ) {}

  check(h: SemHarness): boolean {
    if (this.what !== 'add') return true;
    const total = h.total + this.delta;
    return total >= 0 && total <= MAX_PERMITS;
  }

  async run(h: SemHarness): Promise<void> {
    const client = h.world.clients[this.slot];
    if (!client) return;
    count(this.what);
    if (this.what === 'add') {
      await client.semaphore.addPermits(this.delta);
      h.total += this.delta;
    } else if (this.what === 'drain') {
      const drained = await client.semaphore.drainPermits();
      if (drained < 0) throw h.violation(`drainPermits returned ${drained}`);
      h.total -= drained;
    } else {
      h.adopt();
      const held = h.held;
      const available = await client.semaphore.availablePermits();
      if (available + held > h.total)
        throw h.violation(`availablePermits() ${available} + ${held} held > total ${h.total}`);
    }
    h.note(`${client.label} ${String(this)} (total ${h.total})`);
    await h.settle();
  }

  toString(): string {
    const who = 'AB'[this.slot] ?? '?';
    return this.what === 'add' ? `${who} addPermits(${this.delta})` : `${who} ${this.what}Permits()`;
  }
}

/** An acquisition (or none) in flight while the event loop stalls or the server sleeps. */
class FaultCommand implements SemCommand {
  constructor(
    readonly how: 'stall' | 'sleep',
    readonly ms: number,
    readonly inner: AcquireCommand | undefined,
  ) {}

  check(h: SemHarness): boolean {
    return this.inner === undefined || this.inner.check(h);
  }

  async run(h: SemHarness): Promise<void> {
    count(this.how === 'stall' ? 'Stall' : 'ServerSleep');
    h.orderExcused = true;
    if (this.how === 'sleep') {
      const sleeping = await h.world.serverSleep(this.ms);
      if (this.inner) {
        count(this.inner.kind, 'inner');
        this.inner.start(h);
      }
      await sleeping.done;
    } else {
      if (this.inner) {
        count(this.inner.kind, 'inner');
        this.inner.start(h);
      }
      busyWait(this.ms);
    }
    h.calmFrom = now();
    h.note(`${String(this)} over`);
    await h.settle();
  }

  toString(): string {
    return `${this.how === 'stall' ? 'stall' : 'DEBUG SLEEP'} ${this.ms}ms${this.inner ? ` with ${String(this.inner)}` : ''}`;
  }
}

/** DEL or PEXPIRE 1 of one of the semaphore's keys, from the admin connection. */
class DeleteKeyCommand implements SemCommand {
  constructor(
    readonly key: 'count' | 'queue' | 'deadlines',
    readonly how: 'del' | 'pexpire',
  ) {}

  check(h: SemHarness): boolean {
    // The count's PEXPIRE: only with nobody waiting (a grant between the read and the expiry would be lost
    // to the model's arithmetic, not to the library).
    return !(this.key === 'count' && this.how === 'pexpire' && h.world.actors.some((a) => a.busy));
  }

  async run(h: SemHarness): Promise<void> {
    count(`${this.how.toUpperCase()} ${this.key}`);
    const { admin, keys } = h.world;
    h.orderExcused = true;
    if (this.key === 'count') {
      if (this.how === 'del') {
        const value = (await admin.call('GETDEL', keys.lockKey)) as string | null;
        h.total -= value === null ? 0 : Number(value);
      } else {
        const replies = await admin.multi().get(keys.lockKey).pexpire(keys.lockKey, 1).exec();
        const value = replies?.[0]?.[1] as string | null;
        h.total -= value === null ? 0 : Number(value);
        while ((await admin.exists(keys.lockKey)) > 0) await sleep(2);
      }
    } else {
      const key = this.key === 'queue' ? keys.queueKey : keys.deadlinesKey;
      if (this.how === 'del') await admin.del(key);
      // Judged once it is gone (a state read within that millisecond would still show it).
      else if ((await admin.pexpire(key, 1)) === 1) while ((await admin.exists(key)) > 0) await sleep(2);
    }
    h.calmFrom = now();
    h.note(`${String(this)} (total ${h.total})`);
    await h.settle();
  }

  toString(): string {
    return `${this.how === 'del' ? 'DEL' : 'PEXPIRE'} ${this.key}`;
  }
}

class KillSubscribersCommand implements SemCommand {
  check(): boolean {
    return true;
  }

  async run(h: SemHarness): Promise<void> {
    count('CLIENT KILL pubsub');
    h.orderExcused = true;
    await h.world.admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    h.calmFrom = now();
    h.note('CLIENT KILL TYPE pubsub');
    await h.settle();
  }

  toString(): string {
    return 'CLIENT KILL TYPE pubsub';
  }
}

/** close() of a client, with an acquisition of its own (or none) in flight; a fresh client replaces it. */
class CloseCommand implements SemCommand {
  constructor(
    readonly slot: number,
    readonly inner: AcquireCommand | undefined,
  ) {}

  check(h: SemHarness): boolean {
    return this.inner === undefined || this.inner.check(h);
  }

  async run(h: SemHarness): Promise<void> {
    const client = h.world.clients[this.slot];
    if (!client) return;
    count('close');
    h.orderExcused = true;
    if (this.inner) {
      count(this.inner.kind, 'inner');
      this.inner.start(h);
      await sleep(Math.floor(Math.random() * 3));
    }
    client.closed = true;
    if (!(await settlesWithin(client.locks.close(), 10_000))) throw h.violation(`${client.label} close() hangs`);
    for (const actor of h.world.actors) {
      const job = actor.last;
      if (job?.client === client && !(await settlesWithin(job.done, SETTLE_MS)))
        throw h.violation(`${actor.name}: ${String(job)} still waits after its client's close()`);
    }
    await h.world.replaceClient(this.slot);
    h.calmFrom = now();
    h.note(`${client.label} closed`);
    await h.settle();
  }

  toString(): string {
    return `close ${'AB'[this.slot] ?? '?'}${this.inner ? ` with ${String(this.inner)}` : ''}`;
  }
}

const actorArb = fc.integer({ min: 0, max: ACTORS.length - 1 });
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
  actorArb.map((actor) => new AbortCommand(actor)),
  fc
    .tuple(
      fc.integer({ min: 0, max: 1 }),
      fc.constantFrom('add' as const, 'drain' as const, 'available' as const),
      fc.constantFrom(-1, 1, 2),
    )
    .map(([slot, what, delta]) => new CountCommand(slot, what, delta)),
  fc
    .tuple(
      fc.constantFrom('stall' as const, 'sleep' as const),
      fc.constantFrom(200, 700, 1500),
      fc.option(acquireArb, { nil: undefined }),
    )
    .map(([how, ms, inner]) => new FaultCommand(how, ms, inner)),
  fc
    .tuple(
      fc.constantFrom('count' as const, 'queue' as const, 'deadlines' as const),
      fc.constantFrom('del' as const, 'pexpire' as const),
    )
    .map(([key, how]) => new DeleteKeyCommand(key, how)),
  fc.constant(new KillSubscribersCommand()),
  fc.tuple(fc.integer({ min: 0, max: 1 }), fc.option(acquireArb, { nil: undefined })).map(
    ([slot, inner]) =>
      // The acquisition in flight is by an actor of the client that closes.
      new CloseCommand(
        slot,
        inner &&
          new AcquireCommand(
            slot * ACTORS_PER_CLIENT + (inner.actor % ACTORS_PER_CLIENT),
            inner.kind,
            inner.permits,
            inner.wait,
          ),
      ),
  ),
];
