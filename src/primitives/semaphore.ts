/**
 * RSemaphore: Redisson's counted semaphore. The available permits are one integer (`<name>`, shared with
 * Java clients); a release adds to it and announces the new number on `redisson_sc:{name}`. Permits have
 * no owner and no lease (Redisson's semantics): a process that dies holding permits leaks them until
 * someone calls `addPermits` (RPermitExpirableSemaphore has leases and a watchdog). No flows, no re-entry.
 *
 * Waiting is by pub/sub: a release wakes, in each process, as many of its waiters as the announced permits
 * can serve, in arrival order; a newcomer queues behind its process's waiters.
 *
 * Differences from Redisson, none visible on the wire to a Java client:
 * - A waiter for several permits is neither stuck behind smaller needs nor starved by them: in its process
 *   nobody overtakes it, and across processes, once it has failed an attempt, it claims the permits
 *   (`flowlock:claim:{name}`, one claim at a time, living `watchdogTimeout` past its latest attempt):
 *   newcomers of this library then take only permits beyond its need. Java clients do not read the claim.
 * - Grants and releases are idempotent under a resend (memo keys), and a grant whose reply was lost, or came
 *   after the caller gave up, is given back.
 * - `addPermits` keeps a TTL the key has; `drainPermits` never makes the count positive.
 */
import { LockClientClosedError, LockNotReplicatedError } from '../errors.js';
import { waitFor } from '../machinery/waiting.js';
import { monotonicNow, settleBy } from '../machinery/time.js';
import {
  checkPermitDelta,
  checkPermits,
  resolveSemaphoreAcquireArgs,
  resolveSemaphoreTryAcquireArgs,
  type ResolvedPermitWait,
  type SemaphoreAcquireOptions,
  type SemaphoreTryAcquireOptions,
} from '../options.js';
import { semaphoreKeys, type SemaphoreKeys } from '../redis/keys.js';
import { integerAt, MEMO_MS, newRequestId } from '../redis/scripts.js';
import type { LockContext } from './lock.js';

let claimCounter = 0;

export class RSemaphore {
  readonly name: string;
  readonly #context: LockContext;
  readonly #keys: SemaphoreKeys;

  constructor(context: LockContext, name: string) {
    this.name = name;
    this.#context = context;
    this.#keys = semaphoreKeys(context.keyPrefix, name, context.cluster);
  }

  /** Sets the number of permits if the semaphore has none set yet; resolves to whether it did. */
  async trySetPermits(permits: number): Promise<boolean> {
    return trySetPermits(this.#context, this.name, this.#keys, checkPermits(permits));
  }

  /** Adds permits (a negative number takes them away; the count may go below zero). */
  async addPermits(permits: number): Promise<void> {
    await addPermits(this.#context, this.name, this.#keys, checkPermitDelta(permits));
  }

  /** The number of permits available now (0 when none were ever set). */
  async availablePermits(): Promise<number> {
    checkOpen(this.#context, this.name);
    return Number((await this.#context.redis.get(this.#keys.lockKey)) ?? 0);
  }

  /** Takes every available permit; resolves to how many. */
  async drainPermits(): Promise<number> {
    checkOpen(this.#context, this.name);
    return integerAt([await this.#context.scripts.run('semaphore/drain-permits', [this.#keys.lockKey], [])], 0);
  }

  /** Waits until `permits` (default 1) are granted, or the signal aborts. */
  acquire(permits?: number): Promise<void>;
  acquire(options: SemaphoreAcquireOptions): Promise<void>;
  async acquire(...args: unknown[]): Promise<void> {
    await this.#take(resolveSemaphoreAcquireArgs(args));
  }

  /**
   * Takes `permits` (default 1) if they are available at once (`tryAcquire()`, `tryAcquire(permits)`), or
   * within `waitTime` ms. Resolves to whether they were granted.
   */
  tryAcquire(permits?: number, waitTime?: number): Promise<boolean>;
  tryAcquire(options: SemaphoreTryAcquireOptions): Promise<boolean>;
  async tryAcquire(...args: unknown[]): Promise<boolean> {
    return this.#take(resolveSemaphoreTryAcquireArgs(args));
  }

  /** Gives `permits` (default 1) back and wakes waiters they can serve. Anyone may release (no owners). */
  async release(permits = 1): Promise<void> {
    checkPermits(permits);
    checkOpen(this.#context, this.name);
    const { lockKey, channel, releaseMemoPrefix } = this.#keys;
    await this.#context.scripts.runAnnouncing(
      'semaphore/release',
      [lockKey, channel, releaseMemoPrefix + newRequestId()],
      [permits, MEMO_MS, 'release'],
    );
  }

  async #take({ permits, waitTime, signal }: ResolvedPermitWait): Promise<boolean> {
    const context = this.#context;
    checkOpen(context, this.name);
    signal?.throwIfAborted();
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    const attemptDeadline = singleAttemptDeadline(waitTime, deadline);
    const { lockKey, claimKey, channel, acquireMemoPrefix } = this.#keys;
    // A waiter for several permits claims them once it failed an attempt (see the module comment), and
    // then refreshes its claim at least every third of its life.
    const claimId = permits > 1 && waitTime !== 0 ? `${context.clientId}:c${claimCounter++}` : '';
    const refreshMs = claimId ? Math.floor(context.watchdogTimeout / 3) : undefined;
    // Set by the attempts (a closure): whether Redis may hold this waiter's claim.
    const claim = { sent: false };
    try {
      const granted = await waitFor(
        context.waits,
        channel,
        { wake: 'permits', need: permits },
        deadline,
        signal,
        async () => {
          const requestId = newRequestId();
          claim.sent ||= claimId !== '';
          const reply = await attemptGrant(context, this.name, lockKey, attemptDeadline, signal, {
            send: async () => {
              const raw = await context.scripts.runAnnouncing(
                'semaphore/acquire',
                [lockKey, claimKey, acquireMemoPrefix + requestId, channel],
                [permits, MEMO_MS, claimId, context.watchdogTimeout],
              );
              return { granted: integerAt(raw, 0) === 1, available: integerAt(raw, 1) };
            },
            undo: () => this.#undo(requestId),
          });
          if (reply?.granted) return { done: true, value: true, available: reply.available };
          return refreshMs === undefined ? { done: false } : { done: false, retryInMs: refreshMs };
        },
      );
      if (granted) claim.sent = false; // the grant dropped the claim
      return granted === true;
    } finally {
      if (claim.sent) context.track(this.#leaveClaim(claimId));
    }
  }

  /** Gives back the grant of acquisition `requestId`, if it ran and was not undone yet. */
  async #undo(requestId: string): Promise<void> {
    const { lockKey, channel, acquireMemoPrefix } = this.#keys;
    try {
      await this.#context.scripts.runAnnouncing(
        'semaphore/release',
        [lockKey, channel, acquireMemoPrefix + requestId],
        [0, MEMO_MS, 'undo'],
        { direct: true },
      );
    } catch {
      // The connection is failing: the memo runs out and the permits stay taken (no owner to expire them).
    }
  }

  async #leaveClaim(claimId: string): Promise<void> {
    const { claimKey, lockKey, channel } = this.#keys;
    try {
      await this.#context.scripts.runAnnouncing('semaphore/leave', [claimKey, lockKey, channel], [claimId], {
        direct: true,
      });
    } catch {
      // The connection is failing: the claim runs out within watchdogTimeout.
    }
  }
}

export function checkOpen(context: LockContext, name: string): void {
  if (context.closed) throw new LockClientClosedError(name);
}

/** Sets the permits of a semaphore (plain or expirable: they share the key) that has none yet. */
export async function trySetPermits(
  context: LockContext,
  name: string,
  keys: SemaphoreKeys,
  permits: number,
): Promise<boolean> {
  checkOpen(context, name);
  const reply = await context.scripts.runAnnouncing(
    'semaphore/try-set-permits',
    [keys.lockKey, keys.channel],
    [permits],
  );
  return integerAt([reply], 0) === 1;
}

/** Adds `delta` permits to a semaphore (plain or expirable); a negative delta takes them away. */
export async function addPermits(
  context: LockContext,
  name: string,
  keys: SemaphoreKeys,
  delta: number,
): Promise<void> {
  checkOpen(context, name);
  await context.scripts.runAnnouncing('semaphore/add-permits', [keys.lockKey, keys.channel], [delta]);
}

/**
 * The deadline of each attempt: the wait's, since a stalled Redis must not stretch it, but a single attempt
 * (waitTime 0) runs to its reply: there is nothing to wait for.
 */
export function singleAttemptDeadline(waitTime: number | undefined, deadline: number): number {
  return waitTime === 0 ? Infinity : deadline;
}

/**
 * One grant attempt of a semaphore, bounded by `deadline` (monotonic ms), the signal and the client's close;
 * with `syncReplicas`, the grant is confirmed by WAIT or undone (LockNotReplicatedError). A grant whose
 * reply was lost, or arrived after the caller gave up, is undone (close() waits for that). Resolves to the
 * reply, or undefined when the caller gave up (deadline) before it came.
 */
export async function attemptGrant<R extends { readonly granted: boolean }>(
  context: LockContext,
  name: string,
  key: string,
  deadline: number,
  signal: AbortSignal | undefined,
  { send, undo }: { send: () => Promise<R>; undo: () => Promise<void> },
): Promise<R | undefined> {
  const { replicaSync, closeSignal, track } = context;
  context.firstUse();
  const confirmed = async (): Promise<R> => {
    const ticket = replicaSync?.ticket(key);
    const reply = await send();
    if (!reply.granted || !replicaSync || !ticket) return reply;
    let acknowledged: number;
    try {
      acknowledged = await replicaSync.acknowledged(ticket);
    } catch (error) {
      await undo();
      throw error;
    }
    if (acknowledged >= replicaSync.replicas) return reply;
    await undo();
    throw new LockNotReplicatedError(name, replicaSync.replicas, acknowledged);
  };
  const pending = confirmed();
  let outcome;
  try {
    outcome = await settleBy(pending, deadline, signal, closeSignal);
  } catch (error) {
    // No reply: the script may have run anyway. (A grant too few replicas acknowledged is undone already.)
    if (!(error instanceof LockNotReplicatedError)) track(undo());
    throw error;
  }
  if (outcome.kind === 'reply' && !context.closed) return outcome.value;
  track(pending.then((reply) => (reply.granted ? undo() : undefined), undo));
  if (outcome.kind === 'aborted') throw outcome.reason;
  if (context.closed) throw new LockClientClosedError(name);
  return undefined;
}
