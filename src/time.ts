/** Monotonic milliseconds (unaffected by wall-clock steps); all lease and wait arithmetic uses this. */
export function monotonicNow(): number {
  return performance.now();
}

/** setTimeout's delay is a signed 32-bit number; longer delays would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** setTimeout for any delay: a delay beyond the 32-bit limit fires at the limit (callers re-check time). */
export function clampedTimeout(callback: () => void, delayMs: number): NodeJS.Timeout {
  return setTimeout(callback, Math.min(Math.max(0, delayMs), MAX_TIMER_MS));
}

/** Waits `ms`, which only an abort of one of `signals` ends early: it then rejects with that signal's reason. */
export function abortableSleep(ms: number, signals: readonly AbortSignal[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const aborted = signals.find((signal) => signal.aborted);
    if (aborted) {
      reject(aborted.reason as Error);
      return;
    }
    const finish = (settle: () => void): void => {
      clearTimeout(timer);
      for (const signal of signals) signal.removeEventListener('abort', onAbort);
      settle();
    };
    const onAbort = (event: Event): void => finish(() => reject((event.target as AbortSignal).reason as Error));
    const timer = clampedTimeout(() => finish(resolve), ms);
    for (const signal of signals) signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** How a wait for a reply ended. */
export type Settled<T> =
  | { readonly kind: 'reply'; readonly value: T }
  | { readonly kind: 'aborted'; readonly reason: unknown }
  | { readonly kind: 'closed' };

/**
 * A lock client's close, as the calls in flight watch it: whether it has closed, and the listeners it calls
 * once when it does. A call adds and removes one per reply it awaits: a Set entry costs a fraction of an
 * AbortSignal listener (an EventTarget's add and remove), on every acquire.
 */
export interface CloseWatch {
  readonly closed: boolean;
  readonly closeListeners: Set<() => void>;
}

/**
 * `call()`'s promise, or a rejection with what it threw: for plain functions on hot paths (no async frame of
 * their own) whose callers must get every error as a rejection.
 */
export function promiseOf<T>(call: () => Promise<T>): Promise<T> {
  try {
    return call();
  } catch (error) {
    return Promise.reject(error);
  }
}

/** Awaits `promise`, but no longer than `signal` allows, and not past the client's close (`closing`). */
export function settleBy<T>(
  promise: Promise<T>,
  signal: AbortSignal | undefined,
  closing: CloseWatch,
): Promise<Settled<T>> {
  if (signal?.aborted) return Promise.resolve({ kind: 'aborted', reason: signal.reason as unknown });
  if (closing.closed) return Promise.resolve({ kind: 'closed' });
  return new Promise((resolve, reject) => {
    // Runs on every acquire attempt: the abort listener is made only when there is a signal.
    const cleanup = (): void => {
      if (onAbort) signal.removeEventListener('abort', onAbort);
      closing.closeListeners.delete(onClose);
    };
    const onAbort =
      signal &&
      ((): void => {
        cleanup();
        resolve({ kind: 'aborted', reason: signal.reason as unknown });
      });
    const onClose = (): void => {
      cleanup();
      resolve({ kind: 'closed' });
    };
    if (onAbort) signal.addEventListener('abort', onAbort, { once: true });
    closing.closeListeners.add(onClose);
    promise.then(
      (value) => {
        cleanup();
        resolve({ kind: 'reply', value });
      },
      (error: unknown) => {
        cleanup();
        reject(error);
      },
    );
  });
}
