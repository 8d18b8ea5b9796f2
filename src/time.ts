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
