/**
 * The watchdog: the table of every hold this client has, and the one scheduler that keeps them honest.
 * Every `watchdogTimeout / 3` it renews all watchdog-mode holds in batched script calls (one per Cluster
 * slot and chunk); a hold is lost when renewal finds another owner, or when its local lease deadline
 * (monotonic, from the send time of the last successful acquire or renewal) passes. Fixed-lease holds are
 * never renewed and are lost at their deadline. Losing a hold aborts its signal with a LockLostError and
 * reports it, outside every flow; nothing is thrown from a timer. A hold lost at its local deadline may
 * still be in Redis (the drift allowance, a stalled event loop): it is purged there, so that no hold is
 * left in Redis that nobody here believes it has.
 */
import { LockLostError } from '../errors.js';
import { outsideFlows } from './flow.js';
import { keySlot } from '../redis/keys.js';
import type { LockScripts, ReleaseMode, ReleaseOptions, ReleaseReply, RenewEntry } from '../redis/scripts.js';
import { clampedTimeout, monotonicNow } from './time.js';

/** Lock keys per renewal call: at 1000 locks a call the watchdog sends 1 round trip per 1000 held locks. */
const RENEW_CHUNK = 1000;

/** Clock drift allowance subtracted from every local lease deadline (as in Redlock: 1% + 2 ms). */
export function driftMs(leaseMs: number): number {
  return Math.floor(leaseMs * 0.01) + 2;
}

/** The kinds of hold: the locks' (see primitives/protocol.ts) and the expirable semaphore's permits. */
export type HoldKind = 'lock' | 'fair' | 'read' | 'write' | 'permit';

/** What the watchdog needs of a kind of hold: where it is filed, how it is renewed and given back. */
export interface HoldProtocol {
  readonly kind: HoldKind;
  /** `lockKey` files the hold (a lock hash, the permit sorted set); its Cluster slot groups renewals. */
  readonly keys: { readonly lockKey: string };
  renewEntry(owner: string): RenewEntry;
  /** Gives back the holds of `owners` ('purge': a hold declared lost here; 'all': the client is closing). */
  release(mode: ReleaseMode, owners: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply>;
}

export type HoldState = 'held' | 'releasing' | 'released' | 'lost';

/** One owner's hold on one lock, shared by all its re-entrant acquisitions. */
export class Hold {
  readonly name: string;
  /** The kind of hold, its keys and scripts. */
  readonly protocol: HoldProtocol;
  readonly keys: HoldProtocol['keys'];
  /** The owner's field in the lock hash (the owner id; for a write hold `<owner>:write`). */
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly controller = new AbortController();
  /**
   * The lease time of each acquisition still held, oldest first (-1: watchdog mode). Releases drop the
   * newest: an unlock undoes the latest acquisition, as nested calls do.
   */
  readonly leaseTimes: number[] = [];
  /** Request id of the latest acquire script call that took or re-entered the hold (Redis's `<owner>:acq`). */
  acquireId = '';
  /** Monotonic ms after which the hold must be presumed gone. */
  deadline = 0;
  state: HoldState = 'held';

  constructor(name: string, protocol: HoldProtocol, owner: string, fencingToken: bigint) {
    this.name = name;
    this.protocol = protocol;
    this.keys = protocol.keys;
    this.owner = owner;
    this.fencingToken = fencingToken;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /**
   * Renewed by the watchdog while some acquisition still held is in watchdog mode. Once the last of them is
   * released a fixed lease is left: it is no longer renewed and runs out with the TTL it has.
   */
  get renewing(): boolean {
    return this.leaseTimes.includes(-1);
  }

  /** The hold count, as Redis has it. */
  get count(): number {
    return this.leaseTimes.length;
  }
}

export interface WatchdogOptions {
  readonly scripts: LockScripts;
  readonly watchdogTimeout: number;
  /** Group renewals by Cluster slot (a script call may only touch one slot there). */
  readonly perSlot: boolean;
  readonly onLost: (hold: Hold, error: LockLostError) => void;
  /** Registers a command whose outcome the client's close() must wait for. */
  readonly track: (work: Promise<unknown>) => void;
}

export class Watchdog {
  readonly #options: WatchdogOptions;
  /** lock key -> owner -> hold (nested, so that the hot lookups build no strings). */
  readonly #holds = new Map<string, Map<string, Hold>>();
  #timer: NodeJS.Timeout | undefined;
  #nextTickAt = Infinity;
  #renewing = false;
  #stopped = false;

  constructor(options: WatchdogOptions) {
    this.#options = options;
  }

  get period(): number {
    return Math.floor(this.#options.watchdogTimeout / 3);
  }

  find(lockKey: string, owner: string): Hold | undefined {
    return this.#holds.get(lockKey)?.get(owner);
  }

  /** The hold of the nearest owner in `owners` (a flow chain) on `lockKey`, if this client knows one. */
  nearest(lockKey: string, owners: readonly string[]): Hold | undefined {
    for (const owner of owners) {
      const hold = this.find(lockKey, owner);
      if (hold) return hold;
    }
    return undefined;
  }

  holdsOf(lockKey: string): Hold[] {
    return [...(this.#holds.get(lockKey)?.values() ?? [])];
  }

  all(): Hold[] {
    return [...this.#holds.values()].flatMap((owners) => [...owners.values()]);
  }

  /**
   * Records a successful acquire script call (request id `requestId`) sent at `sentAt` for `leaseTime`
   * (-1: watchdog mode). A hold count of 1 means a fresh hold: any older local record of that owner is stale
   * and lost. A re-entry keeps the local hold and its token (the reply's token is 0 if the counter was
   * evicted).
   */
  acquired(
    name: string,
    protocol: HoldProtocol,
    owner: string,
    reply: { readonly token: bigint; readonly holdCount: number },
    requestId: string,
    sentAt: number,
    leaseTime: number,
  ): Hold {
    const { lockKey } = protocol.keys;
    let hold = this.find(lockKey, owner);
    if (!hold || reply.holdCount === 1) {
      if (hold) this.lose(hold, 'its lease ended before this owner acquired the lock again');
      hold = new Hold(name, protocol, owner, reply.token);
      const owners = this.#holds.get(lockKey);
      if (owners) owners.set(owner, hold);
      else this.#holds.set(lockKey, new Map([[owner, hold]]));
    }
    const lease = leaseTime === -1 ? this.#options.watchdogTimeout : leaseTime;
    // A resend answered from Redis's memo repeats a count already recorded: no new acquisition.
    while (hold.leaseTimes.length < reply.holdCount) hold.leaseTimes.push(leaseTime);
    hold.leaseTimes.length = reply.holdCount;
    hold.acquireId = requestId;
    hold.state = 'held';
    hold.deadline = Math.max(hold.deadline, sentAt + lease - driftMs(lease));
    this.#scheduleAt(hold.renewing ? Math.min(hold.deadline, monotonicNow() + this.period) : hold.deadline);
    return hold;
  }

  /** Records a release script reply for `hold`: `remaining` holds are left (0: the lock is free). */
  released(hold: Hold, remaining: number): void {
    if (remaining > 0) {
      hold.leaseTimes.length = Math.min(hold.leaseTimes.length, remaining);
      if (hold.state === 'releasing') hold.state = 'held';
      return;
    }
    this.forget(hold, 'released');
  }

  /** Drops `hold` from the table without a loss signal (released, or left to expire after a failed release). */
  forget(hold: Hold, state: 'released' | 'lost' = 'released'): void {
    if (hold.state !== 'lost') hold.state = state;
    const owners = this.#holds.get(hold.keys.lockKey);
    if (owners?.get(hold.owner) !== hold) return;
    owners.delete(hold.owner);
    if (owners.size === 0) this.#holds.delete(hold.keys.lockKey);
  }

  /**
   * Declares `hold` lost: aborts its signal with a LockLostError and reports it, outside every flow (a
   * listener must not run in the flow of whichever call happened to detect the loss). `purge`: Redis may
   * still have the hold, so it is dropped there. Idempotent.
   */
  lose(hold: Hold, reason: string, options: { cause?: unknown; report?: boolean; purge?: boolean } = {}): void {
    if (hold.state === 'lost' || hold.state === 'released') return;
    this.forget(hold, 'lost');
    if (options.purge) this.#purge(hold);
    const error = new LockLostError(hold.name, reason, { cause: options.cause });
    outsideFlows(() => {
      hold.controller.abort(error);
      if (options.report !== false) this.#options.onLost(hold, error);
    });
  }

  /**
   * Drops a hold that was declared lost here from Redis, every count of it, but only while its latest
   * acquisition is the one this client knows: a later acquisition by the same owner is left alone.
   */
  #purge(hold: Hold): void {
    const purging = hold.protocol
      .release('purge', [hold.owner], { undoId: hold.acquireId, repair: true })
      .catch(() => undefined); // Failing connection: the lease's own expiry ends it, as nobody renews it.
    this.#options.track(purging);
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#nextTickAt = Infinity;
  }

  #scheduleAt(at: number): void {
    if (this.#stopped || at >= this.#nextTickAt) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#nextTickAt = at;
    // Created outside every flow: the tick, the renewals and the losses they find belong to no caller.
    this.#timer = outsideFlows(() => clampedTimeout(() => this.#tick(), at - monotonicNow()));
    // A held lock must not keep the process alive: a process that exits simply lets its leases run out.
    this.#timer.unref();
  }

  #tick(): void {
    this.#timer = undefined;
    this.#nextTickAt = Infinity;
    const now = monotonicNow();
    let next = Infinity;
    const due: Hold[] = [];
    for (const hold of this.all()) {
      if (hold.deadline <= now) {
        this.lose(
          hold,
          hold.renewing
            ? 'the watchdog could not renew it before its lease deadline'
            : 'its lease time ran out before it was released',
          { purge: true },
        );
        continue;
      }
      next = Math.min(next, hold.deadline);
      if (hold.renewing) {
        next = Math.min(next, now + this.period);
        if (hold.state === 'held') due.push(hold);
      }
    }
    if (due.length > 0 && !this.#renewing) this.#renew(due, now);
    if (next !== Infinity) this.#scheduleAt(next);
  }

  #renew(holds: Hold[], sentAt: number): void {
    this.#renewing = true;
    const batches = new Map<number, Hold[]>();
    for (const hold of holds) {
      const slot = this.#options.perSlot ? keySlot(hold.keys.lockKey) : 0;
      const batch = batches.get(slot);
      if (batch) batch.push(hold);
      else batches.set(slot, [hold]);
    }
    const calls: Promise<void>[] = [];
    for (const batch of batches.values()) {
      for (let i = 0; i < batch.length; i += RENEW_CHUNK) {
        calls.push(this.#renewChunk(batch.slice(i, i + RENEW_CHUNK), sentAt));
      }
    }
    void Promise.all(calls).then(() => {
      this.#renewing = false;
    });
  }

  async #renewChunk(holds: Hold[], sentAt: number): Promise<void> {
    const lease = this.#options.watchdogTimeout;
    let renewed: boolean[];
    try {
      renewed = await this.#options.scripts.renew(
        holds.map((h) => h.protocol.renewEntry(h.owner)),
        lease,
      );
    } catch {
      return; // Transient: the next tick retries, and the deadline check declares loss if none succeeds.
    }
    holds.forEach((hold, i) => {
      // A hold released, lost or replaced while the call was in flight is no longer ours to judge.
      if (hold.state !== 'held' || this.find(hold.keys.lockKey, hold.owner) !== hold) return;
      if (renewed[i]) hold.deadline = Math.max(hold.deadline, sentAt + lease - driftMs(lease));
      else this.lose(hold, 'the watchdog found it held by another owner or gone');
    });
  }
}
