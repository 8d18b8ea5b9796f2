/**
 * Waiting by pub/sub, for every primitive: one subscriber connection per client, one subscription per
 * channel while it has local waiters, and a FIFO of local waiters per channel that a message wakes as the
 * primitive's wake mode says (one waiter per lock release, every reader, as many permit waiters as the
 * permits announced can serve, every latch waiter at zero). Pub/sub only speeds waiting up: a lock wait is
 * also bounded by the holder's TTL, and after the subscriber reconnects (messages may have been lost) every
 * waiter is woken to try again.
 */
import { pubsubChannel, type PubSubMessage } from '../diagnostics/channels.js';
import type { AcquireObserver } from '../diagnostics/publish.js';
import { LockClientClosedError } from '../errors.js';
import type { PubSubMode, RedisAdapter, Subscriber } from '../redis/adapter.js';
import { clampedTimeout, monotonicNow } from '../time.js';

export type WakeReason = 'woken' | 'timeout';

/**
 * What a message on a channel wakes. 'one': one waiter (a lock release; a process's newcomers queue behind
 * its waiters). 'all': every waiter (the read-write lock's readers may all go in together). 'permits': the
 * message is a number of available permits, and waiters are woken in arrival order while their needs fit
 * in it; a waiter that does not fit stops the walk, so that smaller needs behind it do not overtake it.
 * 'zero': every waiter, on the message "0" only (a count-down latch opened).
 */
export type WakeMode = 'one' | 'all' | 'permits' | 'zero';

/** How a waiter enters a channel's queue. */
export interface EnterOptions {
  /** @default 'one' */
  readonly wake?: WakeMode;
  /** Permits this waiter needs ('permits' mode). @default 1 */
  readonly need?: number;
  /** The subscription outlives the last waiter by this long (a fair-lock waiter id that is reused). @default 0 */
  readonly lingerMs?: number;
  /** The waiter's name: a message on the queue's `direct` channel that names it wakes it. @default undefined */
  readonly id?: string;
  /**
   * A second channel of the queue, subscribed with it, whose messages each name the one waiter they wake
   * (the permit queue's channel of this client). @default undefined
   */
  readonly direct?: string;
  /** The name of what is waited for, shown by `LockClient.waits()`. @default the channel */
  readonly name?: string;
}

/** One channel's local waiters, as `LockClient.waits()` shows them. */
export interface WaitSnapshot {
  /** The lock, semaphore or latch waited for. */
  readonly name: string;
  /** The channel its waiters are woken on. */
  readonly channel: string;
  /** Waiters in this process. */
  readonly waiters: number;
  /**
   * Whether the channel is subscribed ('active'); 'pending' while it is being subscribed, or restored after
   * the subscriber's connection went down; 'failed' when subscribing failed (tried again at most once a second
   * while waiters wait). Until it is active, waiters re-check every second.
   */
  readonly subscription: 'pending' | 'active' | 'failed';
}

/**
 * How long a subscription that waiters of this process will likely need again stays open after its last
 * waiter (a fair-lock waiter id, a semaphore's channels): the next waiter then needs no SUBSCRIBE.
 */
export const LINGER_MS = 2000;

/** Bound on one wait while the channel's subscription is not (yet) active: pub/sub cannot wake us then. */
const UNSUBSCRIBED_WAIT_MS = 1000;

/**
 * Bound on one wait on a Cluster. Under sharded pub/sub Redis drops a shard channel's subscribers without a
 * word when its slot migrates, and the subscriber learns of it only at a slot refresh (node-redis 5 not at
 * all); a waiter re-checks meanwhile. A client that cannot subscribe to shard channels (iovalkey) listens on
 * classic ones, and there misses the releases of the Cluster's other clients, which announce on shard
 * channels (Redis 7): it re-checks as often.
 */
const CLUSTER_WAIT_MS = 2000;

class ChannelQueue {
  readonly waiters: Waiter[] = [];
  name = '';
  /** Monotonic time when the holder's lease runs out, as learned by the latest failed attempt. */
  holderExpiresAt = 0;
  /** Until the subscription is active a release could go unseen, so waits are bounded more tightly. */
  subscription: 'pending' | 'active' | 'failed' = 'pending';
  /** Monotonic time of the last subscribe tried again after a failure (see WaitQueues.retry). */
  retriedAt = -Infinity;

  /** Longest single wait while subscribed (sharded pub/sub can lose a subscription silently). */
  subscribedWaitMs = Infinity;
  wake: WakeMode = 'one';
  /** The queue's `direct` channel, if it has one. */
  direct: string | undefined;
  /** Keeps the subscription this long after the last waiter left (a fair-lock waiter id that is reused). */
  lingerMs = 0;
  lingerTimer: NodeJS.Timeout | undefined;

  /** The subscriber's connection went down: the subscription is pending until it is restored. */
  subscriptionLost(): void {
    if (this.subscription === 'active') this.subscription = 'pending';
  }

  /** Its subscribe is asked for again: pending meanwhile, and waiters try again (a release may have gone unseen). */
  subscriptionRetried(): void {
    this.subscription = 'pending';
    this.wakeAll();
  }

  /** The subscription became active (or failed): waiters try again, since a release may have gone unseen. */
  subscriptionSettled(active: boolean): void {
    this.subscription = active ? 'active' : 'failed';
    this.wakeAll();
  }

  /** A message arrived (or this process learned what one would say): wake waiters as the mode says. */
  dispatch(message: string): void {
    switch (this.wake) {
      case 'all':
        this.wakeAll();
        return;
      case 'zero':
        if (message === '0') this.wakeAll();
        return;
      case 'permits':
        this.wakeFitting(Number(message));
        return;
      case 'one':
        // A release: the first waiter in arrival order that has no wake yet gets it, parked or mid-attempt
        // (it then asks again at once, rather than a later waiter overtaking it). One that has one is skipped:
        // each release wakes another waiter.
        this.waiters.find((w) => !w.hasWake)?.wake();
    }
  }

  /**
   * Permits were announced on the semaphore's shared channel: wakes waiters in arrival order while their
   * needs fit in `available`, and the first one in any case (Redisson's messages are hints to try again,
   * and some carry a number of permits added, not the total available).
   */
  wakeFitting(available: number): void {
    let budget = Number.isFinite(available) ? available : 0;
    for (const [index, waiter] of this.waiters.entries()) {
      if (index > 0 && waiter.need > budget) return;
      budget -= waiter.need;
      waiter.wake();
    }
  }

  wakeAll(): void {
    for (const waiter of this.waiters) waiter.wake();
  }

  /** A message on the direct channel: wake the waiter it names. */
  wakeNamed(id: string): void {
    this.waiters.find((waiter) => waiter.id === id)?.wake();
  }

  /** A woken waiter left without using its wake: pass it on to the next. */
  passOn(): void {
    if (this.wake === 'one') this.dispatch('0');
    else if (this.wake === 'permits') this.waiters[0]?.wake();
  }
}

export class Waiter {
  readonly #queues: WaitQueues;
  readonly #channel: string;
  readonly #queue: ChannelQueue;
  /** Permits this waiter needs ('permits' mode). */
  readonly need: number;
  /** The waiter's name on its queue's direct channel. */
  readonly id: string | undefined;
  #settle: ((reason: WakeReason) => void) | undefined;
  #fail: ((error: unknown) => void) | undefined;
  /** Woken by a message that it has not yet acted on; passed on if it leaves without trying. */
  #unusedWake = false;
  /**
   * Woken while not parked (mid-attempt): the message may have followed the state its attempt in flight
   * read, so its next park returns at once.
   */
  #pendingWake = false;
  #left = false;

  constructor(queues: WaitQueues, channel: string, queue: ChannelQueue, need: number, id: string | undefined) {
    this.#queues = queues;
    this.#channel = channel;
    this.#queue = queue;
    this.need = need;
    this.id = id;
  }

  /** Whether a message woke this waiter and it has not yet attempted since. */
  get hasWake(): boolean {
    return this.#unusedWake;
  }

  /** Records what a failed attempt learned: the holder's PTTL in ms (-1: no expiry). */
  noteHolderTtl(pttl: number): void {
    this.#queue.holderExpiresAt = pttl < 0 ? Infinity : monotonicNow() + pttl;
  }

  /** Milliseconds until the holder's lease ends, as last learned by any waiter of this lock. */
  holderTtl(): number {
    return Math.max(0, this.#queue.holderExpiresAt - monotonicNow());
  }

  /** The waiter is about to try to acquire: any wake it got is used up. */
  attempting(): void {
    this.#unusedWake = false;
    this.#pendingWake = false;
  }

  /**
   * Waits for a release message (`'woken'`) or `timeoutMs` (`'timeout'`); rejects with the signal's
   * reason on abort, or with LockClientClosedError when the client closes.
   */
  park(timeoutMs: number, signal: AbortSignal | undefined): Promise<WakeReason> {
    if (this.#queues.closed) return Promise.reject(new LockClientClosedError(this.#queue.name));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#pendingWake) {
      this.#pendingWake = false;
      return Promise.resolve('woken');
    }
    if (this.#queue.subscription === 'failed') this.#queues.retry(this.#channel, this.#queue);
    const bound = Math.min(
      timeoutMs,
      this.#queue.subscription === 'active' ? this.#queue.subscribedWaitMs : UNSUBSCRIBED_WAIT_MS,
    );
    return new Promise<WakeReason>((resolve, reject) => {
      const timer = bound === Infinity ? undefined : clampedTimeout(() => finish('timeout'), bound);
      const onAbort = (): void => fail(signal?.reason);
      const cleanup = (): void => {
        if (timer) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#settle = undefined;
        this.#fail = undefined;
      };
      const finish = (reason: WakeReason): void => {
        cleanup();
        resolve(reason);
      };
      const fail = (error: unknown): void => {
        cleanup();
        reject(error);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#settle = finish;
      this.#fail = fail;
    });
  }

  wake(): void {
    this.#unusedWake = true;
    if (this.#settle) this.#settle('woken');
    else this.#pendingWake = true;
  }

  close(): void {
    this.#fail?.(new LockClientClosedError(this.#queue.name));
  }

  /** Leaves the queue; the last waiter of a channel drops its subscription. Idempotent. */
  leave(): void {
    if (this.#left) return;
    this.#left = true;
    const waiters = this.#queue.waiters;
    const index = waiters.indexOf(this);
    if (index !== -1) waiters.splice(index, 1);
    if (waiters.length === 0) this.#queues.drop(this.#channel, this.#queue);
    else if (this.#unusedWake) this.#queue.passOn();
  }
}

/** How long after waking waiters elsewhere a newcomer of this process yields to them. */
const YIELD_WINDOW_MS = 5;

export class WaitQueues {
  readonly #redis: RedisAdapter;
  readonly #pubsubMode: () => Promise<PubSubMode>;
  readonly #queues = new Map<string, ChannelQueue>();
  /** Direct channels (see EnterOptions) and their queues. */
  readonly #direct = new Map<string, ChannelQueue>();
  /** Waiter slots in use, per lock: fair-lock waiters reuse ids (and their subscriptions). */
  readonly #slots = new Map<string, Set<number>>();
  /** Channels whose lock this process just freed while waiters in other processes were listening. */
  readonly #othersWokenAt = new Map<string, number>();
  #subscriber: Subscriber | undefined;
  /** The subscriber's pub/sub mode, once known (for the diagnostics channel). */
  #mode: PubSubMode | undefined;
  #closed = false;
  readonly #clientId: string;

  constructor(redis: RedisAdapter, pubsubMode: () => Promise<PubSubMode>, clientId: string) {
    this.#redis = redis;
    this.#pubsubMode = pubsubMode;
    this.#clientId = clientId;
  }

  /** Every channel with local waiters (or a lingering subscription), for `LockClient.waits()`. No I/O. */
  snapshot(): WaitSnapshot[] {
    return [...this.#queues].map(([channel, queue]) => ({
      name: queue.name,
      channel,
      waiters: queue.waiters.length,
      subscription: queue.subscription,
    }));
  }

  /** Publishes the subscriber's state on `flowlock:pubsub`, when anyone listens. */
  #publish(event: PubSubMessage['event'], extra: { channel?: string; error?: unknown } = {}): void {
    if (!pubsubChannel.hasSubscribers) return;
    const message: PubSubMessage = {
      clientId: this.#clientId,
      event,
      mode: this.#mode,
      channels: this.#queues.size,
      ...(extra.channel === undefined ? {} : { channel: extra.channel }),
      ...(extra.error === undefined ? {} : { error: extra.error }),
    };
    pubsubChannel.publish(message);
  }

  get closed(): boolean {
    return this.#closed;
  }

  hasWaiters(channel: string): boolean {
    return (this.#queues.get(channel)?.waiters.length ?? 0) > 0;
  }

  /**
   * Whether `channel` has a queue here (subscribed, or subscribing). A waiter that joins one after its
   * attempt may have missed a message the queue's other waiters got meanwhile: it asks once more.
   */
  hasQueue(channel: string): boolean {
    return this.#queues.has(channel);
  }

  /** Whether `channel` is subscribed right now (a message published from now on reaches this process). */
  isSubscribed(channel: string): boolean {
    return this.#queues.get(channel)?.subscription === 'active';
  }

  /** The lowest waiter slot of `key` not in use by this client; give it back with `releaseSlot`. */
  takeSlot(key: string): number {
    let used = this.#slots.get(key);
    if (!used) this.#slots.set(key, (used = new Set()));
    let slot = 0;
    while (used.has(slot)) slot++;
    used.add(slot);
    return slot;
  }

  releaseSlot(key: string, slot: number): void {
    const used = this.#slots.get(key);
    used?.delete(slot);
    if (used?.size === 0) this.#slots.delete(key);
  }

  /** This process freed the lock on `channel`; its release message reached `woken` subscriber connections. */
  released(channel: string, woken: number): void {
    // A hint, not a count of waiters: our own subscription counts only once it is confirmed.
    const local = this.#queues.get(channel)?.subscription === 'active' ? 1 : 0;
    if (woken <= local) return;
    if (this.#othersWokenAt.size >= 1024) {
      const now = monotonicNow();
      for (const [key, at] of this.#othersWokenAt) if (now - at > YIELD_WINDOW_MS) this.#othersWokenAt.delete(key);
    }
    this.#othersWokenAt.set(channel, monotonicNow());
  }

  /** Whether this process freed the lock moments ago for waiters elsewhere (a newcomer should let them in). */
  othersWoken(channel: string): boolean {
    const at = this.#othersWokenAt.get(channel);
    if (at === undefined) return false;
    if (monotonicNow() - at <= YIELD_WINDOW_MS) return true;
    this.#othersWokenAt.delete(channel);
    return false;
  }

  /** Joins the FIFO of `channel`, subscribing to it when this is its first waiter. */
  enter(channel: string, { wake = 'one', need = 1, lingerMs = 0, id, direct, name }: EnterOptions = {}): Waiter {
    let queue = this.#queues.get(channel);
    if (queue?.lingerTimer) {
      clearTimeout(queue.lingerTimer);
      queue.lingerTimer = undefined;
    }
    if (!queue) {
      const created = new ChannelQueue();
      created.name = name ?? channel;
      created.wake = wake;
      created.lingerMs = lingerMs;
      created.direct = direct;
      this.#queues.set(channel, created);
      if (direct !== undefined) this.#direct.set(direct, created);
      this.#subscribe(channel, created);
      queue = created;
    }
    const waiter = new Waiter(this, channel, queue, need, id);
    queue.waiters.push(waiter);
    return waiter;
  }

  /**
   * A waiter parks on `queue`, whose subscribe failed: subscribe again, at most once per UNSUBSCRIBED_WAIT_MS
   * (the waiters re-check as often meanwhile). Another failure wakes nobody (they would attempt and park again
   * at once); success wakes them, as any subscription's does. A subscriber that failed for a moment (a GLIDE
   * subscriber whose creation met a server down, issue 38) so serves its waiters again without their leaving.
   */
  retry(channel: string, queue: ChannelQueue): void {
    if (this.#closed || this.#queues.get(channel) !== queue) return;
    const now = monotonicNow();
    if (now - queue.retriedAt < UNSUBSCRIBED_WAIT_MS) return;
    queue.retriedAt = now;
    queue.subscription = 'pending';
    this.#subscribe(channel, queue, true);
  }

  /**
   * Subscribes to the channels of `queue` (again, after its subscribe failed), and settles it; `quietly`: a
   * failure wakes no waiter.
   */
  #subscribe(channel: string, queue: ChannelQueue, quietly = false): void {
    this.#pubsubMode()
      .then(async (mode) => {
        this.#mode = mode;
        if (this.#redis.topology === 'cluster') queue.subscribedWaitMs = CLUSTER_WAIT_MS;
        if (mode === 'sharded') {
          // A slot migration can drop a shard channel's subscription unseen, and one kept across waits
          // would then stay lost (every wake-up left to the re-check): each wait subscribes afresh, which
          // reaches the slot's current owner.
          queue.lingerMs = 0;
        }
        // Closed, or every waiter left, while the mode was looked up: no connection, no stale subscription.
        if (this.#closed || this.#queues.get(channel) !== queue) return;
        const { direct } = queue;
        await this.#connection(mode).subscribe(direct === undefined ? [channel] : [channel, direct]);
      })
      .then(
        () => {
          queue.subscriptionSettled(true);
          this.#publish('subscribed', { channel });
        },
        (error: unknown) => {
          if (quietly) queue.subscription = 'failed';
          else queue.subscriptionSettled(false);
          this.#publish('failed', { channel, error });
        },
      );
  }

  /** Called by the last waiter of a channel as it leaves. */
  drop(channel: string, queue: ChannelQueue): void {
    if (this.#queues.get(channel) !== queue) return;
    if (queue.lingerMs > 0 && !this.#closed && !queue.lingerTimer) {
      queue.lingerTimer = clampedTimeout(() => {
        queue.lingerTimer = undefined;
        if (queue.waiters.length === 0) this.#unsubscribe(channel, queue);
      }, queue.lingerMs);
      queue.lingerTimer.unref();
      return;
    }
    this.#unsubscribe(channel, queue);
  }

  #unsubscribe(channel: string, queue: ChannelQueue): void {
    if (this.#queues.get(channel) !== queue) return;
    this.#queues.delete(channel);
    const channels = [channel];
    if (queue.direct !== undefined) {
      this.#direct.delete(queue.direct);
      channels.push(queue.direct);
    }
    if (!this.#closed) this.#subscriber?.unsubscribe(channels).catch(() => undefined);
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const queue of this.#queues.values()) {
      if (queue.lingerTimer) clearTimeout(queue.lingerTimer);
      for (const waiter of [...queue.waiters]) waiter.close();
    }
    this.#queues.clear();
    this.#direct.clear();
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    subscriber?.close();
    if (subscriber) this.#publish('closed');
    await Promise.resolve();
  }

  #connection(mode: PubSubMode): Subscriber {
    this.#subscriber ??= this.#redis.openSubscriber(mode, {
      message: (channel, message) => {
        const queue = this.#queues.get(channel);
        if (queue) queue.dispatch(message);
        else this.#direct.get(channel)?.wakeNamed(message);
      },
      // Messages may have been lost meanwhile: every waiter tries again. A queue whose own subscribe failed
      // (its reply lost with the connection, say) is in none of the subscriber's restored subscriptions:
      // it subscribes again, its waiters re-checking meanwhile, rather than be taken for subscribed.
      restored: (subscribed) => {
        if (this.#closed) return;
        for (const [channel, queue] of this.#queues) {
          if (subscribed && queue.subscription === 'failed') {
            queue.subscriptionRetried();
            this.#subscribe(channel, queue);
          } else {
            queue.subscriptionSettled(subscribed);
          }
        }
        this.#publish(subscribed ? 'restored' : 'failed');
      },
      lost: () => {
        if (this.#closed) return;
        for (const queue of this.#queues.values()) queue.subscriptionLost();
      },
    });
    return this.#subscriber;
  }
}

/** What one attempt found: done (with its value), or not yet, and then how long at most to park before asking again. */
export type Attempt<T> =
  { readonly done: true; readonly value: T } | { readonly done: false; readonly retryInMs?: number };

/**
 * The wait of the counted primitives (semaphores, the latch): attempt; after a failed attempt join the
 * channel's queue (subscribing), attempt once more, then park until a message wakes this waiter, the
 * attempt's retry hint or `deadline` (monotonic ms), and attempt again, until done or the deadline.
 * Resolves to the done attempt's value, or undefined at the deadline; rejects with the signal's reason or a
 * close. `observer` is told of the attempts and waits (for the diagnostics channels).
 */
export async function waitFor<T>(
  waits: WaitQueues,
  channel: string,
  entry: EnterOptions,
  deadline: number,
  signal: AbortSignal | undefined,
  attempt: () => Promise<Attempt<T>>,
  observer?: AcquireObserver,
): Promise<T | undefined> {
  // Already listening, or about to (a subscription that lingers, or another waiter's): joining before the
  // first attempt catches a message that follows it (or the subscription's settling wakes it to ask again).
  let waiter = waits.hasQueue(channel) ? waits.enter(channel, entry) : undefined;
  let attempted = false;
  let retryInMs = Infinity;
  try {
    for (;;) {
      if (waiter && attempted) {
        const remaining = deadline - monotonicNow();
        if (remaining > 0) {
          observer?.waiting(retryInMs === Infinity ? -1 : retryInMs);
          const woke = await waiter.park(Math.min(remaining, retryInMs), signal);
          observer?.woke(woke);
        }
        if (deadline - monotonicNow() <= 0) return undefined;
        waiter.attempting();
      }
      observer?.attempted();
      const result = await attempt();
      attempted = true;
      if (result.done) return result.value;
      observer?.contended();
      if (deadline - monotonicNow() <= 0) return undefined;
      retryInMs = result.retryInMs ?? Infinity;
      if (!waiter) {
        // A queue that appeared during the attempt may have had its message already (the count reached
        // zero, permits announced) before this waiter was in it: ask again at once rather than park.
        const late = waits.hasQueue(channel);
        waiter = waits.enter(channel, entry);
        if (late) attempted = false;
      }
    }
  } finally {
    waiter?.leave();
  }
}
