/**
 * RSemaphore: Redisson's counted semaphore. The available permits are one integer (`<name>`, shared with
 * Java clients); a release adds to it and announces the new number on `redisson_sc:{name}`. Permits have
 * no owner and no lease (Redisson's semantics): a process that dies holding permits leaks them until
 * someone calls `addPermits` (RPermitExpirableSemaphore has leases and a watchdog). No flows, no re-entry.
 *
 * Waiting is by pub/sub, first come first served across every client of this library: a waiter whose
 * attempt fails joins the permit queue in Redis (`flowlock:permit-queue:{name}`, shared with the expirable
 * semaphore), and newcomers take only permits that no queued waiter ahead of them needs. A release wakes
 * exactly the queued waiters its permits serve, in order, each by name on its own client's channel (no
 * herd: other processes hear nothing), and announces on Redisson's channel only what no queued waiter
 * needs. A waiter for several permits is therefore neither stuck behind smaller needs nor starved by them
 * (Redisson #6664, #6687). An entry lives `watchdogTimeout` past its waiter's latest attempt (a waiter
 * attempts at least every third of that), so a crashed waiter stops holding the queue up within about
 * `watchdogTimeout`.
 *
 * Differences from Redisson, none visible on the wire to a Java client:
 * - The queue is ours: Redisson's clients take permits as they find them (they may overtake our queue),
 *   and hear on Redisson's channel only the permits our queued waiters do not need.
 * - Grants and releases are idempotent under a resend (memo keys), and a grant whose reply was lost, or came
 *   after the caller gave up, is given back.
 * - `addPermits` keeps a TTL the key has; `drainPermits` never makes the count positive.
 */
import type { LockIdentity } from '../diagnostics/channels.js';
import { AcquireObserver, releaseContext, traceAcquire, traceRelease } from '../diagnostics/publish.js';
import { LockClientClosedError, LockNotReplicatedError } from '../errors.js';
import { confirmedGrant } from '../machinery/replication.js';
import { LINGER_MS, waitFor, type Attempt, type EnterOptions } from '../machinery/waiting.js';
import { monotonicNow, settleBy } from '../time.js';
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
import { checkOpen, type LockContext } from './lock.js';

/**
 * What both semaphores of a name share: the count of available permits (Redisson's key and channel, and this
 * library's permit queue). RSemaphore and RPermitExpirableSemaphore extend it.
 */
export abstract class PermitCount {
  readonly name: string;
  /** @internal */
  protected readonly context: LockContext;
  /** @internal */
  protected readonly keys: SemaphoreKeys;

  /** @internal */
  constructor(context: LockContext, name: string) {
    this.name = name;
    this.context = context;
    this.keys = semaphoreKeys(context.keyPrefix, name, context.cluster);
  }

  /** Sets the number of permits if the semaphore has none set yet; resolves to whether it did. */
  async trySetPermits(permits: number): Promise<boolean> {
    checkPermits(permits);
    checkOpen(this.context, this.name);
    const { lockKey, queueKey, deadlinesKey, channel, wakeChannel } = this.keys;
    const reply = await this.context.scripts.runAnnouncing(
      'semaphore/try-set-permits',
      [lockKey, queueKey, deadlinesKey, channel, wakeChannel],
      [permits],
    );
    return integerAt([reply], 0) === 1;
  }

  /** Adds permits (a negative number takes them away; the count may go below zero). */
  async addPermits(permits: number): Promise<void> {
    checkPermitDelta(permits);
    checkOpen(this.context, this.name);
    const { lockKey, queueKey, deadlinesKey, channel, wakeChannel } = this.keys;
    await this.context.scripts.runAnnouncing(
      'semaphore/add-permits',
      [lockKey, queueKey, deadlinesKey, channel, wakeChannel],
      [permits],
    );
  }

  /**
   * The number of permits available now (0 when none were ever set), once expirable permits whose lease
   * ended are given back.
   */
  async availablePermits(): Promise<number> {
    checkOpen(this.context, this.name);
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, wakeChannel } = this.keys;
    const reply = await this.context.scripts.runAnnouncing(
      'semaphore/available-permits',
      [lockKey, timeoutKey, queueKey, deadlinesKey, channel, wakeChannel],
      [],
    );
    return integerAt([reply], 0);
  }
}

/**
 * Redisson's `RSemaphore`, from `locks.getSemaphore(name)`: a count of permits without owners or leases, with
 * a first-come-first-served queue of waiters shared by every client.
 */
export class RSemaphore extends PermitCount {
  /** Takes every available permit; resolves to how many. */
  async drainPermits(): Promise<number> {
    checkOpen(this.context, this.name);
    return integerAt([await this.context.scripts.run('semaphore/drain-permits', [this.keys.lockKey], [])], 0);
  }

  /** Waits until `permits` (default 1) are granted, or the signal aborts. */
  acquire(permits?: number): Promise<void>;
  acquire(options: SemaphoreAcquireOptions): Promise<void>;
  async acquire(...args: unknown[]): Promise<void> {
    await this.#observedTake(resolveSemaphoreAcquireArgs(args));
  }

  /**
   * Takes `permits` (default 1) if they are available at once (`tryAcquire()`, `tryAcquire(permits)`), or
   * within `waitTime` ms. Resolves to whether they were granted.
   */
  tryAcquire(permits?: number, waitTime?: number): Promise<boolean>;
  tryAcquire(options: SemaphoreTryAcquireOptions): Promise<boolean>;
  async tryAcquire(...args: unknown[]): Promise<boolean> {
    return this.#observedTake(resolveSemaphoreTryAcquireArgs(args));
  }

  /** Gives `permits` (default 1) back and wakes waiters they can serve. Anyone may release (no owners). */
  async release(permits = 1): Promise<void> {
    checkPermits(permits);
    checkOpen(this.context, this.name);
    const { lockKey, queueKey, deadlinesKey, channel, releaseMemoPrefix, wakeChannel } = this.keys;
    const trace = releaseContext(this.#identity(), undefined, { permits });
    await traceRelease(trace, async () => {
      await this.context.scripts.runAnnouncing(
        'semaphore/release',
        [lockKey, queueKey, deadlinesKey, channel, releaseMemoPrefix + newRequestId(), wakeChannel],
        [permits, MEMO_MS, 'release'],
      );
      if (trace) trace.freed = true;
    });
  }

  #identity(): LockIdentity {
    return { name: this.name, key: this.keys.lockKey, clientId: this.context.clientId, kind: 'semaphore' };
  }

  #observedTake(options: ResolvedPermitWait): Promise<boolean> {
    const observer = AcquireObserver.create(() => ({
      ...this.#identity(),
      owner: undefined,
      mode: 'none',
      leaseMs: undefined,
      waitMs: options.waitTime,
      permits: options.permits,
    }));
    return traceAcquire(
      observer,
      options.signal,
      () => this.#take(options, observer),
      (granted) => ({ outcome: granted ? 'acquired' : 'timeout' }),
      (granted) => granted,
    );
  }

  async #take(
    { permits, waitTime, signal }: ResolvedPermitWait,
    observer: AcquireObserver | undefined,
  ): Promise<boolean> {
    const context = this.context;
    checkOpen(context, this.name);
    signal?.throwIfAborted();
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    const keys = this.keys;
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, wakeChannel } = keys;
    const queue = waitTime === 0 ? undefined : queueEntry(context, keys, permits, this.name);
    return (
      (await waitInQueue(
        context,
        keys,
        queue,
        deadline,
        signal,
        async (entry, sending) => {
          const requestId = newRequestId();
          const reply = await attemptGrant(context, this.name, lockKey, signal, {
            sending,
            send: async () => {
              const raw = await context.scripts.runAnnouncing(
                'semaphore/acquire',
                [lockKey, timeoutKey, queueKey, deadlinesKey, channel, acquireMemoPrefix + requestId, wakeChannel],
                [permits, MEMO_MS, entry, context.watchdogTimeout, context.scripts.previousLayout],
              );
              const granted = integerAt(raw, 0) === 1;
              return { granted, untilMs: granted ? -1 : integerAt(raw, 2) };
            },
            undo: () => this.#undo(requestId),
          });
          if (reply.granted) return { done: true, value: true };
          // Woken by name when released permits are kept for it; at the latest when a waiter ahead that
          // stopped refreshing its place (dead?) would lose it, or an expirable permit's lease ends.
          return reply.untilMs < 0 ? { done: false } : { done: false, retryInMs: reply.untilMs };
        },
        observer,
      )) === true
    );
  }

  /** Gives back the grant of acquisition `requestId`, if it ran and was not undone yet. */
  async #undo(requestId: string): Promise<void> {
    const { lockKey, queueKey, deadlinesKey, channel, acquireMemoPrefix, wakeChannel } = this.keys;
    try {
      await this.context.scripts.runAnnouncing(
        'semaphore/release',
        [lockKey, queueKey, deadlinesKey, channel, acquireMemoPrefix + requestId, wakeChannel],
        [0, MEMO_MS, 'undo'],
        { direct: true },
      );
    } catch {
      // The connection is failing: the memo runs out and the permits stay taken (no owner to expire them).
    }
  }
}

/** A waiter's place in the permit queue: its entry, and the local queue it waits in. */
export interface QueueEntry {
  readonly entry: string;
  readonly local: EnterOptions;
}

let entryCounter = 0;

/** A new entry in the permit queue for a waiter of this client that needs `permits`. */
export function queueEntry(context: LockContext, keys: SemaphoreKeys, permits: number, name: string): QueueEntry {
  const entry = `${permits}|${context.clientId}|${entryCounter++}`;
  return {
    entry,
    local: {
      wake: 'permits',
      name,
      need: permits,
      id: entry,
      direct: keys.wakeChannel,
      // A process that waits once on a semaphore likely waits again: its next waiter needs no SUBSCRIBE.
      lingerMs: LINGER_MS,
    },
  };
}

/**
 * Waits for permits the way both semaphores do: `attempt(entry)` sends the waiter's queue entry ('' for a
 * single attempt, which never queues) and resolves whether it was granted. A waiter that queued refreshes
 * its entry at least every third of `watchdogTimeout` (its deadline), and leaves the queue when it stops
 * waiting without a grant (close() waits for that).
 */
export async function waitInQueue<T>(
  context: LockContext,
  keys: SemaphoreKeys,
  queue: QueueEntry | undefined,
  deadline: number,
  signal: AbortSignal | undefined,
  attempt: (entry: string, sending: (call: Promise<unknown>) => void) => Promise<Attempt<T>>,
  observer: AcquireObserver | undefined,
): Promise<T | undefined> {
  const refreshMs = Math.floor(context.watchdogTimeout / 3);
  // Set by the attempts (a closure): whether Redis may hold the waiter's entry, and the latest script call,
  // which may still be in flight (or be resent) when the waiter gives up.
  const state: { queued: boolean; granted: boolean; call: Promise<unknown> | undefined } = {
    queued: false,
    granted: false,
    call: undefined,
  };
  const sending = (call: Promise<unknown>): void => {
    state.call = call;
  };
  try {
    const value = await waitFor(
      context.waits,
      keys.channel,
      queue?.local ?? { wake: 'permits', name: keys.lockKey },
      deadline,
      signal,
      async () => {
        state.queued ||= queue !== undefined;
        const result = await attempt(queue?.entry ?? '', sending);
        if (result.done) return result;
        return { done: false, retryInMs: Math.min(result.retryInMs ?? Infinity, refreshMs) };
      },
      observer,
    );
    state.granted = value !== undefined;
    return value;
  } finally {
    // A grant took the entry out of the queue; any other end leaves it, once the latest attempt is settled:
    // an attempt given up on that still runs (a NOSCRIPT retry, a resend) would queue the entry again.
    if (state.queued && !state.granted && queue) {
      const leave = (): Promise<void> => leaveQueue(context, keys, queue.entry);
      context.track((state.call ?? Promise.resolve()).then(leave, leave));
    }
  }
}

async function leaveQueue(context: LockContext, keys: SemaphoreKeys, entry: string): Promise<void> {
  const { queueKey, deadlinesKey, lockKey, channel, wakeChannel } = keys;
  try {
    await context.scripts.runAnnouncing(
      'semaphore/leave',
      [queueKey, deadlinesKey, lockKey, channel, wakeChannel],
      [entry, context.scripts.previousLayout],
      { direct: true, pubsub: context.scripts.knownPubsubMode },
    );
  } catch {
    // The connection is failing: the entry runs out at its deadline.
  }
}

/**
 * One grant attempt of a semaphore, awaited to its reply also past the call's wait time (which bounds waiting
 * for permits, not the round trip), unless the signal aborts or the client closes; with `syncReplicas`, the
 * grant is confirmed by WAIT or undone (LockNotReplicatedError). A grant whose reply was lost, or arrived
 * after an abort or close, is undone (close() waits for that).
 */
export async function attemptGrant<R extends { readonly granted: boolean }>(
  context: LockContext,
  name: string,
  key: string,
  signal: AbortSignal | undefined,
  {
    send,
    undo,
    sending,
  }: { send: () => Promise<R>; undo: () => Promise<void>; sending?: (call: Promise<unknown>) => void },
): Promise<R> {
  const { track } = context;
  context.firstUse();
  const pending = confirmedGrant(context.replicaSync, key, name, {
    send,
    granted: (reply) => reply.granted,
    undo,
  });
  sending?.(pending);
  let outcome;
  try {
    outcome = await settleBy(pending, signal, context);
  } catch (error) {
    // No reply: the script may have run anyway. (A grant too few replicas acknowledged is undone already.)
    if (!(error instanceof LockNotReplicatedError)) track(undo());
    throw error;
  }
  if (outcome.kind === 'reply' && !context.closed) return outcome.value;
  track(pending.then((reply) => (reply.granted ? undo() : undefined), undo));
  if (outcome.kind === 'aborted') throw outcome.reason;
  throw new LockClientClosedError(name);
}
