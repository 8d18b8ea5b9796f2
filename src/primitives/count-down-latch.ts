/**
 * RCountDownLatch: Redisson's count-down latch. The count is one integer (`<name>`, deleted at zero);
 * `trySetCount` arms it and announces "1", the count-down that reaches zero announces "0" on
 * `redisson_countdownlatch__channel__{name}`, which wakes every waiter of every client (Java's too).
 *
 * Differences from Redisson, none visible on the wire to a Java client:
 * - A count-down is idempotent under a resend (a memo key): a reconnect never counts down twice.
 * - Waiters re-check the count after the subscriber reconnects (a "0" may have been missed meanwhile).
 * - On a Cluster, a name with braces of its own gets a channel in its count's slot (see `latchKeys`).
 */
import type { LockIdentity } from '../diagnostics/channels.js';
import { AcquireObserver, releaseContext, traceAcquire, traceRelease } from '../diagnostics/publish.js';
import { LockClientClosedError } from '../errors.js';
import { monotonicNow, settleBy } from '../time.js';
import { waitFor, type Attempt } from '../machinery/waiting.js';
import { checkPermits, resolveLatchAwaitArgs, type LatchAwaitOptions } from '../options.js';
import { latchKeys, type LatchKeys } from '../redis/keys.js';
import { integerAt, MEMO_MS, newRequestId } from '../redis/scripts.js';
import { checkOpen, type LockContext } from './lock.js';

/**
 * Redisson's `RCountDownLatch`, from `locks.getCountDownLatch(name)`: a count that `countDown()` lowers; the
 * count-down reaching zero wakes every waiter of every client.
 */
export class RCountDownLatch {
  readonly name: string;
  readonly #context: LockContext;
  readonly #keys: LatchKeys;

  /** @internal */
  constructor(context: LockContext, name: string) {
    this.name = name;
    this.#context = context;
    this.#keys = latchKeys(context.keyPrefix, name, context.cluster);
  }

  /** Arms the latch with `count` if it is not counting (zero, or never set); resolves to whether it did. */
  async trySetCount(count: number): Promise<boolean> {
    checkPermits(count, 'count');
    checkOpen(this.#context, this.name);
    const { lockKey, channel } = this.#keys;
    const reply = await this.#context.scripts.runAnnouncing(
      'count-down-latch/try-set-count',
      [lockKey, channel],
      [count],
    );
    return integerAt([reply], 0) === 1;
  }

  /** Decrements the count; the count-down that reaches zero wakes every waiter. No effect at zero. */
  async countDown(): Promise<void> {
    checkOpen(this.#context, this.name);
    const { lockKey, channel, countDownMemoPrefix } = this.#keys;
    const trace = releaseContext(this.#identity(), undefined);
    await traceRelease(trace, () =>
      this.#context.scripts.runAnnouncing(
        'count-down-latch/count-down',
        [lockKey, channel, countDownMemoPrefix + newRequestId()],
        [MEMO_MS],
      ),
    );
  }

  #identity(): LockIdentity {
    return { name: this.name, key: this.#keys.lockKey, clientId: this.#context.clientId, kind: 'latch' };
  }

  /** The current count (0 when the latch is open or was never set). */
  async getCount(): Promise<number> {
    checkOpen(this.#context, this.name);
    const { redis, scripts } = this.#context;
    return Number((await scripts.read(() => redis.get(this.#keys.lockKey))) ?? 0);
  }

  /**
   * Waits until the count is zero: resolves to true then, or to false when `waitTime` (ms) runs out first
   * (forever without one). Rejects with the signal's reason on abort.
   */
  await(waitTime?: number): Promise<boolean>;
  await(options: LatchAwaitOptions): Promise<boolean>;
  async await(...args: unknown[]): Promise<boolean> {
    const { waitTime, signal } = resolveLatchAwaitArgs(args);
    const context = this.#context;
    checkOpen(context, this.name);
    signal?.throwIfAborted();
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    // An await is an acquisition of the open latch, for the diagnostics channels: its waits are a lock's.
    const observer = AcquireObserver.create(() => ({
      ...this.#identity(),
      owner: undefined,
      mode: 'none',
      leaseMs: undefined,
      waitMs: waitTime,
    }));
    const look = async (): Promise<Attempt<true>> => {
      const outcome = await settleBy(this.getCount(), signal, context);
      if (outcome.kind === 'aborted') throw outcome.reason;
      if (outcome.kind === 'closed') throw new LockClientClosedError(this.name);
      return outcome.value <= 0 ? { done: true, value: true } : { done: false };
    };
    return traceAcquire(
      observer,
      signal,
      () =>
        waitFor(context.waits, this.#keys.channel, { wake: 'zero', name: this.name }, deadline, signal, look, observer),
      (open) => ({ outcome: open ? 'acquired' : 'timeout' }),
      (open) => open === true,
    );
  }
}
