/**
 * The model-based test of RCountDownLatch: six actors on two lock clients await, count down, arm and read
 * one latch, interleaved with faults (test/model/primitive.ts's, DEL and PEXPIRE of the count, and a killed
 * data connection under a count-down in flight, which ioredis resends), and a played Redisson client (Java)
 * counting down and arming the same latch through Redisson's own scripts. After every command Redis (the
 * count, read on an admin connection) and what every caller was told are judged against a model:
 *
 * - the count in Redis is the model's exactly (every count-down counted once, a resend included; the key
 *   absent at zero); trySetCount succeeds exactly when the latch is not counting; getCount tells the count;
 * - never open before zero: an await resolves true only if the count was zero at some moment of its wait;
 * - every waiter is released at zero: once a count-down reaches zero (it announces it; Java's on Redisson's
 *   channel, which our waiters must hear), every waiter, and
 *   every await begun while the count is zero, resolves true within RELEASE_MS (after faults end); a zero
 *   made by deleting the key announces nothing, so only the awaits begun after it are bound;
 * - an await with a waitTime gives up no earlier than its waitTime; only an abort or close() rejects it.
 *
 * Liveness at the end of a run: after the faults stop, six unbounded waiters are all released within
 * RELEASE_MS of the count-down that reaches zero.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import type { RCountDownLatch } from '../../src/index.js';
import { latchKeys } from '../../src/redis/keys.js';
import type { Redis } from '../support/fixture.js';
import { RedissonCountDownLatch } from '../support/redisson.js';
import {
  ACTORS,
  actorArb,
  describeError,
  faultCommands,
  KeyFaultCommand,
  fmt,
  ModelHarness,
  PrimitiveWorld,
  slotArb,
  WaitJob,
  type InnerStep,
  type PrimitiveActor,
} from './primitive.js';
import { countStep, newStats } from './runner.js';
import { now, settlesWithin, type ServerInfo } from './world.js';

export const stats = newStats();

const INITIAL_COUNT = 2;
/**
 * A waiter bound to be released is released within this, after the zero and the end of faults: one message
 * or one GET (a killed subscriber reconnects and looks again in well under a second), the rest margin for a
 * loaded 2-core machine.
 */
const RELEASE_MS = 5000;
/** How long an await step is watched before the command ends (it then waits in the background). */
const WATCH_MS = 120;

type Actor = PrimitiveActor<RCountDownLatch>;

class AwaitJob extends WaitJob<RCountDownLatch> {
  /** By when it must resolve true (set while the model binds it: the latch is open to it). */
  boundBy: number | undefined;

  constructor(actor: Actor, wait: number | undefined) {
    super(actor, `await(${wait === undefined ? '' : `${wait}ms`})`, wait, (latch, signal) =>
      latch.await(wait === undefined ? { signal } : { waitTime: wait, signal }),
    );
  }
}

const awaitJob = (actor: Actor): AwaitJob | undefined => (actor.last instanceof AwaitJob ? actor.last : undefined);

/** The slot of the played Redisson client (test/support/redisson.ts) that takes part beside clients A and B. */
const JAVA = 2;
const WHO = ['A', 'B', 'Java'] as const;

/** A stretch in which the count was zero, as the model knows it: from a change's send to a change's reply. */
interface Open {
  readonly from: number;
  to: number;
}

class LatchWorld extends PrimitiveWorld<RCountDownLatch> {
  readonly key: string;

  constructor(server: ServerInfo, admin: Redis, name: string) {
    const { lockKey } = latchKeys('', name);
    super(server, admin, name, [lockKey], (locks) => locks.getCountDownLatch(name));
    this.key = lockKey;
  }
}

export class LatchHarness extends ModelHarness<RCountDownLatch, LatchWorld> {
  count = 0;
  /** When the count last became zero, and whether that was announced (a count-down reached it). */
  zeroSince = -Infinity;
  zeroAnnounced = true;
  readonly opens: Open[] = [{ from: -Infinity, to: Infinity }];

  private constructor(world: LatchWorld) {
    super(world, stats);
  }

  static async create(server: ServerInfo, admin: Redis, name: string): Promise<LatchHarness> {
    const world = new LatchWorld(server, admin, name);
    const h = new LatchHarness(world);
    await world.ready();
    await h.trySetCount(0, INITIAL_COUNT);
    await h.settle();
    return h;
  }

  faulted(): void {
    // Nothing of the latch's judgement depends on an order a fault could change.
  }

  protected describeModel(): string {
    const waits = this.world.actors
      .filter((a) => a.busy)
      .map((a) => `${a.name} ${String(a.last)}`)
      .join(', ');
    return `count ${this.count}${this.count === 0 ? ` (zero${this.zeroAnnounced ? ', announced' : ''})` : ''}; waiting: ${waits || 'none'}`;
  }

  /** The count went to zero: sent at `sentAt`, told at `at`. */
  opened(sentAt: number, announced: boolean): void {
    if (this.count === 0) return;
    this.count = 0;
    this.zeroSince = sentAt;
    this.zeroAnnounced = announced;
    this.opens.push({ from: sentAt, to: Infinity });
  }

  /** Client A's or B's latch, or (slot JAVA) a played Redisson client's on the admin connection. */
  #latch(slot: number): Pick<RCountDownLatch, 'trySetCount' | 'countDown'> {
    if (slot === JAVA) return new RedissonCountDownLatch(this.world.admin, this.world.name);
    const latch = this.world.clients[slot]?.primitive;
    if (!latch) throw new Error('no client');
    return latch;
  }

  async trySetCount(slot: number, n: number): Promise<void> {
    const latch = this.#latch(slot);
    const expected = this.count === 0;
    const set = await latch.trySetCount(n);
    const at = now();
    this.note(`${WHO[slot] ?? '?'} trySetCount(${n}) -> ${set}`);
    if (set !== expected)
      throw this.violation(`trySetCount(${n}) returned ${set} with the count at ${this.count} in the model`);
    if (!set) return;
    this.count = n;
    const open = this.opens.at(-1);
    if (open && open.to === Infinity) open.to = at;
  }

  async countDown(slot: number): Promise<void> {
    const latch = this.#latch(slot);
    const sentAt = now();
    await latch.countDown();
    this.countedDown(sentAt);
  }

  countedDown(sentAt: number): void {
    this.note(`count-down from ${this.count}`);
    if (this.count === 1) this.opened(sentAt, true);
    else if (this.count > 1) this.count--;
  }

  /** Judges what settled awaits were told. */
  adopt(): void {
    for (const actor of this.world.actors) {
      const job = awaitJob(actor);
      if (!job?.outcome || job.adopted) continue;
      job.adopted = true;
      const { value: open, error, at } = job.outcome;
      this.judgeEnded(job);
      if (error !== undefined) continue;
      if (open) {
        if (!this.opens.some((o) => o.from <= at && o.to >= job.startedAt))
          throw this.violation(
            `${actor.name} ${String(job)} resolved true, but the count was never zero while it waited`,
          );
        this.note(`${actor.name} ${String(job)} released after ${fmt(at - job.startedAt)} ms`);
        continue;
      }
      if (job.wait === undefined)
        throw this.violation(`${actor.name} ${String(job)} resolved false without a waitTime`);
      if (job.boundBy !== undefined && job.boundBy <= job.startedAt + job.wait)
        throw this.violation(`${actor.name} ${String(job)} timed out although the latch was open to it`);
      this.note(`${actor.name} ${String(job)} timed out`);
    }
  }

  /** Binds the waiters the open latch must release; resolves to why the state is not settled yet. */
  #unsettled(value: string | null): string | undefined {
    const actual = value === null ? 0 : Number(value);
    if (actual !== this.count)
      throw this.violation(`Redis has the count at ${value ?? 'absent'}, the model at ${this.count}`);
    if (value !== null && actual <= 0) throw this.violation(`the count key is left at ${value}`);
    if (this.count !== 0) return undefined;
    const t = now();
    for (const actor of this.world.actors) {
      const job = awaitJob(actor);
      if (!job?.waiting || job.aborted || job.client.closed) continue;
      if (!this.zeroAnnounced && job.startedAt < this.zeroSince) continue;
      const by = Math.max(this.zeroSince, job.startedAt, this.calmFrom) + RELEASE_MS;
      if (job.wait !== undefined && job.startedAt + job.wait < by) continue;
      job.boundBy ??= by;
      if (t > job.boundBy)
        throw this.violation(
          `${actor.name} ${String(job)} not released ${fmt(t - Math.max(this.zeroSince, job.startedAt))} ms after the count reached zero`,
        );
      return `${actor.name} ${String(job)} to be released`;
    }
    return undefined;
  }

  async settle(): Promise<void> {
    // Bound by each waiter's own bound (the judge throws past it); this is a safety net.
    await this.settleOn(
      2 * RELEASE_MS,
      () => this.adopt(),
      () => this.world.admin.get(this.world.key),
      (value) => this.#unsettled(value),
    );
    this.adopt();
  }

  /** Ends the run: aborts the waits; liveness: six unbounded waiters are released at zero. */
  async finish(): Promise<void> {
    const { world } = this;
    await this.abortWaits();
    await this.settle();
    if (this.count === 0) await this.trySetCount(0, 2);
    const jobs = world.actors.map((actor) => {
      const job = new AwaitJob(actor, undefined);
      actor.last = job;
      return job;
    });
    await sleep(WATCH_MS);
    this.adopt();
    while (this.count > 0) await this.countDown(1);
    await this.settle();
    if (jobs.some((job) => job.outcome?.value !== true)) throw this.violation('liveness: a waiter was not released');
    await this.closeClients();
  }
}

type LatchCommand = fc.AsyncCommand<LatchHarness, LatchHarness>;

class AwaitCommand implements LatchCommand, InnerStep<LatchHarness> {
  readonly kind = 'await';

  constructor(
    readonly actor: number,
    readonly wait: number | undefined,
  ) {}

  by(actor: number): AwaitCommand {
    return new AwaitCommand(actor, this.wait);
  }

  check(h: LatchHarness): boolean {
    const actor = h.world.actors[this.actor];
    return actor !== undefined && !actor.busy && !actor.unadopted;
  }

  start(h: LatchHarness): void {
    h.world.begin(h, this.actor, (actor) => new AwaitJob(actor, this.wait));
  }

  async run(h: LatchHarness): Promise<void> {
    countStep(stats, 'await', 'step');
    this.start(h);
    const job = h.world.actors[this.actor]?.last;
    if (job) await settlesWithin(job.done, WATCH_MS);
    await h.settle();
  }

  toString(): string {
    return `${ACTORS[this.actor] ?? '?'} await(${this.wait === undefined ? '' : `${this.wait}ms`})`;
  }
}

/** countDown(), trySetCount(n) or getCount() by client A or B. */
class CountCommand implements LatchCommand {
  constructor(
    readonly slot: number,
    readonly what: 'countDown' | 'trySetCount' | 'getCount',
    readonly n: number,
  ) {}

  check(): boolean {
    return true;
  }

  async run(h: LatchHarness): Promise<void> {
    countStep(stats, this.slot === JAVA ? `Java ${this.what}` : this.what, 'step');
    if (this.what === 'countDown') await h.countDown(this.slot);
    else if (this.what === 'trySetCount') await h.trySetCount(this.slot, this.n);
    else {
      const value = await h.world.clients[this.slot]?.primitive.getCount();
      if (value !== h.count) throw h.violation(`getCount() returned ${value}, the model has ${h.count}`);
    }
    await h.settle();
  }

  toString(): string {
    const who = WHO[this.slot] ?? '?';
    return this.what === 'trySetCount' ? `${who} trySetCount(${this.n})` : `${who} ${this.what}()`;
  }
}

/** A count-down in flight when its client's data connection is killed: ioredis resends it after reconnecting. */
class ResendCommand implements LatchCommand {
  constructor(
    readonly slot: number,
    readonly asleep: boolean,
  ) {}

  check(): boolean {
    return true;
  }

  async run(h: LatchHarness): Promise<void> {
    const client = h.world.clients[this.slot];
    if (!client) return;
    countStep(stats, 'countDown+CLIENT KILL', 'step');
    h.faulted();
    const id = await client.connection.id();
    // Half the time the server sleeps while the count-down and the kill queue up: woken, it reads both in one
    // go and may run the count-down and drop its connection before the reply goes out (ioredis resends it).
    const sleeping = this.asleep ? await h.world.serverSleep(50) : undefined;
    const sentAt = now();
    // Its outcome is taken at once (a rejection while the kill is awaited would otherwise count as unhandled).
    const counted = client.primitive.countDown().then(
      () => undefined,
      (error: unknown) => error,
    );
    if (sleeping) await sleep(1);
    await h.world.admin.call('CLIENT', 'KILL', 'ID', String(id));
    await sleeping?.done;
    const error = await counted;
    if (error !== undefined) throw h.violation(`a count-down across a reconnect failed: ${describeError(error)}`);
    h.countedDown(sentAt);
    h.calmFrom = now();
    await h.settle();
  }

  toString(): string {
    return `${'AB'[this.slot] ?? '?'} countDown() with its connection killed${this.asleep ? ' (queued behind DEBUG SLEEP)' : ''}`;
  }
}

/** DEL or PEXPIRE 1 of the count: the latch opens, announcing nothing. */
class DeleteKeyCommand extends KeyFaultCommand<RCountDownLatch, LatchHarness> {
  protected async hit(h: LatchHarness): Promise<void> {
    const sentAt = now();
    if (this.how === 'del') await h.world.admin.del(h.world.key);
    else await h.world.expireNow(h.world.key);
    h.opened(sentAt, false);
  }
}

const awaitArb: fc.Arbitrary<AwaitCommand> = fc
  .tuple(actorArb, fc.constantFrom<number | undefined>(undefined, undefined, 50, 300, 1500, 6000))
  .map(([actor, wait]) => new AwaitCommand(actor, wait));
const countArb = fc
  .tuple(
    slotArb,
    fc.constantFrom('countDown' as const, 'countDown' as const, 'trySetCount' as const, 'getCount' as const),
    fc.integer({ min: 1, max: 3 }),
  )
  .map(([slot, what, n]) => new CountCommand(slot, what, n));
/** A played Redisson client counts down or sets the count: our waiters must hear its zero. */
const javaArb = fc
  .tuple(fc.constantFrom('countDown' as const, 'trySetCount' as const), fc.integer({ min: 1, max: 3 }))
  .map(([what, n]) => new CountCommand(JAVA, what, n));

/** Operations three times as often as each kind of fault. */
export const latchCommands: fc.Arbitrary<LatchCommand>[] = [
  awaitArb,
  awaitArb,
  awaitArb,
  countArb,
  countArb,
  countArb,
  javaArb,
  fc.tuple(slotArb, fc.boolean()).map(([slot, asleep]) => new ResendCommand(slot, asleep)),
  fc.constantFrom('del' as const, 'pexpire' as const).map((how) => new DeleteKeyCommand('count', how)),
  ...faultCommands<RCountDownLatch, LatchHarness>(awaitArb),
];
