/**
 * How the primitives publish on the diagnostics channels (channels.ts), in one place: an acquisition's
 * trace and wait events (AcquireObserver, traceAcquire), a release's trace (traceRelease) and the outcome
 * of a failed call. Everything here is skipped when nobody listens: the observers are not even created.
 */
import { LockAcquireTimeoutError, LockClientClosedError, type LockLostError } from '../errors.js';
import { monotonicNow } from '../time.js';
import {
  acquireChannel,
  holdEndChannel,
  holdStartChannel,
  releaseChannel,
  waitEndChannel,
  waitStartChannel,
  type AcquireOutcome,
  type AcquireStart,
  type AcquireTraceContext,
  type HoldEndMessage,
  type HoldEndReason,
  type HoldStartMessage,
  type LossReason,
  type LockIdentity,
  type ReleaseTraceContext,
  type WaitEndMessage,
  type WaitStartMessage,
} from './channels.js';

/** How a call that threw ended: its wait ran out, its signal aborted it, the client closed, or an error. */
export function failedOutcome(error: unknown, signal: AbortSignal | undefined): AcquireOutcome {
  if (error instanceof LockAcquireTimeoutError) return 'timeout';
  if (error instanceof LockClientClosedError) return 'closed';
  if (signal?.aborted && error === signal.reason) return 'aborted';
  return 'error';
}

/**
 * Follows one acquisition for the channels: counts its attempts and wake-ups, publishes `wait:start` when
 * it first has to wait and `wait:end` (only then) when it ends, and fills the acquire trace's context.
 */
export class AcquireObserver {
  /** The acquire trace's context, when `tracing:flowlock:acquire` has subscribers. */
  readonly context: AcquireTraceContext | undefined;
  readonly #start: AcquireStart;
  readonly #startedAt = monotonicNow();
  #attempts = 0;
  #contended = false;
  readonly #wakeups = { message: 0, timeout: 0 };
  /** The `wait:start` message, once published (`wait:end` is then owed), and when. */
  #waitStart: WaitStartMessage | undefined;
  #waitingSince = 0;
  #ended = false;

  /** An observer when anyone listens to acquisitions or waits, else undefined (nothing to do). */
  static create(start: () => AcquireStart): AcquireObserver | undefined {
    const traced = acquireChannel.hasSubscribers;
    if (!traced && !waitStartChannel.hasSubscribers) return undefined;
    return new AcquireObserver(start(), traced);
  }

  private constructor(start: AcquireStart, traced: boolean) {
    this.#start = start;
    this.context = traced
      ? {
          ...start,
          outcome: undefined,
          contended: false,
          attempts: 0,
          wakeups: this.#wakeups,
          waitedMs: 0,
          holdCount: undefined,
          fencingToken: undefined,
        }
      : undefined;
  }

  /** An acquire script call was sent. */
  attempted(): void {
    this.#attempts++;
    if (this.context) this.context.attempts = this.#attempts;
  }

  /** An attempt found the lock (or the permits) taken. */
  contended(): void {
    this.#contended = true;
    if (this.context) this.context.contended = true;
  }

  /** The acquisition is about to wait; `holderTtlMs`: the holder's remaining lease as last seen (-1: none). */
  waiting(holderTtlMs: number): void {
    if (this.#waitStart !== undefined || this.#ended) return;
    this.#contended = true;
    if (this.context) this.context.contended = true;
    if (!waitStartChannel.hasSubscribers) return;
    this.#waitingSince = monotonicNow();
    const { name, key, clientId, kind, owner } = this.#start;
    this.#waitStart = { name, key, clientId, kind, owner, holderTtlMs };
    waitStartChannel.publish(this.#waitStart);
  }

  /** A wait ended: by a message, or by its timeout (the holder's TTL, a re-check). */
  woke(reason: 'woken' | 'timeout'): void {
    if (reason === 'woken') this.#wakeups.message++;
    else this.#wakeups.timeout++;
  }

  /** The acquisition ended (called once; later calls do nothing). */
  end(outcome: AcquireOutcome, hold?: { readonly count: number; readonly fencingToken: bigint }): void {
    if (this.#ended) return;
    this.#ended = true;
    const now = monotonicNow();
    if (this.context) {
      this.context.outcome = outcome;
      this.context.waitedMs = now - this.#startedAt;
      if (hold) {
        this.context.holdCount = hold.count;
        this.context.fencingToken = hold.fencingToken;
      }
    }
    const start = this.#waitStart;
    if (start === undefined) return;
    const message: WaitEndMessage = {
      start,
      name: start.name,
      key: start.key,
      clientId: start.clientId,
      kind: start.kind,
      owner: start.owner,
      outcome,
      waitedMs: now - this.#waitingSince,
      attempts: this.#attempts,
      wakeups: { ...this.#wakeups },
    };
    waitEndChannel.publish(message);
  }

  /** Whether any attempt found the lock taken. */
  get wasContended(): boolean {
    return this.#contended;
  }
}

/** How an acquisition that did not throw ended, and the hold it has, if any. */
export interface Settlement {
  readonly outcome: AcquireOutcome;
  readonly hold?: { readonly count: number; readonly fencingToken: bigint };
}

/** The settlement of a lock acquisition: a hold (counted once: new; more: re-entered), or none at the wait's end. */
export function holdSettlement(
  hold: { readonly count: number; readonly fencingToken: bigint } | undefined,
): Settlement {
  if (!hold) return { outcome: 'timeout' };
  return { outcome: hold.count > 1 ? 'reentered' : 'acquired', hold };
}

/**
 * Runs an acquisition under its observer: `take` does the work (and tells the observer its attempts and
 * waits), `settle` says how what it took ended, `finish` makes the caller's value of it (and may throw, as
 * a timeout does). Traced on `flowlock:acquire` when that has subscribers; the observer's context is
 * complete before the trace settles.
 */
export function traceAcquire<H, T>(
  observer: AcquireObserver | undefined,
  signal: AbortSignal | undefined,
  take: () => Promise<H>,
  settle: (held: H) => Settlement,
  finish: (held: H) => T,
): Promise<T> {
  // Not async: unobserved, the acquisition costs one reaction more than `take`'s own promise.
  if (!observer) return take().then(finish);
  const observed = async (): Promise<T> => {
    let held: H;
    try {
      held = await take();
    } catch (error) {
      observer.end(failedOutcome(error, signal));
      throw error;
    }
    const { outcome, hold } = settle(held);
    observer.end(outcome, hold);
    return finish(held);
  };
  return observer.context ? acquireChannel.tracePromise(observed, observer.context) : observed();
}

/** A release's trace context when `flowlock:release` has subscribers, else undefined. */
export function releaseContext(
  identity: LockIdentity,
  owner: string | undefined,
  extra: { readonly force?: boolean; readonly permits?: number } = {},
): ReleaseTraceContext | undefined {
  if (!releaseChannel.hasSubscribers) return undefined;
  return {
    ...identity,
    owner,
    force: extra.force ?? false,
    ...(extra.permits === undefined ? {} : { permits: extra.permits }),
    remaining: undefined,
    freed: false,
    woken: undefined,
    heldMs: undefined,
    fencingToken: undefined,
  };
}

/** Runs a release traced on `flowlock:release` when it has a context (`run` fills it before it settles). */
export function traceRelease<T>(context: ReleaseTraceContext | undefined, run: () => Promise<T>): Promise<T> {
  return context === undefined ? run() : releaseChannel.tracePromise(run, context);
}

/**
 * Publishes `hold:start` when anyone listens to it. Returns the message, which the hold keeps to publish
 * its end with (`holdEnded`), whenever anyone listens to either channel: an end is owed to a subscriber of
 * `hold:end` alone (a loss logger) as much as to one that pairs starts with ends. Undefined: nobody
 * listened, and no end is owed, so a subscriber that comes in mid-hold gets no end of it (nor, listening to
 * both, an end without its start); one that comes in while others already listened pairs an end with its
 * start by the end's `start`, the same object.
 */
export function holdStarted(message: () => HoldStartMessage): HoldStartMessage | undefined {
  if (!holdStartChannel.hasSubscribers && !holdEndChannel.hasSubscribers) return undefined;
  const started = message();
  holdStartChannel.publish(started);
  return started;
}

/** Publishes `hold:end` for a hold whose `hold:start` was published (`started`, from holdStarted). */
export function holdEnded(
  started: HoldStartMessage | undefined,
  startedAt: number,
  reason: HoldEndReason,
  lossReason?: LossReason,
  error?: LockLostError,
): void {
  // Built only for a listener: an idle OpenTelemetry instrumentation listens to hold:start alone.
  if (!started || !holdEndChannel.hasSubscribers) return;
  const message: HoldEndMessage = {
    ...started,
    start: started,
    heldMs: monotonicNow() - startedAt,
    reason,
    ...(lossReason === undefined ? {} : { lossReason }),
    ...(error === undefined ? {} : { error }),
  };
  holdEndChannel.publish(message);
}
