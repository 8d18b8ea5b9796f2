/** Stable machine-readable codes of the errors this library throws. */
export type LockErrorCode =
  | 'LOCK_ACQUIRE_TIMEOUT'
  | 'LOCK_NOT_HELD'
  | 'LOCK_LOST'
  | 'LOCK_NO_FLOW'
  | 'LOCK_CLIENT_CLOSED'
  | 'LOCK_REDIS_NOT_OPEN'
  | 'LOCK_NOT_REPLICATED'
  | 'LOCK_UPGRADE'
  | 'PERMIT_NOT_HELD'
  | 'LOCK_RENEWAL_UNANSWERED'
  | 'LOCKS_NOT_RELEASED'
  | 'LOCK_PERMISSION_DENIED'
  | 'LOCK_REDIS_UNAVAILABLE'
  | 'UNSUPPORTED_SERVER'
  | 'LOCK_CROSS_SLOT';

/** Base class of every error the library raises about a lock; `code` is stable across versions. */
export abstract class LockError extends Error {
  abstract override readonly name: string;
  abstract readonly code: LockErrorCode;
  /** The lock's name as given to `getLock`, or `undefined` for errors that concern the whole client. */
  readonly lockName: string | undefined;

  constructor(message: string, lockName: string | undefined, options?: { cause?: unknown }) {
    super(message, options);
    this.lockName = lockName;
  }
}

/** `withLock` / `acquire` could not take the lock within `waitTime`. */
export class LockAcquireTimeoutError extends LockError {
  override readonly name = 'LockAcquireTimeoutError';
  readonly code = 'LOCK_ACQUIRE_TIMEOUT';
  /** How long the caller waited, in milliseconds. */
  readonly waitTime: number;

  constructor(lockName: string, waitTime: number) {
    super(`Could not acquire "${lockName}" within ${waitTime} ms`, lockName);
    this.waitTime = waitTime;
  }
}

/** `unlock()` or `release()` by a flow that does not hold the lock (it expired, was lost or never taken). */
export class LockNotHeldError extends LockError {
  override readonly name = 'LockNotHeldError';
  readonly code = 'LOCK_NOT_HELD';

  constructor(lockName: string, options?: { cause?: unknown }) {
    // Gone because it was lost (its lease ran out, say): the flow did hold it, and the cause says why not now.
    const lost = options?.cause instanceof LockLostError ? `: it was lost (${options.cause.reason})` : '';
    super(
      lost === ''
        ? `Lock "${lockName}" is not held by the current flow; nothing was changed`
        : `Lock "${lockName}" is no longer held by the current flow${lost}; nothing was changed`,
      lockName,
      options,
    );
  }
}

/**
 * A hold ended without being released: the lease lapsed, renewal found another owner, or the client closed.
 * A scoped call (`withLock`) whose hold was lost while its function ran rejects with one after the function
 * resolved: `result` is then what the function returned (its work ran, unprotected for part of it), and
 * `cause` is the loss its lease's signal reported.
 */
export class LockLostError extends LockError {
  override readonly name = 'LockLostError';
  readonly code = 'LOCK_LOST';
  /** Why the hold was lost. */
  readonly reason: string;
  /** What the scoped function returned, when this error reports a loss after it resolved. */
  readonly result: unknown;

  constructor(lockName: string, reason: string, options?: { cause?: unknown; result?: unknown }) {
    super(`Lock "${lockName}" was lost: ${reason}`, lockName, options);
    this.reason = reason;
    this.result = options?.result;
  }
}

/** An imperative call (`tryLock`, `lock`, `unlock`, ...) ran outside any flow. */
export class NoFlowError extends LockError {
  override readonly name = 'NoFlowError';
  readonly code = 'LOCK_NO_FLOW';

  constructor(lockName: string, method: string) {
    super(
      `${method}() on lock "${lockName}" needs an owning flow: wrap the calling code in ` +
        '`await locks.run(async () => { ... })`, or use `lock.withLock(fn)` / `await using lease = await lock.acquire()`',
      lockName,
    );
  }
}

/** The lock client was closed; no further calls are accepted and pending waits end with this error. */
export class LockClientClosedError extends LockError {
  override readonly name = 'LockClientClosedError';
  readonly code = 'LOCK_CLIENT_CLOSED';

  constructor(lockName?: string) {
    super(
      lockName === undefined
        ? 'The lock client is closed'
        : `The lock client is closed: "${lockName}" cannot be acquired, waited for or released through it`,
      lockName,
    );
  }
}

/**
 * The node-redis client (or cluster, or sentinel) given to `createLockClient` is not open: it was never
 * connected, or it was closed. node-redis itself would only say "The client is closed".
 */
export class RedisNotOpenError extends LockError {
  override readonly name = 'RedisNotOpenError';
  readonly code = 'LOCK_REDIS_NOT_OPEN';

  constructor() {
    super(
      'The node-redis client given to createLockClient is not open: call `await client.connect()` before ' +
        'using the lock client (a client closed by close(), quit() or destroy() cannot be used either)',
      undefined,
    );
  }
}

/**
 * `syncReplicas` is on and fewer replicas than required acknowledged a grant within its timeout: the grant
 * was undone (the lock is not held) and the acquisition fails rather than risk a failover losing it.
 */
export class LockNotReplicatedError extends LockError {
  override readonly name = 'LockNotReplicatedError';
  readonly code = 'LOCK_NOT_REPLICATED';
  /** Replicas that had to acknowledge the grant. */
  readonly replicas: number;
  /** Replicas that did, as WAIT reported. */
  readonly acknowledged: number;

  constructor(lockName: string, replicas: number, acknowledged: number) {
    super(
      `Lock "${lockName}" was granted but only ${acknowledged} of ${replicas} required replicas acknowledged it; ` +
        'the grant was undone',
      lockName,
    );
    this.replicas = replicas;
    this.acknowledged = acknowledged;
  }
}

/**
 * A flow that holds a read-write lock only for reading asked for its write lock. Waiting would deadlock
 * (the writer would wait for its own read hold; Redisson waits forever there): release the read hold first,
 * or take the write lock first and then the read lock (a downgrade, which is allowed).
 */
export class LockUpgradeError extends LockError {
  override readonly name = 'LockUpgradeError';
  readonly code = 'LOCK_UPGRADE';

  constructor(lockName: string) {
    super(
      `The current flow holds read-write lock "${lockName}" for reading and asked for its write lock: an ` +
        'upgrade would wait for itself. Release the read lock first, or take the write lock before the read lock',
      lockName,
    );
  }
}

/**
 * `release(permitId)` of an expirable semaphore's permit that is not held: released already, its lease ran
 * out (it was given back to the semaphore then), or never granted. Nothing was changed.
 */
export class PermitNotHeldError extends LockError {
  override readonly name = 'PermitNotHeldError';
  readonly code = 'PERMIT_NOT_HELD';
  readonly permitId: string;

  constructor(semaphoreName: string, permitId: string, options?: { cause?: unknown }) {
    super(
      `Permit ${permitId} of semaphore "${semaphoreName}" is not held; nothing was changed`,
      semaphoreName,
      options,
    );
    this.permitId = permitId;
  }
}

/**
 * The watchdog's renewal of `holds` holds had no answer within `timeoutMs` (Redis unreachable or stalled;
 * ioredis and node-redis queue a command while their connection is down instead of failing it). Published
 * as the error of `tracing:flowlock:renew`, never thrown: the holds are kept until their lease deadline, and
 * a reply that still comes counts.
 */
export class LockRenewalUnansweredError extends LockError {
  override readonly name = 'LockRenewalUnansweredError';
  readonly code = 'LOCK_RENEWAL_UNANSWERED';
  /** How many holds the unanswered call renews. */
  readonly holds: number;
  /** How long it went unanswered, ms. */
  readonly timeoutMs: number;

  constructor(holds: number, timeoutMs: number) {
    super(
      `The watchdog's renewal of ${holds} hold(s) had no answer within ${timeoutMs} ms (Redis unreachable or ` +
        'stalled); the holds are kept until their lease deadline',
      undefined,
    );
    this.holds = holds;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Redis refused a command of the lock client because its user lacks an ACL permission the library needs: a
 * command, a key outside the user's key patterns, or a channel outside its channel patterns (the rule is on
 * the docs' "Where it runs" page). `cause`: the server's refusal. Refused inside a script, the script's
 * commands before the refused one stay applied (Redis does not roll a script back): a release refused for
 * its channel may have freed the lock already.
 */
export class LockPermissionError extends LockError {
  override readonly name = 'LockPermissionError';
  readonly code = 'LOCK_PERMISSION_DENIED';

  constructor(lockName: string | undefined, cause: unknown) {
    const refusal = (cause instanceof Error ? cause.message : String(cause)).split('\n')[0] ?? '';
    super(
      `Redis refused a command of the lock client${lockName === undefined ? '' : ` on "${lockName}"`}: its ` +
        `user lacks an ACL permission the library needs (see "Where it runs" in the docs): ${refusal}`,
      lockName,
      { cause },
    );
  }
}

/**
 * A command of the lock client got no answer from Redis: the client library's command timeout ran out
 * (`reason` `timeout`), or its connection is closed or gave up (`closed`). `cause` is the client library's
 * own error. Whether the command ran is unknown: an acquire is undone if it did.
 */
export class RedisUnavailableError extends LockError {
  override readonly name = 'RedisUnavailableError';
  readonly code = 'LOCK_REDIS_UNAVAILABLE';
  readonly reason: 'timeout' | 'closed';

  constructor(lockName: string | undefined, reason: 'timeout' | 'closed', cause: unknown) {
    const what = reason === 'timeout' ? 'Redis did not answer in time' : 'the connection to Redis is closed';
    // node-redis' errors keep the name "Error": their class says what they are.
    const kind = cause instanceof Error ? (cause.name === 'Error' ? cause.constructor.name : cause.name) : '';
    const detail = cause instanceof Error ? `${kind}${cause.message ? `: ${cause.message}` : ''}` : String(cause);
    super(
      `${lockName === undefined ? '' : `Lock "${lockName}": `}${what} (the Redis client said ${detail})`,
      lockName,
      { cause },
    );
    this.reason = reason;
  }
}

/** A hold that `close()` could not release: it stays in Redis until its lease runs out. */
export interface UnreleasedHold {
  readonly name: string;
  /** The Redis key it is filed under (the lock hash; an expirable semaphore's permit set). */
  readonly key: string;
  /** The owner's field in the lock hash, or a permit's id. */
  readonly owner: string;
  /** When Redis drops it at the latest: its lease after close() began (unless a renewal still queued runs later). */
  readonly expiresBy: Date;
}

/**
 * `close()` could not release every hold of the client: the Redis client was closed first, Redis did not
 * answer within close()'s timeout, or a release failed. Each hold in `holds` stays in Redis, blocking other
 * clients, until its lease runs out (`expiresBy`). The lock client is closed all the same. `cause`: the
 * first failed release's error, if one failed.
 */
export class LocksNotReleasedError extends LockError {
  override readonly name = 'LocksNotReleasedError';
  readonly code = 'LOCKS_NOT_RELEASED';
  readonly holds: readonly UnreleasedHold[];

  constructor(holds: readonly UnreleasedHold[], why: string, options?: { cause?: unknown }) {
    const listed = holds
      .slice(0, 10)
      .map((hold) => `"${hold.name}" (until ${hold.expiresBy.toISOString()} at the latest)`)
      .join(', ');
    const more = holds.length > 10 ? ` and ${holds.length - 10} more` : '';
    super(
      `close() could not release ${holds.length} hold(s), ${why}: ${listed}${more}. They stay in Redis, ` +
        'blocking other clients, until their leases run out',
      holds.length === 1 ? holds[0]?.name : undefined,
      options,
    );
    this.holds = holds;
  }
}

/**
 * The server refused a command of the lock's scripts (`cause`: its error) and is below the floor this
 * library supports, Redis 6.0 or Valkey 7.2: some operations would work and others not (a lock taken and
 * never released). Raised by the call that met the refusal, and by each later one the server refuses. The
 * version is read from `INFO server` once, at the first such refusal; where INFO is denied, the server's own
 * error is raised instead.
 */
export class UnsupportedServerError extends LockError {
  override readonly name = 'UnsupportedServerError';
  readonly code = 'UNSUPPORTED_SERVER';
  /** `Redis` or `Valkey` (by `server_name`). */
  readonly server: string;
  /** Its version (`valkey_version` for a Valkey, which always reports `redis_version` 7.2.4). */
  readonly version: string;

  /** `floor`: the supported versions, as a phrase ("Redis 6.0 (Valkey 7.2)"). */
  constructor(server: string, version: string, floor: string, options?: { cause?: unknown }) {
    super(
      `${server} ${version} is below flowlock's floor, ${floor}: it refused a command of the lock scripts ` +
        '(see cause). Upgrade the server',
      undefined,
      options,
    );
    this.server = server;
    this.version = version;
  }
}

/**
 * The server refused a script call whose keys lie in different hash slots (`CROSSSLOT`, the server's error as
 * `cause`): the endpoint keeps every request in one slot (a proxy-sharded database behind one endpoint, such as
 * Azure Managed Redis with its Enterprise policy or a multi-shard Redis Cloud database, or a cluster-mode
 * server reached by a standalone client), and the lock's keys are not all in one slot there: the key prefix
 * has no hash tag of its own (`app:`), so Redisson's names (`app:redisson_lock__channel:{name}`) hash apart
 * from the lock (`app:name`). A lock client with such a prefix asks once, before its first script call, so
 * it is refused before anything is written, not after an acquire that its release could not undo.
 */
export class LockCrossSlotError extends LockError {
  override readonly name = 'LockCrossSlotError';
  readonly code = 'LOCK_CROSS_SLOT';
  /** The lock client's key prefix ('' for none). */
  readonly keyPrefix: string;

  constructor(lockName: string | undefined, keyPrefix: string, cause: unknown) {
    const fix =
      keyPrefix === ''
        ? "the braces in the lock name make a hash tag that Redisson's names of the lock do not share: use a " +
          'name without braces, or a Cluster client'
        : `keyPrefix "${keyPrefix}" has no hash tag, so a lock's keys hash to different slots: use a keyPrefix ` +
          `with a hash tag, such as "{${keyPrefix.replace(/:$/, '')}}:", no keyPrefix, or a Cluster client ` +
          'where the provider offers the Cluster API';
    super(
      `${lockName === undefined ? '' : `Lock "${lockName}": `}Redis keeps every request in one hash slot here ` +
        `(it answered CROSSSLOT: a proxy-sharded endpoint, or a cluster-mode server reached by a standalone ` +
        `client), and ${fix}`,
      lockName,
      { cause },
    );
    this.keyPrefix = keyPrefix;
  }
}
