/**
 * RMultiLock: several locks taken all-or-nothing by one flow. Members are always taken in one global order
 * (by Redis key), so two multi-locks over overlapping names cannot deadlock each other (a flow that already
 * holds one of the names and then waits still can, as with any two locks); if a member cannot be had in
 * time, the members already taken are released and the call fails. Each member is an ordinary reentrant
 * hold of the flow, renewed by the client's one watchdog; the lease's signal aborts when any is lost.
 */
import type { LockIdentity } from '../diagnostics/channels.js';
import { AcquireObserver, traceAcquire } from '../diagnostics/publish.js';
import { LockAcquireTimeoutError } from '../errors.js';
import { currentFlow, newFlow, runInFlow, type Flow } from '../machinery/flow.js';
import { scopedLease, type LockLease, type RLock } from './lock.js';
import { checkFunction, resolveAcquireOptions, type AcquireOptions, type ResolvedAcquire } from '../options.js';
import { monotonicNow } from '../time.js';

/** The holds of one multi-lock acquisition; release it once (or let `await using` do it). */
export interface MultiLockLease extends AsyncDisposable {
  readonly names: readonly string[];
  /** Aborts with the LockLostError of the first member hold that is lost. */
  readonly signal: AbortSignal;
  /** Each member's fencing token, by lock name. */
  readonly fencingTokens: ReadonlyMap<string, bigint>;
  /** Releases every member (in reverse order); rejects with the first error after trying them all. */
  release(): Promise<void>;
}

/**
 * Several locks taken all-or-nothing for one flow, from
 * `locks.getMultiLock(names)`; members are taken in one global order, so overlapping multi-locks never
 * deadlock each other (a flow that already holds a lock and then waits for a multi-lock still can: give that
 * wait a `waitTime`).
 */
export class RMultiLock {
  /** The member names, in the order they are taken. */
  readonly names: readonly string[];
  readonly #members: readonly RLock[];
  /** For the diagnostics channels: the multi-lock is named by its members, keyed by the first. */
  readonly #identity: LockIdentity;
  readonly #watchdogTimeout: number;

  /** @internal `members` must already be in the global order (see LockClient.getMultiLock); `firstKey` is the first's key. */
  constructor(members: readonly RLock[], clientId: string, firstKey: string, watchdogTimeout: number) {
    this.#members = members;
    this.names = members.map((member) => member.name);
    this.#identity = { name: this.names.join(', '), key: firstKey, clientId, kind: 'multi' };
    this.#watchdogTimeout = watchdogTimeout;
  }

  /**
   * Takes every member for the current flow (outside any flow, for the lease alone). Waits forever unless
   * `waitTime` is given, which bounds the whole call; throws LockAcquireTimeoutError when it runs out.
   */
  async acquire(options?: AcquireOptions): Promise<MultiLockLease> {
    const resolved = resolveAcquireOptions(options);
    return this.#observedAcquire(currentFlow() ?? newFlow(), resolved);
  }

  /** Runs `fn` holding every member, in a new child flow, and releases them afterwards. */
  async withLock<T>(
    fn: (signal: AbortSignal, lease: MultiLockLease) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T> {
    checkFunction(fn, 'multiLock.withLock(fn, options)');
    const resolved = resolveAcquireOptions(options);
    const acquire = (): Promise<MultiLockLease> => this.#observedAcquire(currentFlow() ?? newFlow(), resolved);
    const leaseMs = resolved.leaseTime === -1 ? this.#watchdogTimeout : resolved.leaseTime;
    // Each member's token is on its own acquire trace; the multi-lock has none of its own.
    return scopedLease({ ...this.#identity, names: this.names }, resolved, leaseMs, acquire, () => undefined, fn);
  }

  /** #acquireIn, traced as one acquisition of kind `multi` (each member's is traced as well). */
  #observedAcquire(flow: Flow, options: ResolvedAcquire): Promise<MultiLockLease> {
    const observer = AcquireObserver.create(() => ({
      ...this.#identity,
      owner: undefined,
      names: this.names,
      mode: options.leaseTime === -1 ? 'watchdog' : 'lease',
      leaseMs: options.leaseTime === -1 ? this.#watchdogTimeout : options.leaseTime,
      waitMs: options.waitTime,
    }));
    return traceAcquire(
      observer,
      options.signal,
      () => this.#acquireIn(flow, options),
      () => ({ outcome: 'acquired' }),
      (lease) => lease,
    );
  }

  async #acquireIn(flow: Flow, options: ResolvedAcquire): Promise<MultiLockLease> {
    const { waitTime, leaseTime, signal } = options;
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    let leases: LockLease[] = [];
    for (;;) {
      try {
        for (const member of this.#members) {
          // A member reached after the multi-lock's own wait ran out still gets one attempt (waitTime 0), as
          // every member of a multi-lock without a wait does: a longer wait never does worse than none.
          const remaining = Math.max(0, Math.floor(deadline - monotonicNow()));
          const memberOptions: AcquireOptions = {
            leaseTime,
            ...(deadline === Infinity ? {} : { waitTime: remaining }),
            ...(signal === undefined ? {} : { signal }),
          };
          leases.push(await runInFlow(flow, () => member.acquire(memberOptions)));
        }
      } catch (error) {
        await releaseAll(leases).catch(() => undefined);
        if (error instanceof LockAcquireTimeoutError) {
          throw new LockAcquireTimeoutError(this.names.join(', '), waitTime ?? 0);
        }
        throw error;
      }
      // A fixed lease of an earlier member runs while later ones are awaited, and may have run out (another
      // owner may hold that member now): all-or-nothing means starting over, within the same wait time.
      if (!leases.some((lease) => lease.signal.aborted)) break;
      await releaseAll(leases).catch(() => undefined);
      leases = [];
      if (deadline - monotonicNow() <= 0) throw new LockAcquireTimeoutError(this.names.join(', '), waitTime ?? 0);
    }
    let released: Promise<void> | undefined;
    const release = (): Promise<void> => (released ??= releaseAll(leases));
    return {
      names: this.names,
      signal: AbortSignal.any(leases.map((lease) => lease.signal)),
      fencingTokens: new Map(leases.map((lease) => [lease.name, lease.fencingToken])),
      release,
      [Symbol.asyncDispose]: release,
    };
  }
}

/** Releases `leases` in reverse order, all of them, then rejects with the first failure if any. */
async function releaseAll(leases: readonly LockLease[]): Promise<void> {
  let failure: { error: unknown } | undefined;
  for (const lease of [...leases].reverse()) {
    try {
      await lease.release();
    } catch (error) {
      failure ??= { error };
    }
  }
  if (failure) throw failure.error;
}
