/**
 * The model-based test of RMultiLock: six actors on two lock clients take multi-locks over random subsets
 * (one to three names, duplicates and any order allowed) of a pool of three lock names, mixed with
 * single-member acquisitions (`getLock(name).acquire()`) of the same names. RMultiLock's members are plain
 * RLocks (`getMultiLock(names)` takes names only), so a fair lock or a read-write side cannot be a member; a
 * plain lock of a member's name is the one other kind that shares its hash. Each acquisition has a fixed 30 s
 * lease (only the faults take holds away) and runs in a flow of its own, by `acquire()` or `withLock()`; an
 * actor that holds something acquires again in the same flow (with a bounded wait), re-entering what it
 * holds. Faults: test/model/primitive.ts's (stalls, DEBUG SLEEP, killed subscribers, close() mid-flight,
 * aborts), and DEL or PEXPIRE of one name's lock hash. After every command Redis (every name's hash: owner
 * -> count, on an admin connection) and what every caller was told are judged against a model:
 *
 * - all or nothing: once stable, each name's hash holds exactly the model's live holds: for each actor, as
 *   many counts as its live acquisitions covering the name (re-entry counts up, a release counts down), plus
 *   at most the members of its one waiting acquisition, and of those only a prefix in the global (key) order
 *   and never all of them (a grant not yet told is not a stable state); an acquisition that timed out, was
 *   aborted or whose client closed leaves nothing behind (any count no live hold or waiting call explains
 *   keeps the state unstable, and fails the run once it outlasts STABLE_MS);
 * - mutual exclusion per name across all actors and both kinds: a grant told while another actor has a live
 *   hold on a shared member is a violation, and so is a hash with two owners;
 * - liveness within STABLE_MS: a waiting acquisition whose next member (in key order) nobody else holds is
 *   granted that member (a waiter that waited when one of its members' hash was deleted is left out: nothing
 *   announces a DEL, it sleeps out the 30 s lease it saw; so does a call of its client that queued behind it
 *   locally for that member meanwhile); a waitTime-0 acquisition whose members were all
 *   free (or its own) at the last stable state, with no waiting call of another actor on any of them and no
 *   fault since, is granted;
 * - what callers are told: only an abort or close() rejects a wait, a bounded wait gives up no earlier than
 *   its waitTime, an unbounded one never gives up; a release of a live hold succeeds (and the hashes show it
 *   freed every member); close() releases its client's holds.
 *
 * A DEL or PEXPIRE takes the name's member from every hold; an acquisition waiting at that moment may have
 * taken the member before or after it, so that member of its grant is doubtful: its count is not judged until
 * a stable state with nothing else that could explain it shows whether it is held (then it is judged as
 * held, or as gone). A release of a hold with a gone or doubtful member may reject (LockNotHeldError).
 *
 * Liveness at the end of a run: after the faults stop and every hold is released, six unbounded multi-locks
 * over overlapping subsets (one per actor, LIVENESS_SETS) are each granted (and release at once) within
 * STABLE_MS of the previous release; afterwards no lock hash is left.
 */
import fc from 'fast-check';
import type { AcquireOptions, LockClient } from '../../src/index.js';
import { currentFlow, runInFlow, type Flow } from '../../src/machinery/flow.js';
import { lockKeys } from '../../src/redis/keys.js';
import type { Redis } from '../support/fixture.js';
import {
  AbortCommand,
  ACTORS,
  actorArb,
  describeError,
  faultCommands,
  KeyFaultCommand,
  PrimitiveWorld,
  WaitJob,
  type InnerStep,
  type PrimitiveActor,
  type PrimitiveClient,
} from './primitive.js';
import { acquiredInTime, HoldHarness, LEASE_MS, STABLE_MS, WATCH_MS } from './holds.js';
import { countStep, newStats } from './runner.js';
import { settlesWithin, type ServerInfo } from './world.js';

export const stats = newStats();

/** The pool's names are `<base>:<label>`; key order is label order. */
const LABELS = ['a', 'b', 'c'] as const;
/** How many acquisitions an actor may hold at once (the second re-enters the first's flow). */
const MAX_HOLDS = 2;
/** The liveness check's subsets (pool indices), one per actor: overlapping, so that most must take turns. */
const LIVENESS_SETS: readonly (readonly number[])[] = [[0, 1, 2], [0], [1, 2], [0, 2], [1], [0, 1]];

/** A multi-lock (`acquire`, `withLock`) or a plain lock of one member's name (`single`). */
type How = 'acquire' | 'withLock' | 'single';
type Actor = PrimitiveActor<LockClient>;

/** The process's flow registry (src/machinery/flow.ts): withLock's child flow is the one made during the call. */
function nextFlowId(): number {
  const registry = (globalThis as Record<symbol, unknown>)[Symbol.for('flowlock.flows')] as { nextId: number };
  return registry.nextId;
}

/** Where an acquisition's fields are, and how to give its hold back; filled in by the call. */
interface Box {
  flow?: Flow | undefined;
  release?: () => Promise<void>;
  /** A harness problem (the withLock child flow was not the one predicted). */
  problem?: string;
}

/** One acquisition of `names` (sorted, unique) by an actor, in `flow` (its actor's holds' flow) or a new one. */
class MultiJob extends WaitJob<LockClient> {
  readonly how: How;
  readonly names: readonly string[];
  readonly nested: boolean;
  /** The hash field its members are taken under. */
  readonly owner: string;
  readonly box: Box;
  /** Members whose hash a fault deleted while it waited: it may sleep out the lease it saw there. */
  readonly hit = new Set<string>();
  /** A waitTime-0 acquisition of members that were free at the last stable state: it must be granted. */
  expectGrant = false;

  constructor(actor: Actor, how: How, names: readonly string[], wait: number | undefined, flow: Flow | undefined) {
    const box: Box = {};
    let predicted = 0;
    const label = `${flow ? 'nested ' : ''}${how}[${names.map((n) => n.slice(n.lastIndexOf(':') + 1)).join('')}](${wait === undefined ? '' : `${wait}ms`})`;
    super(actor, label, wait, async (locks, signal) => {
      const options: AcquireOptions =
        wait === undefined ? { leaseTime: LEASE_MS, signal } : { waitTime: wait, leaseTime: LEASE_MS, signal };
      const first = names[0] ?? '';
      if (how === 'withLock')
        // In a flow of its own, whose child withLock makes (synchronously) and takes the members in; resolves
        // once the scoped function runs, which holds them until the model releases.
        return acquiredInTime(() =>
          locks.run(() => {
            predicted = nextFlowId();
            let told = false;
            let tell: () => void = () => undefined;
            let fail: (error: unknown) => void = () => undefined;
            const entered = new Promise<void>((resolve, reject) => {
              tell = resolve;
              fail = reject;
            });
            const scoped = locks.getMultiLock(names).withLock(async () => {
              box.flow = currentFlow();
              if (box.flow?.id !== predicted) box.problem = `withLock ran in flow ${box.flow?.id}, not ${predicted}`;
              await new Promise<void>((resolve) => {
                box.release = async () => {
                  resolve();
                  await scoped;
                };
                told = true;
                tell();
              });
            }, options);
            scoped.catch((error: unknown) => {
              if (!told) fail(error);
            });
            return entered;
          }),
        );
      const take = async (): Promise<void> => {
        box.flow = currentFlow();
        const lease =
          how === 'single'
            ? await locks.getLock(first).acquire(options)
            : await locks.getMultiLock(names).acquire(options);
        box.release = () => lease.release();
      };
      return acquiredInTime(() => (flow ? runInFlow(flow, take) : locks.run(take)));
    });
    this.how = how;
    this.names = names;
    this.nested = flow !== undefined;
    this.box = box;
    const flowId = how === 'withLock' ? predicted : (flow ?? box.flow)?.id;
    this.owner = `${actor.client.locks.clientId}:${flowId ?? '?'}`;
  }
}

const multiJob = (actor: Actor): MultiJob | undefined => (actor.last instanceof MultiJob ? actor.last : undefined);

/** A granted acquisition the model counts on, until released or its client closed. */
class Hold {
  readonly job: MultiJob;
  /** Members a fault took away (DEL or PEXPIRE of the hash). */
  readonly gone = new Set<string>();
  /** Members whose hash a fault deleted while the acquisition waited: held or gone, read from Redis. */
  readonly doubtful: Set<string>;

  constructor(job: MultiJob) {
    this.job = job;
    this.doubtful = new Set(job.hit);
  }

  get names(): readonly string[] {
    return this.job.names;
  }

  get owner(): string {
    return this.job.owner;
  }

  /** Counted as held in Redis for sure. */
  certain(name: string): boolean {
    return this.names.includes(name) && !this.gone.has(name) && !this.doubtful.has(name);
  }

  toString(): string {
    return this.job.label;
  }
}

/** Each name's hash: owner field -> hold count. */
interface Snapshot {
  readonly owners: ReadonlyMap<string, ReadonlyMap<string, number>>;
}

class MultiWorld extends PrimitiveWorld<LockClient> {
  readonly pool: readonly string[];

  constructor(server: ServerInfo, admin: Redis, base: string) {
    const pool = LABELS.map((label) => `${base}:${label}`);
    const keys = pool.flatMap((name) => {
      const { lockKey, holdKey } = lockKeys('', name);
      return [lockKey, holdKey];
    });
    super(server, admin, base, keys, (locks) => locks);
    this.pool = pool;
  }

  async snapshot(): Promise<Snapshot> {
    const read = this.admin.multi();
    for (const name of this.pool) read.hgetall(lockKeys('', name).lockKey);
    const replies = (await read.exec()) ?? [];
    const owners = new Map<string, Map<string, number>>();
    this.pool.forEach((name, i) => {
      const fields = (replies[i]?.[1] ?? {}) as Record<string, string>;
      owners.set(name, new Map(Object.entries(fields).map(([owner, count]) => [owner, Number(count)])));
    });
    return { owners };
  }
}

export class MultiHarness extends HoldHarness<LockClient, MultiWorld, MultiJob> {
  stable: Snapshot | undefined;
  /** Something may have changed under the model since the last stable state (a fault). */
  excused = false;
  /** Each actor's holds (by actor index), oldest first; all in one flow. */
  readonly holds: Hold[][] = ACTORS.map(() => []);

  private constructor(world: MultiWorld) {
    super(world, stats);
  }

  static async create(server: ServerInfo, admin: Redis, base: string): Promise<MultiHarness> {
    const world = new MultiWorld(server, admin, base);
    const h = new MultiHarness(world);
    await world.ready();
    await h.settle();
    return h;
  }

  faulted(): void {
    this.excused = true;
    for (const actor of this.world.actors) {
      const job = multiJob(actor);
      if (job) job.expectGrant = false;
    }
  }

  protected describeModel(): string {
    return this.world.actors
      .map((a) => {
        const holds = this.holdsOf(a).map((hold) => {
          const marks = [...hold.gone].map((n) => `-${n}`).concat([...hold.doubtful].map((n) => `?${n}`));
          return `${String(hold)}${marks.length > 0 ? ` (${marks.join(' ')})` : ''}`;
        });
        const job = multiJob(a);
        const waits = job?.waiting ? `waits ${String(job)} as ${job.owner}` : '';
        return `${a.name}: ${[holds.length > 0 ? `holds ${holds.join(', ')}` : '', waits].filter(Boolean).join('; ') || '-'}`;
      })
      .join('; ');
  }

  holdsOf(actor: Actor): Hold[] {
    return this.holds[actor.index] ?? [];
  }

  /** The flow an actor's next acquisition re-enters (that of its holds), if it holds anything. */
  flowOf(actor: Actor): Flow | undefined {
    return this.holdsOf(actor)[0]?.job.box.flow;
  }

  /** An actor's acquisition still waiting (not told). */
  #pending(actor: Actor): MultiJob | undefined {
    const job = multiJob(actor);
    return job?.waiting && !job.adopted ? job : undefined;
  }

  protected jobOf(actor: Actor): MultiJob | undefined {
    return multiJob(actor);
  }

  /** A grant of a member another actor holds for sure is a violation; a grant after close() holds nothing. */
  protected granted(job: MultiJob, who: string): void {
    if (job.box.problem) throw new Error(`harness: ${job.box.problem}`);
    for (const other of this.world.actors) {
      if (other === job.actor) continue;
      for (const hold of this.holdsOf(other)) {
        const shared = job.names.filter((n) => !job.hit.has(n) && hold.certain(n));
        if (shared.length > 0)
          throw this.violation(`${who} was granted ${shared.join(', ')} while ${other.name} holds ${String(hold)}`);
      }
    }
    // Granted before its client's close(), which released it: nothing is left to hold.
    if (job.client.closed) void job.box.release?.().catch(() => undefined);
    else this.holdsOf(job.actor).push(new Hold(job));
  }

  /** A waitTime-0 call on members that were free (expectGrant) must have been granted. */
  protected override notGranted(job: MultiJob, who: string): void {
    if (job.expectGrant && job.outcome?.error === undefined && !job.aborted)
      throw this.violation(`${who} was not granted, though its members were free`);
  }

  /**
   * Why `snap` is not a stable state of the model (undefined: it is); throws what no later state can mend.
   * Doubtful members count as held or not, whichever Redis shows.
   */
  #unstable(snap: Snapshot): string | undefined {
    const { pool, actors } = this.world;
    for (const [name, owners] of snap.owners)
      if (owners.size > 1)
        throw this.violation(`${name} has ${owners.size} owners at once: ${[...owners.keys()].join(', ')}`);
    const known = new Set<string>();
    for (const actor of actors) {
      const holds = this.holdsOf(actor);
      const job = this.#pending(actor);
      const owner = holds[0]?.owner ?? job?.owner;
      if (owner === undefined) continue;
      known.add(owner);
      /** Per member of the waiting acquisition: whether Redis shows it taken (undefined: cannot tell). */
      const taken = new Map<string, boolean | undefined>();
      for (const name of pool) {
        const base = holds.filter((hold) => hold.certain(name)).length;
        const maybe = holds.filter((hold) => hold.doubtful.has(name) && !hold.gone.has(name)).length;
        const count = snap.owners.get(name)?.get(owner) ?? 0;
        if (count < base)
          throw this.violation(`${name}: Redis has ${count} holds of ${actor.name} (${owner}), the model ${base}`);
        const extra = count - base;
        const waits = job?.names.includes(name) ?? false;
        if (extra > maybe + (waits ? 1 : 0))
          return `${name}: Redis has ${count} holds of ${actor.name}, the model ${base}${maybe > 0 ? ` (+${maybe} doubtful)` : ''}${waits ? ' and its waiting call' : ''}`;
        if (job && waits) taken.set(name, job.hit.has(name) || maybe > 0 ? undefined : extra > 0);
      }
      if (!job) continue;
      // Members are taken in key order (the names sorted): a waiting call holds a prefix of them, never all.
      const decided = job.names.filter((n) => taken.get(n) !== undefined);
      const next = decided.find((n) => taken.get(n) === false);
      if (next !== undefined && decided.slice(decided.indexOf(next)).some((n) => taken.get(n) === true))
        return `${actor.name}'s waiting ${String(job)} holds members after ${next}, which it does not hold`;
      if (next === undefined) {
        if (decided.length === job.names.length) return `${actor.name}'s waiting ${String(job)} holds every member`;
        continue;
      }
      const others = [...(snap.owners.get(next)?.keys() ?? [])].filter((o) => o !== owner);
      const undecided = job.names.slice(0, job.names.indexOf(next)).some((n) => taken.get(n) === undefined);
      if (others.length === 0 && job.hit.size === 0 && !undecided && !job.aborted && !job.client.closed)
        return `${actor.name}'s ${String(job)} waits for ${next}, which nobody else holds`;
    }
    for (const [name, owners] of snap.owners)
      for (const owner of owners.keys())
        if (!known.has(owner)) return `${name} is held by ${owner}, whom the model does not know`;
    return undefined;
  }

  /** In a stable state: a doubtful member is held if Redis has every doubtful count, gone if none. */
  #resolveDoubts(snap: Snapshot): void {
    for (const actor of this.world.actors) {
      const holds = this.holdsOf(actor);
      const job = this.#pending(actor);
      for (const name of this.world.pool) {
        const doubting = holds.filter((hold) => hold.doubtful.has(name));
        if (doubting.length === 0 || job?.names.includes(name)) continue;
        const live = doubting.filter((hold) => !hold.gone.has(name));
        const owner = holds[0]?.owner ?? '';
        const extra = (snap.owners.get(name)?.get(owner) ?? 0) - holds.filter((hold) => hold.certain(name)).length;
        if (extra !== 0 && extra !== live.length) continue;
        for (const hold of doubting) {
          hold.doubtful.delete(name);
          if (extra === 0) hold.gone.add(name);
        }
        this.note(`${actor.name}: doubtful ${name} is ${extra === 0 ? 'gone' : 'held'}`);
      }
    }
  }

  async settle(): Promise<Snapshot> {
    const snap = await this.settleOn(
      STABLE_MS,
      () => this.adopt(),
      () => this.world.snapshot(),
      (state) => this.#unstable(state),
    );
    this.#resolveDoubts(snap);
    this.stable = snap;
    this.excused = false;
    return snap;
  }

  /** Whether a fresh acquisition of `names` by `actor` would find them free (or its own) now. */
  freeFor(actor: Actor, names: readonly string[]): boolean {
    const { stable } = this;
    if (this.excused || !stable) return false;
    const owner = this.holdsOf(actor)[0]?.owner;
    if (names.some((n) => [...(stable.owners.get(n)?.keys() ?? [])].some((o) => o !== owner))) return false;
    return !this.world.actors.some(
      (a) => a !== actor && (this.#pending(a)?.names.some((n) => names.includes(n)) ?? false),
    );
  }

  async release(actor: Actor, hold: Hold): Promise<void> {
    const holds = this.holdsOf(actor);
    holds.splice(holds.indexOf(hold), 1);
    const unsure = hold.gone.size + hold.doubtful.size > 0;
    this.note(`${actor.name} releases ${String(hold)}${unsure ? ' (not all held)' : ''}`);
    try {
      await hold.job.box.release?.();
    } catch (error) {
      if (!unsure)
        throw this.violation(`${actor.name}: release of live ${String(hold)} failed: ${describeError(error)}`);
    }
  }

  /** close() released the client's holds. */
  clientClosed(client: PrimitiveClient<LockClient>): void {
    for (const actor of this.world.actors) {
      const holds = this.holdsOf(actor);
      for (const hold of holds.filter((h) => h.job.client === client)) {
        holds.splice(holds.indexOf(hold), 1);
        void hold.job.box.release?.().catch(() => undefined);
      }
    }
  }

  /**
   * A DEL or PEXPIRE of `name`'s hash: every hold's member is gone; a waiter on it may sleep. An acquisition
   * not adopted yet may have taken the member before or after the fault: still waiting, or told while the
   * fault's own command was awaited (seen on GLIDE beside a CPU hog: granted in the same millisecond as the
   * PEXPIRE, adopted after it, then judged as holding the member).
   */
  memberGone(name: string): void {
    for (const holds of this.holds)
      for (const hold of holds)
        if (hold.names.includes(name)) {
          hold.gone.add(name);
          hold.doubtful.delete(name);
        }
    for (const actor of this.world.actors) {
      const job = multiJob(actor);
      if (job && !job.adopted && job.names.includes(name)) job.hit.add(name);
    }
  }

  async finish(): Promise<void> {
    const { world } = this;
    await this.endWaits();
    for (const actor of world.actors)
      for (const hold of [...this.holdsOf(actor)].reverse()) await this.release(actor, hold);
    await this.settle();
    // Liveness once the faults stopped: every actor a multi-lock, each releasing at once.
    await this.takeTurns(
      (actor) =>
        new MultiJob(
          actor,
          'acquire',
          (LIVENESS_SETS[actor.index] ?? [0]).map((i) => world.pool[i] ?? ''),
          undefined,
          undefined,
        ),
      async (job) => {
        const hold = this.holdsOf(job.actor).find((h) => h.job === job);
        if (hold) await this.release(job.actor, hold);
        return hold !== undefined;
      },
      async () => {
        const { owners } = await world.snapshot();
        return JSON.stringify([...owners].map(([name, fields]) => [name, Object.fromEntries(fields)]));
      },
    );
    await this.settle();
    const left = await world.admin.exists(...world.pool.map((name) => lockKeys('', name).lockKey));
    if (left > 0) throw this.violation(`${left} lock hashes are left on the server`);
    await this.closeClients();
  }
}

type MultiCommand = fc.AsyncCommand<MultiHarness, MultiHarness>;

class AcquireCommand implements MultiCommand, InnerStep<MultiHarness> {
  constructor(
    readonly actor: number,
    readonly how: How,
    /** Pool indices in the caller's order (duplicates count once; a single takes the first). */
    readonly picks: readonly number[],
    readonly wait: number | undefined,
  ) {}

  get kind(): string {
    return this.how;
  }

  by(actor: number): AcquireCommand {
    return new AcquireCommand(actor, this.how, this.picks, this.wait);
  }

  names(h: MultiHarness): string[] {
    const picked = this.how === 'single' ? this.picks.slice(0, 1) : this.picks;
    return [...new Set(picked.map((i) => h.world.pool[i] ?? ''))].sort();
  }

  check(h: MultiHarness): boolean {
    const actor = h.world.actors[this.actor];
    if (!actor || actor.busy || actor.unadopted) return false;
    const holds = h.holdsOf(actor).length;
    // A second acquisition re-enters the first's flow; waiting unboundedly there could deadlock (the global
    // order holds per acquisition, not across nested ones), and withLock would take new members in a child.
    return holds === 0 || (holds < MAX_HOLDS && this.how !== 'withLock' && this.wait !== undefined);
  }

  start(h: MultiHarness): MultiJob {
    const names = this.names(h);
    // Waiting calls of the same client that sleep out a deleted member's lease: this one queues behind them
    // locally for that member and sleeps as long (a newcomer does not try past a local waiter, and the
    // queue's holder TTL is the one they saw), even after they left.
    const client = h.world.actors[this.actor]?.client;
    const sleeping = h.world.actors
      .map(multiJob)
      .filter((other) => other?.waiting === true && other.client === client)
      .flatMap((other) => [...(other?.hit ?? [])]);
    const job = h.world.begin(
      h,
      this.actor,
      (actor) => new MultiJob(actor, this.how, names, this.wait, h.flowOf(actor)),
    );
    for (const name of sleeping) if (names.includes(name)) job.hit.add(name);
    return job;
  }

  async run(h: MultiHarness): Promise<void> {
    const actor = h.world.actors[this.actor];
    countStep(stats, `${actor && h.holdsOf(actor).length > 0 ? 'nested ' : ''}${this.how}`, 'step');
    const free = actor !== undefined && this.wait === 0 && h.freeFor(actor, this.names(h));
    const job = this.start(h);
    job.expectGrant = free;
    await settlesWithin(job.done, WATCH_MS);
    await h.settle();
  }

  toString(): string {
    const picks = this.picks.map((i) => LABELS[i] ?? '?').join('');
    return `${ACTORS[this.actor] ?? '?'} ${this.how}[${picks}](${this.wait === undefined ? '' : `${this.wait}ms`})`;
  }
}

class ReleaseCommand implements MultiCommand {
  constructor(
    readonly actor: number,
    /** Which of its holds (modulo how many it has). */
    readonly which: number,
  ) {}

  check(h: MultiHarness): boolean {
    const actor = h.world.actors[this.actor];
    return actor !== undefined && h.holdsOf(actor).length > 0;
  }

  async run(h: MultiHarness): Promise<void> {
    const actor = h.world.actors[this.actor];
    const holds = actor ? h.holdsOf(actor) : [];
    const hold = holds[this.which % Math.max(1, holds.length)];
    if (!actor || !hold) return;
    countStep(stats, 'release', 'step');
    await h.release(actor, hold);
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} release #${this.which}`;
  }
}

/** DEL or PEXPIRE 1 of one name's lock hash: every hold of that member is gone. */
class DeleteKeyCommand extends KeyFaultCommand<LockClient, MultiHarness> {
  protected async hit(h: MultiHarness): Promise<void> {
    const name = h.world.pool[LABELS.indexOf(this.key as (typeof LABELS)[number])] ?? '';
    const key = lockKeys('', name).lockKey;
    if (this.how === 'del') await h.world.admin.del(key);
    else if (!(await h.world.expireHashNow(key))) {
      h.note('   missed: a holder set a lease anew within its millisecond, and Redis kept every hold');
      return;
    }
    h.memberGone(name);
  }
}

const pickArb = fc.integer({ min: 0, max: LABELS.length - 1 });
const acquireArb: fc.Arbitrary<AcquireCommand> = fc
  .tuple(
    actorArb,
    fc.constantFrom<How>('acquire', 'acquire', 'withLock', 'single'),
    fc.array(pickArb, { minLength: 1, maxLength: 3 }),
    fc.constantFrom<number | undefined>(undefined, 0, 300, 1500),
  )
  .map(([actor, how, picks, wait]) => new AcquireCommand(actor, how, picks, wait));
const releaseArb = fc
  .tuple(actorArb, fc.integer({ min: 0, max: MAX_HOLDS - 1 }))
  .map(([actor, which]) => new ReleaseCommand(actor, which));

/** Operations three times as often as each kind of fault. */
export const multiLockCommands: fc.Arbitrary<MultiCommand>[] = [
  acquireArb,
  acquireArb,
  acquireArb,
  releaseArb,
  releaseArb,
  releaseArb,
  fc
    .tuple(fc.constantFrom(...LABELS), fc.constantFrom('del' as const, 'pexpire' as const))
    .map(([key, how]) => new DeleteKeyCommand(key, how)),
  ...faultCommands<LockClient, MultiHarness>(acquireArb),
  // Once more: an abort finds a waiting call only now and then (most calls are granted or time out first).
  actorArb.map((actor) => new AbortCommand<LockClient, MultiHarness>(actor)),
];
