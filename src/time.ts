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
  | { readonly kind: 'deadline' }
  | { readonly kind: 'aborted'; readonly reason: unknown }
  | { readonly kind: 'closed' };

/**
 * Awaits `promise`, but no later than `deadline` (monotonic ms), no longer than `signal` allows, and not
 * past the client's close.
 */
export function settleBy<T>(
  promise: Promise<T>,
  deadline: number,
  signal: AbortSignal | undefined,
  closeSignal: AbortSignal,
): Promise<Settled<T>> {
  if (signal?.aborted) return Promise.resolve({ kind: 'aborted', reason: signal.reason as unknown });
  if (closeSignal.aborted) return Promise.resolve({ kind: 'closed' });
  return new Promise((resolve, reject) => {
    const timer =
      deadline === Infinity ? undefined : clampedTimeout(() => done({ kind: 'deadline' }), deadline - monotonicNow());
    const onAbort = (): void => done({ kind: 'aborted', reason: signal?.reason });
    const onClose = (): void => done({ kind: 'closed' });
    const cleanup = (): void => {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      closeSignal.removeEventListener('abort', onClose);
    };
    function done(outcome: Settled<T>): void {
      cleanup();
      resolve(outcome);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    closeSignal.addEventListener('abort', onClose, { once: true });
    promise.then(
      (value) => done({ kind: 'reply', value }),
      (error: unknown) => {
        cleanup();
        reject(error);
      },
    );
  });
}
