/**
 * Quorum locks over several independent Redis masters (the Redlock algorithm, on this library's scripts and
 * key layout). An acquisition sends the acquire script to every node at once and holds only when a majority
 * granted it while time was left: validity = lease − elapsed − drift (0.01 × lease + 2 ms), measured on a
 * monotonic clock from before the first send. Otherwise it is released on every node, the nodes that did not
 * answer included, and a grant that still comes late is released when it comes (a late grant must not
 * linger). Extending renews on every node and re-asserts the key on nodes that lost it (restarted, evicted),
 * so a quorum is not eroded one restart at a time. A node that is down (its connection not ready) is sent
 * nothing and counts as not answering, so that its client does not queue every round's commands for it.
 *
 * What it does not give: safety against clock jumps or process pauses longer than the validity (no lock
 * on Redis can), and fencing tokens (each node counts its own, and they are not comparable). A quorum lock
 * is not reentrant: every acquisition is its own owner. Waiters are woken by the release message of any node.
 */
import { randomUUID } from 'node:crypto';
import {
  type HoldEndReason,
  type HoldStartMessage,
  type LockIdentity,
  type LossReason,
} from '../diagnostics/channels.js';
import { startDebugLog } from '../diagnostics/debug-log.js';
import {
  AcquireObserver,
  holdEnded,
  holdStarted,
  releaseContext,
  traceAcquire,
  traceRelease,
} from '../diagnostics/publish.js';
import { LockAcquireTimeoutError, LockClientClosedError, LockLostError, LockNotHeldError } from '../errors.js';
import { outsideFlows } from '../machinery/flow.js';
import { lockKeys, type LockKeys } from '../redis/keys.js';
import { scopedLease } from './lock.js';
import { adaptClient, type RedisAdapter } from '../redis/adapter.js';
import {
  checkFunction,
  checkLockName,
  checkQuorumNodes,
  resolveQuorumAcquireOptions,
  resolveQuorumOptions,
  type RedisClient,
  type AcquireOptions,
  type QuorumLockOptions,
  type ResolvedAcquire,
  type ResolvedQuorumOptions,
} from '../options.js';
import { LockScripts, newRequestId, type ReleaseReply } from '../redis/scripts.js';
import { abortableSleep, clampedTimeout, monotonicNow } from '../time.js';
import { WaitQueues, type Waiter } from '../machinery/waiting.js';
import { driftMs } from '../machinery/watchdog.js';

/** One acquisition of a quorum lock; release it once (or let `await using` do it). */
export interface QuorumLease extends AsyncDisposable {
  readonly name: string;
  /**
   * Aborts with a LockLostError when the validity runs out, when an extension finds another owner holding the
   * key on so many nodes that no quorum is left, or when an explicit `extend()` reaches no quorum.
   */
  readonly signal: AbortSignal;
  /** Milliseconds of validity left (0 once lost or released). Work that needs the lock must fit in it. */
  validity(): number;
  /**
   * Renews the lease on every node (re-asserting it where the key is gone). Short of a quorum the lease is
   * lost: this rejects with LockLostError and the signal aborts.
   */
  extend(): Promise<void>;
  /** Releases it on every node; rejects with LockNotHeldError if it was already lost. Idempotent. */
  release(): Promise<void>;
}

/** What a node said to one acquire: granted, held by another (with its PTTL), or nothing in time. */
type NodeAnswer = { readonly granted: true } | { readonly granted: false; readonly pttl: number | undefined };

const GRANTED: NodeAnswer = { granted: true };
const NO_ANSWER: NodeAnswer = { granted: false, pttl: undefined };

/** Where one node stands after an extension: it holds the lease, it does not, or it did not answer in time. */
type NodeExtension = 'held' | 'lost' | 'unanswered';

const VALIDITY_RAN_OUT = 'its validity ran out before it was extended';

/** Hands out quorum locks over one set of nodes; `close()` releases what it still holds. */
export class QuorumLockClient {
  readonly clientId: string;
  readonly #nodes: QuorumNodes;
  readonly #keyPrefix: string;
  #closing: Promise<void> | undefined;

  /** @internal */
  constructor(nodes: readonly RedisAdapter[], options: ResolvedQuorumOptions) {
    startDebugLog();
    this.clientId = options.clientId;
    this.#keyPrefix = options.keyPrefix;
    this.#nodes = new QuorumNodes(nodes, options);
  }

  /** How many nodes must grant an acquisition: a strict majority. */
  get quorum(): number {
    return this.#nodes.quorum;
  }

  /** A quorum lock for `name`; no I/O. */
  getLock(name: string): QuorumLock {
    return new QuorumLock(this.#nodes, checkLockName(name, this.#keyPrefix));
  }

  /**
   * Ends pending waits (they reject with LockClientClosedError), lets attempts in flight give back their
   * grants, stops extending, releases every lease. When it resolves, nothing more is sent to the nodes
   * except the release of a grant that a slow node makes later.
   */
  close(): Promise<void> {
    this.#closing ??= this.#nodes.close();
    return this.#closing;
  }
}

/** One node of a quorum client: its scripts, its release-message waits, and whether it was ever connected. */
class QuorumNode {
  readonly scripts: LockScripts;
  readonly waits: WaitQueues;
  readonly #redis: RedisAdapter;
  #connectedBefore = false;

  constructor(redis: RedisAdapter, options: ResolvedQuorumOptions) {
    this.#redis = redis;
    const { holderInfo, keyPrefix, previousLayout, clientId } = options;
    this.scripts = new LockScripts(redis, holderInfo, keyPrefix, previousLayout === 'retired');
    this.waits = new WaitQueues(redis, () => this.scripts.pubsubMode(), clientId);
  }

  /**
   * Whether a round sends its command here. A node whose connection was ready and is not now is down
   * (reconnecting, closed): the client would queue the commands of every round and run them all once it is
   * back, so it is sent nothing and counts as not answering. Until its connection is first seen ready (a
   * client just created, or lazyConnect's 'wait', which only a command ends) the command is sent and waits
   * in the offline queue for a moment: a lock taken right after the clients were created must not fail.
   */
  isUp(): boolean {
    const readiness = this.#redis.readiness();
    if (readiness === 'ready') {
      this.#connectedBefore = true;
      return true;
    }
    return !this.#connectedBefore && readiness === 'connecting';
  }

  release(keys: LockKeys, owner: string): Promise<ReleaseReply> {
    return this.scripts.release(keys, 'all', [owner], { repair: true });
  }

  /**
   * Releases a grant that came after its round stopped waiting for this node, if `wanted()` says by then
   * that nobody holds it (the attempt failed, or the hold has ended). Errors are dropped: the key's lease
   * ends it anyway.
   */
  releaseLateGrant(keys: LockKeys, owner: string, granted: Promise<boolean>, wanted: () => boolean): void {
    granted.then((acquired) => (acquired && !wanted() ? this.release(keys, owner) : undefined)).catch(() => undefined);
  }
}

/** The nodes of one quorum client, and the acquire / extend / release rounds that run on all of them. */
class QuorumNodes {
  readonly quorum: number;
  readonly nodeTimeout: number;
  readonly #clientId: string;
  readonly #nodes: readonly QuorumNode[];
  readonly #options: ResolvedQuorumOptions;
  readonly #leases = new Set<QuorumHold>();
  /** Acquisitions in progress: close() waits for them, since an attempt may have grants to give back. */
  readonly #takes = new Set<Promise<unknown>>();
  /** Aborted by close(): ends the sleeps between attempts. */
  readonly #closing = new AbortController();
  #closed = false;

  constructor(nodes: readonly RedisAdapter[], options: ResolvedQuorumOptions) {
    this.#clientId = options.clientId;
    this.#options = options;
    this.nodeTimeout = options.nodeTimeout;
    this.#nodes = nodes.map((redis) => new QuorumNode(redis, options));
    this.quorum = Math.floor(nodes.length / 2) + 1;
  }

  get size(): number {
    return this.#nodes.length;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort(new LockClientClosedError());
    await Promise.all(this.#nodes.map((node) => node.waits.close()));
    // An attempt in flight finishes its round and gives back its grants (it then rejects, and makes no
    // lease): the caller may close its Redis clients as soon as close() resolves.
    await Promise.allSettled(this.#takes);
    const leases = [...this.#leases];
    await Promise.all(
      leases.map((lease) => lease.end(new LockLostError(lease.name, 'the lock client was closed'), 'closed')),
    );
  }

  /** Acquires `name` within the options' wait time: the hold, or undefined when it ran out. */
  /** The client's id (the first part of its owner ids). */
  get clientId(): string {
    return this.#clientId;
  }

  /** The lock hash's key of `name` on every node. */
  keyOf(name: string): string {
    return lockKeys(this.#options.keyPrefix, name).lockKey;
  }

  /** The lease of acquisitions with `options` (ms). */
  leaseMs(options: ResolvedAcquire): number {
    return options.leaseTime === -1 ? this.#options.watchdogTimeout : options.leaseTime;
  }

  take(name: string, options: ResolvedAcquire, observer?: AcquireObserver): Promise<QuorumHold | undefined> {
    const taking = this.#take(name, options, observer);
    this.#takes.add(taking);
    const settled = (): void => void this.#takes.delete(taking);
    taking.then(settled, settled);
    return taking;
  }

  async #take(
    name: string,
    options: ResolvedAcquire,
    observer: AcquireObserver | undefined,
  ): Promise<QuorumHold | undefined> {
    this.#checkOpen(name);
    const { waitTime, signal } = options;
    signal?.throwIfAborted();
    const keys = lockKeys(this.#options.keyPrefix, name);
    const lease = options.leaseTime === -1 ? this.#options.watchdogTimeout : options.leaseTime;
    const deadline = waitTime === undefined ? Infinity : monotonicNow() + waitTime;
    const sleepEnds = signal ? [signal, this.#closing.signal] : [this.#closing.signal];
    let waiters: Waiter[] | undefined;
    try {
      for (;;) {
        for (const waiter of waiters ?? []) waiter.attempting();
        // A new owner per attempt: a grant that comes late, and the release chained to it, can then never
        // touch the key of a later attempt.
        const owner = `${this.#clientId}:q${randomUUID()}`;
        let hold: QuorumHold | undefined;
        const sentAt = monotonicNow();
        observer?.attempted();
        const answers = await this.#acquireEverywhere(keys, owner, lease, () => hold?.active === true);
        const granted = answers.filter((answer) => answer.granted).length;
        const validUntil = sentAt + lease - driftMs(lease);
        if (granted >= this.quorum && validUntil > monotonicNow() && !this.#closed && !signal?.aborted) {
          hold = new QuorumHold(this, name, keys, owner, lease, options.leaseTime === -1, validUntil);
          this.#leases.add(hold);
          return hold;
        }
        // Give back what was granted, and what may still be granted late by a node that did not answer.
        await this.releaseEverywhere(keys, owner);
        this.#checkOpen(name);
        signal?.throwIfAborted();
        const remaining = deadline - monotonicNow();
        if (remaining <= 0) return undefined;
        const jitter = this.#options.nodeTimeout * (1 + Math.random());
        observer?.contended();
        observer?.waiting(-1);
        if (granted > 0) {
          // A split vote (or a quorum that came too late): retry after a random delay, so that contenders
          // do not collide again in step. Release messages must not end it: the release just sent published
          // one on every node that had granted, and it would wake this very attempt at once.
          await abortableSleep(Math.min(remaining, jitter), sleepEnds);
        } else {
          waiters ??= this.#nodes.map((node) => node.waits.enter(keys.channel, { name }));
          await parkAny(waiters, Math.min(remaining, this.#retryDelay(answers, jitter)), signal);
        }
      }
    } finally {
      for (const waiter of waiters ?? []) waiter.leave();
    }
  }

  /**
   * How long to wait for a release message after an attempt that no node granted: until the earliest
   * holder's lease ends, or `jitter` when fewer than a quorum of nodes answered.
   */
  #retryDelay(answers: readonly NodeAnswer[], jitter: number): number {
    const ttls = answers.flatMap((answer) => (!answer.granted && answer.pttl !== undefined ? [answer.pttl] : []));
    if (ttls.length < this.quorum) return jitter;
    const earliest = Math.min(...ttls.map((ttl) => (ttl < 0 ? Infinity : ttl)));
    return Math.max(earliest, 1);
  }

  /** Sends the acquire to every node that is up; `wanted()` tells, when a late grant comes, whether to keep it. */
  #acquireEverywhere(keys: LockKeys, owner: string, lease: number, wanted: () => boolean): Promise<NodeAnswer[]> {
    const requestId = newRequestId();
    return Promise.all(
      this.#nodes.map(async (node): Promise<NodeAnswer> => {
        if (!node.isUp()) return NO_ANSWER;
        const acquiring = node.scripts.acquire(keys, lease, requestId, [owner], false);
        const reply = await within(acquiring, this.#options.nodeTimeout);
        if (reply === undefined) {
          // It may still grant: a slow node, or the EVAL that follows a NOSCRIPT, which can run after the
          // failed attempt's release did.
          const late = acquiring.then((lateReply) => lateReply.acquired);
          node.releaseLateGrant(keys, owner, late, wanted);
          return NO_ANSWER;
        }
        return reply.acquired ? GRANTED : { granted: false, pttl: reply.pttl };
      }),
    );
  }

  /**
   * Renews on every node that is up, re-asserting where the key is gone unless `wanted()` says by then that
   * the hold has ended: how many nodes now hold it, and how many did not answer.
   */
  async extendEverywhere(
    keys: LockKeys,
    owner: string,
    lease: number,
    wanted: () => boolean,
  ): Promise<{ held: number; unanswered: number }> {
    const extensions = await Promise.all(
      this.#nodes.map(async (node): Promise<NodeExtension> => {
        if (!node.isUp()) return 'unanswered';
        const renewAndReassert = async (): Promise<NodeExtension> => {
          const [renewed] = await node.scripts.renew(
            [{ lockKey: keys.lockKey, field: owner, holdKey: keys.holdKey }],
            lease,
          );
          if (renewed) return 'held';
          // Released or lost while the renewal was out: its release may have run here already, and a key
          // taken again now would outlive the hold.
          if (!wanted()) return 'lost';
          // Gone there (restart, eviction): take it again if it is free; another owner's key stays.
          const reasserting = node.scripts.acquire(keys, lease, newRequestId(), [owner], false).then((r) => r.acquired);
          // The hold may end before it grants (a slow node, the EVAL after a NOSCRIPT).
          node.releaseLateGrant(keys, owner, reasserting, wanted);
          return (await reasserting) ? 'held' : 'lost';
        };
        return (await within(renewAndReassert(), this.#options.nodeTimeout)) ?? 'unanswered';
      }),
    );
    const count = (extension: NodeExtension): number => extensions.filter((e) => e === extension).length;
    return { held: count('held'), unanswered: count('unanswered') };
  }

  /**
   * Drops `owner`'s key on every node that is up; resolves (after at most the node timeout) to how many
   * nodes confirmed they had it, and how many answered that they did not. A node that does not answer in
   * time still runs it when it can; a node that is down keeps the key until its lease runs out.
   */
  async releaseEverywhere(keys: LockKeys, owner: string): Promise<{ released: number; notHeld: number }> {
    const answers = await Promise.all(
      this.#nodes.map(async (node) => {
        if (!node.isUp()) return undefined;
        const reply = await within(node.release(keys, owner), this.#options.nodeTimeout);
        return reply && reply.remaining >= 0;
      }),
    );
    return {
      released: answers.filter((answer) => answer === true).length,
      notHeld: answers.filter((answer) => answer === false).length,
    };
  }

  /** The hold ended: close() no longer needs to release it. */
  forget(hold: QuorumHold): void {
    this.#leases.delete(hold);
  }

  #checkOpen(name: string): void {
    if (this.#closed) throw new LockClientClosedError(name);
  }
}

/** A named lock over the client's nodes. Cheap to create; many instances may name the same lock. */
export class QuorumLock {
  readonly name: string;
  readonly #nodes: QuorumNodes;

  /** @internal */
  constructor(nodes: QuorumNodes, name: string) {
    this.#nodes = nodes;
    this.name = name;
  }

  /**
   * Acquires the lock on a majority of nodes. Waits forever unless `waitTime` is given (then throws
   * LockAcquireTimeoutError when it runs out). Without `leaseTime` the lease is extended every third of
   * `watchdogTimeout` while it is held.
   */
  async acquire(options?: AcquireOptions): Promise<QuorumLease> {
    return this.#acquire(resolveQuorumAcquireOptions(options, this.#nodes.nodeTimeout));
  }

  #acquire(resolved: ResolvedAcquire): Promise<QuorumLease> {
    const observer = AcquireObserver.create(() => ({
      ...this.#identity(),
      owner: undefined,
      mode: resolved.leaseTime === -1 ? 'watchdog' : 'lease',
      leaseMs: this.#nodes.leaseMs(resolved),
      waitMs: resolved.waitTime,
    }));
    return traceAcquire(
      observer,
      resolved.signal,
      () => this.#nodes.take(this.name, resolved, observer),
      (hold) => ({ outcome: hold ? 'acquired' : 'timeout' }),
      (hold) => {
        if (!hold) throw new LockAcquireTimeoutError(this.name, resolved.waitTime ?? 0);
        return hold.lease;
      },
    );
  }

  /** The lock on the diagnostics channels; its key is the one every node has. */
  #identity(): LockIdentity {
    return { name: this.name, key: this.#nodes.keyOf(this.name), clientId: this.#nodes.clientId, kind: 'quorum' };
  }

  /** Runs `fn` holding the lock and releases it afterwards; `fn` gets the lease's signal and the lease. */
  async withLock<T>(
    fn: (signal: AbortSignal, lease: QuorumLease) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T> {
    checkFunction(fn, 'quorumLock.withLock(fn, options)');
    const resolved = resolveQuorumAcquireOptions(options, this.#nodes.nodeTimeout);
    const acquire = (): Promise<QuorumLease> => this.#acquire(resolved);
    // A quorum lease has no fencing token (each node counts its own).
    return scopedLease(this.#identity(), resolved, this.#nodes.leaseMs(resolved), acquire, () => undefined, fn);
  }
}

/** What one extension round found; `renewed` when a quorum holds the lease and its validity was renewed. */
interface ExtendRound {
  readonly renewed: boolean;
  readonly held: number;
  readonly unanswered: number;
}

/** A held quorum lease: its validity deadline, its extension timer, and its end. */
class QuorumHold {
  readonly name: string;
  readonly lease: QuorumLease;
  readonly #nodes: QuorumNodes;
  readonly #keys: LockKeys;
  readonly #owner: string;
  readonly #leaseMs: number;
  readonly #autoExtend: boolean;
  readonly #controller = new AbortController();
  #validUntil: number;
  #timer: NodeJS.Timeout | undefined;
  #ended = false;
  #extending: Promise<ExtendRound> | undefined;
  #released: Promise<void> | undefined;
  readonly #startedAt = monotonicNow();
  /** The `hold:start` message published for this lease: `hold:end` is owed. */
  #announced: HoldStartMessage | undefined;

  constructor(
    nodes: QuorumNodes,
    name: string,
    keys: LockKeys,
    owner: string,
    leaseMs: number,
    autoExtend: boolean,
    validUntil: number,
  ) {
    this.#nodes = nodes;
    this.name = name;
    this.#keys = keys;
    this.#owner = owner;
    this.#leaseMs = leaseMs;
    this.#autoExtend = autoExtend;
    this.#validUntil = validUntil;
    const release = (): Promise<void> => (this.#released ??= this.#release());
    this.lease = {
      name,
      signal: this.#controller.signal,
      validity: () => (this.#ended ? 0 : Math.max(0, this.#validUntil - monotonicNow())),
      extend: () => this.#extend(false),
      release,
      [Symbol.asyncDispose]: release,
    };
    this.#announced = holdStarted(() => ({
      name,
      key: keys.lockKey,
      clientId: nodes.clientId,
      kind: 'quorum',
      owner,
      fencingToken: 0n,
      mode: autoExtend ? 'watchdog' : 'lease',
      leaseMs,
    }));
    this.#schedule();
  }

  /** Publishes `hold:end`, once, if `hold:start` was published. */
  #announceEnd(reason: HoldEndReason, lossReason?: LossReason, error?: LockLostError): void {
    const started = this.#announced;
    this.#announced = undefined;
    holdEnded(started, this.#startedAt, reason, lossReason, error);
  }

  /** Why the validity ran out: nothing extended it in time (watchdog mode), or the fixed lease ended. */
  get #ranOut(): LossReason {
    return this.#autoExtend ? 'renewal_deadline' : 'lease_expired';
  }

  /** Neither released nor lost. */
  get active(): boolean {
    return !this.#ended;
  }

  /**
   * Auto-extension every third of the lease (watchdog mode), or a node timeout after an extension that fell
   * short of a quorum (`retrySoon`); either way the lease is declared lost when its validity ends before an
   * extension renewed it.
   */
  #schedule(retrySoon = false): void {
    if (this.#ended) return;
    if (this.#timer) clearTimeout(this.#timer);
    const atValidityEnd = this.#validUntil - monotonicNow();
    const period = retrySoon ? this.#nodes.nodeTimeout : this.#leaseMs / 3;
    const delay = this.#autoExtend ? Math.min(period, atValidityEnd) : atValidityEnd;
    // Created outside every flow: extensions and the loss they may declare belong to no caller's flow.
    this.#timer = outsideFlows(() =>
      clampedTimeout(() => {
        this.#timer = undefined;
        if (this.#validUntil <= monotonicNow()) {
          void this.end(new LockLostError(this.name, VALIDITY_RAN_OUT), this.#ranOut);
        } else if (this.#autoExtend) {
          // The extension schedules the next one, or ends the lease itself (its signal aborts).
          this.#extend(true).catch(() => undefined);
        } else {
          this.#schedule();
        }
      }, delay),
    );
    this.#timer.unref();
  }

  /**
   * An automatic extension that falls short of a quorum keeps the lease while validity remains, and tries
   * again a node timeout later: the missing answers may be a slow node or a stalled event loop, and the
   * validity won before still stands. An explicit extend() promises renewed validity or a LockLostError, so
   * short of a quorum it ends the lease. Either way the lease ends at once when the nodes that answered
   * leave no quorum possible (another owner holds the key there): no retry could make it valid again.
   */
  async #extend(automatic: boolean): Promise<void> {
    if (this.#ended) throw this.#notHeld();
    if (!this.#extending) {
      // Past its validity (a late timer, a call after a stall) the keys may be gone everywhere: re-asserting
      // them on free nodes would revive a lease that another owner may have taken meanwhile.
      if (this.#validUntil <= monotonicNow()) return this.#lost(VALIDITY_RAN_OUT, this.#ranOut);
      this.#extending = this.#extendRound().finally(() => (this.#extending = undefined));
    }
    const { renewed, held, unanswered } = await this.#extending;
    // Released or lost while the extension was out: it must not come back to life.
    if (!this.active) throw this.#notHeld();
    if (renewed) return;
    const nodes = this.#nodes.size;
    if (held + unanswered < this.#nodes.quorum) {
      return this.#lost(
        `an extension found another owner holding it on ${nodes - held - unanswered} of ${nodes} nodes`,
        'renewal_rejected',
      );
    }
    if (automatic) {
      this.#schedule(true);
      return;
    }
    return this.#lost(`an extension did not reach a quorum in time (${held} of ${nodes} nodes)`, 'renewal_deadline');
  }

  /** One extension on every node; renews the validity when a quorum holds the lease. */
  async #extendRound(): Promise<ExtendRound> {
    const sentAt = monotonicNow();
    const { held, unanswered } = await this.#nodes.extendEverywhere(
      this.#keys,
      this.#owner,
      this.#leaseMs,
      () => this.active,
    );
    const validUntil = sentAt + this.#leaseMs - driftMs(this.#leaseMs);
    const renewed = !this.#ended && held >= this.#nodes.quorum && validUntil > monotonicNow();
    if (renewed) {
      this.#validUntil = Math.max(this.#validUntil, validUntil);
      this.#schedule();
    }
    return { renewed, held, unanswered };
  }

  /** Ends the lease as lost and rejects with the LockLostError its signal aborted with. */
  async #lost(reason: string, lossReason: LossReason): Promise<never> {
    const error = new LockLostError(this.name, reason);
    await this.end(error, lossReason);
    throw error;
  }

  /**
   * Ends the lease: no more extensions, the signal aborts with `error`, and every node drops the key. An
   * extension still out re-asserts nothing from now on (see extendEverywhere).
   */
  async end(error: LockLostError, reason: LossReason | 'closed'): Promise<void> {
    if (!this.#lose(error, reason)) return;
    await this.#nodes.releaseEverywhere(this.#keys, this.#owner);
  }

  /** Marks the lease lost and aborts its signal; false if it had already ended. */
  #lose(error: LockLostError, reason: LossReason | 'closed'): boolean {
    if (!this.#stop()) return false;
    this.#abort(error);
    if (reason === 'closed') this.#announceEnd('closed', undefined, error);
    else this.#announceEnd('lost', reason, error);
    return true;
  }

  /** Aborts the lease's signal outside every flow, whoever noticed the loss (an extend() call, a timer). */
  #abort(error: LockLostError): void {
    outsideFlows(() => this.#controller.abort(error));
  }

  /** Ends the lease here: no more timers, and close() has nothing left to release; false if already ended. */
  #stop(): boolean {
    if (this.#ended) return false;
    this.#ended = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#nodes.forget(this);
    return true;
  }

  #release(): Promise<void> {
    const trace = releaseContext(
      { name: this.name, key: this.#keys.lockKey, clientId: this.#nodes.clientId, kind: 'quorum' },
      this.#owner,
    );
    return traceRelease(trace, async () => {
      if (!this.#stop()) throw this.#notHeld();
      try {
        const { released, notHeld } = await this.#nodes.releaseEverywhere(this.#keys, this.#owner);
        if (trace) {
          trace.freed = released > 0;
          trace.remaining = released > 0 ? 0 : -1;
          trace.heldMs = monotonicNow() - this.#startedAt;
        }
        if (released > 0) return;
        if (notHeld >= this.#nodes.quorum) {
          // A majority no longer had it (a fixed lease ran out unnoticed, the keys were deleted): it was lost.
          const error = new LockLostError(this.name, 'a majority of nodes did not hold it when it was released');
          this.#abort(error);
          this.#announceEnd('lost', 'not_held', error);
        }
        throw this.#notHeld();
      } finally {
        this.#announceEnd('released');
      }
    });
  }

  #notHeld(): LockNotHeldError {
    const lost: unknown = this.#controller.signal.aborted ? this.#controller.signal.reason : undefined;
    return new LockNotHeldError(this.name, lost === undefined ? undefined : { cause: lost });
  }
}

/**
 * The promise's value, or undefined when it rejects or takes longer than `ms` (it may still complete).
 * Timers run before the event loop reads sockets: after a stall (synchronous work, a long GC) the timeout is
 * due although the reply may be waiting to be read, so the I/O phase gets one turn before it counts.
 */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => setImmediate(() => resolve(undefined)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      () => {
        clearTimeout(timer);
        resolve(undefined);
      },
    );
  });
}

/** Waits for a release message on any node, or `timeoutMs`; rejects on abort or when the client closes. */
async function parkAny(waiters: readonly Waiter[], timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
  const stop = new AbortController();
  const combined = signal ? AbortSignal.any([signal, stop.signal]) : stop.signal;
  const parked = waiters.map((waiter) => waiter.park(timeoutMs, combined));
  try {
    await Promise.race(parked);
  } finally {
    stop.abort();
    await Promise.allSettled(parked);
  }
}

/**
 * Creates a quorum lock client over independent Redis masters (standalone clients of any supported library,
 * not replicas of one another, not a Cluster); an odd number, 3 or 5, is usual. The clients are never
 * modified or closed.
 */
export function createQuorumLockClient(nodes: readonly RedisClient[], options?: QuorumLockOptions): QuorumLockClient {
  const adapters = checkQuorumNodes(nodes).map((node, i) => {
    const adapter = adaptClient(node, `nodes[${i}]`);
    if (adapter.topology === 'cluster') {
      throw new TypeError(`nodes[${i}] must be a standalone Redis master, not a Cluster`);
    }
    return adapter;
  });
  const prefixes = new Set(adapters.map((adapter) => adapter.keyPrefix));
  if (prefixes.size > 1) throw new TypeError('nodes must all have the same client keyPrefix (or none)');
  return new QuorumLockClient(adapters, resolveQuorumOptions(options, adapters[0]?.keyPrefix ?? ''));
}
