/**
 * The lock's Lua scripts (embedded from lua/ by scripts/generate-lua.mjs) and a typed runner that sends them
 * through the client's adapter (EVALSHA, then EVAL on NOSCRIPT). It only issues commands: it never defines
 * commands on, or otherwise changes, the user's client.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  hashedPart,
  readTimeoutKey,
  readTimeoutKeys,
  type FairLockKeys,
  type LockKeys,
  type ReadWriteLockKeys,
} from './keys.js';
import { luaSources, type LuaScriptName } from './lua-scripts.generated.js';
import type { PubSubMode, RedisAdapter, ScriptArg } from './seam.js';
import { isCrossSlot, isPermissionDenial, unansweredBy } from './shared.js';
import { monotonicNow, promiseOf } from '../time.js';
import { LockCrossSlotError, LockPermissionError, RedisUnavailableError, UnsupportedServerError } from '../errors.js';
import { FLOOR_TEXT, isUnderstandingError, serverIdentity, type ServerIdentity } from './server-version.js';

/** Number of KEYS each script takes; `'variadic'` for scripts that take a batch. Checked against the headers. */
export const scriptKeyCounts: Readonly<Record<LuaScriptName, number | 'variadic'>> = {
  'lock/acquire': 4,
  'lock/release': 4,
  'lock/force-unlock': 3,
  'lock/hold-count': 1,
  'fair-lock/acquire': 6,
  'fair-lock/release': 5,
  'fair-lock/leave': 3,
  'fair-lock/force-unlock': 4,
  'fair-lock/wake': 1,
  'read-write-lock/read-acquire': 6,
  'read-write-lock/read-release': 'variadic',
  'read-write-lock/read-settle': 'variadic',
  'read-write-lock/write-acquire': 5,
  'read-write-lock/write-release': 4,
  'read-write-lock/leave': 3,
  'read-write-lock/force-unlock': 3,
  'semaphore/acquire': 7,
  'semaphore/available-permits': 6,
  'semaphore/release': 6,
  'semaphore/leave': 5,
  'semaphore/try-set-permits': 5,
  'semaphore/add-permits': 5,
  'semaphore/drain-permits': 1,
  'permit-expirable-semaphore/acquire': 6,
  'permit-expirable-semaphore/release': 7,
  'count-down-latch/try-set-count': 2,
  'count-down-latch/count-down': 3,
  'watchdog/renew': 'variadic',
  'admin/retire-legacy-fence': 2,
  'client/record': 1,
  'client/forget-record': 1,
  'client/slot-probe': 2,
};

export type AcquireReply =
  | {
      readonly acquired: true;
      readonly token: bigint;
      readonly holdCount: number;
      readonly ownerIndex: number;
      /** A lean grant (lock/acquire.lua): its server time in microseconds, for the holder info written later. */
      readonly grantedAt?: string;
    }
  | { readonly acquired: false; readonly pttl: number; readonly upgrade?: true };

/**
 * One hold for the watchdog's renewal: its hash and field (for a permit: its semaphore's sorted set and the
 * permit's raw id), for a lock's hold the hash of its side fields, and for a read hold its timeout keys.
 */
export interface RenewEntry {
  readonly lockKey: string;
  readonly field: string | Buffer;
  /** The lock's hold key (side fields, whose TTL follows the hold's); omitted for a permit. */
  readonly holdKey?: string;
  /** Omitted for a hold that is a hash field (plain, fair and write locks). */
  readonly kind?: 'read' | 'permit';
  /** A read hold's timeout keys, 1..its count (see readTimeoutKeys). */
  readonly timeoutKeys?: readonly string[];
  /** The side fields a lean hold still lacks (lock/acquire.lua), written into the hold key with the renewal. */
  readonly side?: { readonly token: bigint; readonly info: string };
}

/** `remaining` -1: no owner of the chain held the lock. */
export interface ReleaseReply {
  readonly remaining: number;
  readonly ownerIndex: number;
  /** When the lock was freed: how many subscriber connections the release message reached. */
  readonly woken: number;
}

// Request ids only need to be unique among the calls that touch one lock: a random per-process prefix
// (72 bits) and a counter give that in 13-20 characters, a third of a UUID, on every acquire and release.
const requestIdPrefix = randomBytes(9).toString('base64url');
let requestCounter = 0;

export function newRequestId(): string {
  return requestIdPrefix + (requestCounter++).toString(36);
}

export type ReleaseMode = 'one' | 'all' | 'undo' | 'purge';

export interface ReleaseOptions {
  /** Unique per call; a resend of the call carries the same one. Tests pass their own. */
  readonly requestId?: string;
  /** Request id of the acquire to undo (modes 'undo' and 'purge'). */
  readonly undoId?: string;
  /** Send by EVAL at once (a repair made while the connection may be failing). */
  readonly repair?: boolean;
  /** How the release is announced; by default as `pubsubMode()` detects, for a repair as known (announcedBy). */
  readonly pubsub?: PubSubMode;
  /**
   * Called once Redis has dropped the holds (the release script answered), before what may follow it there
   * (a fair lock's wake, the other readers' settle): close() counts a hold released from then on.
   */
  readonly dropped?: () => void;
}

const publishCommand = (mode: PubSubMode): string => (mode === 'sharded' ? 'SPUBLISH' : 'PUBLISH');

const CLASSIC: Promise<PubSubMode> = Promise.resolve('classic');

/** How `run` sends a script: see there. */
interface RunOptions {
  readonly direct?: boolean;
  readonly resend?: boolean;
}

/** `run`'s options when the caller gives none: one object for every call. */
const NO_RUN_OPTIONS: RunOptions = {};

/** A repair's options: EVAL at once (see `run`). */
const REPAIR: RunOptions = { direct: true };

/** #sendRelease's `extra` when a release script takes nothing more: one object for every call. */
const NO_EXTRA: { readonly keys: readonly string[]; readonly args: readonly ScriptArg[] } = { keys: [], args: [] };

/**
 * How long Redis remembers a call that a resend must not repeat (a lock release, a semaphore's
 * grant or release, a count-down), so that a resend of it (ioredis and node-redis' Sentinel resend a call
 * after a reconnect) is answered as the
 * success it was. The clients' default retries give up well within it; a lock release resent later than this
 * reports LockNotHeldError (the lock stays free).
 */
export const MEMO_MS = 30_000;

/** The most KEYS and ARGV a read-settle.lua call carries: managed services refuse past 3 999 arguments. */
const MAX_SETTLE_ARGS = 3_990;

/**
 * How long a script call on a Cluster is sent again while the client gives up redirecting it. ioredis and
 * node-redis follow MOVED and ASK (ioredis TRYAGAIN too) but fail the call after 16 redirections: within
 * milliseconds while the masters disagree about a slot at the end of a migration (each sends it to the
 * other), or after about 1.6 s of TRYAGAIN while the lock's keys are split between two masters. A redirection
 * means the script did not run there, and should an earlier try in the client's chain have run unseen (a reply lost to a closed
 * connection), request ids make acquire and release answer the resend without counting twice. So no
 * redirection reaches a caller unless a slot stays unreachable this long.
 */
const CLUSTER_RESEND_MS = 10_000;

/**
 * Scripts that a resend would not answer as their first call: counts added, drained or set without a memo.
 * Sent once only when the client says a reply was lost (ioredis sends every call again by itself).
 */
const NOT_RESENT: ReadonlySet<LuaScriptName> = new Set([
  'semaphore/add-permits',
  'semaphore/drain-permits',
  'semaphore/try-set-permits',
]);

/**
 * Acquire scripts whose last key, the lock's per-name fencing counter of the earlier layout, is left out when
 * the client's `previousLayout` is 'retired' (lock/acquire.lua, KEYS[4]).
 */
const LEGACY_FENCE_LAST: ReadonlySet<LuaScriptName> = new Set([
  'lock/acquire',
  'fair-lock/acquire',
  'read-write-lock/read-acquire',
  'read-write-lock/write-acquire',
]);

/** The longest pause between two resends (they start at 25 ms and double). */
const CLUSTER_RESEND_PAUSE_MS = 400;

/** The integer at `index` of a script's array reply (RESP2 or RESP3, number or numeric string). */
export function integerAt(reply: unknown, index: number): number {
  const value = (reply as unknown[])[index];
  if (typeof value === 'number') return value;
  if (typeof value === 'string' || typeof value === 'bigint') return Number(value);
  throw new TypeError(`unexpected script reply ${JSON.stringify(reply)}`);
}

/**
 * Decodes the reply every acquire script gives: {1, token, holdCount, ownerIndex[, grantedAt]}, {0, pttl} or
 * {2}; or lock/acquire.lua's lean grant, the token alone (an integer), which is also the grant's clock.
 */
export function acquireReply(reply: unknown): AcquireReply {
  if (!Array.isArray(reply)) {
    const token = integerAt([reply], 0);
    return { acquired: true, token: BigInt(token), holdCount: 1, ownerIndex: 0, grantedAt: String(token) };
  }
  const kind = integerAt(reply, 0);
  if (kind === 1) {
    // A decimal string (a Buffer with some clients' return_buffers): its text either way.
    const grantedAt = (reply as unknown[])[4] as string | Buffer | undefined;
    const granted = {
      acquired: true as const,
      token: BigInt(integerAt(reply, 1)),
      holdCount: integerAt(reply, 2),
      ownerIndex: integerAt(reply, 3) - 1,
    };
    return grantedAt === undefined ? granted : { ...granted, grantedAt: String(grantedAt) };
  }
  if (kind === 2) return { acquired: false, pttl: 0, upgrade: true };
  return { acquired: false, pttl: integerAt(reply, 1) };
}

/**
 * Decodes the reply every release script gives: {remaining, ownerIndex[, woken]}; or lock/release.lua's
 * uncontended release, the woken count alone (an integer): the first owner's last hold, freed.
 */
export function releaseReply(reply: unknown): ReleaseReply {
  if (!Array.isArray(reply)) return { remaining: 0, ownerIndex: 0, woken: integerAt([reply], 0) };
  const woken = (reply as unknown[]).length > 2 ? integerAt(reply, 2) : 0;
  return { remaining: integerAt(reply, 0), ownerIndex: integerAt(reply, 1) - 1, woken };
}

/** A fair lock's waiter id a script returned: a string, a Buffer with some clients' return_buffers; nil: none. */
export type WaiterId = string | Buffer | null | undefined;

export class LockScripts {
  readonly #redis: RedisAdapter;
  readonly #cluster: boolean;

  #pubsub: Promise<PubSubMode> | undefined;
  /** The server's identity, read once at the first script error that says it did not understand a command. */
  #identity: Promise<ServerIdentity | undefined> | undefined;
  /** The mode detected so far, without I/O: 'classic' until a detection found a Redis 7+ Cluster. */
  knownPubsubMode: PubSubMode = 'classic';

  /** The label the acquire scripts store with a fresh hold (`<field>:info`); '': none. */
  readonly holderInfo: string;

  /** The lock client's key prefix: a lock's key is `<keyPrefix><name>` (names the lock in an ACL refusal). */
  readonly #keyPrefix: string;

  /**
   * Whether clients of an earlier layout may still run: acquisitions then read (and move up) a lock's per-name
   * fencing counter, and semaphore waiters keep their deadlines where those clients read them. False once the
   * client's `previousLayout` is 'retired'.
   */
  readonly #legacyFence: boolean;

  /**
   * Whether the endpoint keeps every request in one hash slot, where that matters: off a Cluster, with a key
   * prefix that has no hash tag (Redisson's names of a lock then hash apart from its key). 'unchecked' until
   * client/slot-probe.lua answered; the refusal, kept, when it did not run. 'ok' elsewhere, from the start.
   */
  #slots: 'unchecked' | 'ok' | Promise<void> | LockCrossSlotError;

  constructor(redis: RedisAdapter, holderInfo = '', keyPrefix = '', previousLayoutRetired = false) {
    this.#redis = redis;
    this.holderInfo = holderInfo;
    this.#keyPrefix = keyPrefix;
    this.#legacyFence = !previousLayoutRetired;
    this.#cluster = redis.topology === 'cluster';
    this.#slots = !this.#cluster && keyPrefix !== '' && hashedPart(keyPrefix) === keyPrefix ? 'unchecked' : 'ok';
  }

  /**
   * Refuses every call with a LockCrossSlotError once the endpoint refused the slot probe; probes first if
   * nobody has (one round trip in the client's life, shared by the calls that start meanwhile). A probe that
   * fails otherwise (the connection, an ACL without the probe's keys) decides nothing: the call goes on, and
   * the next call probes again.
   */
  async #checkSlots(lockName: string | undefined): Promise<void> {
    if (this.#slots === 'unchecked') {
      const keys = [0, 1].map((n) => `${this.#keyPrefix}flowlock:slot-probe:{${n}}`);
      this.#slots = this.#redis.evalScript(luaSources['client/slot-probe'], keys, [], true).then(
        () => {
          this.#slots = 'ok';
        },
        (error: unknown) => {
          this.#slots = isCrossSlot(error) ? new LockCrossSlotError(undefined, this.#keyPrefix, error) : 'unchecked';
        },
      );
    }
    if (this.#slots instanceof Promise) await this.#slots;
    if (this.#slots instanceof LockCrossSlotError) {
      throw new LockCrossSlotError(lockName, this.#keyPrefix, this.#slots.cause);
    }
  }

  /**
   * The mode a release announces in when its caller names one, or, for a repair (the give-back of a grant
   * nobody took, an undo, the purge of a lost hold), the mode known so far: a repair does not wait for the
   * mode's detection, an INFO that a failing connection may leave unanswered for the client's whole command
   * timeout (GLIDE's, on a Cluster whose connection was killed: measured), which would keep the grant in Redis
   * and close() waiting meanwhile. Before the first detection that is classic: sharded waiters it misses
   * re-check within 2 s (CLUSTER_WAIT_MS).
   */
  announcedBy(options: ReleaseOptions): PubSubMode | undefined {
    return options.pubsub ?? (options.repair ? this.knownPubsubMode : undefined);
  }

  /**
   * Sharded pub/sub on a Redis 7+ Cluster (a release then reaches only the shard of its slot), classic pub/sub
   * elsewhere and on a client that cannot subscribe to shard channels (iovalkey). Detected once from INFO; a
   * failed detection is retried at the next use.
   */
  pubsubMode(): Promise<PubSubMode> {
    if (!this.#cluster || !this.#redis.shardedPubSub) return CLASSIC;
    this.#pubsub ??= this.#redis.info('server').then(
      (info) => {
        const major = Number(/^redis_version:(\d+)/m.exec(info)?.[1] ?? 0);
        this.knownPubsubMode = major >= 7 ? 'sharded' : 'classic';
        return this.knownPubsubMode;
      },
      () => {
        this.#pubsub = undefined;
        return 'classic' as const;
      },
    );
    return this.#pubsub;
  }

  /**
   * Runs a script by EVALSHA, and by EVAL when the server lost it (NOSCRIPT). `direct` sends EVAL at once:
   * for repairs sent while the connection may be failing, where the NOSCRIPT round trip could be cut off
   * by a command timeout and the repair would then never run. `resend` false: a redirection the client gave
   * up on, or a reply the client lost, fails the call at once.
   */
  run(
    name: LuaScriptName,
    keys: readonly string[],
    args: readonly ScriptArg[],
    options: RunOptions = NO_RUN_OPTIONS,
  ): Promise<unknown> {
    // A plain function, not async: a call that succeeds costs the client's promise and one reaction.
    const expected = scriptKeyCounts[name];
    if (
      expected !== 'variadic' &&
      keys.length !== expected &&
      !(keys.length === expected - 1 && LEGACY_FENCE_LAST.has(name))
    ) {
      return Promise.reject(new Error(`script ${name} takes ${expected} keys, got ${keys.length}`));
    }
    if (this.#slots !== 'ok') {
      return this.#checkSlots(this.#lockNameOf(name, keys)).then(() => this.#send(name, keys, args, options));
    }
    return this.#send(name, keys, args, options);
  }

  /** run's call once the slots are known; #recover takes over at its first error. */
  #send(
    name: LuaScriptName,
    keys: readonly string[],
    args: readonly ScriptArg[],
    { direct = false, resend = true }: RunOptions,
  ): Promise<unknown> {
    const started = monotonicNow();
    // A client that throws instead of rejecting: #recover judges that error too.
    return promiseOf(() => this.#redis.evalScript(luaSources[name], keys, args, direct)).then(
      undefined,
      (error: unknown) => this.#recover(name, keys, args, direct, resend, started, error),
    );
  }

  /**
   * What run makes of `error`, the first error of a call sent at `started`: sent again where that may help
   * (at once after a lost reply, after a pause while a Cluster redirects), else thrown as the caller gets it.
   */
  async #recover(
    name: LuaScriptName,
    keys: readonly string[],
    args: readonly ScriptArg[],
    direct: boolean,
    resend: boolean,
    started: number,
    firstError: unknown,
  ): Promise<unknown> {
    let error = firstError;
    let lostReplies = 0;
    for (let pause = 25; ; pause = Math.min(2 * pause, CLUSTER_RESEND_PAUSE_MS)) {
      // A missing permission does not come back by itself: said at once, naming the lock.
      if (isPermissionDenial(error)) throw new LockPermissionError(this.#lockNameOf(name, keys), error);
      // Off a Cluster, keys in several slots are refused only by an endpoint that keeps requests in one
      // (a name whose braces split its keys, where no prefix was probed): said at once, with the way out.
      if (!this.#cluster && isCrossSlot(error)) {
        throw new LockCrossSlotError(this.#lockNameOf(name, keys), this.#keyPrefix, error);
      }
      // The client gave the call up when its connection closed, after writing it: it may have run. Sent
      // again (once, as ioredis would have), it is answered as the first was: the scripts are idempotent
      // per request id. The few that are not leave the caller the error (the outcome is unknown).
      const lostReply = resend && lostReplies === 0 && this.#redis.isLostReply(error) && !NOT_RESENT.has(name);
      if (lostReply) {
        lostReplies++;
      } else {
        const late = monotonicNow() - started + pause > CLUSTER_RESEND_MS;
        if (!this.#cluster || !resend || !this.#redis.isRedirection(error) || late) {
          const unanswered = unansweredBy(error);
          if (unanswered) throw new RedisUnavailableError(this.#lockNameOf(name, keys), unanswered, error);
          throw await this.#explained(error);
        }
        // Unref'd: a pending resend must not keep a process alive that has nothing else to do.
        await sleep(pause, undefined, { ref: false });
      }
      try {
        return await this.#redis.evalScript(luaSources[name], keys, args, direct);
      } catch (next) {
        error = next;
      }
    }
  }

  /**
   * `error` as the caller gets it: an UnsupportedServerError when the server did not understand a command of
   * the script and is below the floor (its INFO read once, at the first such error: nothing is added to calls
   * that succeed); else `error` itself, also when INFO is denied or names no version (then nothing is judged).
   * A failed INFO read is tried again at the next such error.
   */
  async #explained(error: unknown): Promise<unknown> {
    if (!isUnderstandingError(error)) return error;
    this.#identity ??= this.#redis.info('server').then(serverIdentity, () => {
      this.#identity = undefined;
      return undefined;
    });
    const server = await this.#identity;
    if (!server || server.supported) return error;
    return new UnsupportedServerError(server.product, server.version, FLOOR_TEXT, { cause: error });
  }

  /**
   * The lock a script call is about: every script's first key is the lock's (`<keyPrefix><name>`) but the
   * watchdog's (a batch of holds) and the admin's.
   */
  #lockNameOf(script: LuaScriptName, keys: readonly string[]): string | undefined {
    const [first] = keys;
    if (script === 'watchdog/renew' || script.startsWith('admin/') || !first?.startsWith(this.#keyPrefix)) {
      return undefined;
    }
    return first.slice(this.#keyPrefix.length);
  }

  /**
   * A plain read (GET, HGET, ...) sent once more when the client gave it up with its connection, as `run`
   * does for scripts: ioredis sends such a call again by itself, node-redis and GLIDE reject it, and a waiting
   * call's look at Redis should not end the wait over a reconnect the client recovers from at once.
   */
  async read<T>(send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (error) {
      if (!this.#redis.isLostReply(error)) throw error;
      return send();
    }
  }

  /**
   * Whether clients of an earlier layout may still run ('shared') or not ('retired'): the semaphores' queue
   * scripts write a waiter's deadline where those clients read it, or into its place in the queue (see
   * lua/includes/permit-queue.lua).
   */
  get previousLayout(): 'shared' | 'retired' {
    return this.#legacyFence ? 'shared' : 'retired';
  }

  /**
   * The fencing counters every acquire script takes last: the shared one, then the lock's per-name one of the
   * earlier layout unless that layout is retired.
   */
  fenceKeys(keys: Pick<LockKeys, 'fenceKey' | 'legacyFenceKey'>): string[] {
    return this.#legacyFence ? [keys.fenceKey, keys.legacyFenceKey] : [keys.fenceKey];
  }

  /** `lean`: see lock/acquire.lua (ARGV[2]); the caller vouches for it. */
  acquire(
    keys: LockKeys,
    leaseMs: number,
    requestId: string,
    owners: readonly string[],
    lean: boolean,
  ): Promise<AcquireReply> {
    return this.run(
      'lock/acquire',
      [keys.lockKey, keys.holdKey, ...this.fenceKeys(keys)],
      // A lean call: "~<requestId>" and no holder label (lock/acquire.lua's ARGV).
      lean ? [leaseMs, `~${requestId}`, ...owners] : [leaseMs, requestId, this.holderInfo, ...owners],
    ).then(acquireReply);
  }

  /**
   * `mode` 'one' drops one hold, 'all' every hold of the owner, 'undo' one hold only if the owner's last
   * acquire had request id `undoId` (an acquire whose reply was lost), 'purge' every hold of the owner on
   * that same condition (a hold declared lost here). `repair` sends it by EVAL at once.
   */
  release(
    keys: LockKeys,
    mode: ReleaseMode,
    owners: readonly string[],
    options: ReleaseOptions = {},
  ): Promise<ReleaseReply> {
    return this.releaseBy(
      'lock/release',
      [keys.lockKey, keys.channel, keys.holdKey],
      keys.releaseMemoPrefix,
      mode,
      owners,
      options,
    );
  }

  /**
   * Runs release script `script` of any lock kind: they all take `keys` then the memo key (`memoPrefix` +
   * request id), and ARGV memoMs, mode, undoId, publish command, owners.
   */
  releaseBy(
    script: LuaScriptName,
    keys: readonly string[],
    memoPrefix: string,
    mode: ReleaseMode,
    owners: readonly string[],
    options: ReleaseOptions = {},
  ): Promise<ReleaseReply> {
    return this.#sendRelease(script, keys, memoPrefix, mode, owners, options).then(releaseReply);
  }

  /** releaseBy's call, with `extra` keys after the memo key and `extra` args before the owners; its raw reply. */
  #sendRelease(
    script: LuaScriptName,
    keys: readonly string[],
    memoPrefix: string,
    mode: ReleaseMode,
    owners: readonly string[],
    options: ReleaseOptions,
    extra: { keys: readonly string[]; args: readonly ScriptArg[] } = NO_EXTRA,
  ): Promise<unknown> {
    const { requestId = newRequestId(), undoId = '', repair = false } = options;
    const pubsub = this.announcedBy(options);
    const send = (announce: string): Promise<unknown> =>
      this.run(
        script,
        [...keys, memoPrefix + requestId, ...extra.keys],
        [MEMO_MS, mode, undoId, announce, ...extra.args, ...owners],
        repair ? REPAIR : NO_RUN_OPTIONS,
      );
    // Off a Cluster the mode is known: the command goes out at once, in this tick.
    const pending = pubsub ? publishCommand(pubsub) : this.#announce();
    return typeof pending === 'string' ? send(pending) : pending.then(send);
  }

  /**
   * Drops holds of a fair lock (see releaseBy); when that frees it, wakes the waiter first in line, whom the
   * script names (see wakeWaiter).
   */
  async fairRelease(
    keys: FairLockKeys,
    mode: ReleaseMode,
    owners: readonly string[],
    options: ReleaseOptions = {},
  ): Promise<ReleaseReply> {
    const { lockKey, queueKey, timeoutKey, holdKey, releaseMemoPrefix } = keys;
    const reply = (await this.#sendRelease(
      'fair-lock/release',
      [lockKey, queueKey, timeoutKey, holdKey],
      releaseMemoPrefix,
      mode,
      owners,
      options,
    )) as unknown[];
    options.dropped?.();
    const woken = await this.wakeWaiter(keys, reply[2] as WaiterId, this.announcedBy(options));
    return { remaining: integerAt(reply, 0), ownerIndex: integerAt(reply, 1) - 1, woken };
  }

  /** Frees a fair lock whoever holds it and wakes the waiter first in line; resolves to whether it was held. */
  async fairForceUnlock(keys: FairLockKeys): Promise<boolean> {
    const { lockKey, queueKey, timeoutKey, holdKey } = keys;
    const reply = (await this.run('fair-lock/force-unlock', [lockKey, queueKey, timeoutKey, holdKey], [])) as unknown[];
    await this.wakeWaiter(keys, reply[1] as WaiterId);
    return integerAt(reply, 0) === 1;
  }

  /**
   * Wakes the fair lock's waiter `head` (an id a fair-lock script read from the queue and returned; none when
   * null or undefined) on its own channel `<channel>:<head>`: a name no script can declare before reading the
   * queue, so it is published by a script of its own. Resolves to the subscribers reached; 0 when the wake
   * failed (the waiter then retries at its next attempt, within a third of its entry's lease).
   */
  async wakeWaiter(keys: FairLockKeys, head: WaiterId, pubsub?: PubSubMode): Promise<number> {
    if (head === null || head === undefined) return 0;
    try {
      const channel = `${keys.channel}:${String(head)}`;
      return integerAt([await this.runAnnouncing('fair-lock/wake', [channel], [], { pubsub })], 0);
    } catch {
      return 0;
    }
  }

  /**
   * A read hold on a read-write lock for the nearest owner of `owners` that reads (or owners[0]).
   * `expected`: the owner (index into `owners`) and read hold count after this grant that this client
   * believes: the script writes that hold's timeout key, which it must be given (every key a script touches is
   * declared); a wrong guess is answered with the right one, and sent again (same request id) with it.
   */
  async readAcquire(
    keys: ReadWriteLockKeys,
    leaseMs: number,
    requestId: string,
    owners: readonly string[],
    expected: { index: number; count: number },
  ): Promise<AcquireReply> {
    const { lockKey, timeoutBase, writersKey, holdKey } = keys;
    for (let { index, count } = expected; ;) {
      const reply = await this.run(
        'read-write-lock/read-acquire',
        [
          lockKey,
          readTimeoutKey(timeoutBase, owners[index] ?? '', count),
          writersKey,
          holdKey,
          ...this.fenceKeys(keys),
        ],
        [leaseMs, requestId, this.holderInfo, index + 1, count, ...owners],
      );
      if (integerAt(reply, 0) !== 3) return acquireReply(reply);
      index = integerAt(reply, 1) - 1;
      count = integerAt(reply, 2);
    }
  }

  /**
   * Drops read holds of the nearest owner of `owners` that reads (see releaseBy). `expected`: the owner
   * (index into `owners`) and its read hold count that this client believes: the script deletes timeout keys
   * of that owner, which it must be given; a wrong guess is answered with the right one, and sent again
   * (same request id) with it. When other readers remain, read-settle.lua then shortens or frees the lock by
   * their timeout keys.
   */
  async readRelease(
    keys: ReadWriteLockKeys,
    mode: ReleaseMode,
    owners: readonly string[],
    { requestId = newRequestId(), ...options }: ReleaseOptions = {},
    expected: { index: number; count: number } = { index: 0, count: 0 },
  ): Promise<ReleaseReply> {
    const { lockKey, channel, holdKey, timeoutBase, releaseMemoPrefix } = keys;
    for (let { index, count } = expected; ;) {
      const reply = (await this.#sendRelease(
        'read-write-lock/read-release',
        [lockKey, channel, holdKey],
        releaseMemoPrefix,
        mode,
        owners,
        { ...options, requestId },
        { keys: readTimeoutKeys(timeoutBase, owners[index] ?? '', count), args: [index + 1] },
      )) as unknown[];
      if (integerAt(reply, 0) === -2) {
        index = integerAt(reply, 1) - 1;
        count = integerAt(reply, 2);
        continue;
      }
      options.dropped?.();
      const readers = reply.slice(3).map(String);
      if (readers.length === 0) return releaseReply(reply);
      return { ...releaseReply(reply), woken: await this.#settleRead(keys, readers, this.announcedBy(options)) };
    }
  }

  /** read-settle.lua over the other readers (`readers`: field, count, ...) a read release reported. */
  async #settleRead(keys: ReadWriteLockKeys, readers: readonly string[], pubsub?: PubSubMode): Promise<number> {
    const timeouts: string[] = [];
    for (let i = 0; i < readers.length; i += 2) {
      timeouts.push(...readTimeoutKeys(keys.timeoutBase, readers[i] ?? '', Number(readers[i + 1])));
    }
    // Past managed services' argument limit (3 999) the lock keeps its TTL: only freed later, never unsafely.
    if (timeouts.length + readers.length > MAX_SETTLE_ARGS) return 0;
    const reply = await this.runAnnouncing(
      'read-write-lock/read-settle',
      [keys.lockKey, keys.channel, keys.holdKey, ...timeouts],
      readers,
      { pubsub },
    );
    return integerAt([reply], 0);
  }

  /** Renews each hold of `entries` for its field; resolves to whether each is still held. One slot per call. */
  async renew(entries: readonly RenewEntry[], leaseMs: number): Promise<boolean[]> {
    const keys = entries.flatMap((entry) => [
      entry.lockKey,
      entry.holdKey ?? entry.lockKey,
      ...(entry.timeoutKeys ?? []),
    ]);
    const args = entries.flatMap((entry) => [
      entry.field,
      entry.kind ?? 'hash',
      entry.side?.token.toString() ?? '',
      entry.side?.info ?? '',
      entry.timeoutKeys?.length ?? 0,
    ]);
    // Not resent: the watchdog's next period retries, and a renewal held up in resends would hold up the
    // renewals of every other slot (one renewal round runs at a time).
    const reply = (await this.run('watchdog/renew', keys, [leaseMs, ...args], { resend: false })) as unknown[];
    return reply.map((_, i) => integerAt(reply, i) === 1);
  }

  /**
   * The publish command that announces releases here ('SPUBLISH' on a Redis 7+ Cluster). Off a Cluster it is
   * known at once: callers that do not await it send their command in the same tick.
   */
  #announce(): string | Promise<string> {
    return this.#cluster ? this.pubsubMode().then(publishCommand) : 'PUBLISH';
  }

  /**
   * Runs a script that may publish (force-unlocks, a waiter leaving, the semaphores and the latch): `args`
   * followed by the publish command of this deployment (or of `pubsub`, when the caller knows it), its last
   * ARGV.
   */
  async runAnnouncing(
    name: LuaScriptName,
    keys: readonly string[],
    args: readonly ScriptArg[],
    { pubsub, ...options }: { direct?: boolean; pubsub?: PubSubMode | undefined } = {},
  ): Promise<unknown> {
    const announce = pubsub ? publishCommand(pubsub) : await this.#announce();
    return this.run(name, keys, [...args, announce], options);
  }

  async forceUnlock(keys: LockKeys): Promise<boolean> {
    return (await this.runAnnouncing('lock/force-unlock', [keys.lockKey, keys.channel, keys.holdKey], [])) === 1;
  }

  /** Hold count of the nearest owner of the chain that holds the lock (0 if none). */
  async holdCount(keys: LockKeys, owners: readonly string[]): Promise<number> {
    return integerAt(await this.run('lock/hold-count', [keys.lockKey], owners), 0);
  }
}
