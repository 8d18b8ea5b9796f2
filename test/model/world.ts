/**
 * The real side of the model-based lock test: two lock clients on their own connections (REDIS_CLIENT: ioredis, iovalkey or GLIDE), six flows
 * ("actors", three per client) that run lock operations inside their own flows, and the fault injectors.
 * Nothing here judges: it acts and records (timestamps, outcomes, listener contexts); model.ts judges.
 */
import diagnostics from 'node:diagnostics_channel';
import type { GlideClusterClient } from '@valkey/valkey-glide';
import { setTimeout as sleep } from 'node:timers/promises';
import { currentFlow } from '../../src/machinery/flow.js';
import {
  CHANNELS,
  createLockClient,
  type LockClient,
  type LockLease,
  type RedisClient,
  type RenewTraceContext,
  type RLock,
} from '../../src/index.js';
import { fairLockKeys, keySlot, lockKeys, type FairLockKeys, type LockKeys } from '../../src/redis/keys.js';
import { luaSources } from '../../src/redis/lua-scripts.generated.js';
import {
  busyWait as blockEventLoop,
  newRedis,
  onCluster,
  uniqueName,
  type Cluster,
  type Redis,
  type RedisFixture,
} from '../support/fixture.js';
import { slotOwnerAsync } from '../support/redis-cluster.js';
import {
  clientKind,
  isGlideClient,
  newTestClient,
  onNodeRedis,
  ping,
  sendCommand,
  type ClientKind,
  type TestClient,
} from '../support/clients.js';
import { TcpProxy } from '../support/proxy.js';
import { openMonitor } from '../support/monitor.js';
import type { Hold } from './model.js';

export const now = (): number => performance.now();

/** MODEL_DEBUG=1: a timestamped trace of the run, printed with a violation. */
export const tracing = process.env['MODEL_DEBUG'] === '1' || process.env['MODEL_DEBUG'] === '2';
/** MODEL_DEBUG=2: the server's MONITOR feed too (ioredis' monitor mode may not survive a reconnect). */
const monitoring = process.env['MODEL_DEBUG'] === '2';
export const traceLog: string[] = [];
let traceOrigin = 0;
export function trace(message: string): void {
  if (!tracing) return;
  if (traceLog.length === 0) traceOrigin = now();
  traceLog.push(`${(now() - traceOrigin).toFixed(1).padStart(8)} ${message}`);
}

/** Event-loop time blocked on purpose so far (an injected fault), which the lag monitor leaves out. */
let injectedStallMs = 0;

/** Blocks the event loop for `ms` (an injected fault: the lag monitor leaves it out). */
export function busyWait(ms: number): void {
  const start = performance.now();
  blockEventLoop(ms);
  injectedStallMs += performance.now() - start;
}

/** How often the lag monitor looks, ms. */
const LAG_TICK_MS = 20;
/**
 * An unmodeled stall this long (this process's event loop running late: GC, a loaded machine; or a renewal
 * whose reply is this late: Redis descheduled) is judged as a fault. A watchdog-mode hold is lost only when
 * a renewal's tick lateness plus its round trip exceed about 2/3 of watchdogTimeout (392 ms at 600), so at
 * least one of them exceeds 150 ms whenever a loss can come from such a stall.
 */
export const UNMODELED_STALL_MS = 150;
/** Smaller lateness is still recorded (for the wait bounds), above this. */
const LAG_NOTE_MS = 40;

/** A stretch in which this process ran late without an injected fault. */
export interface Lag {
  readonly at: number;
  readonly ms: number;
}

/** One macrotask turn: everything already queued (a command written to a socket, microtasks) runs first. */
export const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Resolves to whether `promise` settled within `ms`. */
export async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, ms));
  });
  try {
    return await Promise.race([
      promise.then(
        () => true as const,
        () => true as const,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Lease of an acquisition: a fixed lease in ms, or -1 for watchdog mode. */
export type LeaseSpec = number;

export const leaseLabel = (lease: LeaseSpec): string => (lease === -1 ? 'watchdog' : `${lease}ms`);

export type Op =
  | { readonly kind: 'tryLock'; readonly lock: number; readonly wait: number; readonly lease: LeaseSpec }
  | { readonly kind: 'lock'; readonly lock: number; readonly lease: LeaseSpec }
  | {
      readonly kind: 'acquire' | 'withLock';
      readonly lock: number;
      readonly wait: number | undefined;
      readonly lease: LeaseSpec;
    }
  | { readonly kind: 'release' }
  | { readonly kind: 'holdCount'; readonly lock: number }
  | { readonly kind: 'stop' };

export type AcquireOp = Extract<Op, { lease: LeaseSpec }>;

export interface Outcome {
  readonly ok: boolean;
  /** tryLock: whether held; holdCount: the count. */
  readonly value?: unknown;
  readonly error?: unknown;
  readonly at: number;
}

/**
 * The fencing token of the client's hold of `name` by a flow of the job's chain (the flow that acquired, or
 * the ancestor it re-entered). Not any hold of the name: another flow's hold of it that Redis lost may still
 * be listed until its client notices (the fair lock model's long run: a PEXPIRE, then another flow's grant).
 */
function heldToken(job: Job, name: string): bigint | undefined {
  const flows = new Set([...job.chain, currentFlow()?.id].map((flow) => `${job.client.clientId}:${flow}`));
  return job.client.locks.holds().find((h) => h.name === name && flows.has(h.owner))?.fencingToken;
}

/** A held acquisition as the actor sees it (one entry of its stack). */
export interface Frame {
  readonly kind: 'imperative' | 'lease' | 'scoped';
  readonly lock: number;
  readonly rlock: RLock;
  readonly lease: LockLease | undefined;
  /**
   * The hold's fencing token as the client has it right after the acquisition (an imperative frame has no
   * lease to read it from, and a lean hold records it in Redis only at its first renewal).
   */
  readonly token: bigint | undefined;
  /** The flow current inside the frame: a scoped frame's own child flow, else the flow that acquired. */
  readonly flow: number;
  /** Serve level whose loop runs inside a scoped frame's body. */
  readonly level: number;
  readonly client: ClientHandle;
  readonly spec: LeaseSpec;
  readonly takenAt: number;
  abortedAt: number | undefined;
  /** The flow the abort listener ran in (it should run outside any flow). */
  abortedInFlow: number | undefined;
  abortReason: unknown;
  /** The model's hold this frame counts on; set when the model adopted the acquisition. */
  hold: Hold | undefined;
}

export class Job {
  readonly op: Op;
  readonly actor: Actor;
  readonly client: ClientHandle;
  /** The actor's flow chain when the job was posted, base flow first. */
  readonly chain: readonly number[];
  readonly startedAt = now();
  readonly controller = new AbortController();
  readonly done: Promise<Outcome>;
  aborted = false;
  /** A fault overlapped the call: its outcome and timing are judged loosely. */
  faulted = false;
  /** Fair lock: when the model first saw this wait's entry in the queue (see Model's fair-queue check). */
  queuedAt: number | undefined;
  outcome: Outcome | undefined;
  /** An acquisition's new frame. */
  frame: Frame | undefined;
  /** A release's popped frame. */
  popped: Frame | undefined;
  adopted = false;
  #resolve: (outcome: Outcome) => void = () => undefined;

  constructor(actor: Actor, op: Op) {
    this.actor = actor;
    this.op = op;
    this.client = actor.client;
    this.chain = actor.chain();
    this.done = new Promise<Outcome>((resolve) => {
      this.#resolve = resolve;
    });
  }

  finish(outcome: Omit<Outcome, 'at'>): void {
    if (this.outcome) return;
    this.outcome = { ...outcome, at: now() };
    trace(
      `${this.actor.name} ${this.op.kind}${'lock' in this.op ? ` L${this.op.lock}` : ''} -> ${outcome.ok ? `ok ${typeof outcome.value === 'boolean' || typeof outcome.value === 'number' ? String(outcome.value) : ''}` : `error ${String(outcome.error)}`}`,
    );
    this.#resolve(this.outcome);
  }

  get settled(): boolean {
    return this.outcome !== undefined;
  }

  get isAcquire(): boolean {
    return 'lease' in this.op;
  }
}

export interface LostRecord {
  readonly name: string;
  readonly token: bigint;
  readonly at: number;
  readonly flow: number | undefined;
  readonly message: string;
  matched: boolean;
}

/** A renewal sent and not yet answered (for the lag monitor): when it was sent, and whether it was noted. */
export interface RenewalInFlight {
  readonly sentAt: number;
  readonly injectedBefore: number;
  noted: boolean;
}

/** A model's lock client as the renewal watch sees it (ClientHandle, PrimitiveClient). */
export interface RenewalWatch {
  /** Called once, synchronously, right after the watchdog sends its next renewal on this client. */
  renewHook?: (() => void) | undefined;
  /** Renewals sent and not yet answered (for the lag monitor). */
  readonly renewalsInFlight: Set<RenewalInFlight>;
}

/** The model's lock clients by clientId, whose renewals the `flowlock:renew` trace reports. */
const renewingClients = new Map<string, RenewalWatch>();

/** Lets the lag monitor see the renewals of `clientId`'s client (until closeAll). */
export function watchRenewals(clientId: string, client: RenewalWatch): void {
  renewingClients.set(clientId, client);
}

const renewals = new WeakMap<RenewTraceContext, RenewalInFlight>();
// The watchdog's renewals as its trace reports them, on every client library alike: `start` comes before
// the call is handed to the client, `end` right after (as the trace's function returns), `asyncEnd` when the
// call settled (answered, failed or given up).
diagnostics.tracingChannel<unknown, RenewTraceContext>(CHANNELS.renew).subscribe({
  start(context) {
    const client = renewingClients.get(context.clientId);
    if (!client) return;
    const renewal = { sentAt: now(), injectedBefore: injectedStallMs, noted: false };
    renewals.set(context, renewal);
    client.renewalsInFlight.add(renewal);
  },
  end(context) {
    const client = renewingClients.get(context.clientId);
    const hook = client?.renewHook;
    if (!client || !hook) return;
    client.renewHook = undefined;
    hook();
  },
  asyncStart() {},
  asyncEnd(context) {
    const renewal = renewals.get(context);
    if (renewal) renewingClients.get(context.clientId)?.renewalsInFlight.delete(renewal);
  },
  error() {},
});

/** One lock client with its own connection; replaced by a fresh one after `close()`. */
export class ClientHandle implements RenewalWatch {
  readonly slot: number;
  readonly gen: number;
  readonly label: string;
  readonly connection: ModelConnection;
  readonly locks: LockClient;
  readonly watchdogTimeout: number;
  readonly lost: LostRecord[] = [];
  /** Called once, synchronously, right after the watchdog sends its next renewal on this client. */
  renewHook: (() => void) | undefined;
  /** Renewals sent and not yet answered (for the lag monitor). */
  readonly renewalsInFlight = new Set<RenewalInFlight>();
  closed = false;

  constructor(server: { host: string; port: number }, slot: number, gen: number, watchdogTimeout: number) {
    this.slot = slot;
    this.gen = gen;
    this.label = `${'AB'[slot] ?? '?'}${gen > 0 ? `#${gen}` : ''}`;
    this.watchdogTimeout = watchdogTimeout;
    this.connection = new ModelConnection(server);
    // Client B (any generation) runs as once no earlier version is left (previousLayout 'retired'), A as during a
    // rolling upgrade: both share every primitive, as the docs allow.
    this.locks = createLockClient(this.connection.client, {
      watchdogTimeout,
      previousLayout: slot === 1 ? 'retired' : 'shared',
    });
    watchRenewals(this.locks.clientId, this);
    this.locks.on('lockLost', (event) => {
      trace(`${this.label} lockLost ${event.name} token ${event.fencingToken}: ${event.error.message}`);
      this.lost.push({
        name: event.name,
        token: event.fencingToken,
        at: now(),
        flow: currentFlow()?.id,
        message: event.error.message,
        matched: false,
      });
    });
  }

  get clientId(): string {
    return this.locks.clientId;
  }

  get period(): number {
    return Math.floor(this.watchdogTimeout / 3);
  }
}

/**
 * A flow that executes lock operations posted to it, one at a time, in its own flow (`locks.run`); a
 * `withLock` body serves the following operations in the body's child flow until its frame is released.
 */
export class Actor {
  readonly index: number;
  readonly name: string;
  readonly slot: number;
  readonly world: World;
  readonly frames: Frame[] = [];
  baseFlow = -1;
  /** The last job posted; the actor is busy until it settles. */
  last: Job | undefined;
  readonly #queue: Job[] = [];
  #wake: (() => void) | undefined;
  #loop: Promise<void> = Promise.resolve();

  constructor(world: World, index: number, slot: number, name: string) {
    this.world = world;
    this.index = index;
    this.slot = slot;
    this.name = name;
  }

  start(): Promise<void> {
    let started!: () => void;
    const ready = new Promise<void>((resolve) => (started = resolve));
    this.#loop = this.client.locks
      .run(async () => {
        this.baseFlow = currentFlow()?.id ?? -1;
        started();
        await this.#serve(0);
      })
      .catch((error: unknown) => {
        this.world.harnessErrors.push(`${this.name}: actor loop failed: ${String(error)}`);
      });
    return ready;
  }

  get client(): ClientHandle {
    const client = this.world.clients[this.slot];
    if (!client) throw new Error(`no client in slot ${this.slot}`);
    return client;
  }

  get busy(): boolean {
    return this.last !== undefined && !this.last.settled;
  }

  /** Flow ids from the base flow to the innermost scoped frame's flow. */
  chain(): number[] {
    return [this.baseFlow, ...this.frames.filter((f) => f.kind === 'scoped').map((f) => f.flow)];
  }

  post(op: Op): Job {
    const job = new Job(this, op);
    if (op.kind !== 'holdCount') trace(`${this.name} post ${JSON.stringify(op)}`);
    if (op.kind !== 'holdCount' && op.kind !== 'stop') this.last = job;
    this.#queue.push(job);
    this.#wake?.();
    return job;
  }

  /** Waits for the actor's loop to end (after a 'stop' job at level 0), at most `ms`. */
  async stopped(ms: number): Promise<boolean> {
    return settlesWithin(this.#loop, ms);
  }

  async #next(): Promise<Job> {
    for (;;) {
      const job = this.#queue.shift();
      if (job) return job;
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
  }

  /** Serves jobs at `level`; returns the job that ends the level (release of its scoped frame, or stop). */
  async #serve(level: number): Promise<Job> {
    for (;;) {
      const job = await this.#next();
      const top = this.frames.at(-1);
      if (job.op.kind === 'stop') {
        if (level === 0) job.finish({ ok: true });
        return job;
      }
      if (job.op.kind === 'release' && top?.kind === 'scoped' && top.level === level) return job;
      try {
        await this.#execute(job, level);
      } catch (error) {
        job.finish({ ok: false, error });
      }
    }
  }

  #push(job: Job, kind: Frame['kind'], rlock: RLock, lease: LockLease | undefined, level: number): Frame {
    const op = job.op as AcquireOp;
    const frame: Frame = {
      kind,
      lock: op.lock,
      rlock,
      lease,
      token: lease?.fencingToken ?? heldToken(job, rlock.name),
      flow: currentFlow()?.id ?? -1,
      level,
      client: job.client,
      spec: op.lease,
      takenAt: now(),
      abortedAt: undefined,
      abortedInFlow: undefined,
      abortReason: undefined,
      hold: undefined,
    };
    if (lease) {
      const record = (): void => {
        trace(`${this.name} lease of L${op.lock} aborted: ${String(lease.signal.reason)}`);
        frame.abortedAt ??= now();
        frame.abortedInFlow = currentFlow()?.id;
        frame.abortReason = lease.signal.reason;
      };
      if (lease.signal.aborted) record();
      else lease.signal.addEventListener('abort', record, { once: true });
    }
    this.frames.push(frame);
    job.frame = frame;
    return frame;
  }

  async #execute(job: Job, level: number): Promise<void> {
    const op = job.op;
    const signal = job.controller.signal;
    switch (op.kind) {
      case 'tryLock': {
        const rlock = this.world.rlock(job.client, op.lock);
        const held = await rlock.tryLock(
          op.wait > 0 ? { waitTime: op.wait, leaseTime: op.lease, signal } : { leaseTime: op.lease, signal },
        );
        if (held) this.#push(job, 'imperative', rlock, undefined, level);
        job.finish({ ok: true, value: held });
        return;
      }
      case 'lock': {
        const rlock = this.world.rlock(job.client, op.lock);
        await rlock.lock({ leaseTime: op.lease, signal });
        this.#push(job, 'imperative', rlock, undefined, level);
        job.finish({ ok: true });
        return;
      }
      case 'acquire': {
        const rlock = this.world.rlock(job.client, op.lock);
        const lease = await rlock.acquire(
          op.wait === undefined ? { leaseTime: op.lease, signal } : { waitTime: op.wait, leaseTime: op.lease, signal },
        );
        this.#push(job, 'lease', rlock, lease, level);
        job.finish({ ok: true });
        return;
      }
      case 'withLock': {
        const rlock = this.world.rlock(job.client, op.lock);
        // Set inside the body (a closure, which control-flow analysis does not follow).
        const body: { entered: boolean; exit: Job | undefined } = { entered: false, exit: undefined };
        try {
          await rlock.withLock(
            async (_signal, lease) => {
              body.entered = true;
              this.#push(job, 'scoped', rlock, lease, level + 1);
              job.finish({ ok: true });
              body.exit = await this.#serve(level + 1);
            },
            op.wait === undefined
              ? { leaseTime: op.lease, signal }
              : { waitTime: op.wait, leaseTime: op.lease, signal },
          );
          if (body.entered) this.#exited(body.exit, { ok: true });
        } catch (error) {
          if (body.entered) this.#exited(body.exit, { ok: false, error });
          else job.finish({ ok: false, error });
        }
        return;
      }
      case 'release': {
        const top = this.frames.pop();
        job.popped = top;
        if (!top) throw new Error('nothing to release');
        if (top.kind === 'imperative') await top.rlock.unlock();
        else await top.lease?.release();
        job.finish({ ok: true });
        return;
      }
      case 'holdCount': {
        const count = await this.world.rlock(job.client, op.lock).getHoldCount();
        job.finish({ ok: true, value: count });
        return;
      }
      default:
        throw new Error(`unexpected job ${op.kind}`);
    }
  }

  /** A scoped frame's body returned (its withLock released the lock, or failed to): settle its release job. */
  #exited(exit: Job | undefined, outcome: Omit<Outcome, 'at'>): void {
    const frame = this.frames.pop();
    if (!exit) return;
    exit.popped = frame;
    if (exit.op.kind === 'stop') {
      // Teardown stopped a nested level: pass the stop on to the level below.
      this.#queue.unshift(exit);
      return;
    }
    exit.finish(outcome);
  }
}

export interface LockSnapshot {
  /** Owner fields (memo fields `:acq`/`:rel` and holder info `:info` left out) and their counts. */
  readonly owners: ReadonlyMap<string, number>;
  readonly exists: boolean;
  readonly pttl: number;
  /** Local time before the read was sent and after its reply. */
  readonly sentAt: number;
  readonly at: number;
}

/**
 * The server a model runs on. On a cluster (REDIS_TOPOLOGY=cluster): the master that holds every key of the
 * run (modelSite picks names in its slots), and the nodes the lock clients start from (`seeds`).
 */
export interface ServerInfo {
  readonly host: string;
  readonly port: number;
  readonly seeds?: readonly ServerInfo[];
  /** On a cluster: a key in the master's slots (a command on it makes a cluster client connect there). */
  readonly key?: string;
}

/**
 * The server and admin connection of one run, and its names: `labels` made unique (on a cluster, each
 * hashing to a slot of one master, which is then the run's server; `tagged`: each a hash tag of its own, for
 * names a model extends, as the multi-lock's pool does).
 */
export async function modelSite(
  redis: RedisFixture,
  labels: readonly string[],
  { tagged = false }: { tagged?: boolean } = {},
): Promise<{ server: ServerInfo; admin: Redis; names: string[] }> {
  if (!onCluster) return { server: redis.server, admin: redis.admin as Redis, names: labels.map((l) => uniqueName(l)) };
  if (!clusterModelClients.includes(clientKind)) {
    // A classic subscriber may sit on any node, where the model's faults and reads do not reach.
    throw new Error(`on a cluster the model tests run on ${clusterModelClients.join(' and ')} (sharded pub/sub)`);
  }
  const target = redis.target;
  if (target.topology !== 'cluster') throw new Error('no cluster');
  const seeds = target.nodes.map(({ host, port }) => ({ host, port }));
  const seed = seeds[0]?.port ?? 0;
  const name = (label: string): string => (tagged ? `{${uniqueName(label)}}` : uniqueName(label));
  const names: string[] = [];
  let master: number | undefined;
  for (const label of labels) {
    for (;;) {
      const candidate = name(label);
      const owner = (await slotOwnerAsync(seed, keySlot(candidate))).port;
      master ??= owner;
      if (owner !== master) continue;
      names.push(candidate);
      break;
    }
  }
  const port = master ?? seed;
  let admin = siteAdmins.get(port);
  if (!admin) {
    admin = newRedis({ host: '127.0.0.1', port });
    admin.on('error', () => undefined);
    siteAdmins.set(port, admin);
  }
  return { server: { host: '127.0.0.1', port, seeds, key: names[0] ?? '' }, admin, names };
}

/** The client libraries the models run with on a cluster. */
const clusterModelClients: readonly ClientKind[] = ['ioredis5', 'ioredis6', 'glide'];
/** Admin connections to a cluster's masters, kept for the file (closeModelSites). */
const siteAdmins = new Map<number, Redis>();

/** Closes the admin connections modelSite opened (after the file's runs). */
export async function closeModelSites(): Promise<void> {
  for (const admin of siteAdmins.values()) await admin.quit().catch(() => admin.disconnect());
  siteAdmins.clear();
}

/**
 * A connection of the model's own (admin, faults): ioredis keeps where each command was sent from, so that a
 * rejection nobody handled ("Connection is closed." after a disconnect, reported by test/support/setup.ts)
 * names its sender.
 */
export function modelRedis(server: ServerInfo): Redis {
  return newRedis(server, { showFriendlyErrorStack: true });
}

/** What a reconnect of a lock client's connection waits, ms (every client library: RECONNECT_ALLOWANCE_MS). */
const RECONNECT_MS = 50;

/**
 * A lock client's connection: a client of the library under test (REDIS_CLIENT: ioredis 5 or 6, iovalkey or
 * GLIDE; test/support/clients.ts), and what the model asks of it in no library's words.
 */
export class ModelConnection {
  readonly client: RedisClient;
  readonly #test: TestClient;
  readonly #endpoint: ServerInfo;

  constructor(endpoint: ServerInfo) {
    if (onNodeRedis) {
      // Whether a node-redis client still has a command to send after a reconnect is in its private queue.
      throw new Error(`the model tests run on ioredis, iovalkey and GLIDE, not on REDIS_CLIENT=${clientKind}`);
    }
    this.#endpoint = endpoint;
    this.#test = newTestClient(
      endpoint.seeds
        ? { topology: 'cluster', nodes: endpoint.seeds }
        : { topology: 'standalone', host: endpoint.host, port: endpoint.port },
      { reconnectMs: RECONNECT_MS, ioredis: { showFriendlyErrorStack: true } },
    );
    this.client = this.#test.client;
  }

  /** Resolves once the connection is up (a command queued while connecting reaches Redis later than a model assumes). */
  async ready(): Promise<void> {
    await ping(this.client);
  }

  /** The server's id of the data connection (CLIENT ID; on a cluster, the one to the run's master), for CLIENT KILL. */
  async id(): Promise<number> {
    const { host, port, seeds } = this.#endpoint;
    if (!seeds) return Number(await sendCommand(this.client, ['CLIENT', 'ID']));
    if (isGlideClient(this.client)) {
      const glide = this.client as unknown as GlideClusterClient;
      return Number(await glide.customCommand(['CLIENT', 'ID'], { route: { type: 'routeByAddress', host, port } }));
    }
    // ioredis drops a node's connection from its pool when it closes (a kill, a reconnect) and adds one again
    // when a command needs it: a read of a key in the master's slots does.
    const cluster = this.client as unknown as Cluster;
    for (let tries = 0; ; tries++) {
      await cluster.exists(this.#endpoint.key ?? '');
      const node = this.#ioredisNodes().find((n) => n.options.port === port);
      if (node) return await node.client('ID');
      if (tries === 20) throw new Error(`the cluster client has no connection to ${host}:${port}`);
      await sleep(50);
    }
  }

  /** An ioredis (or iovalkey) cluster client's node connections. */
  #ioredisNodes(): Redis[] {
    return (this.client as unknown as Cluster).nodes('all');
  }

  /**
   * Why a command of this connection may still reach Redis (undefined: none can): one sent and unanswered, or
   * queued for a reconnect (ioredis' own queues; GLIDE's calls that have not settled).
   */
  busy(): string | undefined {
    if (this.#test.inFlight) {
      const calls = this.#test.inFlight();
      return calls === 0 ? undefined : `${calls} call(s) in flight`;
    }
    interface Queues {
      readonly status: string;
      readonly commandQueue?: { length: number };
      readonly offlineQueue: { length: number };
    }
    const client = this.client as unknown as Queues;
    // A cluster client queues commands of its own while it (re)learns the slots, and each node connection too.
    const connections = (this.#endpoint.seeds ? this.#ioredisNodes() : []) as unknown as Queues[];
    const quiet = [client, ...connections].every(
      (c) => (c.commandQueue?.length ?? 0) === 0 && c.offlineQueue.length === 0,
    );
    return client.status === 'ready' && quiet ? undefined : `${client.status} with commands in flight`;
  }

  /**
   * Why the connection cannot take a command now (undefined: it can). GLIDE fails a call at once, and the
   * script runner's one resend too, while it notices a killed connection and reconnects (the GLIDE model's
   * liveness step met `ConnectionError … channel closed` so, right after a kill behind DEBUG SLEEP): a
   * fault still in effect, which a state is not judged in. ioredis queues commands meanwhile (busy()).
   */
  async unreachable(): Promise<string | undefined> {
    if (!isGlideClient(this.client)) return undefined;
    return ping(this.client).then(
      () => undefined,
      (error: unknown) => `reconnecting (a PING failed: ${String(error)})`,
    );
  }

  /** Closes the connection as a user would (QUIT), dropping it when that fails. */
  async quit(): Promise<void> {
    await this.#test.close();
  }
}

export const WATCHDOG_TIMEOUTS = [600, 900] as const;

/**
 * A fault on the way to Redis while a model's calls go out:
 * - `flush`: SCRIPT FLUSH first (the calls' scripts meet NOSCRIPT and are sent again by source);
 * - `kill`: CLIENT KILL of a client's data connection right after the calls went out (ioredis reconnects and
 *   resends what was unanswered: a call may run twice);
 * - `kill-queued`: the same while the server sleeps 50 ms, so that the calls and the kill queue up: woken, the
 *   server may run a call and drop the connection before its reply goes out (a resend of a call that ran);
 * - `drop`: the next reply through the test proxy (slot 1's connections: a call's, a renewal's or its
 *   subscriber's) is dropped and that connection cut, as a network would (called off after DROP_WINDOW_MS).
 */
export type ConnectionFault = 'flush' | 'kill' | 'kill-queued' | 'drop';
export const CONNECTION_FAULTS: readonly ConnectionFault[] = onCluster
  ? // A cluster client learns its nodes' addresses from the cluster: no proxy can stand in between.
    ['flush', 'kill', 'kill-queued']
  : ['flush', 'kill', 'kill-queued', 'drop'];
/** Each connection fault's name in the step counts and printed sequences. */
export const CONNECTION_FAULT_NAMES: Readonly<Record<ConnectionFault, string>> = {
  flush: 'SCRIPT FLUSH',
  kill: 'CLIENT KILL data',
  'kill-queued': 'CLIENT KILL data behind DEBUG SLEEP',
  drop: 'dropped reply',
};
/** How long a dropped reply is waited for before the drop is called off. */
const DROP_WINDOW_MS = 500;
/** What a reconnect (ioredis retries after 50 ms) may add to a call's time after a kill or a drop. */
export const RECONNECT_ALLOWANCE_MS = 300;
/** The longest fixed lease a step asks for (commands.ts, leaseArb): longer than either watchdog timeout. */
export const LONGEST_LEASE_MS = 2000;
export const ACTOR_NAMES = ['A0', 'A1', 'A2', 'B0', 'B1', 'B2'] as const;
export const ACTORS_PER_CLIENT = 3;

/**
 * What every model's world has: the server, an admin connection, a connection for faults (DEBUG SLEEP), the
 * lag monitor (unmodeled stalls are judged as faults: this process's own, and renewals its clients sent that
 * the server left unanswered) and the harness's own errors. A primitive's world extends it with its clients
 * and actors.
 */
export abstract class BaseWorld {
  readonly server: ServerInfo;
  readonly admin: Redis;
  readonly fault: Redis;
  /**
   * The test proxy the second client (slot 1) connects through, for dropped replies (started by the
   * subclass before its clients: startProxy).
   */
  proxy: TcpProxy | undefined;
  /** Problems of the harness itself (reported as failures too). */
  readonly harnessErrors: string[] = [];
  /** A fault still running in the background (DEBUG SLEEP). */
  faultInFlight: Promise<unknown> | undefined;
  /** Unmodeled lateness seen by the lag monitor (over LAG_NOTE_MS), oldest first. */
  readonly lags: Lag[] = [];
  /** Told of each unmodeled stall over UNMODELED_STALL_MS (the harness judges it as a fault). */
  onStall: ((ms: number) => void) | undefined;
  readonly #lagMonitor: NodeJS.Timeout;

  protected constructor(server: ServerInfo, admin: Redis) {
    this.server = server;
    this.admin = admin;
    this.fault = modelRedis(server);
    this.fault.on('error', () => undefined);
    // Watches for stalls nobody injected: a late tick of this timer (less what busyWait blocked on purpose),
    // and renewals left unanswered (#lateStall).
    let expected = now() + LAG_TICK_MS;
    let injectedBefore = injectedStallMs;
    this.#lagMonitor = setInterval(() => {
      const t = now();
      const late = t - expected - (injectedStallMs - injectedBefore);
      expected = t + LAG_TICK_MS;
      injectedBefore = injectedStallMs;
      if (late > LAG_NOTE_MS) this.lags.push({ at: t, ms: late });
      const stall = Math.max(late, this.#lateStall(t));
      if (stall > UNMODELED_STALL_MS) {
        trace(`unmodeled stall: ${stall.toFixed(0)} ms`);
        this.onStall?.(stall);
      }
    }, LAG_TICK_MS);
    this.#lagMonitor.unref();
  }

  /** Starts the proxy of slot 1's connections. */
  protected async startProxy(): Promise<void> {
    if (!this.server.seeds) this.proxy = await TcpProxy.start(this.server.port);
  }

  /** Where the client of `slot` connects: slot 1 through the proxy once it runs, slot 0 straight. */
  endpointFor(slot: number): ServerInfo {
    return slot === 1 && this.proxy ? { host: '127.0.0.1', port: this.proxy.port } : this.server;
  }

  /**
   * Runs `start` (a model's calls going out) inside a connection fault, resolving to what it resolved to once
   * the fault is over (see ConnectionFault; `victim`: the data connection a kill cuts).
   */
  async connectionFault<T>(how: ConnectionFault, victim: ModelConnection, start: () => Promise<T>): Promise<T> {
    const id = how === 'kill' || how === 'kill-queued' ? await victim.id() : undefined;
    if (how === 'flush') await this.admin.call('SCRIPT', 'FLUSH');
    if (how === 'drop') this.proxy?.dropNextReplies(1);
    const sleeping = how === 'kill-queued' ? await this.serverSleep(50) : undefined;
    const started = await start();
    if (id !== undefined) {
      await sleep(sleeping ? 1 : Math.floor(Math.random() * 3));
      await this.admin.call('CLIENT', 'KILL', 'ID', String(id));
    }
    await sleeping?.done;
    if (sleeping) this.faultInFlight = undefined;
    if (how === 'drop') {
      const by = now() + DROP_WINDOW_MS;
      while ((this.proxy?.pendingDrops ?? 0) > 0 && now() < by) await sleep(5);
      trace(this.proxy?.pendingDrops === 0 ? 'a reply was dropped' : 'no reply to drop');
      this.proxy?.dropNextReplies(0);
    }
    return started;
  }

  /** The world's current clients, whose renewals the lag monitor watches (see watchRenewals). */
  abstract readonly clients: readonly RenewalWatch[];

  /**
   * Renewals left unanswered too long (while DEBUG SLEEP is not running): a server the loaded machine
   * starved, which the event loop's lateness does not show, and which can end a hold or a permit as a fault
   * would.
   */
  #lateStall(t: number): number {
    let stall = 0;
    if (this.faultInFlight) return stall;
    for (const client of this.clients) {
      for (const renewal of client.renewalsInFlight) {
        // Unanswered for this long, less what busyWait blocked on purpose meanwhile.
        const age = t - renewal.sentAt - (injectedStallMs - renewal.injectedBefore);
        if (renewal.noted || age <= UNMODELED_STALL_MS) continue;
        renewal.noted = true;
        stall = Math.max(stall, age);
      }
    }
    return stall;
  }

  /** Stops the lag monitor and waits for a fault still running (the start of every teardown). */
  protected async stopMonitoring(): Promise<void> {
    clearInterval(this.#lagMonitor);
    await this.faultInFlight?.catch(() => undefined);
  }

  /** Closes every lock client (at most 5 s each), quits their connections and the fault connection. */
  protected async closeAll(
    clients: readonly { readonly locks: LockClient; readonly connection: ModelConnection }[],
  ): Promise<void> {
    for (const client of clients) {
      renewingClients.delete(client.locks.clientId);
      await settlesWithin(
        client.locks.close().catch(() => undefined),
        5000,
      );
      await client.connection.quit();
    }
    await this.fault.quit().catch(() => this.fault.disconnect());
    await this.proxy?.close();
  }

  /** The longest unmodeled lateness of this process since `since` (0: none noted). */
  lagSince(since: number): number {
    let longest = 0;
    for (let i = this.lags.length - 1; i >= 0; i--) {
      const lag = this.lags[i];
      if (!lag || lag.at < since) break;
      longest = Math.max(longest, lag.ms);
    }
    return longest;
  }

  /**
   * Fires `DEBUG SLEEP` on its own connection; resolves once the server has had time to start sleeping, to
   * `done` (wrapped: an async function would flatten a returned promise), which settles when it woke up.
   */
  async serverSleep(ms: number): Promise<{ readonly done: Promise<unknown> }> {
    const done = this.fault.call('DEBUG', 'SLEEP', (ms / 1000).toFixed(3)).then(
      () => undefined,
      (error: unknown) => {
        this.harnessErrors.push(`DEBUG SLEEP failed: ${String(error)}`);
      },
    );
    this.faultInFlight = done;
    await sleep(5);
    return { done };
  }
}

/** The lock under test: RLock (`getLock`) or RFairLock (`getFairLock`), which share RLock's interface. */
export type LockKind = 'lock' | 'fair';

/** A fair lock's waiter queue as Redis has it: waiter ids in line, and each one's deadline (server time). */
export interface FairQueue {
  readonly ids: readonly string[];
  readonly deadlines: ReadonlyMap<string, number>;
  readonly serverNow: number;
}

/** Everything one generated sequence of the lock model runs against. */
export class World extends BaseWorld {
  readonly kind: LockKind;
  readonly names: readonly string[];
  readonly keys: readonly LockKeys[];
  readonly clients: ClientHandle[] = [];
  readonly actors: Actor[] = [];
  /** Old clients, kept to quit their connections at the end. */
  readonly retired: ClientHandle[] = [];

  private constructor(server: ServerInfo, admin: Redis, names: readonly string[], kind: LockKind) {
    super(server, admin);
    this.kind = kind;
    this.names = names;
    this.keys = names.map((name) => (kind === 'fair' ? fairLockKeys('', name) : lockKeys('', name)));
  }

  static async create(
    server: ServerInfo,
    admin: Redis,
    names: readonly string[],
    kind: LockKind = 'lock',
  ): Promise<World> {
    const world = new World(server, admin, names, kind);
    if (monitoring) await world.#monitor();
    await world.startProxy();
    for (let slot = 0; slot < WATCHDOG_TIMEOUTS.length; slot++) {
      world.clients.push(new ClientHandle(world.endpointFor(slot), slot, 0, WATCHDOG_TIMEOUTS[slot] ?? 600));
    }
    // A command sent while the connection is still being set up waits in the client's queue and reaches
    // Redis later than the model assumes: start on ready connections.
    await Promise.all([world.fault.ping(), ...world.clients.map((c) => c.connection.ready())]);
    ACTOR_NAMES.forEach((name, i) => world.actors.push(new Actor(world, i, Math.floor(i / ACTORS_PER_CLIENT), name)));
    await Promise.all(world.actors.map((actor) => actor.start()));
    return world;
  }

  /** MODEL_DEBUG: the server's MONITOR feed in the trace (script calls by name, with their keys and args). */
  async #monitor(): Promise<void> {
    const scripts = new Map<string, string>(Object.entries(luaSources).map(([name, s]) => [s.sha1, name]));
    const bySource = new Map<string, string>(Object.entries(luaSources).map(([name, s]) => [s.source, name]));
    const connection = newRedis(this.server);
    connection.on('error', () => undefined);
    const monitor = await openMonitor(connection);
    monitor.on('monitor', (_time: string, args: string[]) => {
      const [command = '', first = '', ...rest] = args;
      const lower = command.toLowerCase();
      if (lower === 'evalsha' || lower === 'eval') {
        const script = (lower === 'evalsha' ? scripts.get(first) : bySource.get(first)) ?? '?';
        trace(`   redis ${lower} ${script} ${rest.map((a) => a.replace(/^[0-9a-f-]{36}/, 'id')).join(' ')}`);
      } else if (!['hgetall', 'pttl', 'multi', 'exec', 'get', 'info', 'scan', 'pubsub'].includes(lower)) {
        trace(`   redis ${args.join(' ')}`);
      }
    });
    this.monitorConnection = monitor;
  }

  monitorConnection: Redis | undefined;

  rlock(client: ClientHandle, lock: number): RLock {
    const name = this.names[lock] ?? '';
    return this.kind === 'fair' ? client.locks.getFairLock(name) : client.locks.getLock(name);
  }

  /** A fair lock's queue (undefined for RLock). */
  async fairQueue(lock: number): Promise<FairQueue | undefined> {
    if (this.kind !== 'fair') return undefined;
    const { queueKey, timeoutKey } = this.keys[lock] as FairLockKeys;
    const replies = await this.admin
      .multi()
      .lrange(queueKey, 0, -1)
      .zrange(timeoutKey, 0, -1, 'WITHSCORES')
      .time()
      .exec();
    const ids = (replies?.[0]?.[1] ?? []) as string[];
    const scores = (replies?.[1]?.[1] ?? []) as string[];
    const [seconds = '0', micros = '0'] = (replies?.[2]?.[1] ?? []) as string[];
    const deadlines = new Map<string, number>();
    for (let i = 0; i + 1 < scores.length; i += 2) deadlines.set(scores[i] ?? '', Number(scores[i + 1]));
    return { ids, deadlines, serverNow: Number(seconds) * 1000 + Number(micros) / 1000 };
  }

  /** A fresh client in `slot` (after the old one was closed), on a ready connection. */
  async replaceClient(slot: number): Promise<ClientHandle> {
    const old = this.clients[slot];
    if (!old) throw new Error(`no client in slot ${slot}`);
    this.retired.push(old);
    const fresh = new ClientHandle(this.endpointFor(slot), slot, old.gen + 1, old.watchdogTimeout);
    this.clients[slot] = fresh;
    await fresh.connection.ready();
    return fresh;
  }

  async snapshot(lock: number): Promise<LockSnapshot> {
    const key = this.keys[lock]?.lockKey ?? '';
    const sentAt = now();
    const replies = await this.admin.multi().hgetall(key).pttl(key).exec();
    const at = now();
    const fields = (replies?.[0]?.[1] ?? {}) as Record<string, string>;
    const pttl = Number(replies?.[1]?.[1] ?? -2);
    const owners = new Map<string, number>();
    for (const [field, value] of Object.entries(fields)) {
      if (/:(acq|rel|info)$/.test(field)) continue;
      owners.set(field, Number(value));
    }
    return { owners, exists: Object.keys(fields).length > 0, pttl, sentAt, at };
  }

  /** The fencing token Redis recorded with `owner`'s hold of `lock` (in the lock's hold key). */
  async fence(lock: number, owner: string): Promise<bigint | undefined> {
    const value = await this.admin.hget(this.keys[lock]?.holdKey ?? '', `${owner}:token`);
    return value === null ? undefined : BigInt(value);
  }

  /** Subscriber connections of the run's lock channels (0 when nobody waits). */
  async subscribers(): Promise<number> {
    const channels = this.keys.map((k) => k.channel);
    // Shard channels on a cluster (the run's master holds their slots), classic ones elsewhere.
    const reply = (await (this.server.seeds
      ? this.admin.pubsub('SHARDNUMSUB', ...channels)
      : this.admin.pubsub('NUMSUB', ...channels))) as (string | number)[];
    let total = 0;
    for (let i = 1; i < reply.length; i += 2) total += Number(reply[i]);
    return total;
  }

  /** Keys of the run's locks left on the server, the fencing counters and release memos left out. */
  async leftoverKeys(): Promise<string[]> {
    const found: string[] = [];
    for (const name of this.names) {
      let cursor = '0';
      do {
        const [next, batch] = await this.admin.scan(cursor, 'MATCH', `*${name}*`, 'COUNT', 1000);
        cursor = next;
        for (const key of batch) {
          if (/flowlock:(fence|released):/.test(key)) continue;
          // A hold's side key outlives its lock only when something else freed the lock (a DEL step, an
          // acquire undone after that), and then by at most that hold's lease: its expiry says so.
          if (/flowlock:hold:/.test(key)) {
            const pttl = await this.admin.pttl(key);
            // -2: it ran out between the SCAN and the PTTL.
            if (pttl === -2 || (pttl > 0 && pttl <= LONGEST_LEASE_MS)) continue;
            found.push(`${key} (PTTL ${pttl}: ${JSON.stringify(await this.admin.hgetall(key))})`);
            continue;
          }
          found.push(key);
        }
      } while (cursor !== '0');
    }
    return found;
  }

  /** Best effort, no judging: end every wait and hold, stop the actors, close and quit everything. */
  async teardown(): Promise<void> {
    await this.stopMonitoring();
    for (const client of this.clients) client.renewHook = undefined;
    for (const actor of this.actors) {
      if (actor.last && !actor.last.settled) {
        actor.last.aborted = true;
        actor.last.controller.abort();
        await settlesWithin(actor.last.done, 3000);
      }
      for (let guard = 0; actor.frames.length > 0 && guard < 20; guard++) {
        await settlesWithin(actor.post({ kind: 'release' }).done, 3000);
      }
      actor.post({ kind: 'stop' });
      if (!(await actor.stopped(3000))) this.harnessErrors.push(`${actor.name}: did not stop`);
    }
    await this.closeAll([...this.clients, ...this.retired]);
    this.monitorConnection?.disconnect();
    await this.admin.del(...this.keys.map((k) => k.lockKey)).catch(() => undefined);
  }
}
