/**
 * `watchLocks`: a live log of acquisitions, releases and expirations. Its sources, in order of precedence:
 * - polling: the watched names are read again every `intervalMs` (globs by a SCAN, as `listLocks` does), and
 *   holders that appeared or left since the last read become events; a holder that left without a release
 *   message, at about the time its lease would have run out, is reported as expired (inferred);
 * - release messages: a lock's release channel (the release scripts publish there) makes its name be read
 *   at once, so that a release and the next acquisition show without waiting for the poll: classic channels
 *   by pattern under the prefix, and on a Redis 7+ Cluster the shard channels of the named locks;
 * - keyspace notifications (`events`): `expired` and `evicted` of a lock key are the server's own proof that
 *   a lease ran out without a release (a crash or a lost lease) or that memory pressure took it, and the hash
 *   commands that create a hold (`hset`, `hincrby`) make its name be read at once, so that its holder is seen
 *   even when it holds for less than `intervalMs`. They are node-local, so every master is subscribed; they
 *   need `notify-keyspace-events` to include `E` and `x` (`e` for evictions, `h` for hash commands), which is
 *   off by default: a `notice` event says so.
 * A hold that began and ended between two reads of its name (its holder was never read) is still reported,
 * as a `brief` event without a holder, when a read finds its trace: a plain lock's release message (one per
 * ended hold), or, for a name that still has an earlier version's per-name fencing counter (a rolling
 * upgrade), a counter that moved with no new holder to account for it. A free lock keeps nothing else: a fair
 * lock's brief hold with nobody waiting publishes nothing and is seen only through keyspace events.
 */
import { checkLockName, describe, type RedisClient } from '../options.js';
import type { AdminListener, AdminNode } from '../redis/adapter.js';
import { fairLockKeys, lockKeys, readWriteLockKeys } from '../redis/keys.js';
import { familyKeys, readLock, type LockInfo } from './inspect.js';
import { listLocks } from './list.js';
import { escapeGlob, globToRegExp, isGlob, type Holder, type LockKind } from './shape.js';
import {
  adminTarget,
  checkCount,
  configGet,
  checkOptions,
  notifiesExpiry,
  notifiesHashes,
  refusalOf,
  type AdminTarget,
} from './target.js';

/** Options of `watchLocks`. */
export interface WatchOptions {
  /** The lock clients' `keyPrefix` (after the Redis client's own, as for `createLockClient`). @default '' */
  readonly prefix?: string;
  /** Lock names or Redis globs on names. @default ['*'] (every lock under the prefix) */
  readonly names?: readonly string[];
  /** Milliseconds between two reads of the watched names (at least 50). @default 2000 */
  readonly intervalMs?: number;
  /**
   * Subscribe to keyspace notifications (`expired`, `evicted`, `del`, and `hset`/`hincrby` to read a name as
   * soon as a hold is created) on every master. @default false
   */
  readonly events?: boolean;
  /** SCAN's COUNT when a glob is polled. @default 1000 */
  readonly count?: number;
  /** Ends the iteration (it then completes normally). @default none: until the consumer stops */
  readonly signal?: AbortSignal;
}

interface EventBase {
  /** When this watcher saw it (ISO 8601, local clock). */
  readonly time: string;
}

/** A holder found by the first read (not an acquisition seen happening). */
export interface HeldEvent extends EventBase {
  readonly type: 'held';
  readonly name: string;
  readonly kind: LockKind | null;
  readonly holder: Holder;
  readonly fencingToken: string | null;
}

/** A new holder. */
export interface AcquiredEvent extends EventBase {
  readonly type: 'acquired';
  readonly name: string;
  readonly kind: LockKind | null;
  readonly holder: Holder;
  /** The new hold's fencing token (null for a read hold). */
  readonly fencingToken: string | null;
}

/** A holder gone by a release (a release message came, or its lease had time left). */
export interface ReleasedEvent extends EventBase {
  readonly type: 'released';
  readonly name: string;
  readonly owner: string;
  /** How long it was held, when its holder info said since when. */
  readonly heldMs: number | null;
}

/** A lease that ran out without a release (or a key that memory pressure evicted). */
export interface ExpiredEvent extends EventBase {
  readonly type: 'expired' | 'evicted';
  readonly name: string;
  /** The holder that lost it, if this watcher had seen it; null otherwise. */
  readonly owner: string | null;
  /** `keyspace`: the server's notification; `ttl`: gone without a release message when its lease ran out. */
  readonly proof: 'keyspace' | 'ttl';
}

/**
 * Holds that began and ended between two reads of the name: their holders were never read. `holds` is a lower
 * bound: a plain lock's release messages count its ended holds one by one, but a fencing counter that moved
 * tells only that at least one hold came and went (fair locks without waiters publish nothing).
 */
export interface BriefEvent extends EventBase {
  readonly type: 'brief';
  readonly name: string;
  readonly kind: LockKind | null;
  /** At least this many holds (1 or more). */
  readonly holds: number;
  /** The fencing token a read found for the name (an earlier version's per-name counter), if any. */
  readonly fencingToken: string | null;
  /** `message`: release messages with no holder read to match them; `fencing`: a per-name counter moved. */
  readonly proof: 'message' | 'fencing';
}

/** Something the watcher cannot do as asked (keyspace notifications off, or unknown). */
export interface NoticeEvent extends EventBase {
  readonly type: 'notice';
  readonly message: string;
}

/** One line of `flowlock watch`: what `watchLocks` yields. */
export type WatchEvent = HeldEvent | AcquiredEvent | ReleasedEvent | BriefEvent | ExpiredEvent | NoticeEvent;

/**
 * What told the watcher that a name changed since a read took its signals: `freed` counts release messages
 * and deletions, `ended` the release messages of a plain lock (one per ended hold).
 */
interface Signals {
  freed: number;
  ended: number;
}

/** What the watcher knows of a held name. */
interface Known {
  readonly info: LockInfo;
  /** performance.now() of the read. */
  readonly at: number;
}

/** A lease this close to its end (ms) when its holder vanished without a release message counts as run out. */
const EXPIRY_MARGIN_MS = 250;

/**
 * How long (ms) after a read reported a plain lock's release its release message may still come. The release
 * script deletes the key (a `del` notification, on another connection) and publishes in one step: a read the
 * notification made can finish before the message, which then belongs to a hold already reported, not to a
 * brief one.
 */
const LATE_MESSAGE_MS = 5000;

const now = (): string => new Date().toISOString();

class Watcher {
  readonly #target: AdminTarget;
  readonly #client: RedisClient;
  readonly #prefixOption: string | undefined;
  readonly #explicit: readonly string[];
  readonly #globs: readonly string[];
  readonly #patterns: readonly RegExp[];
  readonly #intervalMs: number;
  readonly #count: number;
  readonly #known = new Map<string, Known>();
  /**
   * Per name, the signals no read has taken yet. A read takes those that came before it was sent: one that
   * comes while it is in flight may be of a change the read does not show (a hold it finds and that ended
   * meanwhile), and is left to the read it queues.
   */
  readonly #signals = new Map<string, Signals>();
  /**
   * Per name, performance.now() of each plain-lock release a read reported before its release message came:
   * a message within LATE_MESSAGE_MS of it is that release's, not a brief hold's.
   */
  readonly #owed = new Map<string, number[]>();
  /** The fencing token of each name at its last read that had one. */
  readonly #tokens = new Map<string, string>();
  /** Names with a read queued and not started: more signals before it need no read of their own. */
  readonly #queued = new Set<string>();
  /** With keyspace notifications: names whose expiry a read inferred, and when (the notification may follow). */
  readonly #inferred = new Map<string, number>();
  #keyspace = false;
  readonly #connections: AdminListener[] = [];
  readonly #events: WatchEvent[] = [];
  #wake: (() => void) | undefined;
  #failure: { readonly error: unknown } | undefined;
  #stopped = false;
  #first = true;
  #timer: NodeJS.Timeout | undefined;
  /** Reads and comparisons run one at a time, in order. */
  #work: Promise<void> = Promise.resolve();

  constructor(
    target: AdminTarget,
    client: RedisClient,
    prefixOption: string | undefined,
    names: readonly string[],
    intervalMs: number,
    count: number,
  ) {
    this.#target = target;
    this.#client = client;
    this.#prefixOption = prefixOption;
    this.#explicit = names.filter((name) => !isGlob(name));
    this.#globs = names.filter(isGlob);
    this.#patterns = this.#globs.map(globToRegExp);
    this.#intervalMs = intervalMs;
    this.#count = count;
  }

  async start(events: boolean): Promise<void> {
    await this.#subscribe();
    this.#keyspace = events;
    if (events) await this.#subscribeKeyspace();
    await this.#poll();
  }

  /** The next event; undefined once stopped. Rejects with a failure of the background work. */
  async next(): Promise<WatchEvent | undefined> {
    for (;;) {
      if (this.#failure) throw this.#failure.error;
      const event = this.#events.shift();
      if (event) return event;
      if (this.#stopped) return undefined;
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    for (const connection of this.#connections.splice(0)) connection.close();
    this.#wake?.();
  }

  #emit(event: WatchEvent): void {
    this.#events.push(event);
    this.#wake?.();
  }

  #fail(error: unknown): void {
    this.#failure ??= { error };
    this.stop();
  }

  #watched(name: string): boolean {
    return this.#explicit.includes(name) || this.#patterns.some((pattern) => pattern.test(name));
  }

  #enqueue(task: () => Promise<void> | void): void {
    this.#work = this.#work.then(async () => {
      if (!this.#stopped) await task();
    });
    this.#work.catch((error: unknown) => this.#fail(error));
  }

  /** Reads every watched name, compares, and plans the next read. */
  async #poll(): Promise<void> {
    const taken = new Map([...this.#signals].map(([name, signals]) => [name, { ...signals }]));
    const read = new Map<string, LockInfo>();
    for (const info of await Promise.all(this.#explicit.map((name) => readLock(this.#target, name)))) {
      read.set(info.name, info);
    }
    for (const glob of this.#globs) {
      const options = {
        match: glob,
        count: this.#count,
        ...(this.#prefixOption === undefined ? {} : { prefix: this.#prefixOption }),
      };
      for await (const info of listLocks(this.#client, options)) read.set(info.name, info);
    }
    const at = performance.now();
    // A held name no read returned is free now.
    for (const name of this.#known.keys()) if (!read.has(name)) this.#compare(name, undefined, at, taken.get(name));
    for (const [name, info] of read) this.#compare(name, info, at, taken.get(name));
    // Names no read returns again (a glob's free names) keep no release waiting for its message for ever.
    for (const [name, owed] of this.#owed) {
      if (owed.every((since) => at - since >= LATE_MESSAGE_MS)) this.#owed.delete(name);
    }
    this.#first = false;
    if (!this.#stopped) {
      this.#timer = setTimeout(() => this.#enqueue(() => this.#poll()), this.#intervalMs);
    }
  }

  /** Reads one name again now (after its release message). */
  async #reread(name: string): Promise<void> {
    const signals = this.#signals.get(name);
    const taken = signals && { ...signals };
    const info = await readLock(this.#target, name);
    this.#compare(name, info, performance.now(), taken);
  }

  /**
   * Events for the difference between what was known of `name` and `info` (undefined: free); `taken`: the
   * signals of the name that came before the read was sent, which it accounts for.
   */
  #compare(name: string, info: LockInfo | undefined, at: number, taken: Signals | undefined): void {
    const before = this.#known.get(name);
    const previous = before?.info.owners ?? [];
    const current = info?.held ? info.owners : [];
    const messaged = (taken?.freed ?? 0) > 0;
    const messages = taken?.ended ?? 0;
    const left = this.#signals.get(name);
    if (left && taken) {
      // (Fewer are left than were taken when a keyspace notification dropped the name's signals meanwhile.)
      left.freed = Math.max(0, left.freed - taken.freed);
      left.ended = Math.max(0, left.ended - taken.ended);
      if (left.freed === 0) this.#signals.delete(name);
    }
    const gone = previous.filter((holder) => !current.some((c) => c.owner === holder.owner));
    const fresh = current.filter((holder) => !previous.some((p) => p.owner === holder.owner));
    let released = 0;
    for (const holder of gone) {
      const elapsed = before ? at - before.at : 0;
      const lease = holder.leaseMs ?? before?.info.ttlMs ?? null;
      if (!messaged && lease !== null && lease - elapsed <= EXPIRY_MARGIN_MS) {
        if (this.#keyspace) this.#inferred.set(name, at);
        this.#emit({ type: 'expired', time: now(), name, owner: holder.owner, proof: 'ttl' });
      } else {
        released += 1;
        const heldMs = holder.heldMs === null ? null : Math.round(holder.heldMs + elapsed);
        this.#emit({ type: 'released', time: now(), name, owner: holder.owner, heldMs });
      }
    }
    const unmatched = this.#settleOwed(name, messages - gone.length, before?.info.kind === 'lock' ? released : 0, at);
    this.#brief(name, info, unmatched, fresh.length > 0);
    for (const holder of fresh) {
      const kind = info?.kind ?? null;
      const fencingToken = info?.fencingToken ?? null;
      this.#emit({ type: this.#first ? 'held' : 'acquired', time: now(), name, kind, holder, fencingToken });
    }
    if (info && current.length > 0) this.#known.set(name, { info, at });
    else this.#known.delete(name);
  }

  /**
   * Matches release messages with plain-lock releases reported before them: `surplus` release messages this
   * read's released holders do not account for (negative: holders with no message yet), `released` the plain
   * lock's releases it reported. Returns the messages left for brief holds.
   */
  #settleOwed(name: string, surplus: number, released: number, at: number): number {
    const owed = (this.#owed.get(name) ?? []).filter((since) => at - since < LATE_MESSAGE_MS);
    let left = surplus;
    while (left > 0 && owed.length > 0) {
      owed.shift();
      left -= 1;
    }
    for (let i = Math.min(released, -left); i > 0; i -= 1) owed.push(at);
    if (owed.length > 0) this.#owed.set(name, owed);
    else this.#owed.delete(name);
    return left;
  }

  /**
   * Reports the holds of `name` that began and ended since its last read (see BriefEvent): `unmatched` release
   * messages that no holder read before accounts for, or a fencing counter that moved with no new holder to
   * have drawn the token (`acquired`: some holder is new). Where the name has a fencing counter, a counter that
   * did not move means no fresh hold since the last read: messages still unmatched then belong to holds an
   * earlier read already reported (they may arrive after that read).
   */
  #brief(name: string, info: LockInfo | undefined, unmatched: number, acquired: boolean): void {
    const token = info?.fencingToken ?? null;
    const last = this.#tokens.get(name);
    if (token !== null) this.#tokens.set(name, token);
    if (this.#first) return;
    const byMessages = Math.max(0, unmatched);
    let holds = byMessages;
    let proof: BriefEvent['proof'] = 'message';
    if (token !== null && last !== undefined) {
      if (token === last) holds = 0;
      else if (!acquired && byMessages === 0) [holds, proof] = [1, 'fencing'];
    }
    if (holds === 0) return;
    this.#emit({ type: 'brief', time: now(), name, kind: info?.kind ?? null, holds, fencingToken: token, proof });
  }

  /** A lock key expired or was evicted (keyspace notification). */
  #lost(name: string, type: 'expired' | 'evicted'): void {
    const inferredAt = this.#inferred.get(name);
    this.#inferred.delete(name);
    // Already reported by a read that found the holder gone at the end of its lease.
    if (inferredAt !== undefined && performance.now() - inferredAt < 2 * this.#intervalMs + 1000) return;
    const owners = this.#known.get(name)?.info.owners ?? [];
    this.#known.delete(name);
    this.#signals.delete(name);
    this.#owed.delete(name);
    if (owners.length === 0) this.#emit({ type, time: now(), name, owner: null, proof: 'keyspace' });
    for (const holder of owners) this.#emit({ type, time: now(), name, owner: holder.owner, proof: 'keyspace' });
  }

  /**
   * Something freed `name` (a release message, a deletion; `holdEnded`: a message on a plain lock's channel,
   * sent once per ended hold): read it again at once.
   */
  #changed(name: string, holdEnded = false): void {
    if (!this.#watched(name)) return;
    const signals = this.#signals.get(name) ?? { freed: 0, ended: 0 };
    signals.freed += 1;
    if (holdEnded) signals.ended += 1;
    this.#signals.set(name, signals);
    this.#readSoon(name);
  }

  /** Reads `name` again as soon as the reads before are done, unless such a read is queued already. */
  #readSoon(name: string): void {
    if (!this.#watched(name) || this.#queued.has(name)) return;
    this.#queued.add(name);
    this.#enqueue(() => {
      this.#queued.delete(name);
      return this.#reread(name);
    });
  }

  /**
   * Whether a message on `channel` tells that a hold of `name` ended: a plain lock's channel carries only
   * that (its release and force-unlock scripts), where a fair waiter's or a read-write lock's channel also
   * carries the wake of a waiter that gave up.
   */
  #endsHold(name: string, channel: string): boolean {
    return lockKeys(this.#target.prefix, name, this.#target.cluster).channel === channel;
  }

  /** The lock name whose release channel is `channel` (plain, fair waiter's, or read-write), if any. */
  #nameOfChannel(channel: string): string | undefined {
    const { prefix, cluster } = this.#target;
    for (const word of ['redisson_lock__channel:', 'redisson_rwlock:']) {
      const head = prefix + word;
      if (!channel.startsWith(head)) continue;
      const rest = channel.slice(head.length);
      const close = rest.indexOf('}');
      // Candidates: the name in braces (Redisson's `word:{name}`), the lock key after a slot tag (the
      // Cluster variant), the rest as it is or cut at a colon (a name with braces of its own, a fair
      // waiter's suffix); keys.ts confirms one.
      const candidates = [
        ...(rest.startsWith('{') && close > 0 ? [rest.slice(1, close)] : []),
        ...(close > 0 && rest[close + 1] === ':' && rest.startsWith(prefix, close + 2)
          ? [rest.slice(close + 2 + prefix.length)]
          : []),
        rest,
        ...[...rest.matchAll(/:/g)].map((match) => rest.slice(0, match.index)),
      ];
      for (const name of candidates) {
        if (name === '') continue;
        if (
          lockKeys(prefix, name, cluster).channel === channel ||
          readWriteLockKeys(prefix, name, cluster).channel === channel ||
          channel.startsWith(`${fairLockKeys(prefix, name, cluster).channel}:`)
        ) {
          return name;
        }
      }
    }
    return undefined;
  }

  /** A connection of the watcher's own to `node`, whose messages go to `onMessage`; closed by stop(). */
  #open(node: AdminNode, onMessage: (channel: string, message: string) => void): AdminListener {
    const connection = node.listen({
      message: onMessage,
      closed: () => {
        if (!this.#stopped) this.#fail(new Error('a subscriber connection closed'));
      },
    });
    this.#connections.push(connection);
    return connection;
  }

  /**
   * Classic release messages under the prefix, by pattern (a Cluster broadcasts classic messages to every
   * node, so one connection hears them all), and on a Redis 7+ Cluster the named locks' shard channels on
   * their masters (shard channels have no patterns).
   */
  async #subscribe(): Promise<void> {
    const target = this.#target;
    const [first] = await target.nodes.masters();
    if (!first) return;
    const onRelease = (channel: string): void => {
      const name = this.#nameOfChannel(channel);
      if (name !== undefined) this.#changed(name, this.#endsHold(name, channel));
    };
    const classic = this.#open(first, onRelease);
    const escaped = escapeGlob(target.prefix);
    const unheard = 'release messages unheard';
    const polled = 'releases and new holders show at the next read';
    await this.#subscribeOrSay(
      classic,
      () => classic.psubscribe([`${escaped}redisson_lock__channel:*`, `${escaped}redisson_rwlock:*`]),
      (refused) => `${unheard} (PSUBSCRIBE refused on ${first.address}: ${refused}): ${polled}`,
    );
    if (!target.cluster || (await target.scripts.pubsubMode()) !== 'sharded') return;
    // SSUBSCRIBE takes channels of one slot: one call per name (its channels share its slot).
    const byMaster = new Map<string, { node: AdminNode; slots: string[][] }>();
    for (const name of this.#explicit) {
      const keys = familyKeys(target, name);
      const master = await target.nodes.masterOf(keys.lock.lockKey);
      const entry = byMaster.get(master.address) ?? { node: master, slots: [] };
      entry.slots.push([keys.lock.channel, keys.readWrite.channel]);
      byMaster.set(master.address, entry);
    }
    for (const { node, slots } of byMaster.values()) {
      const sharded = this.#open(node, onRelease);
      await this.#subscribeOrSay(
        sharded,
        async () => {
          for (const channels of slots) await sharded.ssubscribe(channels);
        },
        (refused) => `shard ${unheard} (SSUBSCRIBE refused on ${node.address}: ${refused}): ${polled}`,
      );
    }
  }

  /**
   * Runs `subscribe` on `connection`; where the server refuses it (an ACL without the channels, a provider
   * without pub/sub), closes the connection and emits a notice of what goes unheard (`notice`), instead of
   * failing: the reads every `intervalMs` still see every change.
   */
  async #subscribeOrSay(
    connection: AdminListener,
    subscribe: () => Promise<void>,
    notice: (refused: string) => string,
  ): Promise<void> {
    try {
      await subscribe();
    } catch (error) {
      const refused = refusalOf(error);
      if (refused === undefined) throw error;
      this.#connections.splice(this.#connections.indexOf(connection), 1);
      connection.close();
      this.#emit({ type: 'notice', time: now(), message: notice(refused) });
    }
  }

  /** Keyspace notifications of every master (they are node-local), where `notify-keyspace-events` allows. */
  async #subscribeKeyspace(): Promise<void> {
    const target = this.#target;
    const db = target.nodes.database;
    for (const master of await target.nodes.masters()) {
      const flags = await configGet(master, 'notify-keyspace-events');
      const at = master.address;
      const expiry = flags === undefined || notifiesExpiry(flags);
      const hashes = flags === undefined || notifiesHashes(flags);
      const notice = (message: string): void => this.#emit({ type: 'notice', time: now(), message });
      if (flags === undefined) {
        notice(
          `notify-keyspace-events unknown on ${at} (CONFIG GET denied): expirations may be inferred only, ` +
            'and holds shorter than --interval may show without their holders',
        );
      } else if (!expiry || !hashes) {
        const missing = [
          ...(expiry ? [] : ['no expiry notifications (needs E and x): expirations are inferred from TTLs']),
          ...(hashes
            ? []
            : [
                'no hash notifications (needs E and h): a hold that begins and ends between two reads shows without its holder',
              ]),
        ];
        notice(`notify-keyspace-events "${flags}" on ${at}: ${missing.join('; ')}`);
      }
      if (!expiry && !hashes) continue;
      const connection = this.#open(master, (channel, key) => {
        if (!key.startsWith(target.prefix)) return;
        const name = key.slice(target.prefix.length);
        if (name.startsWith('flowlock:') || !this.#watched(name)) return;
        const event = channel.slice(channel.lastIndexOf(':') + 1);
        if (event === 'del') this.#changed(name);
        else if (event === 'expired' || event === 'evicted') this.#enqueue(() => this.#lost(name, event));
        // A hold created or re-entered (or a count lowered): read the name while its holder may still hold.
        else if (event === 'hset' || event === 'hincrby') this.#readSoon(name);
      });
      const events = [...(expiry ? ['expired', 'evicted', 'del'] : []), ...(hashes ? ['hset', 'hincrby'] : [])];
      await this.#subscribeOrSay(
        connection,
        () => connection.subscribe(events.map((event) => `__keyevent@${db}__:${event}`)),
        (refused) =>
          `keyspace notifications unheard (SUBSCRIBE refused on ${at}: ${refused}): expirations are inferred ` +
          'from TTLs, and holds shorter than the read interval may show without their holders',
      );
    }
  }
}

/**
 * A live log of the watched locks (names, or Redis globs on names; every lock by default): holders found at
 * the start (`held`), then `acquired`, `released`, `expired` and `evicted` events as they happen, and
 * `notice`s about what the server does not allow. Iterate it with `for await`; it ends when `signal` aborts
 * or the loop breaks, and then closes its connections (its own duplicates: the client stays open). Fails
 * (the iteration throws) if Redis does.
 */
export function watchLocks(client: RedisClient, options?: WatchOptions): AsyncIterable<WatchEvent> {
  const checked = checkOptions(options, ['prefix', 'names', 'intervalMs', 'events', 'count', 'signal']);
  const prefix = checked['prefix'];
  const target = adminTarget(client, prefix);
  const { names = ['*'], events = false, signal } = checked;
  if (!Array.isArray(names) || names.length === 0) {
    throw new TypeError(`options.names must be a non-empty array, got ${describe(names)}`);
  }
  for (const name of names) {
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`options.names must hold non-empty strings, got ${describe(name)}`);
    }
    if (!isGlob(name)) checkLockName(name);
  }
  if (typeof events !== 'boolean') throw new TypeError(`options.events must be a boolean, got ${describe(events)}`);
  if (signal !== undefined && !(signal instanceof AbortSignal))
    throw new TypeError(`options.signal must be an AbortSignal, got ${describe(signal)}`);
  const intervalMs = checkCount(checked['intervalMs'], 'options.intervalMs', 50, 2 ** 31 - 1) ?? 2000;
  const count = checkCount(checked['count'], 'options.count', 1) ?? 1000;
  return {
    async *[Symbol.asyncIterator]() {
      if (signal?.aborted) return;
      const watcher = new Watcher(target, client, prefix as string | undefined, names as string[], intervalMs, count);
      const onAbort = (): void => watcher.stop();
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        try {
          await watcher.start(events);
        } catch (error) {
          // Stopped while subscribing: its connections were closed under it.
          if (signal?.aborted) return;
          throw error;
        }
        for (let event = await watcher.next(); event; event = await watcher.next()) yield event;
      } finally {
        signal?.removeEventListener('abort', onAbort);
        watcher.stop();
      }
    },
  };
}
