/**
 * RReadWriteLock: Redisson's read-write lock on one hash (`mode` = read | write, a count per reading owner,
 * `<owner>:write` for the writer) with a timeout key per read hold, and one channel for both sides
 * (`redisson_rwlock:{name}`: "0" when the last reader leaves, "1" when the writer does). Any number of flows
 * read at once; the write lock excludes everything else; both are reentrant per flow, and a flow holding
 * the write lock may also take the read lock (a downgrade).
 *
 * Differences from Redisson, none visible on the wire to a Java client:
 * - A read -> write upgrade fails at once with LockUpgradeError instead of waiting for itself forever.
 * - A waiting writer registers (in `flowlock:writers:{name}`, for `watchdogTimeout` past its latest attempt;
 *   it attempts at least every third of that), and this library's readers do not take new read holds
 *   while one is registered, so a stream of them cannot starve it. Redisson's readers do not know the
 *   registry: they still enter while our writer waits.
 * - The watchdog renews only this client's own read holds' timeout keys (as Redisson does since 4.4.0,
 *   #7098): a dead reader's hold runs out although other readers keep the lock.
 * - A downgrade (write released, own read kept) announces "0", so that readers elsewhere come in.
 */
import { readTimeoutKeys, readWriteLockKeys, type ReadWriteLockKeys } from '../redis/keys.js';
import { RLock, type LockContext } from './lock.js';
import type { LockKind, LockProtocol, WaitTicket } from './protocol.js';
import {
  acquireReply,
  type AcquireReply,
  type LockScripts,
  type ReleaseMode,
  type ReleaseOptions,
  type ReleaseReply,
  type RenewEntry,
} from '../redis/scripts.js';

const WRITE_SUFFIX = ':write';

abstract class ReadWriteProtocol implements LockProtocol {
  abstract readonly kind: LockKind;
  readonly wake = 'all';
  abstract readonly refreshMs: number;
  readonly keys: ReadWriteLockKeys;
  protected readonly scripts: LockScripts;
  protected readonly context: LockContext;

  constructor(context: LockContext, name: string) {
    this.keys = readWriteLockKeys(context.keyPrefix, name, context.cluster);
    this.scripts = context.scripts;
    this.context = context;
  }

  abstract field(owner: string): string;
  abstract renewEntry(field: string, count: number): RenewEntry;
  abstract acquire(
    leaseMs: number,
    requestId: string,
    fields: readonly string[],
    ticket?: WaitTicket,
  ): Promise<AcquireReply>;
  abstract release(mode: ReleaseMode, fields: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply>;
  abstract isLocked(): Promise<boolean>;

  async forceUnlock(): Promise<boolean> {
    const { lockKey, channel, holdKey } = this.keys;
    const keys = [lockKey, channel, holdKey];
    return (await this.scripts.runAnnouncing('read-write-lock/force-unlock', keys, [this.kind])) === 1;
  }
}

class ReadProtocol extends ReadWriteProtocol {
  readonly kind = 'read';
  readonly refreshMs = Infinity;

  field(owner: string): string {
    return owner;
  }

  renewEntry(field: string, count: number): RenewEntry {
    const { lockKey, timeoutBase, holdKey } = this.keys;
    return { lockKey, field, kind: 'read', timeoutKeys: readTimeoutKeys(timeoutBase, field, count), holdKey };
  }

  acquire(leaseMs: number, requestId: string, fields: readonly string[]): Promise<AcquireReply> {
    const { index, count } = this.#nearest(fields);
    return this.scripts.readAcquire(this.keys, leaseMs, requestId, fields, { index, count: count + 1 });
  }

  release(mode: ReleaseMode, fields: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply> {
    return this.scripts.readRelease(this.keys, mode, fields, options, this.#nearest(fields));
  }

  /**
   * The nearest owner of `fields` with a read hold this client knows, and its count (Redis's, as far as this
   * client knows it): the hold the scripts will most likely find, whose timeout keys they get.
   */
  #nearest(fields: readonly string[]): { index: number; count: number } {
    const hold = this.context.watchdog.nearest(this.keys.lockKey, fields);
    return hold ? { index: fields.indexOf(hold.owner), count: hold.count } : { index: 0, count: 0 };
  }

  /** Read-held, or write-held by a flow that also reads (Redisson's answer since 3.24.0, #4400). */
  async isLocked(): Promise<boolean> {
    const hash = await this.context.redis.hgetall(this.keys.lockKey);
    if (hash.mode === 'read') return true;
    if (hash.mode !== 'write') return false;
    return Object.entries(hash).some(
      ([field, value]) => field !== 'mode' && !field.endsWith(WRITE_SUFFIX) && /^\d+$/.test(value),
    );
  }
}

class WriteProtocol extends ReadWriteProtocol {
  readonly kind = 'write';
  readonly refreshMs: number;

  constructor(context: LockContext, name: string) {
    super(context, name);
    this.refreshMs = Math.floor(context.watchdogTimeout / 3);
  }

  field(owner: string): string {
    return owner + WRITE_SUFFIX;
  }

  renewEntry(field: string): RenewEntry {
    return { lockKey: this.keys.lockKey, field, holdKey: this.keys.holdKey };
  }

  /** A waiting writer's registration: its write field, for `watchdogTimeout` past each attempt. */
  ticket(fields: readonly string[]): WaitTicket {
    const { writersKey, lockKey, channel } = this.keys;
    const id = fields[0] ?? '';
    return {
      id,
      channel,
      sent: false,
      attempt: undefined,
      leave: async () => {
        try {
          await this.scripts.runAnnouncing('read-write-lock/leave', [writersKey, lockKey, channel], [id], {
            direct: true,
          });
        } catch {
          // The connection is failing: the registration runs out by itself.
        }
      },
      dispose: () => undefined,
    };
  }

  async acquire(
    leaseMs: number,
    requestId: string,
    fields: readonly string[],
    ticket?: WaitTicket,
  ): Promise<AcquireReply> {
    const { lockKey, writersKey, holdKey } = this.keys;
    if (ticket) ticket.sent = true;
    const reply = await this.scripts.run(
      'read-write-lock/write-acquire',
      [lockKey, writersKey, holdKey, ...this.scripts.fenceKeys(this.keys)],
      [leaseMs, requestId, ticket ? this.context.watchdogTimeout : 0, this.scripts.holderInfo, ...fields],
    );
    return acquireReply(reply);
  }

  release(mode: ReleaseMode, fields: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply> {
    const { lockKey, channel, holdKey, releaseMemoPrefix } = this.keys;
    return this.scripts.releaseBy(
      'read-write-lock/write-release',
      [lockKey, channel, holdKey],
      releaseMemoPrefix,
      mode,
      fields,
      options,
    );
  }

  async isLocked(): Promise<boolean> {
    return (await this.context.redis.hget(this.keys.lockKey, 'mode')) === 'write';
  }
}

/** The read side of a read-write lock: RLock's interface; many flows may hold it at once. */
export class RReadLock extends RLock {
  /** @internal */
  constructor(context: LockContext, name: string) {
    super(context, name, new ReadProtocol(context, name));
  }
}

/** The write side of a read-write lock: RLock's interface; its holds carry fencing tokens. */
export class RWriteLock extends RLock {
  /** @internal */
  constructor(context: LockContext, name: string) {
    super(context, name, new WriteProtocol(context, name));
  }
}

/** A read-write lock; `readLock()` and `writeLock()` are cheap (no I/O) and may be called many times. */
export class RReadWriteLock {
  readonly name: string;
  readonly #context: LockContext;

  /** @internal */
  constructor(context: LockContext, name: string) {
    this.name = name;
    this.#context = context;
  }

  /** The shared side: any number of flows may hold it at once, while nobody holds the write lock. */
  readLock(): RReadLock {
    return new RReadLock(this.#context, this.name);
  }

  /** The exclusive side: excludes readers and other writers; a writer may also take the read lock. */
  writeLock(): RWriteLock {
    return new RWriteLock(this.#context, this.name);
  }
}
