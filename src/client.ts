/**
 * The lock client: owns the shared subscriber connection, the watchdog and the wait queues of one Redis
 * client (through its adapter), hands out the locks, semaphores and latches, starts flows, and shuts everything down in `close()`.
 */
import { EventEmitter, setMaxListeners } from 'node:events';
import { startDebugLog } from './diagnostics/debug-log.js';
import { LockClientClosedError, LocksNotReleasedError, type LockLostError, type UnreleasedHold } from './errors.js';
import { runInNewFlow } from './machinery/flow.js';
import { RFairLock } from './primitives/fair-lock.js';
import { RLock, type LockContext } from './primitives/lock.js';
import { RMultiLock } from './primitives/multi-lock.js';
import {
  checkFunction,
  checkLockName,
  resolveClientOptions,
  resolveCloseOptions,
  type CloseOptions,
  type LockClientOptions,
  type RedisClient,
} from './options.js';
import { RReadWriteLock } from './primitives/read-write-lock.js';
import { RCountDownLatch } from './primitives/count-down-latch.js';
import { RPermitExpirableSemaphore } from './primitives/permit-expirable-semaphore.js';
import { RSemaphore } from './primitives/semaphore.js';
import { ReplicaSync } from './machinery/replication.js';
import { adaptClient, type RedisAdapter } from './redis/adapter.js';
import { LockScripts } from './redis/scripts.js';
import { clientRecordKey } from './redis/keys.js';
import { HolderRecord } from './machinery/holder-record.js';
import { WaitQueues, type WaitSnapshot } from './machinery/waiting.js';
import { clampedTimeout, monotonicNow } from './time.js';
import { Watchdog, type Hold, type HoldSnapshot } from './machinery/watchdog.js';

/** Payload of the `lockLost` event. */
export interface LockLostEvent {
  readonly name: string;
  readonly fencingToken: bigint;
  readonly error: LockLostError;
}

/** The events a {@link LockClient} emits, for `on()`, `once()` and `off()`. */
export interface LockClientEvents {
  /** A hold was lost (its lease signal aborted with `error`). Not emitted for holds dropped by `close()`. */
  lockLost: [event: LockLostEvent];
}

/**
 * What `createLockClient` returns: hands out the primitives (`getLock`, `getFairLock`, …), owns the pub/sub
 * connection, the watchdog and the flows, and gives every hold back at `close()`. Emits `lockLost`.
 */
export class LockClient extends EventEmitter<LockClientEvents> {
  /**
   * This client's part of every owner id (`<clientId>:<flowId>`): the `clientId` option followed by `:` and
   * a random suffix unique to this client (or, without the option, a random UUID).
   */
  readonly clientId: string;
  readonly #context: LockContext & { closed: boolean };
  /** The shutdown, once begun (by close(), or by the end of the user's Redis client). */
  #closing: Promise<ClosingReport> | undefined;
  /** Aborted by close(): attempts in flight stop waiting for their replies and give their grants back. */
  readonly #closeSignal = new AbortController();
  /** Commands whose outcome close() waits for: give-backs of grants and purges of lost holds. */
  readonly #inFlight = new Set<Promise<unknown>>();

  /** @internal Use `createLockClient`. */
  constructor(redis: RedisAdapter, options: LockClientOptions = {}) {
    super();
    startDebugLog();
    // Every attempt in flight listens for the close: any number may, without Node 20's leak warning at 11.
    setMaxListeners(0, this.#closeSignal.signal);
    const resolved = resolveClientOptions(options, redis.keyPrefix);
    this.clientId = resolved.clientId;
    const scripts = new LockScripts(
      redis,
      resolved.holderInfo,
      resolved.keyPrefix,
      resolved.previousLayout === 'retired',
    );
    const track = (work: Promise<unknown>): void => {
      const forget = (): void => void this.#inFlight.delete(settled);
      const settled: Promise<void> = work.then(forget, forget);
      this.#inFlight.add(settled);
    };
    const watchdog = new Watchdog({
      scripts,
      watchdogTimeout: resolved.watchdogTimeout,
      cluster: redis.topology === 'cluster',
      clientId: resolved.clientId,
      onLost: (hold, error) => {
        this.#report({ name: hold.name, fencingToken: hold.fencingToken, error });
      },
      track,
    });
    this.#context = {
      redis,
      scripts,
      watchdog,
      waits: new WaitQueues(redis, () => scripts.pubsubMode(), resolved.clientId),
      clientId: resolved.clientId,
      keyPrefix: resolved.keyPrefix,
      watchdogTimeout: resolved.watchdogTimeout,
      cluster: redis.topology === 'cluster',
      closed: false,
      closeSignal: this.#closeSignal.signal,
      closeListeners: new Set(),
      track,
      replicaSync: resolved.syncReplicas && new ReplicaSync(redis, resolved.syncReplicas),
      firstUse: () => {
        if (this.#started) return;
        this.#started = true;
        this.#warnIfEvictable();
        // On a Cluster the pub/sub mode is learnt now (one INFO, then kept): repairs, which do not wait for
        // it, then announce in it (LockScripts.announcedBy).
        void scripts.pubsubMode();
      },
      holderRecord: new HolderRecord(
        scripts,
        clientRecordKey(resolved.keyPrefix, resolved.clientId),
        resolved.holderInfo,
        track,
      ),
      traffic: new Map(),
      plainProtocols: new Map(),
    };
    // Once the user's client has ended nothing can be sent: this client closes too (its own subscriber
    // connection, made from that client, would otherwise keep the process alive), and close() reports
    // the holds that are left in Redis.
    redis.onEnd(() => {
      if (this.#closing) return;
      this.#closing = this.#close(undefined, true);
      // Nothing escapes an event handler: a failure would reach whoever calls close(), if anyone does.
      this.#closing.catch(() => undefined);
    });
  }

  /** An RLock for `name`; no I/O. Many instances may name the same lock. */
  getLock(name: string): RLock {
    return new RLock(this.#context, checkLockName(name, this.#context.keyPrefix));
  }

  /** A fair lock for `name` (RLock's interface; grants in arrival order across all clients); no I/O. */
  getFairLock(name: string): RFairLock {
    return new RFairLock(this.#context, checkLockName(name, this.#context.keyPrefix));
  }

  /** A read-write lock for `name`: `readLock()` and `writeLock()`; no I/O. */
  getReadWriteLock(name: string): RReadWriteLock {
    return new RReadWriteLock(this.#context, checkLockName(name, this.#context.keyPrefix));
  }

  /** Redisson's RSemaphore for `name`: counted permits without owners or leases; no I/O. */
  getSemaphore(name: string): RSemaphore {
    return new RSemaphore(this.#context, checkLockName(name, this.#context.keyPrefix));
  }

  /**
   * Redisson's RPermitExpirableSemaphore for `name`: permits with ids and leases (renewed by the watchdog
   * when taken without `leaseTime`); shares its permits with `getSemaphore(name)`. No I/O.
   */
  getPermitExpirableSemaphore(name: string): RPermitExpirableSemaphore {
    return new RPermitExpirableSemaphore(this.#context, checkLockName(name, this.#context.keyPrefix));
  }

  /** Redisson's RCountDownLatch for `name`; no I/O. */
  getCountDownLatch(name: string): RCountDownLatch {
    return new RCountDownLatch(this.#context, checkLockName(name, this.#context.keyPrefix));
  }

  /**
   * A lock over several names, taken all-or-nothing in one global order (by Redis key) so that multi-locks
   * over overlapping names never deadlock. No I/O. Duplicate names count once.
   */
  getMultiLock(names: readonly string[]): RMultiLock {
    if (!Array.isArray(names)) throw new TypeError('names must be an array of lock names');
    if (names.length === 0) throw new RangeError('names must not be empty');
    const unique = [...new Set(names.map((name) => checkLockName(name, this.#context.keyPrefix)))];
    const keyOf = (name: string): string => this.#context.keyPrefix + name;
    unique.sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0));
    const members = unique.map((name) => new RLock(this.#context, name));
    return new RMultiLock(members, this.clientId, keyOf(unique[0] ?? ''), this.#context.watchdogTimeout);
  }

  /**
   * Every hold this client has now (locks, and expirable semaphores' permits): for `/debug` endpoints and
   * tests. Synchronous, no I/O.
   */
  holds(): HoldSnapshot[] {
    return this.#context.watchdog.snapshot();
  }

  /** Every lock, semaphore or latch this client's flows wait for now, with their numbers. Synchronous, no I/O. */
  waits(): WaitSnapshot[] {
    return this.#context.waits.snapshot();
  }

  /**
   * Runs `fn` in a new flow, the unit of lock ownership: everything `fn` starts, awaited or not, belongs to
   * it. A flow started inside another is its child and re-enters the locks its ancestors hold.
   */
  run<T>(fn: () => T): T {
    checkFunction(fn, 'locks.run(fn)', false);
    return runInNewFlow(fn);
  }

  /**
   * Ends pending waits and attempts (they reject with LockClientClosedError), stops the watchdog, closes the
   * subscriber connection, waits for attempts already sent to be answered and gives back what they were
   * granted, and releases every hold this client still has (their signals abort with a LockLostError).
   * When it settles, nothing more is sent: the caller may close the Redis client, which stays open until
   * then (it is the caller's). Close this client before the Redis client: once that one has ended, this
   * client closes by itself and no hold can be released.
   *
   * It waits for Redis at most `timeout` ms (default `watchdogTimeout`). It rejects with a
   * LocksNotReleasedError naming every hold it could not release (Redis down or too slow for the timeout,
   * the Redis client closed first, a failed release): each stays in Redis until its lease runs out, and
   * blocks other clients until then. A grant that comes after the timeout still expires with its lease; a
   * release still queued in the Redis client runs if that client reconnects before it is closed.
   */
  async close(options?: CloseOptions): Promise<void> {
    const timeout = resolveCloseOptions(options);
    this.#closing ??= this.#close(timeout, false);
    const report = await this.#closing;
    // Holds whose lease has run out by now are no longer in Redis: nothing is left of them to report.
    const now = Date.now();
    const unreleased = report.unreleased.filter((hold) => hold.expiresBy.getTime() > now);
    if (unreleased.length > 0) {
      const why = report.clientEnded
        ? 'the Redis client had ended (close the lock client first)'
        : report.failure === undefined
          ? unansweredWhy(report)
          : 'their release failed';
      throw new LocksNotReleasedError(
        unreleased,
        why,
        report.failure === undefined ? undefined : { cause: report.failure },
      );
    }
  }

  async #close(timeout: number | undefined, clientEnded: boolean): Promise<ClosingReport> {
    const { watchdog, waits, scripts, watchdogTimeout } = this.#context;
    const timeoutMs = timeout ?? watchdogTimeout;
    const startedAt = monotonicNow();
    const deadline = startedAt + timeoutMs;
    this.#context.closed = true;
    this.#closeSignal.abort(new LockClientClosedError());
    for (const listener of [...this.#context.closeListeners]) listener();
    this.#context.redis.dispose();
    watchdog.stop();
    await waits.close();
    // Every hold now: attempts in flight give their grants back (the client is closed), and add none.
    const holds = watchdog.all();
    const unreleased = new Map<Hold, UnreleasedHold>(holds.map((hold) => [hold, unreleasedHold(hold)]));
    let failure: unknown;
    let sentAfterMs = 0;
    const awaitedAttempts = this.#inFlight.size > 0;
    if (!clientEnded) {
      await this.#until(deadline, Promise.allSettled([...this.#inFlight]), () => this.#inFlight.size === 0);
      // How far into the timeout the releases go out: what Redis had left to answer them (the error says so).
      sentAfterMs = Math.round(monotonicNow() - startedAt);
      // No detection while closing: a client that never learnt the mode announces classically.
      const pubsub = scripts.knownPubsubMode;
      const releases = holds.map((hold) =>
        hold.protocol
          .release('all', [hold.owner], {
            repair: true,
            pubsub,
            // Released once Redis dropped it: a fair lock's wake that follows may still be unanswered.
            dropped: () => void unreleased.delete(hold),
          })
          .then(
            () => void unreleased.delete(hold),
            (error: unknown) => {
              failure ??= error;
            },
          ),
      );
      // The holder record goes with the holds (its failure changes nothing: it runs out by itself).
      releases.push(this.#context.holderRecord.forget().catch(() => undefined));
      await this.#until(deadline, Promise.all(releases), () => true);
    }
    // Dropped by close(), or lost: a hold that the user's client took down with it ends other than by its
    // owner's release or close(), and is reported as every loss is.
    for (const hold of holds) {
      if (clientEnded) watchdog.lose(hold, 'client_ended');
      else watchdog.lose(hold, 'closed', { report: false });
    }
    // The user may have quit the client just before close() (its end event comes after): say so.
    const ended = clientEnded || (unreleased.size > 0 && this.#context.redis.hasEnded());
    return {
      unreleased: [...unreleased.values()],
      clientEnded: ended,
      failure,
      timeoutMs,
      sentAfterMs,
      awaitedAttempts,
    };
  }

  /**
   * Waits for `work` until `deadline` (monotonic ms), and again while `done` says no (a give-back in flight may
   * start another). The deadline is wall-clock time, whatever the process did meanwhile; once it has passed,
   * the replies that came while the event loop was busy are read (one more turn) before giving up, so a stall
   * of this process is not taken for Redis not answering, but it never stretches the wait. No timer is left.
   */
  async #until(deadline: number, work: Promise<unknown>, done: () => boolean): Promise<void> {
    let pending = work.then(
      () => true,
      () => true,
    );
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<false>((resolve) => {
        timer = clampedTimeout(() => resolve(false), deadline - monotonicNow());
      });
      let settled = await Promise.race([pending, expired]);
      clearTimeout(timer);
      // setImmediate runs after the poll phase of this turn, which reads what arrived during a stall.
      if (!settled)
        settled = await Promise.race([pending, new Promise<false>((resolve) => setImmediate(resolve, false))]);
      if (!settled || done()) return;
      pending = Promise.allSettled([...this.#inFlight]).then(() => true);
    }
  }

  /** The first lock operation's one-time checks have run (see `firstUse`). */
  #started = false;

  /**
   * Warns (once: called at the first lock operation) when Redis may evict lock keys: every policy but
   * `noeviction` can drop a key with a TTL, which frees a lock under its holder. Read from INFO, not CONFIG,
   * which managed services and least-privilege users often forbid.
   */
  #warnIfEvictable(): void {
    this.#context.redis.info('memory').then(
      (info) => {
        const policy = /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
        if (policy === undefined || policy === 'noeviction' || this.#context.closed) return;
        process.emitWarning(
          `Redis maxmemory-policy is "${policy}": it may evict lock keys, which frees locks under their ` +
            'holders (they are told through lockLost). Use noeviction for lock data.',
          { code: 'FLOWLOCK_EVICTION_POLICY' },
        );
      },
      () => undefined,
    );
  }

  #report(event: LockLostEvent): void {
    try {
      this.emit('lockLost', event);
    } catch (error) {
      // A throwing listener must not turn into an exception thrown from the watchdog's timer.
      process.emitWarning(error instanceof Error ? error : String(error), { code: 'FLOWLOCK_LISTENER' });
    }
  }
}

/** How a shutdown went: the holds it could not release, and why. */
interface ClosingReport {
  readonly unreleased: UnreleasedHold[];
  /** The user's Redis client had ended: nothing could be sent. */
  readonly clientEnded: boolean;
  /** The first failed release's error. */
  readonly failure: unknown;
  readonly timeoutMs: number;
  /** How far into the timeout the releases were sent (ms). */
  readonly sentAfterMs: number;
  /** Attempts were in flight when close() began: it waited for their replies before sending the releases. */
  readonly awaitedAttempts: boolean;
}

/**
 * Why close() names holds it could not release when Redis sent no reply in time: Redis had the whole timeout,
 * or only what was left of it once the releases could go out (after a stall of this process, or after the
 * replies to attempts in flight), which the operator must not read as a server that did not answer.
 */
function unansweredWhy({ timeoutMs, sentAfterMs, awaitedAttempts }: ClosingReport): string {
  // Sent at once (within a twentieth of the timeout, or 20 ms): the timeout was Redis's.
  if (sentAfterMs <= Math.max(20, timeoutMs / 20)) return `Redis did not answer within ${timeoutMs} ms`;
  const before = awaitedAttempts ? 'after the replies to attempts in flight' : 'this process was busy until then';
  const left = timeoutMs - sentAfterMs;
  return left > 0
    ? `Redis did not answer in the ${left} ms left of the ${timeoutMs} ms timeout: the releases went out ${sentAfterMs} ms into it (${before})`
    : `the ${timeoutMs} ms timeout had run out when the releases went out ${sentAfterMs} ms into it (${before})`;
}

/**
 * `hold` as close() reports it when it stays in Redis: until its longest lease after Redis last confirmed
 * it, at the latest (unless a renewal the Redis client still queues runs later).
 */
function unreleasedHold(hold: Hold): UnreleasedHold {
  const leaseMs = Math.max(hold.leaseMs, ...hold.leaseTimes);
  return {
    name: hold.name,
    key: hold.keys.lockKey,
    owner: hold.owner,
    expiresBy: new Date(Date.now() + Math.max(0, hold.confirmedAt + leaseMs - monotonicNow())),
  };
}

/**
 * Creates a lock client on a Redis client: an ioredis or iovalkey `Redis` (standalone or Sentinel) or
 * `Cluster`, a connected node-redis client, cluster or sentinel, or a Valkey GLIDE `GlideClient` or
 * `GlideClusterClient`. The client is never modified: scripts run by EVALSHA/EVAL, and the only connection
 * opened (for pub/sub) is a duplicate (on GLIDE, a client of its own) that `close()` closes.
 */
export function createLockClient(redis: RedisClient, options?: LockClientOptions): LockClient {
  const glideSubscriber = (options as { glideSubscriber?: unknown } | undefined)?.glideSubscriber;
  return new LockClient(adaptClient(redis, 'redis', glideSubscriber), options);
}
