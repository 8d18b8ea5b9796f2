/**
 * The watchdog: the table of every hold this client has, and the one scheduler that keeps them honest.
 * Every `watchdogTimeout / 3` it renews all watchdog-mode holds in batched script calls (one per hash slot
 * and chunk, sent together); a hold is lost when renewal finds another owner, or when its local lease deadline
 * (monotonic, from the send time of the last successful acquire or renewal) passes. Fixed-lease holds are
 * never renewed and are lost at their deadline. Losing a hold aborts its signal with a LockLostError and
 * reports it, outside every flow; nothing is thrown from a timer. A hold lost at its local deadline may
 * still be in Redis (the drift allowance, a stalled event loop): it is purged there, so that no hold is
 * left in Redis that nobody here believes it has.
 */
import {
  renewChannel,
  traced,
  type HoldEndReason,
  type HoldStartMessage,
  type LossReason,
  type RenewTraceContext,
} from '../diagnostics/channels.js';
import { holdEnded, holdStarted } from '../diagnostics/publish.js';
import { LockLostError, LockRenewalUnansweredError } from '../errors.js';
import { outsideFlows } from './flow.js';
import { keySlot, MAX_REQUEST_ARGS } from '../redis/keys.js';
import type { LockScripts, ReleaseMode, ReleaseOptions, ReleaseReply, RenewEntry } from '../redis/scripts.js';
import { clampedTimeout, monotonicNow } from '../time.js';

/** How many recent losses the watchdog remembers for unlock()'s error (see #losses). */
const LOST_MEMORY = 1000;

/** How many locks' emptied hold tables the watchdog keeps for their next acquisition (see #drop). */
const HOLD_TABLES_KEPT = 1024;

/**
 * The arguments of one renewal call (LockScripts.renew, lua/watchdog/renew.lua), which must stay within
 * MAX_REQUEST_ARGS: EVALSHA, the SHA, numkeys and leaseMs, then per hold 3 KEYS and 4 ARGV (570 holds, 3 994
 * arguments), and for a read hold one more per hold count, its Redisson timeout key
 * `…:rwlock_timeout:<k>`, once the renewal declares every key it touches (counted already: a bound).
 */
const RENEW_FIXED_ARGS = 4;
const RENEW_ARGS_PER_HOLD = 7;

function renewArgs(hold: Hold): number {
  return RENEW_ARGS_PER_HOLD + (hold.protocol.kind === 'read' ? hold.count : 0);
}

/** The holds of one slot cut into calls of at most MAX_REQUEST_ARGS arguments each. */
function renewCalls(holds: readonly Hold[]): Hold[][] {
  const calls: Hold[][] = [];
  let call: Hold[] = [];
  let args = RENEW_FIXED_ARGS;
  for (const hold of holds) {
    const more = renewArgs(hold);
    if (call.length > 0 && args + more > MAX_REQUEST_ARGS) {
      calls.push(call);
      call = [];
      args = RENEW_FIXED_ARGS;
    }
    call.push(hold);
    args += more;
  }
  if (call.length > 0) calls.push(call);
  return calls;
}

/**
 * Renewal calls in flight at once (holds of that many slots), the next wave sent when a wave is answered:
 * GLIDE refuses more than 1 000 requests in flight per client by default (its inflightRequestsLimit), which
 * the user's own traffic shares.
 */
const RENEW_CALLS_AT_ONCE = 256;

/**
 * How long a renewal may go unanswered before it is reported as an error (`LockRenewalUnansweredError` on
 * `tracing:flowlock:renew:error`): half the renewal period, so that the report comes before the next
 * renewal is due (which is then sent; a reply of either still counts), but at least RENEW_ANSWER_MIN_MS,
 * so that a loaded server or event loop does not raise false alarms on short leases. While Redis is down,
 * ioredis and node-redis hold the call in their offline queue instead of failing it: without this bound
 * the operator would learn nothing until the hold is lost at its deadline.
 */
const RENEW_ANSWER_SHARE = 0.5;
const RENEW_ANSWER_MIN_MS = 1000;

/** Clock drift allowance subtracted from every local lease deadline (as in Redlock: 1% + 2 ms). */
export function driftMs(leaseMs: number): number {
  return Math.floor(leaseMs * 0.01) + 2;
}

/** The kinds of hold: a lock's (`lock`, `fair`, `read`, `write`) and an expirable semaphore's permit (`permit`). */
export type HoldKind = 'lock' | 'fair' | 'read' | 'write' | 'permit';

/** What the watchdog needs of a kind of hold: where it is filed, how it is renewed and given back. */
export interface HoldProtocol {
  readonly kind: HoldKind;
  /** `lockKey` files the hold (a lock hash, the permit sorted set); its Cluster slot groups renewals. */
  readonly keys: { readonly lockKey: string };
  /** `count`: the hold count (a read hold declares a timeout key per hold). */
  renewEntry(owner: string, count: number): RenewEntry;
  /** Gives back the holds of `owners` ('purge': a hold declared lost here; 'all': the client is closing). */
  release(mode: ReleaseMode, owners: readonly string[], options?: ReleaseOptions): Promise<ReleaseReply>;
}

export type HoldState = 'held' | 'releasing' | 'released' | 'lost';

/** Why a hold was lost, as the LockLostError says it; `closed`: dropped by the client's close(). */
const LOSS_MESSAGES: Readonly<Record<LossReason | 'closed', string>> = {
  renewal_rejected: 'the watchdog found it held by another owner or gone',
  renewal_deadline: 'the watchdog could not renew it before its lease deadline',
  lease_expired: 'its lease time ran out before it was released',
  superseded: 'its lease ended before this owner acquired the lock again',
  force_unlocked: 'it was force-unlocked',
  not_held: 'it was not held when released',
  client_ended: 'the Redis client ended before the lock client was closed (nothing renews or releases it)',
  closed: 'the lock client was closed',
};

/** One owner's hold on one lock, shared by all its re-entrant acquisitions. */
export class Hold {
  readonly name: string;
  /** The kind of hold, its keys and scripts. */
  readonly protocol: HoldProtocol;
  readonly keys: HoldProtocol['keys'];
  /** The owner's field in the lock hash (the owner id; for a write hold `<owner>:write`). */
  readonly owner: string;
  readonly fencingToken: bigint;
  /**
   * Made on the first read of `signal`: most holds (tryLock and unlock, a lease nobody asks for its signal)
   * never need one, and Node 20 takes about 4 us to make an AbortSignal.
   */
  #controller: AbortController | undefined;
  #lostWith: LockLostError | undefined;
  /**
   * The lease time of each acquisition still held, oldest first (-1: watchdog mode). Releases drop the
   * newest: an unlock undoes the latest acquisition, as nested calls do.
   */
  readonly leaseTimes: number[] = [];
  /** Request id of the latest acquire script call that took or re-entered the hold (Redis's `<owner>:acq`). */
  acquireId = '';
  /** Monotonic ms after which the hold must be presumed gone. */
  deadline = 0;
  /**
   * Monotonic ms when Redis last confirmed the hold (an acquire's or a renewal's reply came): its TTL there,
   * set before that, ends at most its lease after it.
   */
  confirmedAt = 0;
  state: HoldState = 'held';
  /** Monotonic ms when the hold began. */
  readonly startedAt = monotonicNow();
  /** The lease of the acquisition that began the hold (ms), and whether the watchdog renews it. */
  leaseMs = 0;
  mode: 'watchdog' | 'lease' = 'lease';
  /** The `hold:start` message published for this hold: `hold:end` is owed. */
  announced: HoldStartMessage | undefined;
  /** A lean grant's side fields (token, holder info), which its first successful renewal writes. */
  pendingSide: RenewEntry['side'];

  constructor(name: string, protocol: HoldProtocol, owner: string, fencingToken: bigint) {
    this.name = name;
    this.protocol = protocol;
    this.keys = protocol.keys;
    this.owner = owner;
    this.fencingToken = fencingToken;
  }

  /** Aborted with a LockLostError when the hold is lost (already aborted if read after that). */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#lostWith !== undefined) this.#controller.abort(this.#lostWith);
    }
    return this.#controller.signal;
  }

  /** The LockLostError the hold was declared lost with (its signal's reason), once it was. */
  get lostWith(): LockLostError | undefined {
    return this.#lostWith;
  }

  /** Records the loss and aborts the signal, if anyone has read it. */
  abort(error: LockLostError): void {
    this.#lostWith = error;
    this.#controller?.abort(error);
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

/** One hold of this client, as `LockClient.holds()` shows it. */
export interface HoldSnapshot {
  readonly name: string;
  /** The Redis key the hold is filed under (the lock hash; an expirable semaphore's permit set). */
  readonly key: string;
  readonly kind: HoldKind;
  /** The owner's field in the lock hash (`<clientId>:<flowId>`, a write hold's `…:write`), or a permit's id. */
  readonly owner: string;
  readonly holdCount: number;
  readonly fencingToken: bigint;
  /** How the hold began: renewed by the watchdog, or a fixed lease. */
  readonly mode: 'watchdog' | 'lease';
  /** Since the hold began, ms. */
  readonly heldMs: number;
  /** Until this client must presume the hold gone unless renewed, ms (its local lease deadline). */
  readonly leaseRemainingMs: number;
  /** Whether the watchdog renews it now. */
  readonly renewing: boolean;
}

export interface WatchdogOptions {
  readonly scripts: LockScripts;
  readonly watchdogTimeout: number;
  /** Whether the deployment is a Redis Cluster: renewal traces name their slot only there. */
  readonly cluster: boolean;
  readonly onLost: (hold: Hold, error: LockLostError) => void;
  /** The lock client's id, for the diagnostics channels. */
  readonly clientId: string;
  /** Registers a command whose outcome the client's close() must wait for. */
  readonly track: (work: Promise<unknown>) => void;
}

export class Watchdog {
  readonly #options: WatchdogOptions;
  /** lock key -> owner -> hold (nested, so that the hot lookups build no strings). */
  readonly #holds = new Map<string, Map<string, Hold>>();
  #timer: NodeJS.Timeout | undefined;
  #nextTickAt = Infinity;
  /** The holds of the renewal round in flight (empty: none is). */
  readonly #renewing = new Set<Hold>();
  /** Holds a tick found due while a round was in flight without them: renewed as soon as it ends. */
  readonly #skipped = new Set<Hold>();
  #stopped = false;
  /** Aborted by stop(): renewals in flight stop being timed (their bound's timer is cleared). */
  readonly #stopping = new AbortController();
  /**
   * Why the latest holds were lost, by lock key and owner, so that an unlock() of one says so rather than blame
   * the flow: the newest LOST_MEMORY losses, each forgotten when its owner acquires the lock again.
   */
  readonly #losses = new Map<string, LockLostError>();

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

  /** Why the hold of the nearest owner in `owners` on `lockKey` was lost, if it was lately. */
  lossOf(lockKey: string, owners: readonly string[]): LockLostError | undefined {
    for (const owner of owners) {
      const loss = this.#losses.get(`${lockKey}\n${owner}`);
      if (loss) return loss;
    }
    return undefined;
  }

  holdsOf(lockKey: string): Hold[] {
    return [...(this.#holds.get(lockKey)?.values() ?? [])];
  }

  all(): Hold[] {
    return [...this.#holds.values()].flatMap((owners) => [...owners.values()]);
  }

  /** Every hold, for `LockClient.holds()`. No I/O. */
  snapshot(): HoldSnapshot[] {
    const now = monotonicNow();
    return this.all().map((hold) => ({
      name: hold.name,
      key: hold.keys.lockKey,
      kind: hold.protocol.kind,
      owner: hold.owner,
      holdCount: hold.count,
      fencingToken: hold.fencingToken,
      mode: hold.mode,
      heldMs: Math.round(now - hold.startedAt),
      leaseRemainingMs: Math.max(0, Math.round(hold.deadline - now)),
      renewing: hold.renewing,
    }));
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
    if (this.#losses.size > 0) this.#losses.delete(`${lockKey}\n${owner}`);
    let hold = this.find(lockKey, owner);
    const lease = leaseTime === -1 ? this.#options.watchdogTimeout : leaseTime;
    if (!hold || reply.holdCount === 1) {
      if (hold) this.lose(hold, 'superseded');
      hold = new Hold(name, protocol, owner, reply.token);
      hold.leaseMs = lease;
      hold.mode = leaseTime === -1 ? 'watchdog' : 'lease';
      const owners = this.#holds.get(lockKey);
      if (owners) owners.set(owner, hold);
      else this.#holds.set(lockKey, new Map<string, Hold>().set(owner, hold));
      const started = hold;
      hold.announced = holdStarted(() => this.#holdMessage(started));
    }
    // A resend answered from Redis's memo repeats a count already recorded: no new acquisition.
    while (hold.leaseTimes.length < reply.holdCount) hold.leaseTimes.push(leaseTime);
    hold.leaseTimes.length = reply.holdCount;
    hold.acquireId = requestId;
    hold.state = 'held';
    hold.deadline = Math.max(hold.deadline, sentAt + lease - driftMs(lease));
    hold.confirmedAt = monotonicNow();
    this.#watch(hold);
    return hold;
  }

  /** Records a release script reply for `hold`: `remaining` holds are left (0: the lock is free). */
  released(hold: Hold, remaining: number): void {
    if (remaining > 0) {
      hold.leaseTimes.length = Math.min(hold.leaseTimes.length, remaining);
      if (hold.state === 'releasing') {
        // A re-entry came in meanwhile: the hold goes on, and the tick, which skipped it, watches it again.
        hold.state = 'held';
        this.#watch(hold);
      }
      return;
    }
    this.forget(hold);
  }

  /**
   * A release found `hold` gone from Redis. Past its deadline its lease ran out while the release was in
   * flight: reported as the tick would have reported it (the tick skips a hold being released). Before its
   * deadline something took it away, which the releasing caller learns from its error: no event.
   */
  releaseFoundGone(hold: Hold): void {
    if (hold.deadline <= monotonicNow()) this.lose(hold, hold.renewing ? 'renewal_deadline' : 'lease_expired');
    else this.lose(hold, 'not_held', { report: false });
  }

  /** Drops `hold` from the table without a loss signal (released, or left to expire after a failed release). */
  forget(hold: Hold): void {
    if (hold.state !== 'lost') hold.state = 'released';
    this.#drop(hold);
    this.#ended(hold, 'released');
  }

  #drop(hold: Hold): void {
    const owners = this.#holds.get(hold.keys.lockKey);
    if (owners?.get(hold.owner) !== hold) return;
    owners.delete(hold.owner);
    // An emptied lock's table stays while few locks have one: the next acquisition of the lock reuses it
    // instead of making a Map and growing this one again. Past HOLD_TABLES_KEPT locks it goes, so that a
    // client locking many names keeps a bounded few.
    if (owners.size === 0 && this.#holds.size > HOLD_TABLES_KEPT) this.#holds.delete(hold.keys.lockKey);
  }

  /** Publishes `hold:end` for a hold whose `hold:start` was published, once. */
  #ended(hold: Hold, reason: HoldEndReason, lossReason?: LossReason, error?: LockLostError): void {
    const started = hold.announced;
    hold.announced = undefined;
    holdEnded(started, hold.startedAt, reason, lossReason, error);
  }

  #holdMessage(hold: Hold): HoldStartMessage {
    return {
      name: hold.name,
      key: hold.keys.lockKey,
      clientId: this.#options.clientId,
      kind: hold.protocol.kind,
      owner: hold.owner,
      fencingToken: hold.fencingToken,
      mode: hold.mode,
      leaseMs: hold.leaseMs,
    };
  }

  /**
   * Declares `hold` lost: aborts its signal with a LockLostError and reports it, outside every flow (a
   * listener must not run in the flow of whichever call happened to detect the loss). `purge`: Redis may
   * still have the hold, so it is dropped there. Idempotent.
   */
  lose(hold: Hold, reason: LossReason | 'closed', options: { report?: boolean; purge?: boolean } = {}): void {
    if (hold.state === 'lost' || hold.state === 'released') return;
    hold.state = 'lost';
    this.#drop(hold);
    if (options.purge) this.#purge(hold);
    const error = new LockLostError(hold.name, LOSS_MESSAGES[reason]);
    if (reason !== 'closed') {
      const key = `${hold.keys.lockKey}\n${hold.owner}`;
      this.#losses.delete(key);
      this.#losses.set(key, error);
      if (this.#losses.size > LOST_MEMORY) this.#losses.delete(this.#losses.keys().next().value ?? '');
    }
    outsideFlows(() => {
      hold.abort(error);
      if (reason === 'closed') this.#ended(hold, 'closed', undefined, error);
      else this.#ended(hold, 'lost', reason, error);
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
    this.#stopping.abort();
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#nextTickAt = Infinity;
  }

  /** Makes the tick come by `hold`'s next renewal (watchdog mode) or its deadline, whichever is first. */
  #watch(hold: Hold): void {
    // A renewed hold is renewed a period from now, or sooner when its deadline is less than a period after
    // that: a grant whose reply took most of its lease (a stalled server or link) has only the rest of it. A
    // tick at the deadline itself would find the hold past it and lose what Redis still holds for a full lease
    // (found beside a CPU hog: a waiter's grant after a DEBUG SLEEP, lost before anyone asked Redis again).
    this.#scheduleAt(
      hold.renewing ? Math.min(hold.deadline - this.period, monotonicNow() + this.period) : hold.deadline,
    );
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
    const now = monotonicNow();
    // How late this tick runs: a stalled event loop (the prime suspect when renewals miss) shows here.
    const lateMs = Math.max(0, now - this.#nextTickAt);
    this.#timer = undefined;
    this.#nextTickAt = Infinity;
    let next = Infinity;
    const due: Hold[] = [];
    for (const hold of this.all()) {
      // The last hold's release is in flight: its reply tells whether Redis still had it (released) or not
      // (releaseFoundGone), where a loss declared now would be a false alarm for a release that frees it.
      if (hold.state === 'releasing') continue;
      if (hold.deadline <= now) {
        this.lose(hold, hold.renewing ? 'renewal_deadline' : 'lease_expired', { purge: true });
        continue;
      }
      next = Math.min(next, hold.deadline);
      if (hold.renewing) {
        next = Math.min(next, now + this.period);
        if (hold.state === 'held') due.push(hold);
      }
    }
    if (this.#renewing.size === 0) {
      if (due.length > 0) this.#renew(due, now, lateMs);
    } else {
      // One round at a time. A hold the round in flight does not carry (one granted during it, perhaps with
      // little of its lease left) goes out when the round ends, not at the next tick: that may be its deadline.
      for (const hold of due) if (!this.#renewing.has(hold)) this.#skipped.add(hold);
    }
    if (next !== Infinity) this.#scheduleAt(next);
  }

  /**
   * One call per hash slot and chunk, on every topology (a Cluster refuses a script call over several slots,
   * and so do the proxy-sharded endpoints that look standalone: Azure Managed Redis with its Enterprise
   * policy, Redis Cloud multi-shard), sent in waves of RENEW_CALLS_AT_ONCE that the client pipelines: a
   * tick's renewal costs about one round trip per wave. Each wave shares one bound (one timer, one stop
   * listener): thousands of calls (one per slot) must not register a listener each.
   */
  #renew(holds: Hold[], sentAt: number, lateMs: number): void {
    for (const hold of holds) this.#renewing.add(hold);
    const answerWithinMs = Math.max(RENEW_ANSWER_MIN_MS, Math.floor(this.period * RENEW_ANSWER_SHARE));
    const batches = new Map<number, Hold[]>();
    for (const hold of holds) {
      const slot = keySlot(hold.keys.lockKey);
      const batch = batches.get(slot);
      if (batch) batch.push(hold);
      else batches.set(slot, [hold]);
    }
    const calls: ((ended: Promise<'deadline' | 'closed'>) => Promise<void>)[] = [];
    for (const [slot, batch] of batches) {
      for (const chunk of renewCalls(batch)) {
        const context: RenewTraceContext | undefined = renewChannel.hasSubscribers
          ? {
              clientId: this.#options.clientId,
              locks: chunk.length,
              slot: this.#options.cluster ? slot : undefined,
              lateMs,
              renewed: undefined,
              rejected: undefined,
            }
          : undefined;
        calls.push((ended) => this.#renewChunk(chunk, sentAt, context, ended, answerWithinMs));
      }
    }
    void (async () => {
      try {
        for (let i = 0; i < calls.length && !this.#stopped; i += RENEW_CALLS_AT_ONCE) {
          const bound = this.#roundBound(monotonicNow() + answerWithinMs);
          await Promise.all(calls.slice(i, i + RENEW_CALLS_AT_ONCE).map((call) => call(bound.ended)));
          bound.dispose();
        }
      } finally {
        this.#renewing.clear();
        const skipped = [...this.#skipped].filter((hold) => hold.state === 'held' && hold.renewing);
        this.#skipped.clear();
        if (skipped.length > 0 && !this.#stopped) this.#renew(skipped, monotonicNow(), 0);
      }
    })();
  }

  /**
   * What ends the wait of a renewal round's calls: `deadline` (monotonic ms) passing, or the watchdog's
   * stop(). `dispose` clears the timer and the listener once every call of the round is settled.
   */
  #roundBound(deadline: number): { ended: Promise<'deadline' | 'closed'>; dispose: () => void } {
    const stopping = this.#stopping.signal;
    let timer: NodeJS.Timeout | undefined;
    let onStop: (() => void) | undefined;
    const ended = new Promise<'deadline' | 'closed'>((resolve) => {
      if (stopping.aborted) return resolve('closed');
      timer = clampedTimeout(() => resolve('deadline'), deadline - monotonicNow());
      onStop = () => resolve('closed');
      stopping.addEventListener('abort', onStop, { once: true });
    });
    return {
      ended,
      dispose: () => {
        if (timer) clearTimeout(timer);
        if (onStop) stopping.removeEventListener('abort', onStop);
      },
    };
  }

  async #renewChunk(
    holds: Hold[],
    sentAt: number,
    context: RenewTraceContext | undefined,
    ended: Promise<'deadline' | 'closed'>,
    answerWithinMs: number,
  ): Promise<void> {
    const lease = this.#options.watchdogTimeout;
    let call: Promise<boolean[]> | undefined;
    let renewed: boolean[] | undefined;
    try {
      renewed = await traced(renewChannel, context, async () => {
        // Sent inside the trace, whose subscribers may bind a context to it (the script call's span).
        call = this.#options.scripts.renew(
          holds.map((h) => {
            const entry = h.protocol.renewEntry(h.owner, h.count);
            return h.pendingSide ? { ...entry, side: h.pendingSide } : entry;
          }),
          lease,
        );
        const outcome = await Promise.race([call, ended]);
        if (outcome === 'closed') return undefined;
        if (outcome === 'deadline') throw new LockRenewalUnansweredError(holds.length, answerWithinMs);
        const replies = outcome;
        if (context) {
          context.renewed = replies.filter(Boolean).length;
          context.rejected = replies.length - context.renewed;
        }
        return replies;
      });
    } catch (error) {
      // Transient (published on tracing:flowlock:renew:error): the next tick retries, and the deadline
      // check declares loss if none succeeds. An unanswered call may still be answered: that reply counts.
      if (error instanceof LockRenewalUnansweredError) {
        call?.then(
          (replies) => this.#renewed(holds, replies, sentAt),
          () => undefined,
        );
      }
      return;
    }
    if (renewed) this.#renewed(holds, renewed, sentAt);
  }

  /** Applies a renewal's replies (`renewed[i]`: whether `holds[i]` is still held) sent at `sentAt`. */
  #renewed(holds: readonly Hold[], renewed: readonly boolean[], sentAt: number): void {
    if (this.#stopped) return;
    const lease = this.#options.watchdogTimeout;
    holds.forEach((hold, i) => {
      // A hold released, lost or replaced while the call was in flight is no longer ours to judge.
      if (hold.state !== 'held' || this.find(hold.keys.lockKey, hold.owner) !== hold) return;
      if (renewed[i]) {
        hold.pendingSide = undefined;
        hold.deadline = Math.max(hold.deadline, sentAt + lease - driftMs(lease));
        hold.confirmedAt = monotonicNow();
      } else this.lose(hold, 'renewal_rejected');
    });
  }
}
