/**
 * What the models of the lock family's other primitives (semaphore, latch, ...) share: two lock clients on
 * their own connections (a closed one is replaced by a fresh one), six actors (three per client) that each
 * run one waiting call at a time in the background, and the fault commands (an event-loop stall or DEBUG
 * SLEEP with a call in flight, SCRIPT FLUSH, a killed data connection or a dropped reply with a call in
 * flight, CLIENT KILL TYPE pubsub, close() with a call of its client in flight, an abort). A model supplies its harness (PrimitiveHarness: settle-and-judge after every command) and its own
 * operations. Nothing here judges but what every primitive must do: an aborted or closed wait settles.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { createLockClient, LockClientClosedError, type LockClient } from '../../src/index.js';
import type { Redis } from '../support/fixture.js';
import { countSkipped, countStep, type Stats } from './runner.js';
import {
  BaseWorld,
  busyWait,
  CONNECTION_FAULT_NAMES,
  CONNECTION_FAULTS,
  ModelConnection,
  now,
  settlesWithin,
  trace,
  traceLog,
  tracing,
  WATCHDOG_TIMEOUTS,
  watchRenewals,
  type ConnectionFault,
  type RenewalInFlight,
  type RenewalWatch,
  type ServerInfo,
} from './world.js';

export const ACTORS = ['A0', 'A1', 'A2', 'B0', 'B1', 'B2'] as const;
export const ACTORS_PER_CLIENT = 3;
/** An aborted wait, or one whose client closed, settles within this. */
export const SETTLE_MS = 3000;
/** A wait may give up this much before its waitTime (timer and clock granularity). */
export const EARLY_MS = 15;

export const fmt = (ms: number): string => ms.toFixed(0);
export const describeError = (error: unknown): string =>
  error instanceof Error ? `${error.name}: ${error.message}` : JSON.stringify(error);

export class Violation extends Error {
  override readonly name = 'Violation';
}

/** One lock client on its own connection, and the primitive of the run on it. */
export class PrimitiveClient<P> implements RenewalWatch {
  readonly slot: number;
  readonly gen: number;
  readonly label: string;
  readonly connection: ModelConnection;
  readonly locks: LockClient;
  readonly primitive: P;
  /** Renewals of watchdog-mode permits sent and not yet answered (for the lag monitor). */
  readonly renewalsInFlight = new Set<RenewalInFlight>();
  closed = false;

  constructor(server: ServerInfo, slot: number, gen: number, make: (locks: LockClient) => P) {
    this.slot = slot;
    this.gen = gen;
    this.label = `${'AB'[slot] ?? '?'}${gen > 0 ? `#${gen}` : ''}`;
    this.connection = new ModelConnection(server);
    this.locks = createLockClient(this.connection.client, { watchdogTimeout: WATCHDOG_TIMEOUTS[slot] ?? 600 });
    watchRenewals(this.locks.clientId, this);
    this.primitive = make(this.locks);
  }
}

export interface WaitOutcome {
  /** What the call resolved to (granted, open); false when it rejected. */
  readonly value: boolean;
  readonly error?: unknown;
  readonly at: number;
}

/** One waiting call of an actor (an acquisition, an await), run in the background. */
export class WaitJob<P> {
  readonly actor: PrimitiveActor<P>;
  readonly client: PrimitiveClient<P>;
  readonly label: string;
  /** Its waitTime (undefined: unbounded; 0: one attempt). */
  readonly wait: number | undefined;
  readonly controller = new AbortController();
  readonly startedAt = now();
  readonly done: Promise<WaitOutcome>;
  outcome: WaitOutcome | undefined;
  aborted = false;
  adopted = false;

  constructor(
    actor: PrimitiveActor<P>,
    label: string,
    wait: number | undefined,
    call: (primitive: P, signal: AbortSignal, job: WaitJob<P>) => Promise<boolean>,
  ) {
    this.actor = actor;
    this.client = actor.client;
    this.label = label;
    this.wait = wait;
    this.done = call(this.client.primitive, this.controller.signal, this).then(
      (value) => this.#finish({ value, at: now() }),
      (error: unknown) => this.#finish({ value: false, error, at: now() }),
    );
  }

  #finish(outcome: WaitOutcome): WaitOutcome {
    this.outcome = outcome;
    trace(
      `${this.actor.name} ${this.label} -> ${outcome.error ? describeError(outcome.error) : String(outcome.value)}`,
    );
    return outcome;
  }

  /** Posted and not settled. */
  get waiting(): boolean {
    return this.outcome === undefined;
  }

  toString(): string {
    return this.label;
  }
}

export class PrimitiveActor<P> {
  readonly index: number;
  readonly name: string;
  readonly slot: number;
  readonly world: PrimitiveWorld<P>;
  /** What the model counts on this actor (permits held). */
  held = 0;
  last: WaitJob<P> | undefined;

  constructor(world: PrimitiveWorld<P>, index: number) {
    this.world = world;
    this.index = index;
    this.name = ACTORS[index] ?? `actor${index}`;
    this.slot = Math.floor(index / ACTORS_PER_CLIENT);
  }

  get client(): PrimitiveClient<P> {
    const client = this.world.clients[this.slot];
    if (!client) throw new Error(`no client in slot ${this.slot}`);
    return client;
  }

  get busy(): boolean {
    return this.last?.waiting ?? false;
  }

  /**
   * Its last call settled and the model has not taken in what it was told yet: a new call must not replace
   * it (its grant would drop out of the model, a hold in Redis that no actor answers for).
   */
  get unadopted(): boolean {
    return this.last?.outcome !== undefined && !this.last.adopted;
  }
}

/** Two clients, six actors and the primitive named `name` on each client. */
export class PrimitiveWorld<P> extends BaseWorld {
  readonly name: string;
  readonly clients: PrimitiveClient<P>[] = [];
  readonly actors: PrimitiveActor<P>[] = [];
  readonly retired: PrimitiveClient<P>[] = [];
  /** The primitive's keys, deleted at the end. */
  readonly keys: readonly string[];
  readonly #make: (locks: LockClient) => P;

  constructor(server: ServerInfo, admin: Redis, name: string, keys: readonly string[], make: (locks: LockClient) => P) {
    super(server, admin);
    this.name = name;
    this.keys = keys;
    this.#make = make;
    ACTORS.forEach((_, i) => this.actors.push(new PrimitiveActor(this, i)));
  }

  /**
   * PEXPIRE `key` 1 from the admin connection; resolves once it is gone (a read within that ms sees it), or
   * made anew by a client (with a TTL of its own: not waited out).
   */
  async expireNow(key: string): Promise<void> {
    if ((await this.admin.pexpire(key, 1)) !== 1) return;
    for (;;) {
      const ttl = await this.admin.pttl(key);
      if (ttl < 0 || ttl > 1) return;
      await sleep(2);
    }
  }

  /**
   * expireNow for a lock hash `key`: resolves whether its holds are gone. Not when a renewal or a re-entry
   * that Redis ran within that millisecond set a lease anew (the lock model met that beside a CPU hog): the
   * hash then still has every holder's field with at least the count it had at the PEXPIRE (read with it, in
   * one MULTI). A hash that expired and was taken anew holds its new holder's field instead.
   */
  async expireHashNow(key: string): Promise<boolean> {
    const replies = await this.admin.multi().hgetall(key).pexpire(key, 1).exec();
    const before = (replies?.[0]?.[1] ?? {}) as Record<string, string>;
    if (replies?.[1]?.[1] !== 1) return true;
    for (;;) {
      const ttl = await this.admin.pttl(key);
      if (ttl < 0 || ttl > 1) break;
      await sleep(2);
    }
    const after = await this.admin.hgetall(key);
    const counts = Object.entries(before).filter(([, value]) => /^\d+$/.test(value));
    return !(counts.length > 0 && counts.every(([field, count]) => Number(after[field] ?? 0) >= Number(count)));
  }

  /** Starts `make(actor)` as actor `index`'s current call, noted in the model's log. */
  begin<J extends WaitJob<P>>(
    h: { note(message: string): void },
    index: number,
    make: (actor: PrimitiveActor<P>) => J,
  ): J {
    const actor = this.actors[index];
    if (!actor) throw new Error(`no actor ${index}`);
    const job = make(actor);
    actor.last = job;
    h.note(`${actor.name} ${String(job)} on ${actor.client.label}`);
    return job;
  }

  /**
   * Starts the proxy, then the two clients (slot 1's through the proxy), and waits for ready connections (a
   * command queued offline reaches Redis later than a model assumes).
   */
  async ready(): Promise<void> {
    await this.startProxy();
    for (let slot = 0; slot < 2; slot++)
      this.clients.push(new PrimitiveClient(this.endpointFor(slot), slot, 0, this.#make));
    await Promise.all([this.fault.ping(), ...this.clients.map((c) => c.connection.ready())]);
  }

  async replaceClient(slot: number): Promise<PrimitiveClient<P>> {
    const old = this.clients[slot];
    if (!old) throw new Error(`no client in slot ${slot}`);
    this.retired.push(old);
    const fresh = new PrimitiveClient(this.endpointFor(slot), slot, old.gen + 1, this.#make);
    this.clients[slot] = fresh;
    await fresh.connection.ready();
    return fresh;
  }

  /** Best effort, no judging: ends every wait, closes and quits everything, deletes the keys. */
  async teardown(): Promise<void> {
    await this.stopMonitoring();
    for (const actor of this.actors) {
      if (actor.last?.waiting) {
        actor.last.controller.abort();
        await settlesWithin(actor.last.done, SETTLE_MS);
      }
    }
    await this.closeAll([...this.clients, ...this.retired]);
    await this.admin.del(...this.keys).catch(() => undefined);
  }
}

/** What the shared commands need of a model's harness. */
export interface PrimitiveHarness<P> {
  readonly world: PrimitiveWorld<P>;
  readonly stats: Stats;
  /** A fault's end: the model's bounds count from here. */
  calmFrom: number;
  /** A fault happened: what it may legitimately disturb (an order, a queue) is not judged until stable. */
  faulted(): void;
  note(message: string): void;
  violation(message: string): Violation;
  /** Waits for the state to settle, judging it (after every command). */
  settle(): Promise<unknown>;
  /** `client` was closed, and every wait of it settled (a lock's holds are released then). */
  clientClosed?(client: PrimitiveClient<P>): void;
}

/** A model's harness: its log, its violations, and unmodeled stalls judged as faults. */
export abstract class ModelHarness<P, W extends PrimitiveWorld<P>> implements PrimitiveHarness<P> {
  readonly world: W;
  readonly stats: Stats;
  calmFrom = 0;
  readonly #log: string[] = [];

  protected constructor(world: W, stats: Stats) {
    this.world = world;
    this.stats = stats;
    world.onStall = (ms) => {
      if (!stats.shrinking) stats.stalls++;
      this.faulted();
      this.calmFrom = Math.max(this.calmFrom, now());
      this.note(`unmodeled stall ${fmt(ms)} ms`);
    };
  }

  abstract faulted(): void;
  abstract settle(): Promise<unknown>;
  /** The model's state, for a violation's message. */
  protected abstract describeModel(): string;

  /** Waits for a DEBUG SLEEP still running (the start of every settle). */
  protected async faultOver(): Promise<void> {
    await this.world.faultInFlight;
    this.world.faultInFlight = undefined;
  }

  /**
   * Reads the state (after adopting what settled) until `unstable` gives no reason to wait, at most `boundMs`
   * after now and after the end of the latest fault; resolves to the last read.
   */
  protected async settleOn<S>(
    boundMs: number,
    adopt: () => void,
    read: () => Promise<S>,
    unstable: (state: S) => string | undefined,
  ): Promise<S> {
    await this.faultOver();
    const by = Math.max(now(), this.calmFrom) + boundMs;
    let state: { value: S } | undefined;
    await pollUntil(
      this,
      () => Math.max(by, this.calmFrom + boundMs),
      async () => {
        adopt();
        state = { value: await read() };
        // A command queued for a reconnect (or resent after one) may still change Redis: a call that gave up
        // while its connection was down can run after the read (a killed connection, a dropped reply).
        for (const client of this.world.clients) {
          const busy = client.connection.busy();
          if (busy) return `${client.label}'s connection is ${busy}`;
        }
        for (const client of this.world.clients) {
          const down = client.closed ? undefined : await client.connection.unreachable();
          if (down) return `${client.label}'s connection is ${down}`;
        }
        // A call that settled after adopt() (during the read or the connection checks, which await too) is
        // neither waiting nor adopted: judging this read without it would miss its grant (its reply may come
        // in before a read sent earlier on another connection). Checked after the last await, right before
        // the judging, which awaits nothing.
        const unadopted = this.world.actors.find((a) => a.unadopted);
        if (unadopted) return `${unadopted.name}'s ${String(unadopted.last)} settled during the read`;
        return unstable(state.value);
      },
    );
    if (!state) throw new Error('nothing read');
    return state.value;
  }

  /** Aborts every wait still running; each must settle within SETTLE_MS (the start of every finish). */
  protected async abortWaits(): Promise<void> {
    for (const actor of this.world.actors) {
      const job = actor.last;
      if (job?.waiting) {
        job.aborted = true;
        job.controller.abort();
        if (!(await settlesWithin(job.done, SETTLE_MS))) throw this.violation(`${actor.name}: an aborted wait hangs`);
      }
    }
  }

  /** Closes the run's clients (the end of every finish) and reports the harness's own errors. */
  protected async closeClients(): Promise<void> {
    for (const client of this.world.clients) {
      client.closed = true;
      await client.locks.close();
    }
    if (this.world.harnessErrors.length > 0) throw new Error(`harness: ${this.world.harnessErrors.join('; ')}`);
  }

  /**
   * Judges a wait that settled without success (nothing for a success): it rejected only if aborted or closed, and a bounded one gave
   * up no earlier than its waitTime (an unbounded one resolving false is judged by the model).
   */
  protected judgeEnded(job: WaitJob<P>): void {
    if (!job.outcome || job.outcome.value) return;
    const { error, at } = job.outcome;
    const who = `${job.actor.name} ${String(job)}`;
    if (error !== undefined) {
      const closed = error instanceof LockClientClosedError && job.client.closed;
      if (!job.aborted && !closed) throw this.violation(`${who} rejected: ${describeError(error)}`);
      this.note(`${who} ended: ${closed ? 'closed' : 'aborted'}`);
      return;
    }
    if (job.wait !== undefined && !job.aborted && at - job.startedAt < job.wait - EARLY_MS)
      throw this.violation(`${who} gave up after ${fmt(at - job.startedAt)} ms, before its waitTime`);
  }

  note(message: string): void {
    this.#log.push(`${fmt(now() % 100_000).padStart(6)} ${message}`);
    if (this.#log.length > 60) this.#log.shift();
    trace(message);
  }

  violation(message: string): Violation {
    const traced = tracing ? `\n  trace:\n${traceLog.slice(-120).join('\n')}` : '';
    return new Violation(`${message}\n  ${this.describeModel()}\n  log:\n    ${this.#log.join('\n    ')}${traced}`);
  }
}

/** A model's waiting call, which a fault command can start in flight. */
export interface InnerStep<H> {
  readonly actor: number;
  readonly kind: string;
  check(h: H): boolean;
  start(h: H): void;
  /** The same call by `actor` (an actor of the client a close() ends). */
  by(actor: number): InnerStep<H>;
  toString(): string;
}

type Command<H extends object> = fc.AsyncCommand<H, H>;

/** An event-loop stall or DEBUG SLEEP, with a model's call (or none) in flight. */
export class FaultCommand<P, H extends PrimitiveHarness<P>> implements Command<H> {
  constructor(
    readonly how: 'stall' | 'sleep',
    readonly ms: number,
    readonly inner: InnerStep<H> | undefined,
  ) {}

  check(h: H): boolean {
    return this.inner === undefined || this.inner.check(h);
  }

  async run(h: H): Promise<void> {
    countStep(h.stats, this.how === 'stall' ? 'Stall' : 'ServerSleep', 'step');
    h.faulted();
    const sleeping = this.how === 'sleep' ? await h.world.serverSleep(this.ms) : undefined;
    if (this.inner) {
      countStep(h.stats, this.inner.kind, 'inner');
      this.inner.start(h);
    }
    if (sleeping) await sleeping.done;
    else busyWait(this.ms);
    h.calmFrom = now();
    h.note(`${String(this)} over`);
    await h.settle();
  }

  toString(): string {
    return `${this.how === 'stall' ? 'stall' : 'DEBUG SLEEP'} ${this.ms}ms${this.inner ? ` with ${String(this.inner)}` : ''}`;
  }
}

/** A connection fault (world.ts, ConnectionFault) with a model's call (or none) in flight. */
export class ConnectionFaultCommand<P, H extends PrimitiveHarness<P>> implements Command<H> {
  readonly inner: InnerStep<H> | undefined;

  constructor(
    readonly how: ConnectionFault,
    inner: InnerStep<H> | undefined,
  ) {
    // A dropped reply hits slot 1's connections only: the call is made by the matching actor of that client.
    this.inner = how === 'drop' ? inner?.by(ACTORS_PER_CLIENT + (inner.actor % ACTORS_PER_CLIENT)) : inner;
  }

  check(h: H): boolean {
    return this.inner === undefined || this.inner.check(h);
  }

  async run(h: H): Promise<void> {
    const { world } = h;
    const client = world.clients[this.inner ? Math.floor(this.inner.actor / ACTORS_PER_CLIENT) : 0];
    if (!client) return;
    countStep(h.stats, CONNECTION_FAULT_NAMES[this.how], 'step');
    h.faulted();
    await world.connectionFault(this.how, client.connection, () => {
      if (this.inner) {
        countStep(h.stats, this.inner.kind, 'inner');
        this.inner.start(h);
      }
      return Promise.resolve();
    });
    h.calmFrom = now();
    h.note(`${String(this)} over`);
    await h.settle();
  }

  toString(): string {
    return `${CONNECTION_FAULT_NAMES[this.how]}${this.inner ? ` with ${String(this.inner)}` : ''}`;
  }
}

/**
 * DEL or PEXPIRE 1 of one of the primitive's keys from the admin connection; `hit` does it (an expired key is
 * judged once gone: see expireNow) and tells the model what it took.
 */
export abstract class KeyFaultCommand<P, H extends PrimitiveHarness<P>> implements Command<H> {
  constructor(
    readonly key: string,
    readonly how: 'del' | 'pexpire',
  ) {}

  check(h: H): boolean {
    return h.world.clients.length > 0;
  }

  protected abstract hit(h: H): Promise<void>;

  async run(h: H): Promise<void> {
    countStep(h.stats, `${this.how.toUpperCase()} ${this.key}`, 'step');
    h.faulted();
    await this.hit(h);
    h.calmFrom = now();
    h.note(String(this));
    await h.settle();
  }

  toString(): string {
    return `${this.how === 'del' ? 'DEL' : 'PEXPIRE'} ${this.key}`;
  }
}

/** CLIENT KILL TYPE pubsub: every subscriber connection drops (ioredis reconnects). */
export class KillSubscribersCommand<P, H extends PrimitiveHarness<P>> implements Command<H> {
  check(): boolean {
    return true;
  }

  async run(h: H): Promise<void> {
    countStep(h.stats, 'CLIENT KILL pubsub', 'step');
    h.faulted();
    await h.world.admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    h.calmFrom = now();
    h.note('CLIENT KILL TYPE pubsub');
    await h.settle();
  }

  toString(): string {
    return 'CLIENT KILL TYPE pubsub';
  }
}

/**
 * close() of a client with a call of its own (or none) in flight: close() settles, so does every wait of the
 * client (the model judges how); a fresh client replaces it.
 */
export class CloseCommand<P, H extends PrimitiveHarness<P>> implements Command<H> {
  readonly inner: InnerStep<H> | undefined;

  constructor(
    readonly slot: number,
    inner: InnerStep<H> | undefined,
  ) {
    this.inner = inner?.by(slot * ACTORS_PER_CLIENT + (inner.actor % ACTORS_PER_CLIENT));
  }

  check(h: H): boolean {
    return this.inner === undefined || this.inner.check(h);
  }

  async run(h: H): Promise<void> {
    const client = h.world.clients[this.slot];
    if (!client) return;
    countStep(h.stats, 'close', 'step');
    h.faulted();
    if (this.inner) {
      countStep(h.stats, this.inner.kind, 'inner');
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
    h.clientClosed?.(client);
    await h.world.replaceClient(this.slot);
    h.calmFrom = now();
    h.note(`${client.label} closed`);
    await h.settle();
  }

  toString(): string {
    return `close ${'AB'[this.slot] ?? '?'}${this.inner ? ` with ${String(this.inner)}` : ''}`;
  }
}

/** An abort of an actor's wait: it settles within SETTLE_MS. */
export class AbortCommand<P, H extends PrimitiveHarness<P>> implements Command<H> {
  constructor(readonly actor: number) {}

  check(h: H): boolean {
    return h.world.actors[this.actor]?.busy ?? false;
  }

  async run(h: H): Promise<void> {
    const job = h.world.actors[this.actor]?.last;
    if (!job?.waiting) {
      countSkipped(h.stats);
      return;
    }
    countStep(h.stats, 'abort', 'step');
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

export const actorArb = fc.integer({ min: 0, max: ACTORS.length - 1 });
export const slotArb = fc.integer({ min: 0, max: 1 });
export const faultMsArb = fc.constantFrom(200, 700, 1500);

/** The shared fault commands over a model's waiting calls `inner`. */
export function faultCommands<P, H extends PrimitiveHarness<P>>(
  inner: fc.Arbitrary<InnerStep<H>>,
): fc.Arbitrary<Command<H>>[] {
  const maybe = fc.option(inner, { nil: undefined });
  return [
    fc
      .tuple(fc.constantFrom('stall' as const, 'sleep' as const), faultMsArb, maybe)
      .map(([how, ms, step]) => new FaultCommand<P, H>(how, ms, step)),
    fc
      .tuple(fc.constantFrom(...CONNECTION_FAULTS), maybe)
      .map(([how, step]) => new ConnectionFaultCommand<P, H>(how, step)),
    fc.constant(new KillSubscribersCommand<P, H>()),
    fc.tuple(slotArb, maybe).map(([slot, step]) => new CloseCommand<P, H>(slot, step)),
    actorArb.map((actor) => new AbortCommand<P, H>(actor)),
  ];
}

/** Polls `ready` every 25 ms until it gives no reason to wait; `by()` is re-read each time (faults move it). */
export async function pollUntil(
  h: { note(message: string): void; violation(message: string): Violation },
  by: () => number,
  ready: () => Promise<string | undefined>,
): Promise<void> {
  let last = '';
  for (;;) {
    const why = await ready();
    if (why === undefined) return;
    if (why !== last) h.note(`not settled yet: ${why}`);
    last = why;
    if (now() > by()) throw h.violation(`not settled in time: ${why}`);
    await sleep(25);
  }
}
