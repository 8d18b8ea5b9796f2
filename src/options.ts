/**
 * Every public option, its default, and the one place where input is validated and defaults are filled.
 * All checks run before any I/O and throw a TypeError or RangeError that names the argument.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { hostname } from 'node:os';

/** Options of `createLockClient`. */
export interface LockClientOptions {
  /**
   * Lease in milliseconds for holds taken without a `leaseTime` (watchdog mode); the watchdog renews them
   * every `watchdogTimeout / 3` while the holder lives.
   * @default 30_000
   */
  readonly watchdogTimeout?: number;
  /**
   * A label for this client in owner ids (`<clientId>:<flowId>`), such as the service's name. The client
   * appends `:` and a random suffix of its own (see `LockClient.clientId`), so that two clients, or two
   * processes, configured with the same label never share owner ids.
   * @default crypto.randomUUID() (used as it is: already unique)
   */
  readonly clientId?: string;
  /**
   * Prepended to every key and channel. May contain one complete hash tag (`{app}:`) and no other braces.
   * A keyPrefix set on the Redis client itself comes first (the rules apply to the two together).
   * @default ''
   */
  readonly keyPrefix?: string;
  /**
   * After every grant, send `WAIT replicas timeout` and undo the grant (failing with
   * LockNotReplicatedError) when fewer replicas acknowledge it. Narrows, but cannot close, the window in
   * which a failover loses a granted lock; costs a replication round trip per acquisition. See the docs'
   * Topologies page.
   * @default undefined (off: grants are not waited for)
   */
  readonly syncReplicas?: SyncReplicas;
  /**
   * What a fresh hold records about its holder beside the lock (`<owner>:info` in its hold key: when the hold
   * began, by the server's clock, and this host and pid, plus `app`), for `flowlock inspect` and `list`.
   * Written by the acquire script in the command that writes the hold's memo: no extra command. `false`:
   * record nothing.
   * @default {} (host and pid, no app label)
   */
  readonly holderInfo?: HolderInfo | false;
  /**
   * Whether clients of an earlier version of flowlock, with an earlier Redis layout, may still run on these
   * locks (a rolling upgrade). `'shared'`: they may. Every acquisition then also reads the lock's per-name
   * fencing counter (`flowlock:fence:{...}`) and moves it up with the new token, so that tokens keep rising
   * whichever version grants next, and a semaphore waiter keeps its deadline in the sorted set where those
   * versions look for it (`flowlock:permit-deadlines:{...}`). `'retired'`: none runs any more and
   * `flowlock cleanup --yes` has removed their counters. Acquisitions then leave that counter out (one key
   * fewer per acquire script call), and a waiter's deadline goes into its place in the permit queue (one key
   * for the whole queue: 6 server commands fewer per contended acquisition). Clients with either setting share
   * everything safely. See the docs' "Redis data" page.
   * @default 'shared'
   */
  readonly previousLayout?: PreviousLayout;
  /**
   * Valkey GLIDE only: creates the lock client's own subscriber client. GLIDE takes a client's message callback
   * only when the client is created, so the library creates a client for its pub/sub: by this factory, which
   * must create a client of the same kind on the same servers with `pubsubSubscriptions: pubsub` (and RESP3,
   * GLIDE's default), e.g. `(pubsub) => GlideClient.createClient({ ...config, pubsubSubscriptions: pubsub })`.
   * The lock client closes it. Without it, the library creates one from the creation config the GLIDE client
   * keeps (its `config` field, private in GLIDE's types).
   * @default undefined (from the GLIDE client's creation config)
   */
  readonly glideSubscriber?: GlideSubscriberFactory;
}

/** Whether clients of an earlier Redis layout may still run (see `LockClientOptions.previousLayout`). */
export type PreviousLayout = 'shared' | 'retired';

/** The holder info a lock client records with its fresh holds (see `LockClientOptions.holderInfo`). */
export interface HolderInfo {
  /**
   * A label for the application, shown after host and pid (at most 64 characters).
   * @default undefined (none)
   */
  readonly app?: string;
}

/** `WAIT` after each grant: how many replicas must acknowledge it, and how long to wait for them. */
export interface SyncReplicas {
  /**
   * Replicas that must acknowledge a grant (an integer >= 1).
   * @default no default: required
   */
  readonly replicas: number;
  /**
   * Milliseconds to wait for them (an integer >= 1; WAIT's 0, wait forever, is not accepted).
   * @default no default: required
   */
  readonly timeout: number;
}

/** Options of `createQuorumLockClient`. */
export interface QuorumLockOptions {
  /**
   * Lease in milliseconds for acquisitions without a `leaseTime`; they are extended every third of it.
   * @default 30_000
   */
  readonly watchdogTimeout?: number;
  /**
   * How long one node may take to answer one command, in milliseconds; a node that takes longer counts as
   * not granting (its late grant is released). Keep it well below the lease.
   * @default 100
   */
  readonly nodeTimeout?: number;
  /**
   * A label for this client in owner ids; a random suffix is appended, as for `createLockClient`.
   * @default crypto.randomUUID()
   */
  readonly clientId?: string;
  /**
   * Prepended to every key and channel, on every node.
   * @default ''
   */
  readonly keyPrefix?: string;
  /**
   * What a fresh hold records about its holder beside the lock (`<owner>:info` in its hold key: when the hold
   * began, by the server's clock, and this host and pid, plus `app`), for `flowlock inspect` and `list`.
   * Written by the acquire script in the command that writes the hold's memo: no extra command. `false`:
   * record nothing.
   * @default {} (host and pid, no app label)
   */
  readonly holderInfo?: HolderInfo | false;
  /**
   * Whether clients of an earlier version of flowlock, with an earlier Redis layout, may still run on these
   * locks: see `LockClientOptions.previousLayout`.
   * @default 'shared'
   */
  readonly previousLayout?: PreviousLayout;
}

/** Options of `tryLock`, `withLock` and `acquire`. */
export interface AcquireOptions {
  /**
   * How long to wait for the lock, in milliseconds (0: one attempt).
   * @default one attempt for `tryLock`; forever for `withLock` and `acquire`
   */
  readonly waitTime?: number;
  /**
   * Lease in milliseconds (at least 30), after which Redis frees the lock; `-1` means watchdog mode.
   * @default -1 (watchdog mode: `watchdogTimeout`, renewed while the holder lives)
   */
  readonly leaseTime?: number;
  /**
   * Aborts the wait; the call rejects with the signal's reason and leaves no hold behind.
   * @default undefined
   */
  readonly signal?: AbortSignal;
}

/** Options of `lock`. */
export interface LockOptions {
  /** Lease in milliseconds (at least 30); `-1` means watchdog mode. @default -1 (watchdog mode) */
  readonly leaseTime?: number;
  /** @default undefined */
  readonly signal?: AbortSignal;
}

/** Options of a semaphore's `acquire`. */
export interface SemaphoreAcquireOptions {
  /** Permits to take at once (an integer >= 1). @default 1 */
  readonly permits?: number;
  /** Aborts the wait; the call rejects with the signal's reason and takes nothing. @default undefined */
  readonly signal?: AbortSignal;
}

/** Options of a semaphore's `tryAcquire`. */
export interface SemaphoreTryAcquireOptions extends SemaphoreAcquireOptions {
  /** How long to wait for the permits, in milliseconds. @default 0 (one attempt) */
  readonly waitTime?: number;
}

/** Options of a count-down latch's `await`. */
export interface LatchAwaitOptions {
  /** How long to wait for the count to reach zero, in milliseconds. @default forever */
  readonly waitTime?: number;
  /** Aborts the wait; the call rejects with the signal's reason. @default undefined */
  readonly signal?: AbortSignal;
}

/**
 * An ioredis or iovalkey `Redis` or `Cluster` (ioredis 5 or 6), by shape: the two libraries' classes differ
 * in their types, and neither package is loaded by this library.
 */
export interface IoredisClient {
  /** ioredis's own `evalsha`: part of the shape the client is recognised by (no package is imported). */
  evalsha(...args: never[]): unknown;
  /** ioredis's own `eval`: part of the shape the client is recognised by (no package is imported). */
  eval(...args: never[]): unknown;
  /** ioredis's own `call`: part of the shape the client is recognised by (no package is imported). */
  call(...args: never[]): unknown;
  /** ioredis's own `duplicate`: part of the shape the client is recognised by (no package is imported). */
  duplicate(...args: never[]): unknown;
  readonly status: string;
  readonly options: object;
}

/** A node-redis 5 or 6 client, cluster or sentinel (`createClient`, `createCluster`, `createSentinel`), connected. */
export interface NodeRedisClient {
  /** node-redis's own `evalSha`: part of the shape the client is recognised by (no package is imported). */
  evalSha(...args: never[]): unknown;
  /** node-redis's own `sendCommand`: part of the shape the client is recognised by (no package is imported). */
  sendCommand(...args: never[]): unknown;
  /** node-redis's own `withTypeMapping`: part of the shape the client is recognised by (no package is imported). */
  withTypeMapping(...args: never[]): unknown;
  readonly isOpen: boolean;
}

/**
 * A Valkey GLIDE 2.x `GlideClient` or `GlideClusterClient` (`@valkey/valkey-glide`), by shape: the package is
 * not loaded by this library.
 */
export interface GlideClientLike {
  /** GLIDE's own `customCommand`: part of the shape the client is recognised by (no package is imported). */
  customCommand(...args: never[]): unknown;
  /** GLIDE's own `invokeScript`: part of the shape the client is recognised by (no package is imported). */
  invokeScript(...args: never[]): unknown;
  /** GLIDE's own `getSubscriptions`: part of the shape the client is recognised by (no package is imported). */
  getSubscriptions(...args: never[]): unknown;
  /** GLIDE's own `getStatistics`: part of the shape the client is recognised by (no package is imported). */
  getStatistics(...args: never[]): unknown;
}

/** What `options.glideSubscriber` is given: the `pubsubSubscriptions` to create the subscriber client with. */
export interface GlidePubSubConfig {
  /** Empty: the library subscribes later, channel by channel. */
  readonly channelsAndPatterns: Record<string, never>;
  /** Receives the messages (a GLIDE `PubSubMsg`). */
  readonly callback: (message: { readonly channel: unknown; readonly message: unknown }) => void;
}

/** `options.glideSubscriber`: resolves to a new GLIDE client created with `pubsubSubscriptions: pubsub`. */
export type GlideSubscriberFactory = (pubsub: GlidePubSubConfig) => Promise<GlideClientLike>;

/** Every client `createLockClient` and `createQuorumLockClient` accept. */
export type RedisClient = IoredisClient | NodeRedisClient | GlideClientLike;

export interface ResolvedClientOptions {
  readonly watchdogTimeout: number;
  readonly clientId: string;
  readonly keyPrefix: string;
  readonly syncReplicas: SyncReplicas | undefined;
  /** The label stored with fresh holds; '': none. */
  readonly holderInfo: string;
  readonly previousLayout: PreviousLayout;
}

export interface ResolvedQuorumOptions {
  readonly watchdogTimeout: number;
  readonly nodeTimeout: number;
  readonly clientId: string;
  readonly keyPrefix: string;
  readonly holderInfo: string;
  readonly previousLayout: PreviousLayout;
}

export interface ResolvedAcquire {
  /** `undefined`: no bound (forever, or one attempt for `tryLock`). */
  readonly waitTime: number | undefined;
  /** `-1`: watchdog mode. */
  readonly leaseTime: number;
  readonly signal: AbortSignal | undefined;
}

const MAX_NAME_BYTES = 512;
const MAX_PREFIX_BYTES = 256;
const MAX_CLIENT_ID_LENGTH = 128;
const MIN_WATCHDOG_TIMEOUT = 30;
/**
 * The shortest lease. A grant counts as held only if its reply came within the lease less the drift
 * allowance (1 % + 2 ms): a lease of a few milliseconds could never be held, and each grant would be given
 * back and asked for again.
 */
const MIN_LEASE_TIME = 30;
/**
 * The library's own keys are `<keyPrefix>flowlock:...` (fencing counters, memos, records): no lock key of any
 * client, whatever its prefix, may contain this.
 */
const RESERVED_NAME_PART = 'flowlock:';
/** Random bytes of the suffix appended to a clientId the user chose (72 bits, 12 base64url characters). */
const CLIENT_SUFFIX_BYTES = 9;

const CLIENT_OPTION_KEYS: ReadonlySet<string> = new Set([
  'watchdogTimeout',
  'clientId',
  'keyPrefix',
  'syncReplicas',
  'holderInfo',
  'previousLayout',
  'glideSubscriber',
]);
const QUORUM_OPTION_KEYS: ReadonlySet<string> = new Set([
  'watchdogTimeout',
  'nodeTimeout',
  'clientId',
  'keyPrefix',
  'holderInfo',
  'previousLayout',
]);
const HOLDER_INFO_KEYS: ReadonlySet<string> = new Set(['app']);
const SYNC_REPLICAS_KEYS: ReadonlySet<string> = new Set(['replicas', 'timeout']);
const ACQUIRE_OPTION_KEYS: ReadonlySet<string> = new Set(['waitTime', 'leaseTime', 'signal']);
const LOCK_OPTION_KEYS: ReadonlySet<string> = new Set(['leaseTime', 'signal']);
const SEMAPHORE_ACQUIRE_KEYS: ReadonlySet<string> = new Set(['permits', 'signal']);
const SEMAPHORE_TRY_ACQUIRE_KEYS: ReadonlySet<string> = new Set(['permits', 'waitTime', 'signal']);
const LATCH_AWAIT_KEYS: ReadonlySet<string> = new Set(['waitTime', 'signal']);

/** At most this many characters of a string argument are shown in an error message. */
const SHOWN_STRING_LENGTH = 40;

/** What a wrong argument is, for an error message: its value (a long string cut), or its type for objects. */
export function describe(value: unknown): string {
  if (typeof value === 'string') {
    const shown = value.length > SHOWN_STRING_LENGTH ? `${value.slice(0, SHOWN_STRING_LENGTH)}…` : value;
    // Quoted and escaped: a control character in it cannot break the message's line.
    return `the string ${JSON.stringify(shown)}${value.length > SHOWN_STRING_LENGTH ? ` (${value.length} characters)` : ''}`;
  }
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'bigint') return `the bigint ${value}n`;
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'object') return 'an object';
  return `a ${typeof value}`;
}

/**
 * The function `method` takes first. An object in its place is usually the options given first, when
 * `method` takes options.
 */
export function checkFunction(fn: unknown, method: string, takesOptions = true): void {
  if (typeof fn === 'function') return;
  const swapped = takesOptions && typeof fn === 'object' && fn !== null ? ' (the options come second)' : '';
  throw new TypeError(`${method} needs a function as its first argument, got ${describe(fn)}${swapped}`);
}

function checkPlainObject(value: unknown, argument: string): asserts value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`${argument} must be an object, got ${describe(value)}`);
  }
}

function checkKnownKeys(value: Record<string, unknown>, allowed: ReadonlySet<string>, argument: string): void {
  for (const key of Object.keys(value)) {
    if (!allowed.has(key)) {
      throw new TypeError(`${argument} has an unknown option "${key}" (known: ${[...allowed].join(', ')})`);
    }
  }
}

function checkInteger(value: unknown, argument: string): asserts value is number {
  if (typeof value !== 'number') {
    throw new TypeError(`${argument} must be a number of milliseconds, got ${describe(value)}`);
  }
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`${argument} must be a whole number of milliseconds, got ${value}`);
  }
}

function checkWaitTime(value: unknown, argument = 'waitTime'): number {
  checkInteger(value, argument);
  if (value < 0) throw new RangeError(`${argument} must be >= 0 milliseconds, got ${value}`);
  return value;
}

function checkLeaseTime(value: unknown, argument = 'leaseTime'): number {
  checkInteger(value, argument);
  if (value !== -1 && value < MIN_LEASE_TIME) {
    throw new RangeError(
      `${argument} must be >= ${MIN_LEASE_TIME} milliseconds, or -1 for watchdog mode, got ${value}`,
    );
  }
  return value;
}

/**
 * Redis stores strings as UTF-8, where a lone UTF-16 surrogate (what `slice()` through an emoji leaves)
 * becomes U+FFFD: two such names would be one key, and a channel name would not read back as it was sent.
 */
function checkWellFormed(value: string, argument: string): void {
  if (!value.isWellFormed()) {
    throw new RangeError(`${argument} must be well-formed Unicode: it contains a lone UTF-16 surrogate`);
  }
}

function checkSignal(value: unknown, argument: string): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) throw new TypeError(`${argument} must be an AbortSignal`);
  return value;
}

/**
 * Checks a lock name; `keyPrefix` is the lock client's (the Redis client's and its own): the lock's key is
 * `keyPrefix + name`. Every key of the library's own is `<some prefix>flowlock:...`, so a lock key containing
 * "flowlock:" anywhere could be the fencing counter, a memo or a record of some client with another prefix
 * (`svc:flowlock:fencing:{1}` is a name without a prefix and the counter of prefix `svc:`): refused.
 */
export function checkLockName(name: unknown, keyPrefix = ''): string {
  if (typeof name !== 'string') throw new TypeError(`name must be a string, got ${describe(name)}`);
  if (name.length === 0) throw new RangeError('name must not be empty');
  checkWellFormed(name, 'name');
  if ((keyPrefix + name).includes(RESERVED_NAME_PART)) {
    const key = keyPrefix === '' ? '' : ` (with the key prefix, the key ${JSON.stringify(keyPrefix + name)})`;
    throw new RangeError(
      `name must not contain "${RESERVED_NAME_PART}"${key}, got ${JSON.stringify(name)}: every key prefix keeps ` +
        `the library's own keys (fencing counters, memos, holder records) under "<prefix>${RESERVED_NAME_PART}", ` +
        'so such a lock could overwrite those of another client',
    );
  }
  const bytes = Buffer.byteLength(name, 'utf8');
  if (bytes > MAX_NAME_BYTES) {
    throw new RangeError(`name must be at most ${MAX_NAME_BYTES} bytes in UTF-8, got ${bytes}`);
  }
  return name;
}

/** An expirable semaphore's permit id: 32 lowercase hex digits (Redisson's 16 random bytes, as hex). */
export const PERMIT_ID = /^[0-9a-f]{32}$/;

export function checkPermitId(value: unknown, argument: string): string {
  if (typeof value !== 'string') throw new TypeError(`${argument} must be a string, got ${describe(value)}`);
  if (!PERMIT_ID.test(value)) {
    throw new RangeError(`${argument} must be 32 lowercase hex digits, got ${describe(value)}`);
  }
  return value;
}

/**
 * The options of `createLockClient`. `clientPrefix`: the keyPrefix of the user's Redis client, which the
 * client puts before every key: the resolved `keyPrefix` starts with it, so that the library computes slots
 * and channel names as the server sees them.
 */
export function resolveClientOptions(options: unknown, clientPrefix = ''): ResolvedClientOptions {
  if (options === undefined) options = {};
  checkPlainObject(options, 'options');
  checkKnownKeys(options, CLIENT_OPTION_KEYS, 'options');
  return { ...checkCommonOptions(options, clientPrefix), syncReplicas: checkSyncReplicas(options.syncReplicas) };
}

/** The nodes of `createQuorumLockClient`: a non-empty array of distinct clients (adapted by the caller). */
export function checkQuorumNodes(nodes: unknown): unknown[] {
  if (!Array.isArray(nodes)) throw new TypeError('nodes must be an array of Redis clients');
  if (nodes.length === 0) throw new RangeError('nodes must not be empty');
  if (new Set(nodes).size !== nodes.length) throw new TypeError('nodes must not repeat a client');
  return nodes as unknown[];
}

/** The options of `createQuorumLockClient`; `clientPrefix` as for `resolveClientOptions`. */
export function resolveQuorumOptions(options: unknown, clientPrefix = ''): ResolvedQuorumOptions {
  if (options === undefined) options = {};
  checkPlainObject(options, 'options');
  checkKnownKeys(options, QUORUM_OPTION_KEYS, 'options');
  const { nodeTimeout = 100 } = options;
  checkInteger(nodeTimeout, 'options.nodeTimeout');
  if (nodeTimeout < 1) throw new RangeError(`options.nodeTimeout must be >= 1 ms, got ${nodeTimeout}`);
  const common = checkCommonOptions(options, clientPrefix);
  if (nodeTimeout >= common.watchdogTimeout / 3) {
    throw new RangeError('options.nodeTimeout must be below a third of options.watchdogTimeout');
  }
  return { ...common, nodeTimeout };
}

function checkCommonOptions(
  options: Record<string, unknown>,
  clientPrefix: string,
): Omit<ResolvedClientOptions, 'syncReplicas'> {
  const { watchdogTimeout = 30_000, clientId, keyPrefix = '' } = options;
  checkInteger(watchdogTimeout, 'options.watchdogTimeout');
  if (watchdogTimeout < MIN_WATCHDOG_TIMEOUT) {
    throw new RangeError(`options.watchdogTimeout must be >= ${MIN_WATCHDOG_TIMEOUT} ms, got ${watchdogTimeout}`);
  }
  if (clientId !== undefined) {
    if (typeof clientId !== 'string') {
      throw new TypeError(`options.clientId must be a string, got ${describe(clientId)}`);
    }
    if (clientId.length === 0 || clientId.length > MAX_CLIENT_ID_LENGTH) {
      throw new RangeError(`options.clientId must have 1 to ${MAX_CLIENT_ID_LENGTH} characters`);
    }
    checkWellFormed(clientId, 'options.clientId');
  }
  if (typeof keyPrefix !== 'string') {
    throw new TypeError(`options.keyPrefix must be a string, got ${describe(keyPrefix)}`);
  }
  // The client's own prefix comes first in every key: the rules hold for the two together.
  const prefix = clientPrefix + keyPrefix;
  const argument = clientPrefix === '' ? 'options.keyPrefix' : "the Redis client's keyPrefix and options.keyPrefix";
  checkWellFormed(prefix, argument);
  if (prefix.includes(RESERVED_NAME_PART)) {
    throw new RangeError(
      `${argument} must not contain "${RESERVED_NAME_PART}", got ${JSON.stringify(prefix)}: every lock key would ` +
        "then be in the library's own key space of a shorter prefix",
    );
  }
  if (Buffer.byteLength(prefix, 'utf8') > MAX_PREFIX_BYTES) {
    throw new RangeError(`${argument} must be at most ${MAX_PREFIX_BYTES} bytes`);
  }
  if (/[{}]/.test(prefix) && !/^[^{}]*\{[^{}]+\}[^{}]*$/.test(prefix)) {
    throw new RangeError(`${argument} may contain one complete hash tag like "{app}:" and no other braces`);
  }
  // Owner ids are `<clientId>:<flowId>` and flow ids restart in every process: a label the user chose (a
  // service name, the same in every replica) gets a suffix of this client's own, or two processes would
  // hold one lock at once under one owner id.
  const id =
    clientId === undefined ? randomUUID() : `${clientId}:${randomBytes(CLIENT_SUFFIX_BYTES).toString('base64url')}`;
  return {
    watchdogTimeout,
    clientId: id,
    keyPrefix: prefix,
    holderInfo: holderLabel(options.holderInfo),
    previousLayout: checkPreviousLayout(options.previousLayout),
  };
}

function checkPreviousLayout(value: unknown): PreviousLayout {
  if (value === undefined) return 'shared';
  if (value !== 'shared' && value !== 'retired') {
    const message = `options.previousLayout must be 'shared' or 'retired', got ${describe(value)}`;
    throw typeof value === 'string' ? new RangeError(message) : new TypeError(message);
  }
  return value;
}

const MAX_APP_LABEL_LENGTH = 64;

/** The label of `holderInfo`: "<host> pid <pid>", and " (<app>)" with an app label; '' when turned off. */
function holderLabel(holderInfo: unknown): string {
  if (holderInfo === false) return '';
  if (holderInfo === undefined) holderInfo = {};
  checkPlainObject(holderInfo, 'options.holderInfo');
  checkKnownKeys(holderInfo, HOLDER_INFO_KEYS, 'options.holderInfo');
  const { app } = holderInfo;
  const label = `${hostname()} pid ${process.pid}`;
  if (app === undefined) return label;
  if (typeof app !== 'string') throw new TypeError(`options.holderInfo.app must be a string, got ${describe(app)}`);
  // One line in `flowlock inspect`: no control characters.
  if (app.length === 0 || app.length > MAX_APP_LABEL_LENGTH || /\p{Cc}/u.test(app)) {
    throw new RangeError(
      `options.holderInfo.app must have 1 to ${MAX_APP_LABEL_LENGTH} characters and no control characters`,
    );
  }
  return `${label} (${app})`;
}

function checkSyncReplicas(value: unknown): SyncReplicas | undefined {
  if (value === undefined) return undefined;
  const argument = 'options.syncReplicas';
  checkPlainObject(value, argument);
  checkKnownKeys(value, SYNC_REPLICAS_KEYS, argument);
  const { replicas, timeout } = value;
  if (typeof replicas !== 'number') {
    throw new TypeError(`${argument}.replicas must be a number, got ${describe(replicas)}`);
  }
  if (!Number.isSafeInteger(replicas) || replicas < 1) {
    throw new RangeError(`${argument}.replicas must be a whole number >= 1, got ${replicas}`);
  }
  checkInteger(timeout, `${argument}.timeout`);
  if (timeout < 1) throw new RangeError(`${argument}.timeout must be >= 1 millisecond, got ${timeout}`);
  return { replicas, timeout };
}

/** `tryLock()`, `tryLock(waitTime)`, `tryLock(waitTime, leaseTime)`, `tryLock({ waitTime?, leaseTime?, signal? })`. */
export function resolveTryLockArgs(args: readonly unknown[]): ResolvedAcquire {
  if (args.length > 2) throw new TypeError(`tryLock takes at most 2 arguments, got ${args.length}`);
  const [first, second] = args;
  if (typeof first === 'object' && first !== null) {
    if (args.length > 1) throw new TypeError('tryLock(options) takes no second argument');
    return resolveAcquireOptions(first, 'options');
  }
  return {
    waitTime: first === undefined ? undefined : checkWaitTime(first),
    leaseTime: second === undefined ? -1 : checkLeaseTime(second),
    signal: undefined,
  };
}

/** `lock()`, `lock(leaseTime)`, `lock({ leaseTime?, signal? })`. */
export function resolveLockArgs(args: readonly unknown[]): ResolvedAcquire {
  if (args.length > 1) throw new TypeError(`lock takes at most 1 argument, got ${args.length}`);
  const [first] = args;
  if (typeof first === 'object' && first !== null) {
    checkPlainObject(first, 'options');
    checkKnownKeys(first, LOCK_OPTION_KEYS, 'options');
    return {
      waitTime: undefined,
      leaseTime: first.leaseTime === undefined ? -1 : checkLeaseTime(first.leaseTime, 'options.leaseTime'),
      signal: checkSignal(first.signal, 'options.signal'),
    };
  }
  return {
    waitTime: undefined,
    leaseTime: first === undefined ? -1 : checkLeaseTime(first),
    signal: undefined,
  };
}

/** Options of `withLock` and `acquire` (and the object form of `tryLock`). */
export function resolveAcquireOptions(options: unknown, argument = 'options'): ResolvedAcquire {
  if (options === undefined) return { waitTime: undefined, leaseTime: -1, signal: undefined };
  checkPlainObject(options, argument);
  checkKnownKeys(options, ACQUIRE_OPTION_KEYS, argument);
  return {
    waitTime: options.waitTime === undefined ? undefined : checkWaitTime(options.waitTime, `${argument}.waitTime`),
    leaseTime: options.leaseTime === undefined ? -1 : checkLeaseTime(options.leaseTime, `${argument}.leaseTime`),
    signal: checkSignal(options.signal, `${argument}.signal`),
  };
}

/**
 * Options of a quorum lock's `acquire` and `withLock`: a fixed lease must be at least three node timeouts,
 * or a quorum reached in time could leave no validity, and every acquisition would be given back.
 */
export function resolveQuorumAcquireOptions(options: unknown, nodeTimeout: number): ResolvedAcquire {
  const resolved = resolveAcquireOptions(options);
  if (resolved.leaseTime !== -1 && resolved.leaseTime < 3 * nodeTimeout) {
    throw new RangeError(
      `options.leaseTime must be at least 3 × nodeTimeout (${3 * nodeTimeout} ms), got ${resolved.leaseTime}`,
    );
  }
  return resolved;
}

/** A number of permits (or a latch count): an integer >= 1. */
export function checkPermits(value: unknown, argument = 'permits'): number {
  if (typeof value !== 'number') throw new TypeError(`${argument} must be a number, got ${describe(value)}`);
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${argument} must be a whole number >= 1, got ${value}`);
  }
  return value;
}

/** A change of the number of permits: a whole number, not 0 (negative takes permits away). */
export function checkPermitDelta(value: unknown, argument = 'permits'): number {
  if (typeof value !== 'number') throw new TypeError(`${argument} must be a number, got ${describe(value)}`);
  if (!Number.isSafeInteger(value) || value === 0) {
    throw new RangeError(`${argument} must be a whole number other than 0, got ${value}`);
  }
  return value;
}

export interface ResolvedPermitWait {
  readonly permits: number;
  /** `undefined`: forever. */
  readonly waitTime: number | undefined;
  readonly signal: AbortSignal | undefined;
}

/** A semaphore's `acquire()`, `acquire(permits)`, `acquire({ permits?, signal? })`. */
export function resolveSemaphoreAcquireArgs(args: readonly unknown[]): ResolvedPermitWait {
  if (args.length > 1) throw new TypeError(`acquire takes at most 1 argument, got ${args.length}`);
  const [first] = args;
  if (typeof first === 'object' && first !== null) {
    checkPlainObject(first, 'options');
    checkKnownKeys(first, SEMAPHORE_ACQUIRE_KEYS, 'options');
    return {
      permits: first.permits === undefined ? 1 : checkPermits(first.permits, 'options.permits'),
      waitTime: undefined,
      signal: checkSignal(first.signal, 'options.signal'),
    };
  }
  return { permits: first === undefined ? 1 : checkPermits(first), waitTime: undefined, signal: undefined };
}

/** A semaphore's `tryAcquire()`, `tryAcquire(permits, waitTime?)`, `tryAcquire({ permits?, waitTime?, signal? })`. */
export function resolveSemaphoreTryAcquireArgs(args: readonly unknown[]): ResolvedPermitWait {
  if (args.length > 2) throw new TypeError(`tryAcquire takes at most 2 arguments, got ${args.length}`);
  const [first, second] = args;
  if (typeof first === 'object' && first !== null) {
    if (args.length > 1) throw new TypeError('tryAcquire(options) takes no second argument');
    checkPlainObject(first, 'options');
    checkKnownKeys(first, SEMAPHORE_TRY_ACQUIRE_KEYS, 'options');
    return {
      permits: first.permits === undefined ? 1 : checkPermits(first.permits, 'options.permits'),
      waitTime: first.waitTime === undefined ? 0 : checkWaitTime(first.waitTime, 'options.waitTime'),
      signal: checkSignal(first.signal, 'options.signal'),
    };
  }
  return {
    permits: first === undefined ? 1 : checkPermits(first),
    waitTime: second === undefined ? 0 : checkWaitTime(second),
    signal: undefined,
  };
}

/** A latch's `await()`, `await(waitTime)`, `await({ waitTime?, signal? })`. */
export function resolveLatchAwaitArgs(args: readonly unknown[]): Omit<ResolvedPermitWait, 'permits'> {
  if (args.length > 1) throw new TypeError(`await takes at most 1 argument, got ${args.length}`);
  const [first] = args;
  if (typeof first === 'object' && first !== null) {
    checkPlainObject(first, 'options');
    checkKnownKeys(first, LATCH_AWAIT_KEYS, 'options');
    return {
      waitTime: first.waitTime === undefined ? undefined : checkWaitTime(first.waitTime, 'options.waitTime'),
      signal: checkSignal(first.signal, 'options.signal'),
    };
  }
  return { waitTime: first === undefined ? undefined : checkWaitTime(first), signal: undefined };
}

/** Options of `LockClient.close()`. */
export interface CloseOptions {
  /**
   * At most how long, in milliseconds, close() waits for Redis: for the replies of calls in flight and for
   * the releases of the holds this client still has. When it runs out, close() rejects with a
   * `LocksNotReleasedError` that names every hold it could not release (each stays in Redis until its lease
   * runs out), and sends nothing more.
   * @default watchdogTimeout (for the calls in flight; the releases then get what is left of it)
   */
  readonly timeout?: number;
}

const CLOSE_OPTION_KEYS: ReadonlySet<string> = new Set(['timeout']);

/** Options of `close()`: the timeout in ms, or undefined for the default. */
export function resolveCloseOptions(options: unknown): number | undefined {
  if (options === undefined) return undefined;
  checkPlainObject(options, 'options');
  checkKnownKeys(options, CLOSE_OPTION_KEYS, 'options');
  return options.timeout === undefined ? undefined : checkWaitTime(options.timeout, 'options.timeout');
}
