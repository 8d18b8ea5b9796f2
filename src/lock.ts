/**
 * RLock: one named lock seen through one client. Cheap to create (no I/O); many instances may name the
 * same lock. Acquisition is: attempt -> join the lock's local wait queue (subscribing to its channel) ->
 * attempt again once subscribed -> wait for a release message or the holder's TTL -> attempt ... until the
 * wait time runs out. Holds belong to flows (see flow.ts); re-entry by a flow or its ancestors never queues.
 */
import {
  LockAcquireTimeoutError,
  LockClientClosedError,
  LockNotHeldError,
  LockNotReplicatedError,
  NoFlowError,
} from './errors.js';
import { currentFlow, newFlow, ownerChain, runInNewFlow, type Flow } from './flow.js';
import { lockKeys, type LockKeys } from './keys.js';
import {
  resolveAcquireOptions,
  resolveLockArgs,
  resolveTryLockArgs,
  type AcquireOptions,
  type LockOptions,
  type RedisClient,
  type ResolvedAcquire,
} from './options.js';
import type { ReplicaSync } from './replication.js';
import { newRequestId, type AcquireReply, type LockScripts } from './scripts.js';
import { clampedTimeout, monotonicNow } from './time.js';
import type { WaitQueues, Waiter } from './waiting.js';
import { driftMs, type Hold, type Watchdog } from './watchdog.js';

/** What an RLock needs from its client. */
export interface LockContext {
  readonly redis: RedisClient;
  readonly scripts: LockScripts;
  readonly watchdog: Watchdog;
  readonly waits: WaitQueues;
  readonly clientId: string;
  readonly keyPrefix: string;
  readonly watchdogTimeout: number;
  /** The client is an ioredis Cluster: every key and the channel of one lock must share its slot. */
  readonly cluster: boolean;
  readonly closed: boolean;
  /** Set when `syncReplicas` is on: every grant is confirmed by WAIT, or undone. */
  readonly replicaSync: ReplicaSync | undefined;
  /** Called before every acquire attempt; the client runs its one-time start-up checks on the first. */
  readonly firstUse: () => void;
}

/** One acquisition of a lock, returned by `acquire()`; release it once (or let `await using` do it). */
export interface LockLease extends AsyncDisposable {
  readonly name: string;
  /** Aborts with a LockLostError when the hold is lost (lease ran out, taken over, client closed). */
  readonly signal: AbortSignal;
  /** Strictly increasing per lock on every free -> held transition; the same for re-entrant acquisitions. */
  readonly fencingToken: bigint;
  /** Releases this acquisition; rejects with LockNotHeldError if the hold was already gone. Idempotent. */
  release(): Promise<void>;
}

/**
 * How long a newcomer yields to waiters in other processes that this process's release just woke: at most
 * this, or until its own subscription is confirmed (one round trip), whichever comes first.
 */
const YIELD_MS = 20;

type AttemptResult = { readonly hold: Hold } | { readonly hold: undefined; readonly pttl: number };

export class RLock {
  readonly name: string;
  readonly #context: LockContext;
  readonly #keys: LockKeys;

  constructor(context: LockContext, name: string) {
    this.name = name;
    this.#context = context;
    this.#keys = lockKeys(context.keyPrefix, name, context.cluster);
  }

  /**
   * Tries to acquire the lock for the current flow: `tryLock()` makes one attempt; `tryLock(waitTime)`
   * waits up to `waitTime` ms; `leaseTime` (ms) fixes the lease, omitted or -1 means watchdog mode.
   * @returns whether the lock is now held by the current flow.
   */
  tryLock(waitTime?: number, leaseTime?: number): Promise<boolean>;
  tryLock(options: AcquireOptions): Promise<boolean>;
  async tryLock(...args: unknown[]): Promise<boolean> {
    const options = resolveTryLockArgs(args);
    const flow = this.#requireFlow('tryLock');
    const hold = await this.#take(ownerChain(this.#context.clientId, flow), {
      ...options,
      waitTime: options.waitTime ?? 0,
    });
    return hold !== undefined;
  }

  /** Waits until the lock is held by the current flow (or the signal aborts). */
  lock(leaseTime?: number): Promise<void>;
  lock(options: LockOptions): Promise<void>;
  async lock(...args: unknown[]): Promise<void> {
    const options = resolveLockArgs(args);
    const flow = this.#requireFlow('lock');
    await this.#take(ownerChain(this.#context.clientId, flow), options);
  }

  /** Drops one hold of the current flow (or the ancestor that holds it). Throws LockNotHeldError if none. */
  async unlock(): Promise<void> {
    const flow = this.#requireFlow('unlock');
    await this.#release(ownerChain(this.#context.clientId, flow));
  }

  /** Frees the lock whoever holds it; resolves to whether it was held. Local holders lose it. */
  async forceUnlock(): Promise<boolean> {
    this.#checkOpen();
    const freed = await this.#context.scripts.forceUnlock(this.#keys);
    for (const hold of this.#context.watchdog.holdsOf(this.#keys.lockKey)) {
      this.#context.watchdog.lose(hold, 'it was force-unlocked');
    }
    return freed;
  }

  async isLocked(): Promise<boolean> {
    this.#checkOpen();
    return (await this.#context.redis.exists(this.#keys.lockKey)) === 1;
  }

  /** Whether the current flow or an ancestor holds the lock (asks Redis). False outside any flow. */
  async isHeldByCurrentFlow(): Promise<boolean> {
    return (await this.getHoldCount()) > 0;
  }

  /** Hold count of the current flow (or the ancestor that holds the lock); 0 outside any flow. */
  async getHoldCount(): Promise<number> {
    this.#checkOpen();
    const flow = currentFlow();
    if (!flow) return 0;
    return this.#context.scripts.holdCount(this.#keys, ownerChain(this.#context.clientId, flow));
  }

  /** Milliseconds until the lock expires: -2 when not locked, -1 when it has no expiry. */
  async remainTimeToLive(): Promise<number> {
    this.#checkOpen();
    return this.#context.redis.pttl(this.#keys.lockKey);
  }

  /**
   * Runs `fn` holding the lock, in a new child flow of the current one (so concurrent `withLock` calls
   * exclude each other, and nested ones re-enter), and releases it afterwards. Waits forever unless
   * `waitTime` is given; throws LockAcquireTimeoutError when it runs out. `fn` gets the lease's signal
   * (aborted if the hold is lost) and the lease itself (for its fencing token).
   */
  async withLock<T>(
    fn: (signal: AbortSignal, lease: LockLease) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('fn must be a function');
    const resolved = resolveAcquireOptions(options);
    return runInNewFlow(() => withLease(() => this.#lease(currentFlow() ?? newFlow(), resolved), fn));
  }

  /**
   * Acquires the lock and returns a lease for `await using`. Inside a flow the hold is the flow's (nested
   * calls re-enter it); outside any flow it belongs to the lease alone. Waits forever unless `waitTime`.
   */
  async acquire(options?: AcquireOptions): Promise<LockLease> {
    const resolved = resolveAcquireOptions(options);
    return this.#lease(currentFlow() ?? newFlow(), resolved);
  }

  #checkOpen(): void {
    if (this.#context.closed) throw new LockClientClosedError(this.name);
  }

  #requireFlow(method: string): Flow {
    this.#checkOpen();
    const flow = currentFlow();
    if (!flow) throw new NoFlowError(this.name, method);
    return flow;
  }

  async #lease(flow: Flow, options: ResolvedAcquire): Promise<LockLease> {
    const hold = await this.#take(ownerChain(this.#context.clientId, flow), options);
    if (!hold) throw new LockAcquireTimeoutError(this.name, options.waitTime ?? 0);
    let released: Promise<void> | undefined;
    const release = (): Promise<void> => (released ??= this.#releaseLease(hold));
    return {
      name: this.name,
      signal: hold.signal,
      fencingToken: hold.fencingToken,
      release,
      [Symbol.asyncDispose]: release,
    };
  }

  /** Acquires for the first owner of `owners` (or re-enters for any): the hold, or undefined at waitTime. */
  async #take(owners: readonly string[], options: ResolvedAcquire): Promise<Hold | undefined> {
    this.#checkOpen();
    const { waitTime, signal } = options;
    signal?.throwIfAborted();
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    const { watchdog, waits } = this.#context;
    const reentry = watchdog.nearest(this.#keys.lockKey, owners) !== undefined;
    // A newcomer that may wait queues behind local waiters instead of racing them for a release one of
    // them is due; a single attempt (waitTime 0) just makes it.
    const queued = waits.hasWaiters(this.#keys.channel);
    // Right after this process freed the lock for waiters elsewhere, a newcomer lets them take it first
    // instead of winning every race by a round trip (which starves other processes).
    const yielding =
      !reentry && (waitTime === undefined || waitTime >= YIELD_MS) && !queued && waits.othersWoken(this.#keys.channel);
    const queueFirst = !reentry && waitTime !== 0 && (queued || yielding);
    // waitTime bounds every attempt, the first included (a stalled Redis must not stretch it); an attempt
    // with nothing to wait for runs to its reply.
    const attemptDeadline = waitTime === 0 ? Infinity : deadline;
    let attempted = false;
    let waiter: Waiter | undefined;
    try {
      if (!queueFirst) {
        const first = await this.#attempt(owners, options, attemptDeadline);
        if (first.hold) return first.hold;
        attempted = true;
        if (deadline - monotonicNow() <= 0) return undefined;
        waiter = waits.enter(this.#keys.channel);
        waiter.noteHolderTtl(first.pttl);
      } else {
        waiter = waits.enter(this.#keys.channel);
        if (yielding) waiter.noteHolderTtl(YIELD_MS);
      }
      for (;;) {
        const remaining = deadline - monotonicNow();
        if (remaining > 0) await waiter.park(Math.min(remaining, waiter.holderTtl()), signal);
        const expired = deadline - monotonicNow() <= 0;
        // A queued newcomer whose wait ran out before its turn still asks Redis once.
        if (expired && attempted) return undefined;
        waiter.attempting();
        const result = await this.#attempt(owners, options, expired ? Infinity : attemptDeadline);
        if (result.hold || expired) return result.hold;
        attempted = true;
        waiter.noteHolderTtl(result.pttl);
      }
    } finally {
      waiter?.leave();
    }
  }

  /**
   * One acquire script call. If the caller gives up while it is in flight (abort, wait time over, client
   * closed), a grant that arrives later is released at once, and never renewed.
   */
  async #attempt(owners: readonly string[], options: ResolvedAcquire, deadline: number): Promise<AttemptResult> {
    const { watchdog, watchdogTimeout } = this.#context;
    const lease = options.leaseTime === -1 ? watchdogTimeout : options.leaseTime;
    this.#context.firstUse();
    const sentAt = monotonicNow();
    const requestId = newRequestId();
    const pending = this.#grant(owners, lease, requestId);
    let outcome: Settled<AcquireReply>;
    try {
      outcome = await settleBy(pending, deadline, options.signal);
    } catch (error) {
      // No reply (connection lost without a resend, command timeout): the script may have run anyway.
      // Undo exactly that acquisition if it did, so that no hold is left that nobody believes it has.
      // (#grant already undid a grant too few replicas acknowledged.)
      if (!(error instanceof LockNotReplicatedError)) void this.#undo(owners, requestId);
      throw error;
    }
    if (outcome.kind !== 'reply' || this.#context.closed) {
      // Given up on: a grant that still arrives is given back; an error leaves the outcome unknown, so the
      // acquisition is undone by its request id if it ran.
      void pending.then(
        (reply) => reply.acquired && this.#releaseQuietly(owners[reply.ownerIndex]),
        () => void this.#undo(owners, requestId),
      );
      if (outcome.kind === 'aborted') throw outcome.reason;
      if (this.#context.closed) throw new LockClientClosedError(this.name);
      return { hold: undefined, pttl: 0 };
    }
    const reply = outcome.value;
    if (!reply.acquired) return { hold: undefined, pttl: reply.pttl };
    const owner = owners[reply.ownerIndex] ?? owners[0] ?? '';
    if (reply.holdCount === 1 && sentAt + lease - driftMs(lease) <= monotonicNow()) {
      // The grant arrived after its own lease could have run out (a stalled server or network): the lock
      // may already be someone else's, so it is not held. Give it back and let the caller try again.
      this.#releaseQuietly(owner);
      return { hold: undefined, pttl: 0 };
    }
    const hold = watchdog.acquired(this.name, this.#keys, owner, reply, sentAt, options.leaseTime);
    return { hold };
  }

  /**
   * The acquire script; with `syncReplicas`, then WAIT for the grant (in the same attempt, so the wait time
   * and the signal bound it too). A grant too few replicas acknowledged is undone before this rejects.
   */
  async #grant(owners: readonly string[], leaseMs: number, requestId: string): Promise<AcquireReply> {
    const { scripts, replicaSync } = this.#context;
    const ticket = replicaSync?.ticket(this.#keys.lockKey);
    const reply = await scripts.acquire(this.#keys, leaseMs, requestId, owners);
    if (!reply.acquired || !replicaSync || !ticket) return reply;
    let acknowledged: number;
    try {
      acknowledged = await replicaSync.acknowledged(ticket);
    } catch (error) {
      await this.#undo(owners, requestId);
      throw error;
    }
    if (acknowledged >= replicaSync.replicas) return reply;
    await this.#undo(owners, requestId);
    throw new LockNotReplicatedError(this.name, replicaSync.replicas, acknowledged);
  }

  /** Undoes the acquisition with request id `acquireId` if it ran; failures are left to the lease's expiry. */
  async #undo(owners: readonly string[], acquireId: string): Promise<void> {
    try {
      await this.#context.scripts.release(this.#keys, 'undo', owners, { undoId: acquireId, repair: true });
    } catch {
      // The connection is failing: the grant, if it exists, expires with its lease.
    }
  }

  #releaseQuietly(owner: string | undefined): void {
    if (owner === undefined) return;
    this.#context.scripts.release(this.#keys, 'one', [owner], { repair: true }).then(
      (reply) => {
        const hold = this.#context.watchdog.find(this.#keys.lockKey, owner);
        if (hold && reply.remaining >= 0) this.#context.watchdog.released(hold, reply.remaining);
      },
      () => undefined,
    );
  }

  /**
   * Releases one acquisition made through `acquire()`/`withLock()`. A lease only ever touches its own hold:
   * once that hold was lost or replaced (the same flow acquired afresh), it fails without sending anything.
   */
  async #releaseLease(hold: Hold): Promise<void> {
    if (this.#context.watchdog.find(this.#keys.lockKey, hold.owner) !== hold) {
      const lost: unknown = hold.signal.aborted ? hold.signal.reason : undefined;
      throw new LockNotHeldError(this.name, lost === undefined ? undefined : { cause: lost });
    }
    await this.#release([hold.owner], hold);
  }

  /** Drops one hold of the nearest owner in `owners` that holds the lock. */
  async #release(owners: readonly string[], leaseHold?: Hold): Promise<void> {
    const { watchdog, scripts } = this.#context;
    const local = leaseHold ?? watchdog.nearest(this.#keys.lockKey, owners);
    // Mark the last hold as releasing before the call, so that a renewal racing it is not taken for a loss.
    const last = local !== undefined && local.state === 'held' && local.count <= 1;
    if (last) local.state = 'releasing';
    let reply;
    try {
      reply = await scripts.release(this.#keys, 'one', owners);
    } catch (error) {
      // Unknown outcome: stop renewing the last hold so that, at worst, it expires with its lease.
      if (last) watchdog.forget(local);
      throw error;
    }
    if (reply.remaining >= 0) {
      const hold = watchdog.find(this.#keys.lockKey, owners[reply.ownerIndex] ?? '');
      if (hold) watchdog.released(hold, reply.remaining);
      if (reply.remaining === 0) this.#context.waits.released(this.#keys.channel, reply.woken);
    } else if (local) {
      // The caller learns it from the LockNotHeldError below; no separate lockLost event.
      watchdog.lose(local, 'it was not held when released', { report: false });
    }
    // A lease already declared lost stays lost even if Redis still had it: its holder was told to stop.
    if (reply.remaining < 0 || leaseHold?.state === 'lost') {
      const lost: unknown = local?.signal.aborted ? local.signal.reason : undefined;
      throw new LockNotHeldError(this.name, lost === undefined ? undefined : { cause: lost });
    }
  }
}

/**
 * Runs `fn` holding the lease that `acquire` takes (in the current flow), and releases it afterwards: when
 * `fn` throws, its error wins over a failed release; otherwise a failed release (the hold was lost) rejects.
 */
export async function withLease<L extends { readonly signal: AbortSignal; release(): Promise<void> }, T>(
  acquire: () => Promise<L>,
  fn: (signal: AbortSignal, lease: L) => T | PromiseLike<T>,
): Promise<T> {
  const lease = await acquire();
  let result: T;
  try {
    result = await fn(lease.signal, lease);
  } catch (error) {
    await lease.release().catch(() => undefined);
    throw error;
  }
  await lease.release();
  return result;
}

type Settled<T> =
  | { readonly kind: 'reply'; readonly value: T }
  | { readonly kind: 'deadline' }
  | { readonly kind: 'aborted'; readonly reason: unknown };

/** Awaits `promise`, but no later than `deadline` (monotonic ms) and no longer than `signal` allows. */
function settleBy<T>(promise: Promise<T>, deadline: number, signal: AbortSignal | undefined): Promise<Settled<T>> {
  if (deadline === Infinity && !signal) return promise.then((value) => ({ kind: 'reply', value }));
  if (signal?.aborted) return Promise.resolve({ kind: 'aborted', reason: signal.reason as unknown });
  return new Promise((resolve, reject) => {
    const timer =
      deadline === Infinity ? undefined : clampedTimeout(() => done({ kind: 'deadline' }), deadline - monotonicNow());
    const onAbort = (): void => done({ kind: 'aborted', reason: signal?.reason });
    const cleanup = (): void => {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    function done(outcome: Settled<T>): void {
      cleanup();
      resolve(outcome);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => done({ kind: 'reply', value }),
      (error: unknown) => {
        cleanup();
        reject(error);
      },
    );
  });
}
