/**
 * The model-based test of RReadWriteLock: six actors on two lock clients take the read or the write lock of
 * one name (each acquisition in a flow of its own, with a fixed 30 s lease, so that only the faults take
 * holds away), interleaved with faults (test/model/primitive.ts's, and DEL or PEXPIRE of the lock's hash or
 * of the waiting writers' registry). After every command Redis (the hash: `mode`, read owners, the writer;
 * the registry; on an admin connection) and what every caller was told are judged against a model:
 *
 * - writers exclusive, readers shared: a write grant while another hold is live, or a read grant while a
 *   write hold is live, is a violation; Redis's hash has the mode and the number of read and write owners of
 *   the model's live holds once stable;
 * - stable within STABLE_MS after every command and its faults: every grant told, a free lock with a waiter
 *   granted, a read-held lock with a read waiter and no waiting writer granted (liveness; a waiter that
 *   waited when the hash was deleted is left out: nothing announces a DEL, it sleeps out the lease it saw);
 * - a waiting writer is not starved by our readers: from a stable state with an unbounded writer waiting in
 *   the registry, a new reader is not granted;
 * - only an abort or close() rejects a wait; close() releases its client's holds; a release of a live hold
 *   succeeds.
 *
 * Liveness at the end of a run: after the faults stop, three unbounded writers and three unbounded readers
 * on a free lock are each granted (and release at once) within STABLE_MS of the previous release.
 */
import fc from 'fast-check';
import type { LockLease, RReadWriteLock } from '../../src/index.js';
import { readWriteLockKeys, type ReadWriteLockKeys } from '../../src/redis/keys.js';
import type { Redis } from '../support/fixture.js';
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
import { countStep, newStats } from './runner.js';
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
   * It waited when the hash was deleted: nothing announces that, so it may sleep until the lease it last
   * saw would have run out (up to LEASE_MS): the liveness judge leaves it out.
   */
  sleepy = false;

  constructor(actor: Actor, side: Side, wait: number | undefined) {
    super(actor, `${side}(${wait === undefined ? '' : `${wait}ms`})`, wait, async (rw, signal, job) => {
      const lock = side === 'read' ? rw.readLock() : rw.writeLock();
      const options =
        wait === undefined ? { leaseTime: LEASE_MS, signal } : { waitTime: wait, leaseTime: LEASE_MS, signal };
      return acquiredInTime(async () => {
        const lease = await actor.client.locks.run(() => lock.acquire(options));
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

  constructor(server: ServerInfo, admin: Redis, name: string) {
    const keys = readWriteLockKeys('', name);
    super(server, admin, name, [keys.lockKey, keys.writersKey, keys.holdKey], (locks) => locks.getReadWriteLock(name));
    this.rwKeys = keys;
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
    return actors;
  }

  live(side?: Side): RwJob[] {
    return this.world.actors
      .map(rwJob)
      .filter((job): job is RwJob => job !== undefined && job.live && (side === undefined || job.side === side));
  }

  protected jobOf(actor: Actor): RwJob | undefined {
    return rwJob(actor);
  }

  /** A grant while another hold excludes it is a violation (a write grant: any hold; a read grant: a writer's). */
  protected granted(job: RwJob, who: string): void {
    const others = this.live(job.side === 'write' ? undefined : 'write');
    if (others.length > 0)
      throw this.violation(
        `${who} was granted while ${others.map((o) => `${o.actor.name} holds ${o.side}`).join(', ')}`,
      );
    if (job.client.closed) job.gone = true;
  }

  #unstable(snap: Snapshot): string | undefined {
    const reads = this.live('read').length;
    const writes = this.live('write').length;
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
    const awake = alive.filter((job) => !job.sleepy);
    if (reads + writes === 0 && awake.length > 0) return `free, and ${awake.length} waiting`;
    const writers = alive.filter((job) => job.side === 'write').length;
    if (writes === 0 && writers === 0 && snap.registered === 0 && awake.some((job) => job.side === 'read'))
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

  /** A DEL or PEXPIRE of the hash: every hold is gone. */
  holdsGone(): void {
    for (const job of this.live()) job.gone = true;
    for (const actor of this.world.actors) {
      const job = rwJob(actor);
      if (job?.waiting) job.sleepy = true;
    }
  }

  async finish(): Promise<void> {
    const { world } = this;
    await this.endWaits();
    for (const job of this.live()) await this.release(job);
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
    return actor !== undefined && !actor.busy && !job?.live;
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

/** DEL or PEXPIRE 1 of the lock's hash (every hold is gone) or of the waiting writers' registry. */
class DeleteKeyCommand extends KeyFaultCommand<RReadWriteLock, RwHarness> {
  protected async hit(h: RwHarness): Promise<void> {
    const { admin, rwKeys } = h.world;
    const key = this.key === 'lock' ? rwKeys.lockKey : rwKeys.writersKey;
    if (this.how === 'del') await admin.del(key);
    else await h.world.expireNow(key);
    if (this.key === 'lock') h.holdsGone();
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

/** Operations three times as often as each kind of fault. */
export const readWriteCommands: fc.Arbitrary<RwCommand>[] = [
  acquireArb,
  acquireArb,
  acquireArb,
  releaseArb,
  releaseArb,
  releaseArb,
  fc
    .tuple(fc.constantFrom('lock' as const, 'writers' as const), fc.constantFrom('del' as const, 'pexpire' as const))
    .map(([key, how]) => new DeleteKeyCommand(key, how)),
  ...faultCommands<RReadWriteLock, RwHarness>(acquireArb),
];
