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
