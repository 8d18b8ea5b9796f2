// RLock: one named lock seen through one client. Cheap to create (no I/O); many instances may name the
// same lock. Acquisition is: attempt -> join the lock's local wait queue (subscribing to its channel) ->
// attempt again once subscribed -> wait for a release message or the holder's TTL -> attempt ... until the
// wait time runs out. Holds belong to flows (see flow.ts); re-entry by a flow or its ancestors never queues.
//
// The same machinery drives every lock of the family: a LockProtocol (protocol.ts) says what differs (keys,
// hash fields, scripts, how a message wakes waiters, a waiter's place in Redis). RFairLock (fair-lock.ts)
// and the read-write lock's two sides (read-write-lock.ts) are RLocks with their own protocol.
import { traced, withLockChannel, type LockIdentity, type WithLockTraceContext } from '../diagnostics/channels.js';
import {
  AcquireObserver,
  failedOutcome,
  holdSettlement,
  releaseContext,
  traceAcquire,
  traceRelease,
} from '../diagnostics/publish.js';
import {
  LockAcquireTimeoutError,
  LockClientClosedError,
  LockLostError,
  LockNotHeldError,
  LockNotReplicatedError,
  LockUpgradeError,
  NoFlowError,
} from '../errors.js';
import { currentFlow, newFlow, ownerChain, runInNewFlow, type Flow } from '../machinery/flow.js';
import type { RedisAdapter } from '../redis/adapter.js';
import { lockKeys } from '../redis/keys.js';
import {
  checkFunction,
  resolveAcquireOptions,
  resolveLockArgs,
  resolveTryLockArgs,
  type AcquireOptions,
  type LockOptions,
  type ResolvedAcquire,
} from '../options.js';
import { PlainProtocol, type LockProtocol, type WaitTicket } from './protocol.js';
import { confirmedGrant, type ReplicaSync } from '../machinery/replication.js';
import { newRequestId, type AcquireReply, type LockScripts } from '../redis/scripts.js';
import { abortableSleep, monotonicNow, promiseOf, settleBy, type CloseWatch, type Settled } from '../time.js';
import type { HolderRecord } from '../machinery/holder-record.js';
import { LINGER_MS, type EnterOptions, type WaitQueues, type Waiter } from '../machinery/waiting.js';
import type { ReleaseTraceContext } from '../diagnostics/channels.js';
import { driftMs, type Hold, type Watchdog } from '../machinery/watchdog.js';

/** What an RLock needs from its client. */
export interface LockContext extends CloseWatch {
  readonly redis: RedisAdapter;
  readonly scripts: LockScripts;
  readonly watchdog: Watchdog;
  readonly waits: WaitQueues;
  readonly clientId: string;
  readonly keyPrefix: string;
  readonly watchdogTimeout: number;
  /** The client is a Cluster client: every key and the channel of one lock must share its slot. */
  readonly cluster: boolean;
  /** Aborted when the client closes: waits and pauses in flight end. */
  readonly closeSignal: AbortSignal;
  /** Called once when the client closes (after `closed` is set): attempts in flight stop waiting for their reply and give their grants back (see settleBy). */
  readonly closeListeners: Set<() => void>;
  /** Registers a command whose outcome close() must wait for (a give-back, an undo). */
  readonly track: (work: Promise<unknown>) => void;
  /** Set when `syncReplicas` is on: every grant is confirmed by WAIT, or undone. */
  readonly replicaSync: ReplicaSync | undefined;
  /** Called before every acquire attempt; the client runs its one-time start-up checks on the first. */
  readonly firstUse: () => void;
  /** Who this client is, for operators reading holds that have no holder info yet. */
  readonly holderRecord: HolderRecord;
  /** Calls in flight per lock key, for the plain lock's lean acquires (see PlainProtocol). */
  readonly traffic: Map<string, number>;
  /** The plain lock's protocols of the names used lately (see plainProtocol). */
  readonly plainProtocols: Map<string, PlainProtocol>;
}

/**
 * How many names' plain-lock protocols (their keys, built from the name) a client keeps for `getLock`: a
 * `getLock(name)` per call, as in `getLock('order:42').withLock(...)`, builds them once. Past the bound the
 * cache starts over: a client locking millions of names keeps a bounded few.
 */
const PLAIN_PROTOCOLS_KEPT = 1024;

/** The plain lock's protocol for `name` (stateless but for its keys: shared by every RLock of the name). */
function plainProtocol(context: LockContext, name: string): PlainProtocol {
  const kept = context.plainProtocols;
  let protocol = kept.get(name);
  if (!protocol) {
    if (kept.size >= PLAIN_PROTOCOLS_KEPT) kept.clear();
    protocol = new PlainProtocol(
      context.scripts,
      lockKeys(context.keyPrefix, name, context.cluster),
      context.redis,
      context.traffic,
    );
    kept.set(name, protocol);
  }
  return protocol;
}

/** Rejects calls on a closed client (before any I/O). */
export function checkOpen(context: LockContext, name: string): void {
  if (context.closed) throw new LockClientClosedError(name);
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

/**
 * What a queued newcomer keeps of its wait time for its one attempt (a round trip) when its turn has not
 * come: it asks Redis once before its wait ends, never after.
 */
const LAST_ATTEMPT_RESERVE_MS = 20;

/** The longest pause before asking again after grants that came too late to be held. */
const LATE_GRANT_MAX_PAUSE_MS = 1000;

/**
 * One attempt's result. A failed attempt's `pttl` is the holder's TTL; `late` is set when the lock was granted
 * but the reply came after its own lease could have run out (it was given back), with the round trip that
 * took, in ms.
 */
type AttemptResult =
  { readonly hold: Hold } | { readonly hold: undefined; readonly pttl: number; readonly late?: number };

/**
 * A lease of `acquire()`/`withLock()`. A class, so that its signal is a getter on the prototype: the hold makes
 * its AbortSignal only when someone reads it (Hold.signal), and an object literal with a getter costs more to
 * build than the signal saves.
 */
class HeldLease implements LockLease {
  readonly name: string;
  readonly fencingToken: bigint;
  readonly release: () => Promise<void>;
  readonly #hold: Hold;

  constructor(name: string, hold: Hold, release: () => Promise<void>) {
    this.name = name;
    this.fencingToken = hold.fencingToken;
    this.release = release;
    this.#hold = hold;
  }

  get signal(): AbortSignal {
    return this.#hold.signal;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/**
 * Redisson's reentrant lock (`RLock`), from `locks.getLock(name)`: held per flow, re-entered by the flow and its
 * descendants, woken by pub/sub, renewed by the watchdog without a `leaseTime`, fenced on every free → held.
 */
export class RLock {
  readonly name: string;
  readonly #context: LockContext;
  readonly #protocol: LockProtocol;

  /** @internal `protocol`: the kind of lock (the fair lock and the read-write lock's sides pass theirs). */
  constructor(context: LockContext, name: string, protocol?: LockProtocol) {
    this.name = name;
    this.#context = context;
    this.#protocol = protocol ?? plainProtocol(context, name);
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
    return this.#observedTake(this.#fields(flow), { ...options, waitTime: options.waitTime ?? 0 }, (hold) => !!hold);
  }

  /** Waits until the lock is held by the current flow (or the signal aborts). */
  lock(leaseTime?: number): Promise<void>;
  lock(options: LockOptions): Promise<void>;
  async lock(...args: unknown[]): Promise<void> {
    const options = resolveLockArgs(args);
    const flow = this.#requireFlow('lock');
    await this.#observedTake(this.#fields(flow), options, () => undefined);
  }

  /** Drops one hold of the current flow (or the ancestor that holds it). Throws LockNotHeldError if none. */
  async unlock(): Promise<void> {
    const flow = this.#requireFlow('unlock');
    await this.#release(this.#fields(flow));
  }

  /** Frees the lock whoever holds it; resolves to whether it was held. Local holders lose it. */
  async forceUnlock(): Promise<boolean> {
    this.#checkOpen();
    const context = releaseContext(this.#identity(), undefined, { force: true });
    return traceRelease(context, async () => {
      const freed = await this.#protocol.forceUnlock();
      if (context) context.freed = freed;
      for (const hold of this.#context.watchdog.holdsOf(this.#protocol.keys.lockKey)) {
        // A read-write lock's other side keeps its holds: the force-unlock of one side frees only that side.
        if (hold.protocol.kind === this.#protocol.kind) this.#context.watchdog.lose(hold, 'force_unlocked');
      }
      return freed;
    });
  }

  /** Whether anyone (any flow, any client, a Redisson client) holds the lock now: asked of Redis. */
  async isLocked(): Promise<boolean> {
    this.#checkOpen();
    return this.#protocol.isLocked();
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
    return this.#context.scripts.holdCount(this.#protocol.keys, this.#fields(flow));
  }

  /** Milliseconds until the lock expires: -2 when not locked, -1 when it has no expiry. */
  async remainTimeToLive(): Promise<number> {
    this.#checkOpen();
    return this.#context.redis.pttl(this.#protocol.keys.lockKey);
  }

  /**
   * Runs `fn` holding the lock, in a new child flow of the current one (so concurrent `withLock` calls
   * exclude each other, and nested ones re-enter), and releases it afterwards. Waits forever unless
   * `waitTime` is given; throws LockAcquireTimeoutError when it runs out. `fn` gets the lease's signal
   * (aborted if the hold is lost) and the lease itself (for its fencing token).
   */
  withLock<T>(fn: (signal: AbortSignal, lease: LockLease) => T | PromiseLike<T>, options?: AcquireOptions): Promise<T> {
    // A plain function, not async (one promise less on every call): bad arguments still reject.
    return promiseOf(() => {
      checkFunction(fn, 'lock.withLock(fn, options)');
      const resolved = resolveAcquireOptions(options);
      const acquire = (): Promise<LockLease> => this.#lease(currentFlow() ?? newFlow(), resolved);
      return scopedLease(
        this.#identity(),
        resolved,
        this.#leaseMs(resolved),
        acquire,
        (lease) => lease.fencingToken,
        fn,
      );
    });
  }

  /**
   * Acquires the lock and returns a lease for `await using`. Inside a flow the hold is the flow's (nested
   * calls re-enter it); outside any flow it belongs to the lease alone. Waits forever unless `waitTime`.
   */
  acquire(options?: AcquireOptions): Promise<LockLease> {
    // A plain function, not async (one promise less on every acquire): bad options still reject.
    return promiseOf(() => {
      const resolved = resolveAcquireOptions(options);
      return this.#lease(currentFlow() ?? newFlow(), resolved);
    });
  }

  /** What identifies this lock on the diagnostics channels. */
  #identity(): LockIdentity {
    return {
      name: this.name,
      key: this.#protocol.keys.lockKey,
      clientId: this.#context.clientId,
      kind: this.#protocol.kind,
    };
  }

  #leaseMs(options: ResolvedAcquire): number {
    return options.leaseTime === -1 ? this.#context.watchdogTimeout : options.leaseTime;
  }

  /**
   * #take for the public calls, published on the diagnostics channels when anyone listens; `finish` makes
   * the caller's value of the hold (or of its absence at the end of the wait).
   */
  #observedTake<T>(
    owners: readonly string[],
    options: ResolvedAcquire,
    finish: (hold: Hold | undefined) => T,
  ): Promise<T> {
    const observer = AcquireObserver.create(() => ({
      ...this.#identity(),
      owner: owners[0],
      mode: options.leaseTime === -1 ? 'watchdog' : 'lease',
      leaseMs: this.#leaseMs(options),
      waitMs: options.waitTime,
    }));
    return traceAcquire(observer, options.signal, () => this.#take(owners, options, observer), holdSettlement, finish);
  }

  /** The hash fields of `flow` and its ancestors, nearest first. */
  #fields(flow: Flow): string[] {
    return ownerChain(this.#context.clientId, flow).map((owner) => this.#protocol.field(owner));
  }

  #checkOpen(): void {
    checkOpen(this.#context, this.name);
  }

  #requireFlow(method: string): Flow {
    this.#checkOpen();
    const flow = currentFlow();
    if (!flow) throw new NoFlowError(this.name, method);
    return flow;
  }

  #lease(flow: Flow, options: ResolvedAcquire): Promise<LockLease> {
    return this.#observedTake(this.#fields(flow), options, (hold) => {
      if (!hold) throw new LockAcquireTimeoutError(this.name, options.waitTime ?? 0);
      let released: Promise<void> | undefined;
      return new HeldLease(this.name, hold, () => (released ??= this.#releaseLease(hold)));
    });
  }

  /** Acquires for the first owner of `owners` (or re-enters for any): the hold, or undefined at waitTime. */
  async #take(
    owners: readonly string[],
    options: ResolvedAcquire,
    observer: AcquireObserver | undefined,
  ): Promise<Hold | undefined> {
    this.#checkOpen();
    const { waitTime, signal } = options;
    signal?.throwIfAborted();
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    const { watchdog, waits } = this.#context;
    const protocol = this.#protocol;
    const reentry = watchdog.nearest(protocol.keys.lockKey, owners) !== undefined;
    // A waiter that may wait keeps a place in Redis where the kind of lock has one (the fair lock's queue,
    // a waiting writer's registration); it listens on its own channel there, or on the lock's.
    const ticket = !reentry && waitTime !== 0 ? protocol.ticket?.(owners) : undefined;
    const channel = ticket?.channel ?? protocol.keys.channel;
    const entry: EnterOptions = {
      wake: protocol.wake === 'all' ? 'all' : 'one',
      name: this.name,
      lingerMs: ticket && protocol.wake === 'ticket' ? LINGER_MS : 0,
    };
    const localOrder = protocol.wake === 'one';
    // A newcomer that may wait queues behind local waiters instead of racing them for a release one of
    // them is due; a single attempt (waitTime 0) just makes it.
    const queued = localOrder && waits.hasWaiters(channel);
    // Right after this process freed the lock for waiters elsewhere, a newcomer lets them take it first
    // instead of winning every race by a round trip (which starves other processes).
    const yielding =
      localOrder &&
      !reentry &&
      (waitTime === undefined || waitTime >= YIELD_MS) &&
      !queued &&
      waits.othersWoken(channel);
    let waiter: Waiter | undefined;
    let parkFirst = false;
    if (!reentry && waitTime !== 0 && (queued || yielding)) {
      waiter = waits.enter(channel, entry);
      parkFirst = true;
      if (yielding) waiter.noteHolderTtl(YIELD_MS);
    } else if (ticket && waits.isSubscribed(channel)) {
      // Already listening on the ticket's channel (a reused fair-queue id): a release that this first
      // attempt's place in line earns can no longer go unseen, so no second attempt is needed.
      waiter = waits.enter(channel, entry);
    }
    let attempted = false;
    let lateGrants = 0;
    let hold: Hold | undefined;
    try {
      for (;;) {
        if (waiter && (attempted || parkFirst)) {
          const remaining = deadline - monotonicNow();
          // Until its first attempt a queued newcomer keeps back time for one, so that it asks Redis once
          // within its wait even when its turn never comes.
          const parkFor = attempted ? remaining : remaining - Math.min(remaining / 2, LAST_ATTEMPT_RESERVE_MS);
          if (parkFor > 0) {
            observer?.waiting(waiter.holderTtl());
            const woke = await waiter.park(Math.min(parkFor, waiter.holderTtl(), protocol.refreshMs), signal);
            observer?.woke(woke);
          }
          // A call that may wait never does worse than one that may not: it asks Redis at least once.
          if (attempted && deadline - monotonicNow() <= 0) return undefined;
          waiter.attempting();
        }
        observer?.attempted();
        const result = await this.#attempt(owners, options, ticket);
        if (result.hold) return (hold = result.hold);
        attempted = true;
        if (result.late === undefined) observer?.contended();
        const remaining = deadline - monotonicNow();
        if (remaining <= 0) return undefined;
        if (result.late !== undefined) {
          // Granted, but too late to hold: the lease is about as short as a round trip (a slow link or a
          // stalled server). Ask again, but not at once every time, or a short lease becomes a hot loop.
          const pause = Math.min(remaining, LATE_GRANT_MAX_PAUSE_MS, result.late * 2 ** lateGrants);
          lateGrants++;
          if (lateGrants > 1) {
            const { closeSignal } = this.#context;
            await abortableSleep(pause, signal ? [signal, closeSignal] : [closeSignal]);
          }
          // The lock was free: a waiter asks again without waiting for a holder.
          waiter?.noteHolderTtl(0);
          continue;
        }
        lateGrants = 0;
        if (!waiter) {
          // Where a message wakes every waiter (readers), one that joins a queue which appeared during its
          // attempt may have missed the broadcast its other waiters got: it asks again at once. (Where one
          // message wakes one waiter, a waiter already in the queue got it, parked or mid-attempt.)
          const late = protocol.wake === 'all' && waits.hasQueue(channel);
          waiter = waits.enter(channel, entry);
          if (late) continue;
        }
        waiter.noteHolderTtl(result.pttl);
      }
    } finally {
      waiter?.leave();
      if (ticket) {
        // A place in Redis that no hold came of is given up as soon as the latest attempt has settled (one
        // given up on may still run: a NOSCRIPT retry or a resend sent after the leave would take the place
        // again, where nothing refreshes or removes it); its id is reused only afterwards.
        if (ticket.sent && !hold) {
          const leave = (): Promise<void> => ticket.leave();
          this.#context.track((ticket.attempt ?? Promise.resolve()).then(leave, leave).finally(() => ticket.dispose()));
        } else ticket.dispose();
      }
    }
  }

  /**
   * One acquire script call. If the caller gives up while it is in flight (abort, wait time over, client
   * closed), a grant that arrives later is released at once, and never renewed.
   */
  async #attempt(
    owners: readonly string[],
    options: ResolvedAcquire,
    ticket: WaitTicket | undefined,
    retriedStale = false,
  ): Promise<AttemptResult> {
    const { watchdog, watchdogTimeout, track } = this.#context;
    const lease = options.leaseTime === -1 ? watchdogTimeout : options.leaseTime;
    this.#context.firstUse();
    this.#context.holderRecord.cover(lease);
    const sentAt = monotonicNow();
    const requestId = newRequestId();
    const { lockKey } = this.#protocol.keys;
    const lean =
      this.#protocol.idle?.() === true && owners.every((owner) => watchdog.find(lockKey, owner) === undefined);
    // How undo and purge name this acquire in Redis: a lean grant records no memo (see lock/acquire.lua).
    const memo = lean ? `~${requestId}` : requestId;
    const pending = this.#grant(owners, lease, requestId, memo, ticket, lean);
    if (ticket) ticket.attempt = pending;
    let outcome: Settled<AcquireReply>;
    try {
      // An attempt sent is awaited to its reply, also past the call's wait time (which bounds waiting for a
      // holder, not the round trip): its grant is kept, and no second attempt overlaps it. Only an abort or
      // close() gives it up (the client's own command timeout, if set, bounds a stalled server).
      outcome = await settleBy(pending, options.signal, this.#context);
    } catch (error) {
      // No reply (connection lost without a resend, command timeout): the script may have run anyway.
      // Undo exactly that acquisition if it did, so that no hold is left that nobody believes it has.
      // (#grant already undid a grant too few replicas acknowledged.)
      if (!(error instanceof LockNotReplicatedError)) track(this.#undo(owners, memo));
      throw error;
    }
    if (outcome.kind !== 'reply' || this.#context.closed) {
      // Given up on: a grant that still arrives is given back; an error leaves the outcome unknown, so the
      // acquisition is undone by its request id if it ran. close() waits for either.
      track(
        pending.then(
          (reply) => (reply.acquired ? this.#giveBack(owners[reply.ownerIndex], memo, reply.holdCount) : undefined),
          () => this.#undo(owners, memo),
        ),
      );
      if (outcome.kind === 'aborted') throw outcome.reason;
      throw new LockClientClosedError(this.name);
    }
    const reply = outcome.value;
    if (!reply.acquired) {
      if (reply.upgrade) throw new LockUpgradeError(this.name);
      return { hold: undefined, pttl: reply.pttl };
    }
    const owner = owners[reply.ownerIndex] ?? owners[0] ?? '';
    if (reply.holdCount > 1 && watchdog.find(lockKey, owner) === undefined) {
      // Re-entered a hold this client does not know: one it declared lost whose purge has not reached
      // Redis (or failed). Counting on from it would leave a count nobody releases. Drop it with this
      // acquisition and take the lock afresh.
      await this.#protocol.release('purge', [owner], { undoId: memo, repair: true });
      if (!retriedStale) return this.#attempt(owners, options, ticket, true);
      return { hold: undefined, pttl: 0 };
    }
    const roundTrip = monotonicNow() - sentAt;
    if (reply.holdCount === 1 && roundTrip >= lease - driftMs(lease)) {
      // The grant arrived after its own lease could have run out (a stalled server or network): the lock
      // may already be someone else's, so it is not held. Give it back and let the caller try again.
      track(this.#giveBack(owner, memo, reply.holdCount));
      return { hold: undefined, pttl: 0, late: roundTrip };
    }
    const hold = watchdog.acquired(this.name, this.#protocol, owner, reply, memo, sentAt, options.leaseTime);
    if (reply.grantedAt !== undefined) {
      // A lean grant: the first renewal records its token and holder info (a short hold never pays for them).
      const label = this.#context.scripts.holderInfo;
      hold.pendingSide = { token: reply.token, info: label === '' ? '' : `#${reply.grantedAt} ${label}` };
    }
    return { hold };
  }

  /**
   * The acquire script; with `syncReplicas`, then WAIT for the grant (in the same attempt, so the wait time
   * and the signal bound it too). A grant too few replicas acknowledged is undone before this rejects.
   */
  #grant(
    owners: readonly string[],
    leaseMs: number,
    requestId: string,
    memo: string,
    waitTicket: WaitTicket | undefined,
    lean: boolean,
  ): Promise<AcquireReply> {
    return confirmedGrant(this.#context.replicaSync, this.#protocol.keys.lockKey, this.name, {
      send: () => this.#protocol.acquire(leaseMs, requestId, owners, waitTicket, lean),
      granted: (reply) => reply.acquired,
      undo: () => this.#undo(owners, memo),
    });
  }

  /** Undoes the acquisition with request id `acquireId` if it ran; failures are left to the lease's expiry. */
  async #undo(owners: readonly string[], acquireId: string): Promise<void> {
    try {
      await this.#protocol.release('undo', owners, { undoId: acquireId, repair: true });
    } catch {
      // The connection is failing: the grant, if it exists, expires with its lease.
    }
  }

  /**
   * Gives back the grant of acquisition `requestId` of `owner`, which its caller did not take (gave up on,
   * or got too late). While this client has the owner's hold, that one count is dropped, and the hold's
   * latest acquisition in Redis (`<owner>:acq`) is now this one: a later purge must name it. Without a hold
   * here every count of the owner is stale (its hold was lost meanwhile), so all of them go. A grant counted
   * 1 (`holdCount`) beside a hold this client has was no re-entry: Redis had lost that hold (its lease ran
   * out while the attempt waited on a stalled server, or it was deleted), so the grant goes and the hold is
   * lost, never taken for released. Failures are left to the lease's expiry.
   */
  async #giveBack(owner: string | undefined, requestId: string, holdCount: number): Promise<void> {
    if (owner === undefined) return;
    const { watchdog } = this.#context;
    const found = watchdog.find(this.#protocol.keys.lockKey, owner);
    const hold = found && holdCount > 1 ? found : undefined;
    if (hold) hold.acquireId = requestId;
    if (found && !hold) watchdog.releaseFoundGone(found);
    try {
      const mode = hold ? 'one' : 'purge';
      const reply = await this.#protocol.release(mode, [owner], { undoId: requestId, repair: true });
      if (hold && reply.remaining >= 0) watchdog.released(hold, reply.remaining);
    } catch {
      // The connection is failing: the grant expires with its lease.
    }
  }

  /**
   * Releases one acquisition made through `acquire()`/`withLock()`. A lease only ever touches its own hold:
   * once that hold was lost or replaced (the same flow acquired afresh), it fails without sending anything.
   */
  #releaseLease(hold: Hold): Promise<void> {
    if (this.#context.watchdog.find(this.#protocol.keys.lockKey, hold.owner) !== hold) {
      const lost = hold.lostWith;
      return Promise.reject(new LockNotHeldError(this.name, lost === undefined ? undefined : { cause: lost }));
    }
    return this.#release([hold.owner], hold);
  }

  /** Drops one hold of the nearest owner in `owners` that holds the lock. */
  #release(owners: readonly string[], leaseHold?: Hold): Promise<void> {
    const context = releaseContext(this.#identity(), leaseHold?.owner ?? owners[0]);
    return traceRelease(context, () => this.#releaseOne(owners, leaseHold, context));
  }

  async #releaseOne(
    owners: readonly string[],
    leaseHold: Hold | undefined,
    context?: ReleaseTraceContext,
  ): Promise<void> {
    const { watchdog } = this.#context;
    const { keys } = this.#protocol;
    const local = leaseHold ?? watchdog.nearest(keys.lockKey, owners);
    // Mark the last hold as releasing before the call, so that a renewal racing it is not taken for a loss.
    const last = local !== undefined && local.state === 'held' && local.count <= 1;
    if (last) local.state = 'releasing';
    let reply;
    try {
      reply = await this.#protocol.release('one', owners);
    } catch (error) {
      // Unknown outcome: stop renewing the last hold so that, at worst, it expires with its lease.
      if (last) watchdog.forget(local);
      throw error;
    }
    if (context) {
      context.remaining = reply.remaining;
      context.freed = reply.remaining === 0;
      context.woken = reply.woken;
      context.fencingToken = local?.fencingToken;
      if (reply.remaining === 0 && local) context.heldMs = monotonicNow() - local.startedAt;
    }
    if (reply.remaining >= 0) {
      const hold = watchdog.find(keys.lockKey, owners[reply.ownerIndex] ?? '');
      if (hold) watchdog.released(hold, reply.remaining);
      if (reply.remaining === 0 && this.#protocol.wake === 'one')
        this.#context.waits.released(keys.channel, reply.woken);
    } else if (local) {
      watchdog.releaseFoundGone(local);
    }
    // A lease already declared lost stays lost even if Redis still had it: its holder was told to stop.
    if (reply.remaining < 0 || leaseHold?.state === 'lost') {
      const lost: unknown = local?.lostWith ?? watchdog.lossOf(keys.lockKey, owners);
      throw new LockNotHeldError(this.name, lost === undefined ? undefined : { cause: lost });
    }
  }
}

/**
 * withLease in a new child flow, the scope of `withLock` and `withPermit` of every primitive: traced on
 * `flowlock:withLock` when that has subscribers, with the outcome of the acquisition, the fencing token
 * (`token` reads it from the lease; undefined where there is none) and how long the lock was held. `acquire`
 * runs in the new flow.
 */
export function scopedLease<L extends { readonly signal: AbortSignal; release(): Promise<void> }, T>(
  identity: LockIdentity & { readonly names?: readonly string[] },
  options: ResolvedAcquire,
  leaseMs: number,
  acquire: () => Promise<L>,
  token: (lease: L) => bigint | undefined,
  fn: (signal: AbortSignal, lease: L) => T | PromiseLike<T>,
): Promise<T> {
  if (!withLockChannel.hasSubscribers) return runInNewFlow(() => withLease(acquire, fn));
  const context: WithLockTraceContext = {
    ...identity,
    mode: options.leaseTime === -1 ? 'watchdog' : 'lease',
    leaseMs,
    waitMs: options.waitTime,
    outcome: undefined,
    fencingToken: undefined,
    heldMs: undefined,
  };
  let acquiredAt: number | undefined;
  const observed = async (): Promise<T> => {
    try {
      return await runInNewFlow(() =>
        withLease(async () => {
          const taken = await acquire();
          acquiredAt = monotonicNow();
          context.outcome = 'acquired';
          context.fencingToken = token(taken);
          return taken;
        }, fn),
      );
    } catch (error) {
      context.outcome ??= failedOutcome(error, options.signal);
      throw error;
    } finally {
      if (acquiredAt !== undefined) context.heldMs = monotonicNow() - acquiredAt;
    }
  };
  return traced(withLockChannel, context, observed);
}

/**
 * Runs `fn` holding the lease that `acquire` takes (in the current flow), and releases it afterwards: when
 * `fn` throws, its error wins over a failed release. When the hold was lost while `fn` ran, the call rejects
 * with a LockLostError whose `result` is `fn`'s value, so that a caller can tell "the work ran, unprotected"
 * from "the work did not run" (and does not blindly run it again); any other failed release rejects as it is.
 */
export async function withLease<L extends { readonly signal: AbortSignal; release(): Promise<void> }, T>(
  acquire: () => Promise<L>,
  fn: (signal: AbortSignal, lease: L) => T | PromiseLike<T>,
): Promise<T> {
  const lease = await acquire();
  let result: T;
  try {
    const value = fn(lease.signal, lease);
    // A plain value is not awaited: the release goes out in this tick, with no promise made for nothing.
    result = isPromiseLike(value) ? await value : value;
  } catch (error) {
    await lease.release().catch(() => undefined);
    throw error;
  }
  try {
    await lease.release();
  } catch (error) {
    // A release that finds the hold gone declares it lost first, so the signal tells a loss from a failure.
    const lost: unknown = lease.signal.aborted ? lease.signal.reason : undefined;
    if (!(lost instanceof LockLostError) || lost.lockName === undefined) throw error;
    throw new LockLostError(lost.lockName, `${lost.reason} (while the scoped function ran; it finished)`, {
      cause: lost,
      result,
    });
  }
  return result;
}

/** Whether `value` is a promise or another thenable (awaited as one). */
function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function';
}
