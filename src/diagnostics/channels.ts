/**
 * The observability contract: `node:diagnostics_channel` channels that every primitive publishes on, and
 * the shapes of what they carry (exported from the package index). Channel names are process-global, so a
 * subscriber sees every copy of flowlock loaded in the process (ESM and CJS, two versions).
 *
 * Nothing is prepared when nobody listens: every publisher checks `hasSubscribers` first and builds its
 * context only then. Paired point events (`wait:start`/`wait:end`, `hold:start`/`hold:end`): an end is
 * published only for a start that was announced (a hold's when anyone listened to either of its channels,
 * so that `hold:end` alone gets every end), and carries that start as `start`: a subscriber that attaches
 * mid-hold alone never sees an unmatched end, and one that pairs them does so by identity. Durations are
 * computed here from the monotonic clock (`*Ms`).
 *
 * Tracing channels (subscribe to `tracing:<name>:start|end|asyncStart|asyncEnd|error`):
 * - `flowlock:acquire`   every acquisition (tryLock, lock, acquire, the acquire phase of withLock, a
 *                        semaphore's permits, a latch's await); one per member of a multi-lock
 * - `flowlock:release`   every release (unlock, a lease's release, forceUnlock, a semaphore's release)
 * - `flowlock:withLock`  the whole of withLock/withPermit: acquire, the caller's function, release
 * - `flowlock:renew`     each watchdog renewal call (one per hash slot and chunk of at most 570 holds)
 * Point channels: `flowlock:wait:start`, `flowlock:wait:end`, `flowlock:hold:start`, `flowlock:hold:end`,
 * `flowlock:pubsub`.
 */
import diagnostics from 'node:diagnostics_channel';
import type { LockLostError } from '../errors.js';

/** Which primitive published an event. `read`/`write`: the two sides of a read-write lock; `permit`: an expirable semaphore's. */
export type PrimitiveKind = 'lock' | 'fair' | 'read' | 'write' | 'multi' | 'quorum' | 'semaphore' | 'permit' | 'latch';

/** `watchdog`: renewed while held; `lease`: a fixed lease that runs out; `none`: nothing expires (a plain semaphore's permits, a latch). */
export type LeaseMode = 'watchdog' | 'lease' | 'none';

/**
 * How an acquisition ended: `acquired` a new hold; `reentered` one the flow had; `timeout` the wait time ran
 * out (tryLock resolved false, or acquire rejected); `aborted` by the caller's signal; `closed` by the
 * client's close(); `error` anything else (a Redis error, LockNotReplicatedError, LockUpgradeError).
 */
export type AcquireOutcome = 'acquired' | 'reentered' | 'timeout' | 'aborted' | 'closed' | 'error';

/**
 * Why a hold ended: `released` by its owner (or given up after a release whose outcome is unknown), `lost`
 * (see LossReason; its owner's signal aborted), `closed` by the client's close() (not a loss).
 */
export type HoldEndReason = 'released' | 'lost' | 'closed';

/**
 * Why a hold was lost. `renewal_rejected`: a renewal found the hold gone or another owner's (deleted,
 * evicted, expired, force-unlocked elsewhere); `renewal_deadline`: no renewal succeeded before the local
 * lease deadline (Redis unreachable or slow, or this process's event loop stalled); `lease_expired`: a
 * fixed lease ran out before the release; `superseded`: the owner acquired the lock afresh after its old
 * hold had ended unseen; `force_unlocked`: forceUnlock() on this client; `not_held`: a release found the
 * hold already gone (an unlock after the lease ran out unseen); `client_ended`: the user's Redis client ended
 * (its reconnect strategy gave up, or it was quit) before the lock client was closed, so nothing renews or
 * releases the hold, which stays in Redis until its lease runs out.
 */
export type LossReason =
  | 'renewal_rejected'
  | 'renewal_deadline'
  | 'lease_expired'
  | 'superseded'
  | 'force_unlocked'
  | 'not_held'
  | 'client_ended';

/** Wake-ups of one acquisition's waits: by a message (a release), by a timeout (the holder's TTL, a re-check). */
export interface Wakeups {
  message: number;
  timeout: number;
}

/** What identifies the lock an event is about. */
export interface LockIdentity {
  /** The lock's name as the caller gave it (a multi-lock: its names joined by `, `). */
  readonly name: string;
  /** Its Redis key, with the client's prefix (a multi-lock: the first member's). */
  readonly key: string;
  /** The lock client's id: the first part of every owner id it uses. */
  readonly clientId: string;
  readonly kind: PrimitiveKind;
}

/** What an acquisition is, as its trace starts. */
export interface AcquireStart extends LockIdentity {
  /** The owner id of the calling flow (`<clientId>:<flowId>`); undefined where permits have no owner (a plain semaphore, a latch). */
  readonly owner: string | undefined;
  /** The member names of a multi-lock, in the order they are taken. */
  readonly names?: readonly string[];
  readonly mode: LeaseMode;
  /** The lease in ms (a watchdog lease: `watchdogTimeout`); undefined for mode `none`. */
  readonly leaseMs: number | undefined;
  /** The wait time in ms; undefined: wait until acquired. */
  readonly waitMs: number | undefined;
  /** Permits asked for (semaphores). */
  readonly permits?: number;
}

/**
 * Context of `tracing:flowlock:acquire:*`. The fields below `waitMs` are set before the trace settles, and
 * are complete at `asyncEnd` and `error`.
 */
export interface AcquireTraceContext extends AcquireStart {
  outcome: AcquireOutcome | undefined;
  /** An attempt found the lock held by someone else (it had to wait, or gave up). */
  contended: boolean;
  /** Acquire script calls made. */
  attempts: number;
  wakeups: Wakeups;
  /** Time from the call to its outcome, ms. */
  waitedMs: number;
  /** The hold count after the acquisition. */
  holdCount: number | undefined;
  fencingToken: bigint | undefined;
  /** Set by the channel: the call's result (a lease, a boolean for tryLock), or its error. */
  result?: unknown;
  error?: unknown;
}

/** Context of `tracing:flowlock:release:*`. */
export interface ReleaseTraceContext extends LockIdentity {
  /** The owner whose hold is released; undefined for forceUnlock and a plain semaphore. */
  readonly owner: string | undefined;
  /** forceUnlock(): whoever holds it. */
  readonly force: boolean;
  /** Permits given back (semaphores). */
  readonly permits?: number;
  /** Hold count left (0: the lock is free of this owner); -1: it was not held. */
  remaining: number | undefined;
  /** The lock became free (or, for forceUnlock, was held). */
  freed: boolean;
  /** Subscriber connections the release message reached (about the number of waiting processes). */
  woken: number | undefined;
  /** How long the hold lasted, when this release ended it, ms. */
  heldMs: number | undefined;
  fencingToken: bigint | undefined;
  result?: unknown;
  error?: unknown;
}

/** Context of `tracing:flowlock:withLock:*`: bind a store on its start to nest the caller's work under it. */
export interface WithLockTraceContext extends LockIdentity {
  readonly names?: readonly string[];
  readonly mode: LeaseMode;
  readonly leaseMs: number | undefined;
  readonly waitMs: number | undefined;
  outcome: AcquireOutcome | undefined;
  fencingToken: bigint | undefined;
  /** How long the lock was held (from acquired to released), ms. */
  heldMs: number | undefined;
  result?: unknown;
  error?: unknown;
}

/** Context of `tracing:flowlock:renew:*`: one renewal script call of the watchdog. */
export interface RenewTraceContext {
  readonly clientId: string;
  /** Holds renewed by this call. */
  readonly locks: number;
  /** The Cluster slot of the call; undefined on a standalone server. */
  readonly slot: number | undefined;
  /** How late the watchdog's tick ran against its schedule, ms: a stalled event loop shows here. */
  readonly lateMs: number;
  renewed: number | undefined;
  /** Holds the call found gone or another owner's (each is then lost with `renewal_rejected`). */
  rejected: number | undefined;
  result?: unknown;
  error?: unknown;
}

/** `flowlock:wait:start`: an acquisition found the lock taken and waits (once per acquisition). */
export interface WaitStartMessage extends LockIdentity {
  readonly owner: string | undefined;
  /** The holder's remaining lease as that attempt saw it, ms (-1: no expiry). */
  readonly holderTtlMs: number;
}

/** `flowlock:wait:end`: published exactly once for each `wait:start`, when that acquisition ends. */
export interface WaitEndMessage extends LockIdentity {
  /** The `wait:start` message of this wait (the same object): a subscriber pairs them by identity. */
  readonly start: WaitStartMessage;
  readonly owner: string | undefined;
  readonly outcome: AcquireOutcome;
  /** From the first attempt to the end, ms. */
  readonly waitedMs: number;
  readonly attempts: number;
  readonly wakeups: Readonly<Wakeups>;
}

/** `flowlock:hold:start`: a hold begins (free -> held for this owner; not on re-entry). */
export interface HoldStartMessage extends LockIdentity {
  /** The hold's owner: its field in the lock hash (a write hold: `<owner>:write`), a permit's id. */
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly mode: LeaseMode;
  readonly leaseMs: number;
}

/** `flowlock:hold:end`: published once when a hold ends whose start was announced (see holdStarted). */
export interface HoldEndMessage extends HoldStartMessage {
  /** The `hold:start` message of this hold (the same object): a subscriber pairs them by identity. */
  readonly start: HoldStartMessage;
  readonly heldMs: number;
  readonly reason: HoldEndReason;
  /** Set when `reason` is `lost`. */
  readonly lossReason?: LossReason;
  /** The error the hold's signal aborted with (`lost` and `closed`). */
  readonly error?: LockLostError;
}

/**
 * `flowlock:pubsub`: the state of a client's subscriber connection, the path waiters are woken by.
 * `subscribed`: a channel's subscription is active; `failed`: it could not be made (waiters fall back to
 * re-checking); `restored`: the connection came back and subscribed again (waiters re-check, since
 * messages may have been lost); `closed`: the client closed it.
 */
export interface PubSubMessage {
  readonly clientId: string;
  readonly event: 'subscribed' | 'failed' | 'restored' | 'closed';
  readonly mode: 'classic' | 'sharded' | undefined;
  /** The channel, for `subscribed` and `failed`. */
  readonly channel?: string;
  /** Channels with local waiters now. */
  readonly channels: number;
  readonly error?: unknown;
}

export const acquireChannel = diagnostics.tracingChannel<unknown, AcquireTraceContext>('flowlock:acquire');
export const releaseChannel = diagnostics.tracingChannel<unknown, ReleaseTraceContext>('flowlock:release');
export const withLockChannel = diagnostics.tracingChannel<unknown, WithLockTraceContext>('flowlock:withLock');
export const renewChannel = diagnostics.tracingChannel<unknown, RenewTraceContext>('flowlock:renew');
export const waitStartChannel = diagnostics.channel('flowlock:wait:start');
export const waitEndChannel = diagnostics.channel('flowlock:wait:end');
export const holdStartChannel = diagnostics.channel('flowlock:hold:start');
export const holdEndChannel = diagnostics.channel('flowlock:hold:end');
export const pubsubChannel = diagnostics.channel('flowlock:pubsub');

/** The channel names, for subscribers (`diagnostics_channel.subscribe(name, fn)`). */
export const CHANNELS = {
  acquire: 'flowlock:acquire',
  release: 'flowlock:release',
  withLock: 'flowlock:withLock',
  renew: 'flowlock:renew',
  waitStart: 'flowlock:wait:start',
  waitEnd: 'flowlock:wait:end',
  holdStart: 'flowlock:hold:start',
  holdEnd: 'flowlock:hold:end',
  pubsub: 'flowlock:pubsub',
} as const;

/** Runs `fn` traced on `channel` when a context was made for it (someone listens), else as it is. */
export function traced<C extends object, T>(
  channel: diagnostics.TracingChannel<unknown, C>,
  context: C | undefined,
  fn: () => Promise<T>,
): Promise<T> {
  return context === undefined ? fn() : channel.tracePromise(fn, context);
}
