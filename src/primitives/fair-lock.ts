/**
 * RFairLock: RLock's interface, served first come first served across every client, Redisson's Java
 * clients included. Waiters line up in Redisson's queue (`redisson_lock_queue:{name}`, with deadlines in
 * `redisson_lock_timeout:{name}`); a release wakes only the waiter first in line, on a channel of its own.
 *
 * Differences from Redisson, none visible on the wire to a Java client:
 * - A waiter's entry lives `watchdogTimeout` past its latest attempt, and a waiter attempts at least every
 *   third of that: a crashed waiter stops blocking the queue within about `watchdogTimeout` (Redisson: its
 *   wait time, 5 minutes by default), and a live one is never purged because the holder kept the lock long
 *   (Redisson #3004).
 * - A waiter that gives up leaves the queue at once and, if the lock is free, wakes the next in line.
 * - Our acquisitions do not shorten other waiters' deadlines (Redisson's do, by the acquirer's wait time),
 *   so Java waiters behind ours keep at least the time Redisson gave them. A waiter of ours that a
 *   Redisson acquisition pushed out while first in line takes its place back at the head.
 * - A process reuses a few waiter ids per lock (`<clientId>:w<n>`), whose subscriptions stay open a moment
 *   after use: a waiter usually needs no SUBSCRIBE round trip of its own.
 */
import type { FairLockKeys } from '../redis/keys.js';
import { fairLockKeys } from '../redis/keys.js';
import { RLock, type LockContext } from './lock.js';
import type { LockProtocol, WaitTicket } from './protocol.js';
import {
  acquireReply,
  type AcquireReply,
  type LockScripts,
  type ReleaseMode,
  type ReleaseOptions,
  type ReleaseReply,
  type RenewEntry,
  type WaiterId,
} from '../redis/scripts.js';
import type { WaitQueues } from '../machinery/waiting.js';

class FairProtocol implements LockProtocol {
  readonly kind = 'fair';
  readonly wake = 'ticket';
  readonly keys: FairLockKeys;
  readonly refreshMs: number;
  readonly #scripts: LockScripts;
  readonly #waits: WaitQueues;
  readonly #redis: LockContext['redis'];
  readonly #clientId: string;
  /** How long a waiter's entry lives past its latest attempt. */
  readonly #waiterLeaseMs: number;

  constructor(context: LockContext, name: string) {
    this.keys = fairLockKeys(context.keyPrefix, name, context.cluster);
    this.#scripts = context.scripts;
    this.#waits = context.waits;
    this.#redis = context.redis;
    this.#clientId = context.clientId;
    this.#waiterLeaseMs = context.watchdogTimeout;
    this.refreshMs = Math.floor(context.watchdogTimeout / 3);
  }

  field(owner: string): string {
    return owner;
  }

  renewEntry(field: string): RenewEntry {
    return { lockKey: this.keys.lockKey, field, holdKey: this.keys.holdKey };
  }

  ticket(): WaitTicket {
    const { lockKey, queueKey, timeoutKey, channel } = this.keys;
    const slot = this.#waits.takeSlot(lockKey);
    const id = `${this.#clientId}:w${slot}`;
    return {
      id,
      channel: `${channel}:${id}`,
      sent: false,
      attempt: undefined,
      leave: async () => {
        try {
          const reply = await this.#scripts.run('fair-lock/leave', [lockKey, queueKey, timeoutKey], [id], {
            direct: true,
          });
          await this.#scripts.wakeWaiter(this.keys, (reply as WaiterId[])[1]);
        } catch {
          // The connection is failing: the entry runs out within the waiter lease.
        }
      },
      dispose: () => {
        this.#waits.releaseSlot(lockKey, slot);
      },
    };
  }

  async acquire(
    leaseMs: number,
    requestId: string,
    fields: readonly string[],
    ticket?: WaitTicket,
  ): Promise<AcquireReply> {
    const { lockKey, queueKey, timeoutKey, holdKey } = this.keys;
    // An entry that is gone although an earlier attempt made one was purged while first in line.
    const requeue = ticket?.sent === true ? '1' : '0';
    if (ticket) ticket.sent = true;
    const reply = await this.#scripts.run(
      'fair-lock/acquire',
      [lockKey, queueKey, timeoutKey, holdKey, ...this.#scripts.fenceKeys(this.keys)],
      [leaseMs, requestId, ticket?.id ?? '', this.#waiterLeaseMs, requeue, this.#scripts.holderInfo, ...fields],
    );
    return acquireReply(reply);
  }

  release(mode: ReleaseMode, fields: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply> {
    return this.#scripts.fairRelease(this.keys, mode, fields, options);
  }

  forceUnlock(): Promise<boolean> {
    return this.#scripts.fairForceUnlock(this.keys);
  }

  async isLocked(): Promise<boolean> {
    return this.#redis.exists(this.keys.lockKey);
  }
}

/** A fair lock: RLock's whole interface, with grants in arrival order across all clients. */
export class RFairLock extends RLock {
  /** @internal */
  constructor(context: LockContext, name: string) {
    super(context, name, new FairProtocol(context, name));
  }
}
