/**
 * The model-based test of RReadWriteLock: six actors on two lock clients take the read or the write lock of
 * one name (each acquisition in a flow of its own, with a fixed 30 s lease, so that only the faults take
 * holds away), beside a played Redisson client (Java) taking and giving back read and write holds through
 * Redisson's own scripts, interleaved with faults (test/model/primitive.ts's, and DEL or PEXPIRE of the
 * waiting writers' registry, or of the lock's hash while nobody waits: see DeleteKeyCommand). After every command Redis (the hash: `mode`, read owners, the writer;
 * the registry; on an admin connection) and what every caller was told are judged against a model:
 *
 * - writers exclusive, readers shared: a write grant while another hold is live, or a read grant while a
 *   write hold is live, is a violation; Redis's hash has the mode and the number of read and write owners of
 *   the model's live holds once stable;
 * - stable within STABLE_MS after every command and its faults: every grant told, a free lock with a waiter
 *   granted, a read-held lock with a read waiter and no waiting writer granted (liveness);
 * - a waiting writer is not starved by our readers: from a stable state with an unbounded writer waiting in
 *   the registry, a new reader is not granted;
 * - only an abort or close() rejects a wait; close() releases its client's holds; a release of a live hold
 *   succeeds;
 * - nested calls in a holder's flow (NestedCommand): re-entry and downgrade granted at once with exactly one
 *   count more in the hash, and the hash as before after their release; an upgrade refused
 *   (LockUpgradeError) with nothing changed.
 *
 * Liveness at the end of a run: after the faults stop, three unbounded writers and three unbounded readers
 * on a free lock are each granted (and release at once) within STABLE_MS of the previous release.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import fc from 'fast-check';
import { LockUpgradeError, type LockLease, type RReadWriteLock } from '../../src/index.js';
import { readWriteLockKeys, type ReadWriteLockKeys } from '../../src/redis/keys.js';
import type { Redis } from '../support/fixture.js';
import { RedissonReadWriteLock, redissonOwner } from '../support/redisson.js';
import {
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
import { countSkipped, countStep, newStats } from './runner.js';
import { settlesWithin, type ServerInfo } from './world.js';

export const stats = newStats();

type Side = 'read' | 'write';
type Actor = PrimitiveActor<RReadWriteLock>;

/** One acquisition, in a flow of its own; its lease once granted. */
class RwJob extends WaitJob<RReadWriteLock> {
  readonly side: Side;
  lease: LockLease | undefined;
  /** The hold is gone (a DEL or PEXPIRE of the hash) or being released: not judged as live. */
  gone = false;
  /**
   * Runs a function in the acquisition's flow (a nested call: NestedCommand). Declared only: it is set while
   * the base constructor runs the call, which an initialised field would overwrite.
   */
  declare inFlow: (<R>(fn: () => R) => R) | undefined;

  constructor(actor: Actor, side: Side, wait: number | undefined) {
    super(actor, `${side}(${wait === undefined ? '' : `${wait}ms`})`, wait, async (rw, signal, job) => {
      const lock = side === 'read' ? rw.readLock() : rw.writeLock();
      const options =
        wait === undefined ? { leaseTime: LEASE_MS, signal } : { waitTime: wait, leaseTime: LEASE_MS, signal };
      return acquiredInTime(async () => {
        const lease = await actor.client.locks.run(() => {
          if (job instanceof RwJob) job.inFlow = AsyncLocalStorage.snapshot();
          return lock.acquire(options);
        });
        if (job instanceof RwJob) job.lease = lease;
      });
    });
    this.side = side;
  }

  /** Granted, told, and neither released nor taken away. */
  get live(): boolean {
    return this.adopted && this.outcome?.value === true && !this.gone;
  }
}

const rwJob = (actor: Actor): RwJob | undefined => (actor.last instanceof RwJob ? actor.last : undefined);

interface Snapshot {
  readonly mode: string | undefined;
  readonly readers: number;
  readonly writers: number;
  /** Live entries of the waiting writers' registry. */
  readonly registered: number;
}

class RwWorld extends PrimitiveWorld<RReadWriteLock> {
  readonly rwKeys: ReadWriteLockKeys;

  /** A played Redisson client (one thread) on the same lock, through Redisson's scripts (JavaCommand). */
  readonly java: RedissonReadWriteLock;

  constructor(server: ServerInfo, admin: Redis, name: string) {
    const keys = readWriteLockKeys('', name);
    const owner = redissonOwner();
    // Redisson's read hold has a timeout key of its own (deleted at its unlock; left with its lease by a DEL).
    super(
      server,
      admin,
      name,
      [keys.lockKey, keys.writersKey, keys.holdKey, `{${name}}:${owner}:rwlock_timeout:1`],
      (locks) => locks.getReadWriteLock(name),
    );
    this.rwKeys = keys;
    this.java = new RedissonReadWriteLock(admin, name, owner);
  }

  async snapshot(): Promise<Snapshot> {
    const { lockKey, writersKey } = this.rwKeys;
    const replies = await this.admin.multi().hgetall(lockKey).zrange(writersKey, 0, -1, 'WITHSCORES').time().exec();
    const fields = (replies?.[0]?.[1] ?? {}) as Record<string, string>;
    const scores = (replies?.[1]?.[1] ?? []) as string[];
    const [seconds = '0', micros = '0'] = (replies?.[2]?.[1] ?? []) as string[];
    const serverNow = Number(seconds) * 1000 + Number(micros) / 1000;
    let readers = 0;
    let writers = 0;
    for (const field of Object.keys(fields)) {
      if (field === 'mode') continue;
      if (field.endsWith(':write')) writers++;
      else readers++;
    }
    let registered = 0;
    for (let i = 1; i < scores.length; i += 2) if (Number(scores[i]) > serverNow) registered++;
    return { mode: fields['mode'], readers, writers, registered };
  }
}

export class RwHarness extends HoldHarness<RReadWriteLock, RwWorld, RwJob> {
  /** What the played Redisson client holds (it takes one hold at a time, without waiting). */
  java: Side | undefined;
  stable: Snapshot | undefined;
  /** The registry or the holds may have changed under the model (a fault): newcomers are not judged. */
  excused = false;

  private constructor(world: RwWorld) {
    super(world, stats);
  }

  static async create(server: ServerInfo, admin: Redis, name: string): Promise<RwHarness> {
    const world = new RwWorld(server, admin, name);
    const h = new RwHarness(world);
    await world.ready();
    await h.settle();
    return h;
  }

  faulted(): void {
    this.excused = true;
  }

  protected describeModel(): string {
    const actors = this.world.actors
      .map((a) => {
        const job = rwJob(a);
        if (!job) return `${a.name}: -`;
        return `${a.name}: ${job.live ? `holds ${job.side}` : job.waiting ? `waits ${String(job)}` : '-'}`;
      })
      .join('; ');
    return `${actors}; Java: ${this.java ? `holds ${this.java}` : '-'}`;
  }

  live(side?: Side): RwJob[] {
    return this.world.actors
      .map(rwJob)
      .filter((job): job is RwJob => job !== undefined && job.live && (side === undefined || job.side === side));
  }

  protected jobOf(actor: Actor): RwJob | undefined {
    return rwJob(actor);
  }

  /**
   * A grant while another hold excludes it is a violation (a write grant: any hold; a read grant: a
   * writer's), the played Redisson client's included.
   */
  protected granted(job: RwJob, who: string): void {
    const others = this.live(job.side === 'write' ? undefined : 'write').map((o) => `${o.actor.name} holds ${o.side}`);
    if (this.java === 'write' || (this.java && job.side === 'write')) others.push(`Java holds ${this.java}`);
    if (others.length > 0) throw this.violation(`${who} was granted while ${others.join(', ')}`);
    if (job.client.closed) job.gone = true;
  }

  #unstable(snap: Snapshot): string | undefined {
    const reads = this.live('read').length + (this.java === 'read' ? 1 : 0);
    const writes = this.live('write').length + (this.java === 'write' ? 1 : 0);
    if (snap.writers > 1 || (snap.writers > 0 && snap.readers > 0))
      throw this.violation(`Redis has ${snap.writers} writers and ${snap.readers} readers at once`);
    if (snap.readers < reads || snap.writers < writes)
      throw this.violation(
        `Redis has ${snap.readers} readers and ${snap.writers} writers; the model ${reads} and ${writes}`,
      );
    if (snap.readers > reads || snap.writers > writes)
      return `Redis has ${snap.readers} readers and ${snap.writers} writers, the model ${reads} and ${writes}`;
    const expectedMode = writes > 0 ? 'write' : reads > 0 ? 'read' : undefined;
    if (snap.mode !== expectedMode) return `mode ${snap.mode ?? 'absent'}, expected ${expectedMode ?? 'absent'}`;
    const alive = this.world.actors
      .map(rwJob)
      .filter((job): job is RwJob => job !== undefined && job.waiting && !job.aborted && !job.client.closed);
    if (reads + writes === 0 && alive.length > 0) return `free, and ${alive.length} waiting`;
    const writers = alive.filter((job) => job.side === 'write').length;
    if (writes === 0 && writers === 0 && snap.registered === 0 && alive.some((job) => job.side === 'read'))
      return 'read-held, a reader waiting and no writer';
    if (snap.registered > writers) return `${snap.registered} writers registered`;
    return undefined;
  }

  async settle(): Promise<Snapshot> {
    this.stable = await this.settleOn(
      STABLE_MS,
      () => this.adopt(),
      () => this.world.snapshot(),
      (state) => this.#unstable(state),
    );
    this.excused = false;
    return this.stable;
  }

  async release(job: RwJob): Promise<void> {
    const wasLost = job.gone;
    job.gone = true;
    this.note(`${job.actor.name} releases its ${job.side} hold${wasLost ? ' (gone)' : ''}`);
    try {
      await job.lease?.release();
    } catch (error) {
      if (!wasLost)
        throw this.violation(`${job.actor.name}: release of a live ${job.side} hold failed: ${describeError(error)}`);
    }
  }

  /** close() released the client's holds. */
  clientClosed(client: PrimitiveClient<RReadWriteLock>): void {
    for (const job of this.live()) if (job.client === client) job.gone = true;
  }

  /** The played Redisson client gives its hold back through Redisson's script (its message must wake ours). */
  async javaRelease(): Promise<void> {
    const side = this.java;
    if (!side) return;
    this.java = undefined;
    this.note(`Java releases its ${side} hold`);
    const reply = side === 'read' ? await this.world.java.readUnlock() : await this.world.java.writeUnlock();
    if (reply === null) throw this.violation(`Java's ${side} unlock found no hold of its own`);
  }

  /** A DEL or PEXPIRE of the hash: every hold is gone. */
  holdsGone(): void {
    this.java = undefined;
    for (const job of this.live()) job.gone = true;
  }

  async finish(): Promise<void> {
    const { world } = this;
    await this.endWaits();
    for (const job of this.live()) await this.release(job);
    await this.javaRelease();
    await this.settle();
    // Liveness once the faults stopped: three writers and three readers, each releasing at once.
    await this.takeTurns(
      (actor) => new RwJob(actor, actor.index % 2 === 0 ? 'write' : 'read', undefined),
      async (job) => {
        if (!job.live) return false;
        await this.release(job);
        return true;
      },
      async () => {
        const { lockKey, writersKey, holdKey } = world.rwKeys;
        return JSON.stringify([
          await world.admin.hgetall(lockKey),
          await world.admin.pttl(lockKey),
          await world.admin.zrange(writersKey, 0, -1, 'WITHSCORES'),
          await world.admin.time(),
          await world.admin.hgetall(holdKey),
        ]);
      },
    );
    await this.settle();
    const left = await world.admin.exists(world.rwKeys.lockKey, world.rwKeys.writersKey);
    if (left > 0) throw this.violation('the lock or the writers registry is left on the server');
    await this.closeClients();
  }
}

type RwCommand = fc.AsyncCommand<RwHarness, RwHarness>;

class AcquireCommand implements RwCommand, InnerStep<RwHarness> {
  constructor(
    readonly actor: number,
    readonly side: Side,
    readonly wait: number | undefined,
  ) {}

  get kind(): string {
    return this.side;
  }

  by(actor: number): AcquireCommand {
    return new AcquireCommand(actor, this.side, this.wait);
  }

  check(h: RwHarness): boolean {
    const actor = h.world.actors[this.actor];
    const job = actor && rwJob(actor);
    return actor !== undefined && !actor.busy && !actor.unadopted && !job?.live;
  }

  start(h: RwHarness): RwJob {
    return h.world.begin(h, this.actor, (actor) => new RwJob(actor, this.side, this.wait));
  }

  async run(h: RwHarness): Promise<void> {
    countStep(stats, this.side, 'step');
    const stable = h.excused ? undefined : h.stable;
    // Writer preference: an unbounded writer seen waiting in the registry keeps a new reader out.
    const writerWaits =
      stable !== undefined &&
      stable.registered > 0 &&
      h.world.actors.some((a) => {
        const job = rwJob(a);
        return job?.waiting === true && job.side === 'write' && job.wait === undefined && !job.aborted;
      });
    const job = this.start(h);
    await settlesWithin(job.done, WATCH_MS);
    h.adopt();
    if (writerWaits && this.side === 'read' && job.outcome?.value && !h.excused)
      throw h.violation(`${job.actor.name} ${String(job)} was granted while a writer waits: the writer is starved`);
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} ${this.side}(${this.wait === undefined ? '' : `${this.wait}ms`})`;
  }
}

class ReleaseCommand implements RwCommand {
  constructor(readonly actor: number) {}

  check(h: RwHarness): boolean {
    const actor = h.world.actors[this.actor];
    return (actor && rwJob(actor)?.live) ?? false;
  }

  async run(h: RwHarness): Promise<void> {
    const actor = h.world.actors[this.actor];
    const job = actor && rwJob(actor);
    if (!job) return;
    countStep(stats, 'release', 'step');
    await h.release(job);
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} release`;
  }
}

/**
 * A nested call in the flow of a live hold, held and released within the command: the same side again
 * (re-entry), the read lock under the write lock (downgrade), both granted at once with the hash as before
 * plus one count (an owner's count, or the flow's read field beside its write field), and as before once
 * the nested lease is released; or the write lock under a read hold only (upgrade): LockUpgradeError at
 * once, with nothing in Redis changed.
 */
class NestedCommand implements RwCommand {
  constructor(
    readonly actor: number,
    readonly side: Side,
  ) {}

  check(h: RwHarness): boolean {
    const actor = h.world.actors[this.actor];
    return (actor && rwJob(actor)?.live) ?? false;
  }

  async run(h: RwHarness): Promise<void> {
    const actor = h.world.actors[this.actor];
    const job = actor && rwJob(actor);
    // Only with nobody waiting: a wait granted meanwhile would change the hash beside the nested call.
    if (!job?.live || !job.inFlow || h.world.actors.some((a) => a.busy)) {
      countSkipped(stats);
      return;
    }
    const what =
      job.side === 'read' && this.side === 'write' ? 'upgrade' : job.side === this.side ? 're-entry' : 'downgrade';
    countStep(stats, `nested ${what}`, 'step');
    const { admin, rwKeys } = h.world;
    const before = await admin.hgetall(rwKeys.lockKey);
    const rw = job.client.primitive;
    const lock = this.side === 'read' ? rw.readLock() : rw.writeLock();
    const who = `${job.actor.name} (holding ${job.side}) nested ${this.side}()`;
    let nested: LockLease;
    try {
      nested = await job.inFlow(() => lock.acquire({ waitTime: 0, leaseTime: LEASE_MS }));
    } catch (error) {
      if (what !== 'upgrade' || !(error instanceof LockUpgradeError))
        throw h.violation(`${who} (${what}) rejected: ${describeError(error)}`);
      const after = await admin.hgetall(rwKeys.lockKey);
      if (JSON.stringify(after) !== JSON.stringify(before))
        throw h.violation(
          `${who}: a refused upgrade changed the hash from ${JSON.stringify(before)} to ${JSON.stringify(after)}`,
        );
      h.note(`${who} -> refused (upgrade)`);
      await h.settle();
      return;
    }
    if (what === 'upgrade') {
      await nested.release().catch(() => undefined);
      throw h.violation(`${who} was granted: an upgrade must be refused`);
    }
    const during = await admin.hgetall(rwKeys.lockKey);
    const added = oneCountMore(before, during);
    if (added !== undefined) throw h.violation(`${who} (${what}): ${added}`);
    h.note(`${who} -> granted (${what})`);
    try {
      await nested.release();
    } catch (error) {
      throw h.violation(`${who}: release of the nested hold failed: ${describeError(error)}`);
    }
    const after = await admin.hgetall(rwKeys.lockKey);
    if (JSON.stringify(after) !== JSON.stringify(before))
      throw h.violation(
        `${who}: after its release the hash is ${JSON.stringify(after)}, not ${JSON.stringify(before)}`,
      );
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} nested ${this.side}()`;
  }
}

/** Why `during` is not `before` plus one count (one owner's count up by one, or one new field at 1). */
function oneCountMore(before: Record<string, string>, during: Record<string, string>): string | undefined {
  const changed = Object.keys(during).filter((field) => during[field] !== before[field]);
  const removed = Object.keys(before).filter((field) => !(field in during));
  const [field] = changed;
  const ok =
    removed.length === 0 &&
    changed.length === 1 &&
    field !== undefined &&
    field !== 'mode' &&
    Number(during[field]) === Number(before[field] ?? 0) + 1;
  return ok ? undefined : `the hash went from ${JSON.stringify(before)} to ${JSON.stringify(during)}`;
}

/**
 * A played Redisson client (test/support/redisson.ts) on the same lock: tryReadLock or tryWriteLock (no wait,
 * the model's lease) through Redisson's scripts, judged against every live hold (a grant must respect them:
 * our scripts must leave the hash as Redisson's expect it), or its unlock, whose message our waiters must hear
 * (the settle's liveness). Redisson does not see our waiting writers: its readers may pass them.
 */
class JavaCommand implements RwCommand {
  constructor(readonly what: 'read' | 'write' | 'release') {}

  check(h: RwHarness): boolean {
    return this.what === 'release' ? h.java !== undefined : h.java === undefined;
  }

  async run(h: RwHarness): Promise<void> {
    countStep(stats, `Java ${this.what}`, 'step');
    if (this.what === 'release') await h.javaRelease();
    else {
      h.adopt();
      const { java } = h.world;
      const ttl = this.what === 'read' ? await java.tryReadLock(LEASE_MS) : await java.tryWriteLock(LEASE_MS);
      h.note(`Java try${this.what === 'read' ? 'Read' : 'Write'}Lock -> ${ttl === null ? 'granted' : `ttl ${ttl}`}`);
      if (ttl === null) {
        // Holds told before the call was sent, and still live now (a fault may have taken some away since).
        const blocking = h.live(this.what === 'write' ? undefined : 'write');
        if (blocking.length > 0)
          throw h.violation(
            `Java's ${this.what} lock was granted while ${blocking.map((o) => `${o.actor.name} holds ${o.side}`).join(', ')}`,
          );
        h.java = this.what;
      }
    }
    await h.settle();
  }

  toString(): string {
    return this.what === 'release' ? 'Java release' : `Java try${this.what === 'read' ? 'Read' : 'Write'}Lock`;
  }
}

/** DEL or PEXPIRE 1 of the lock's hash (every hold is gone) or of the waiting writers' registry. */
class DeleteKeyCommand extends KeyFaultCommand<RReadWriteLock, RwHarness> {
  override check(h: RwHarness): boolean {
    // The hash only with nobody waiting: a grant made just before the DEL whose reply comes after it cannot be
    // told from one made just after (a live hold), so the model could not say which holds the DEL took.
    return this.key !== 'lock' || !h.world.actors.some((a) => a.busy);
  }

  protected async hit(h: RwHarness): Promise<void> {
    const { admin, rwKeys } = h.world;
    const key = this.key === 'lock' ? rwKeys.lockKey : rwKeys.writersKey;
    if (this.key !== 'lock') {
      if (this.how === 'del') await admin.del(key);
      else await h.world.expireNow(key);
      return;
    }
    if (this.how === 'del') await admin.del(key);
    else if (!(await h.world.expireHashNow(key))) {
      h.note('   missed: a holder set a lease anew within its millisecond, and Redis kept every hold');
      return;
    }
    h.holdsGone();
  }
}

const acquireArb: fc.Arbitrary<AcquireCommand> = fc
  .tuple(
    actorArb,
    fc.constantFrom<Side>('read', 'read', 'write'),
    fc.constantFrom<number | undefined>(undefined, 0, 300, 1500),
  )
  .map(([actor, side, wait]) => new AcquireCommand(actor, side, wait));
const releaseArb = actorArb.map((actor) => new ReleaseCommand(actor));
const nestedArb = fc
  .tuple(actorArb, fc.constantFrom<Side>('read', 'write'))
  .map(([actor, side]) => new NestedCommand(actor, side));

/** Operations three times as often as each kind of fault. */
export const readWriteCommands: fc.Arbitrary<RwCommand>[] = [
  acquireArb,
  acquireArb,
  acquireArb,
  releaseArb,
  releaseArb,
  releaseArb,
  nestedArb,
  nestedArb,
  fc.constantFrom('read' as const, 'write' as const, 'release' as const).map((what) => new JavaCommand(what)),
  fc
    .tuple(fc.constantFrom('lock' as const, 'writers' as const), fc.constantFrom('del' as const, 'pexpire' as const))
    .map(([key, how]) => new DeleteKeyCommand(key, how)),
  ...faultCommands<RReadWriteLock, RwHarness>(acquireArb),
];
