/**
 * What one kind of lock says to Redis. RLock's machinery (attempts, waiting, the watchdog, give-backs and
 * undos, flows) is the same for every lock of the family; a protocol supplies the parts that differ: the
 * keys, the hash field of an owner, the scripts, the channel its waiters listen on, and, for the kinds
 * whose waiters hold a place in Redis (the fair lock's queue, the read-write lock's waiting writers), that
 * place.
 */
import type { LockKeys } from '../redis/keys.js';
import type { RedisAdapter } from '../redis/adapter.js';
import type { HoldKind, HoldProtocol } from '../machinery/watchdog.js';
import type {
  AcquireReply,
  LockScripts,
  ReleaseMode,
  ReleaseOptions,
  ReleaseReply,
  RenewEntry,
} from '../redis/scripts.js';

/** The plain lock, the fair lock, and the two sides of a read-write lock. */
export type LockKind = Exclude<HoldKind, 'permit'>;

/**
 * A waiter's place in Redis, refreshed by each of its attempts and given up when it stops waiting. Its
 * owner must call `leave` (when an attempt carrying it was sent and no hold resulted, once that attempt
 * has settled), then `dispose`.
 */
export interface WaitTicket {
  /** The waiter's id in Redis (a fair-queue entry, a waiting writer's field). */
  readonly id: string;
  /** The channel this waiter is woken on. */
  readonly channel: string;
  /** An attempt carrying the ticket was sent: Redis may hold the place. */
  sent: boolean;
  /**
   * The latest attempt carrying the ticket, which may still be in flight when its waiter gives up (and may
   * still take the place: a NOSCRIPT retry, a resend): the leave is sent once it has settled.
   */
  attempt: Promise<unknown> | undefined;
  /** Gives the place up in Redis (and wakes whoever that lets in). Never rejects. */
  leave(): Promise<void>;
  /** Frees local resources (a fair-queue slot); after `leave` has settled, when it was needed. */
  dispose(): void;
}

export interface LockProtocol extends HoldProtocol {
  readonly kind: LockKind;
  readonly keys: LockKeys;
  /**
   * 'one': a message wakes one local waiter, and a process's newcomers queue behind its waiters (the plain
   * lock); 'all': a message wakes every local waiter of the channel (the read-write lock's readers may all
   * go in together); 'ticket': each waiter has a channel of its own (the fair lock).
   */
  readonly wake: 'one' | 'all' | 'ticket';
  /** How long a waiter may park without an attempt: its place in Redis must be refreshed within its lease. */
  readonly refreshMs: number;
  /** The hash field that holds an owner's count (the write lock's is `<owner>:write`). */
  field(owner: string): string;
  renewEntry(field: string, count: number): RenewEntry;
  /** A place in Redis for a waiter of the flow chain `fields`, for protocols that keep one. */
  ticket?(fields: readonly string[]): WaitTicket;
  /**
   * Whether an acquire may be sent lean (see lock/acquire.lua): the protocol has lean grants, and no call of
   * this client on the lock is in flight. The caller vouches for the rest (its flow chain holds nothing).
   */
  idle?(): boolean;
  acquire(
    leaseMs: number,
    requestId: string,
    fields: readonly string[],
    ticket?: WaitTicket,
    lean?: boolean,
  ): Promise<AcquireReply>;
  release(mode: ReleaseMode, fields: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply>;
  forceUnlock(): Promise<boolean>;
  isLocked(): Promise<boolean>;
}

/** How many lock keys' traffic counts stay in the table at 0 (see PlainProtocol's #counted). */
const TRAFFIC_KEPT = 1024;

/**
 * The plain RLock: Redisson's hash and channel, one message wakes one waiter. Its uncontended cycle writes
 * no side fields: a lean acquire (see lock/acquire.lua) is sent while no other call of this client on the
 * lock is in flight (`traffic`, shared by the client's RLocks, counts them per lock key), so that Redis
 * can tell a resend, and an undo or purge can name the grant, without a memo.
 */
export class PlainProtocol implements LockProtocol {
  readonly kind = 'lock';
  readonly wake = 'one';
  readonly refreshMs = Infinity;
  readonly keys: LockKeys;
  readonly #scripts: LockScripts;
  readonly #redis: RedisAdapter;
  readonly #traffic: Map<string, number>;

  constructor(scripts: LockScripts, keys: LockKeys, redis: RedisAdapter, traffic: Map<string, number>) {
    this.#scripts = scripts;
    this.keys = keys;
    this.#redis = redis;
    this.#traffic = traffic;
  }

  idle(): boolean {
    return (this.#traffic.get(this.keys.lockKey) ?? 0) === 0;
  }

  /** Counts `call` as traffic on the lock until it settles. */
  #counted<T>(call: Promise<T>): Promise<T> {
    const key = this.keys.lockKey;
    const traffic = this.#traffic;
    traffic.set(key, (traffic.get(key) ?? 0) + 1);
    const done = (): void => {
      const left = (traffic.get(key) ?? 1) - 1;
      // A lock's count stays at 0 while few locks have one: a Map that empties and fills again on every
      // call reallocates its table each time. Past TRAFFIC_KEPT names they go at 0, a bounded few kept.
      if (left > 0 || traffic.size <= TRAFFIC_KEPT) traffic.set(key, left);
      else traffic.delete(key);
    };
    call.then(done, done);
    return call;
  }

  field(owner: string): string {
    return owner;
  }

  renewEntry(field: string): RenewEntry {
    return { lockKey: this.keys.lockKey, field, holdKey: this.keys.holdKey };
  }

  acquire(
    leaseMs: number,
    requestId: string,
    fields: readonly string[],
    _ticket?: WaitTicket,
    lean = false,
  ): Promise<AcquireReply> {
    return this.#counted(this.#scripts.acquire(this.keys, leaseMs, requestId, fields, lean));
  }

  release(mode: ReleaseMode, fields: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply> {
    return this.#counted(this.#scripts.release(this.keys, mode, fields, options));
  }

  forceUnlock(): Promise<boolean> {
    return this.#counted(this.#scripts.forceUnlock(this.keys));
  }

  async isLocked(): Promise<boolean> {
    return this.#redis.exists(this.keys.lockKey);
  }
}
