/**
 * RPermitExpirableSemaphore: Redisson's semaphore whose permits have ids and leases. It shares the permit
 * counter and the channel with RSemaphore (`<name>`, `redisson_sc:{name}`) and keeps every permit out in
 * Redisson's sorted set (`{name}:timeout`, permit id as 16 raw bytes -> lease end, epoch ms). A permit
 * whose lease ended goes back to the counter at the next script that looks (any client's, Java's too).
 *
 * Differences from Redisson, none visible on the wire to a Java client:
 * - A permit taken without `leaseTime` is renewed by the client's one watchdog while its holder lives (its
 *   lease is `watchdogTimeout`, pushed forward every third of it), so a crashed holder's permit comes back
 *   within about `watchdogTimeout`; Redisson has no watchdog for permits (they never expire, or expire at a
 *   fixed lease).
 * - A permit is a lease handle (`PermitLease`, with a signal that aborts when the permit is lost), and
 *   `close()` gives back the permits its client holds.
 * - A permit whose fixed lease ends while its holder's process lives is given back at once (its waiters
 *   wake then); waiters elsewhere also wake when the earliest lease they saw ends.
 * - Lease ends are server time (TIME), not the client's clock.
 * - Waiters queue with the plain semaphore's (see semaphore.ts): first come first served, no herd.
 */
import { randomBytes } from 'node:crypto';
import { type LockIdentity } from '../diagnostics/channels.js';
import { AcquireObserver, releaseContext, traceAcquire, traceRelease } from '../diagnostics/publish.js';
import { LockAcquireTimeoutError, PermitNotHeldError } from '../errors.js';
import { monotonicNow } from '../time.js';
import { driftMs, type Hold, type HoldProtocol } from '../machinery/watchdog.js';
import {
  checkFunction,
  checkPermitId,
  resolveAcquireOptions,
  type AcquireOptions,
  type ResolvedAcquire,
} from '../options.js';
import type { SemaphoreKeys } from '../redis/keys.js';
import {
  integerAt,
  MEMO_MS,
  newRequestId,
  type LockScripts,
  type ReleaseMode,
  type ReleaseOptions,
  type ReleaseReply,
  type RenewEntry,
} from '../redis/scripts.js';
import { checkOpen, scopedLease, type LockContext } from './lock.js';
import { attemptGrant, PermitCount, queueEntry, waitInQueue } from './semaphore.js';

/** One permit of an expirable semaphore; release it once (or let `await using` do it). */
export interface PermitLease extends AsyncDisposable {
  readonly name: string;
  /** The permit's id: 32 lowercase hex digits (Redisson's form), usable with `release(permitId)`. */
  readonly permitId: string;
  /** Aborts with a LockLostError when the permit is lost (its lease ran out, the client closed). */
  readonly signal: AbortSignal;
  /** Gives the permit back; rejects with PermitNotHeldError if it was no longer held. Idempotent. */
  release(): Promise<void>;
}

/** How the watchdog renews, purges and gives back a permit: the permit id (hex) is the hold's owner. */
class PermitProtocol implements HoldProtocol {
  readonly kind = 'permit';
  readonly keys: { readonly lockKey: string };
  readonly #semaphore: SemaphoreKeys;
  readonly #scripts: LockScripts;

  constructor(scripts: LockScripts, keys: SemaphoreKeys) {
    this.#scripts = scripts;
    this.#semaphore = keys;
    this.keys = { lockKey: keys.timeoutKey };
  }

  renewEntry(permitId: string): RenewEntry {
    return { lockKey: this.#semaphore.timeoutKey, field: Buffer.from(permitId, 'hex'), kind: 'permit' };
  }

  /** Gives the permit back if it is still out: every mode means the same for a permit (it has one count). */
  async release(_mode: ReleaseMode, permitIds: readonly string[], options: ReleaseOptions = {}): Promise<ReleaseReply> {
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, releaseMemoPrefix, wakeChannel } = this.#semaphore;
    const memoKey = releaseMemoPrefix + (options.requestId ?? newRequestId());
    const reply = await this.#scripts.runAnnouncing(
      'permit-expirable-semaphore/release',
      [lockKey, timeoutKey, queueKey, deadlinesKey, channel, memoKey, wakeChannel],
      [Buffer.from(permitIds[0] ?? '', 'hex'), MEMO_MS],
      { direct: options.repair === true, pubsub: this.#scripts.announcedBy(options) },
    );
    // 1: given back (remaining holds 0); -1: it was not out.
    return { remaining: integerAt([reply], 0) === 1 ? 0 : -1, ownerIndex: 0, woken: 0 };
  }
}

/**
 * Redisson's `RPermitExpirableSemaphore`, from `locks.getPermitExpirableSemaphore(name)`: permits with ids and
 * leases (renewed by the watchdog without a `leaseTime`), so a crashed holder's permit comes back.
 */
export class RPermitExpirableSemaphore extends PermitCount {
  readonly #protocol: PermitProtocol;

  /** @internal */
  constructor(context: LockContext, name: string) {
    super(context, name);
    this.#protocol = new PermitProtocol(context.scripts, this.keys);
  }

  /**
   * Waits for a permit (forever unless `waitTime`; LockAcquireTimeoutError when it runs out). Without
   * `leaseTime` the watchdog renews the permit while this process lives.
   */
  async acquire(options?: AcquireOptions): Promise<PermitLease> {
    return this.#acquire(resolveAcquireOptions(options));
  }

  #acquire(options: ResolvedAcquire): Promise<PermitLease> {
    return this.#observedTake(options, (lease) => {
      if (!lease) throw new LockAcquireTimeoutError(this.name, options.waitTime ?? 0);
      return lease;
    });
  }

  /** A permit if one is available at once (or within `waitTime`), else undefined. */
  async tryAcquire(options?: AcquireOptions): Promise<PermitLease | undefined> {
    const resolved = resolveAcquireOptions(options);
    return this.#observedTake({ ...resolved, waitTime: resolved.waitTime ?? 0 }, (lease) => lease);
  }

  /**
   * Gives back the permit `permitId` (from this client or any other); rejects with PermitNotHeldError if it
   * is not held (released already, lease ended, unknown).
   */
  async release(permitId: string): Promise<void> {
    checkPermitId(permitId, 'permitId');
    checkOpen(this.context, this.name);
    const hold = this.context.watchdog.find(this.#protocol.keys.lockKey, permitId);
    if (hold) return this.#releaseHold(hold);
    const reply = await this.#protocol.release('one', [permitId]);
    if (reply.remaining < 0) throw new PermitNotHeldError(this.name, permitId);
  }

  /**
   * Runs `fn` holding a permit and gives it back afterwards (LockAcquireTimeoutError at `waitTime`). `fn`
   * gets the permit's signal (aborted if it is lost) and the permit. As with `withLock`, a permit lost while
   * `fn` ran makes the call reject with a LockLostError whose `result` is what `fn` returned.
   */
  async withPermit<T>(
    fn: (signal: AbortSignal, permit: PermitLease) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T> {
    checkFunction(fn, 'semaphore.withPermit(fn, options)');
    const resolved = resolveAcquireOptions(options);
    const acquire = (): Promise<PermitLease> => this.#acquire(resolved);
    // A permit has no fencing token.
    return scopedLease(this.#identity(), resolved, this.#leaseMs(resolved), acquire, () => undefined, fn);
  }

  #identity(): LockIdentity {
    return { name: this.name, key: this.#protocol.keys.lockKey, clientId: this.context.clientId, kind: 'permit' };
  }

  #leaseMs(options: ResolvedAcquire): number {
    return options.leaseTime === -1 ? this.context.watchdogTimeout : options.leaseTime;
  }

  #observedTake<T>(options: ResolvedAcquire, finish: (lease: PermitLease | undefined) => T): Promise<T> {
    const observer = AcquireObserver.create(() => ({
      ...this.#identity(),
      owner: undefined,
      mode: options.leaseTime === -1 ? 'watchdog' : 'lease',
      leaseMs: this.#leaseMs(options),
      waitMs: options.waitTime,
      permits: 1,
    }));
    return traceAcquire(
      observer,
      options.signal,
      () => this.#take(options, observer),
      (lease) => ({ outcome: lease ? 'acquired' : 'timeout' }),
      finish,
    );
  }

  async #take(
    { waitTime, leaseTime, signal }: ResolvedAcquire,
    observer: AcquireObserver | undefined,
  ): Promise<PermitLease | undefined> {
    const context = this.context;
    checkOpen(context, this.name);
    signal?.throwIfAborted();
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    const keys = this.keys;
    const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, wakeChannel } = keys;
    const leaseMs = leaseTime === -1 ? context.watchdogTimeout : leaseTime;
    const queue = waitTime === 0 ? undefined : queueEntry(context, keys, 1, this.name);
    const hold = await waitInQueue(
      context,
      keys,
      queue,
      deadline,
      signal,
      async (entry, sending) => {
        const id = randomBytes(16);
        const permitId = id.toString('hex');
        const requestId = newRequestId();
        const sentAt = monotonicNow();
        const reply = await attemptGrant(context, this.name, lockKey, signal, {
          sending,
          send: async () => {
            const raw = await context.scripts.runAnnouncing(
              'permit-expirable-semaphore/acquire',
              [lockKey, timeoutKey, queueKey, deadlinesKey, channel, wakeChannel],
              [id, leaseMs, entry, context.watchdogTimeout, context.scripts.previousLayout],
            );
            const granted = integerAt(raw, 0) === 1;
            return { granted, untilMs: granted ? -1 : integerAt(raw, 2) };
          },
          undo: async () => {
            await this.#protocol.release('undo', [permitId], { repair: true }).catch(() => undefined);
          },
        });
        // Woken by name when released permits are kept for it; at the latest when the earliest lease ends
        // (its permit then comes back) or a waiter ahead that stopped refreshing its place (dead?) loses it.
        if (!reply.granted) return reply.untilMs < 0 ? { done: false } : { done: false, retryInMs: reply.untilMs };
        const roundTrip = monotonicNow() - sentAt;
        if (roundTrip >= leaseMs - driftMs(leaseMs)) {
          // Granted after its own lease could have run out (a stalled server, network or event loop): the
          // permit may already be someone else's. Give it back and ask again, not at once.
          context.track(this.#protocol.release('undo', [permitId], { repair: true }).catch(() => undefined));
          return { done: false, retryInMs: roundTrip };
        }
        const token = { token: 0n, holdCount: 1 };
        const granted = context.watchdog.acquired(
          this.name,
          this.#protocol,
          permitId,
          token,
          requestId,
          sentAt,
          leaseTime,
        );
        return { done: true, value: granted };
      },
      observer,
    );
    return hold && this.#lease(hold);
  }

  #lease(hold: Hold): PermitLease {
    let released: Promise<void> | undefined;
    const release = (): Promise<void> => (released ??= this.#releaseHold(hold));
    return {
      name: this.name,
      permitId: hold.owner,
      signal: hold.signal,
      release,
      [Symbol.asyncDispose]: release,
    };
  }

  #releaseHold(hold: Hold): Promise<void> {
    const trace = releaseContext(this.#identity(), hold.owner, { permits: 1 });
    return traceRelease(trace, async () => {
      await this.#releaseOne(hold);
      if (trace) {
        trace.remaining = 0;
        trace.freed = true;
        trace.heldMs = monotonicNow() - hold.startedAt;
      }
    });
  }

  async #releaseOne(hold: Hold): Promise<void> {
    const { watchdog } = this.context;
    const notHeld = (): PermitNotHeldError => {
      const lost = hold.lostWith;
      return new PermitNotHeldError(this.name, hold.owner, lost === undefined ? undefined : { cause: lost });
    };
    if (watchdog.find(hold.keys.lockKey, hold.owner) !== hold) throw notHeld();
    hold.state = 'releasing';
    let reply;
    try {
      reply = await this.#protocol.release('one', [hold.owner]);
    } catch (error) {
      // Unknown outcome: no more renewals, so that at worst the permit comes back when its lease ends.
      watchdog.forget(hold);
      throw error;
    }
    if (reply.remaining < 0) {
      watchdog.releaseFoundGone(hold);
      throw notHeld();
    }
    watchdog.forget(hold);
  }
}
