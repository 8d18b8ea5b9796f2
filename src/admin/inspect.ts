/**
 * `inspectLock`: everything Redis knows about one name of the lock family, read in one MULTI (every key of
 * a name shares its slot): the key's type, TTL and content, the holds' side fields (fencing token, holder
 * info) and an earlier version's per-name fencing counter, the fair lock's queue,
 * the read-write lock's waiting writers, the semaphores' permit leases and queue. The kind is told by the
 * keys' shapes, since the hash and string layouts are Redisson's and carry no marker; what the keys cannot
 * tell apart is said in `alsoMatches` (a held lock with no waiters looks the same as a fair one).
 */
import type { RedisClient } from '../options.js';
import type { AdminCommand, AdminReply } from '../redis/adapter.js';
import { checkLockName } from '../options.js';
import {
  clientRecordKey,
  fairLockKeys,
  keySlot,
  latchKeys,
  lockKeys,
  permitPlace,
  readTimeoutKey,
  readWriteLockKeys,
  semaphoreKeys,
  type FairLockKeys,
  type LatchKeys,
  type LockKeys,
  type ReadWriteLockKeys,
  type SemaphoreKeys,
} from '../redis/keys.js';
import { isLockShaped, parseHolders, type Holder, type LockKind } from './shape.js';
import {
  adminTarget,
  checkKind,
  checkOptions,
  hashOf,
  pairsOf,
  PreconditionError,
  refusalOf,
  subscriberCounts,
  timeReply,
  transaction,
  type AdminTarget,
} from './target.js';

/** A waiter's place in Redis: a fair-queue entry, a waiting writer, a semaphore's permit-queue entry. */
export interface QueueEntry {
  /** Its id: the waiter id, the writer's write field, or `<permits>|<clientId>|<n>`. */
  readonly id: string;
  /** Permits a semaphore waiter waits for; null for lock waiters. */
  readonly permits: number | null;
  /** Milliseconds until the entry counts as abandoned unless its waiter refreshes it (negative: overdue). */
  readonly deadlineInMs: number | null;
}

/** A permit of an expirable semaphore that is out. */
export interface PermitLease {
  /** 32 lowercase hex digits (Redisson's form), usable with `releaseOwner`. */
  readonly permitId: string;
  /** Milliseconds until its lease ends (negative: ended, not reclaimed yet); null: no lease. */
  readonly leaseMs: number | null;
}

/** A semaphore's permits. */
export interface Permits {
  readonly available: number;
  /** Permits out (an expirable semaphore's leases); null for a plain semaphore, whose permits have no record. */
  readonly out: number | null;
  /** The first leases, soonest to end first. */
  readonly leases: readonly PermitLease[];
}

/** What `inspectLock` (and each entry of `listLocks`) reports about a name. JSON-ready: no undefined, no bigint. */
export interface LockInfo {
  readonly name: string;
  /** The main key (hash or string), as the server names it. */
  readonly key: string;
  /** The key's Redis type: `hash`, `string`, or `none` when it does not exist. */
  readonly type: string;
  /** The best reading of the keys; null when nothing of the family is there. */
  readonly kind: LockKind | null;
  /** Other kinds that would leave the same keys (pass `kind` to read the name as one of them). */
  readonly alsoMatches: readonly LockKind[];
  /** A lock with a holder, or an expirable semaphore with a permit out. */
  readonly held: boolean;
  /** The key's remaining TTL; null when it has none or does not exist. */
  readonly ttlMs: number | null;
  /**
   * The fencing token of the current plain, fair or write hold (decimal string); for a hold of an earlier
   * version, its per-name counter. null when free, read-held or held by a Java client, and for the
   * semaphores and the latch.
   */
  readonly fencingToken: string | null;
  /** A read-write lock's mode; null otherwise. */
  readonly mode: 'read' | 'write' | null;
  /** Holders, oldest first. */
  readonly owners: readonly Holder[];
  /** The first waiters in Redis: fair-queue entries, waiting writers or the permit queue, in order. */
  readonly queue: readonly QueueEntry[];
  readonly queueLength: number;
  /** For the semaphores; null otherwise. */
  readonly permits: Permits | null;
  /** A count-down latch's count (0: open); null otherwise. */
  readonly count: number | null;
  /** Subscriber connections on the channels its waiters listen on; null when not counted (`listLocks`). */
  readonly waitingConnections: number | null;
  /** Those channels (at most the first 100). */
  readonly channels: readonly string[];
  readonly slot: number;
  /** `host:port` of the master that holds the keys. */
  readonly node: string;
  /**
   * What could not be read because the server refused a command (an ACL, a managed service that blocks it),
   * and what that leaves unknown: one sentence each. Empty when everything was read.
   */
  readonly notices: readonly string[];
}

/** Options of `inspectLock`. */
export interface InspectOptions {
  /**
   * The lock clients' `keyPrefix` (after the Redis client's own keyPrefix, as for `createLockClient`).
   * @default ''
   */
  readonly prefix?: string;
  /** Read the name as this kind, when its keys cannot tell (a fair lock without waiters). @default detected */
  readonly kind?: LockKind;
}

/** At most this many queue entries, leases and channels are read and reported. */
const MAX_ENTRIES = 100;
/** At most this many read-hold timeout keys are read (each reader's longest lease). */
const MAX_READ_TIMEOUTS = 200;
/** Redisson's score of a permit without a lease. */
const NO_LEASE = 922337203685477;

/** Every family member's keys for one name (they share the main key and the slot). */
export interface FamilyKeys {
  readonly lock: LockKeys;
  readonly fair: FairLockKeys;
  readonly readWrite: ReadWriteLockKeys;
  readonly semaphore: SemaphoreKeys;
  readonly latch: LatchKeys;
}

export function familyKeys(target: AdminTarget, name: string): FamilyKeys {
  const { prefix, cluster } = target;
  return {
    lock: lockKeys(prefix, name, cluster),
    fair: fairLockKeys(prefix, name, cluster),
    readWrite: readWriteLockKeys(prefix, name, cluster),
    semaphore: semaphoreKeys(prefix, name, cluster),
    latch: latchKeys(prefix, name, cluster),
  };
}

/** What one MULTI read of a name returns. */
interface Snapshot {
  readonly name: string;
  readonly keys: FamilyKeys;
  readonly nowMs: number;
  readonly type: string;
  readonly pttl: number;
  readonly hash: Readonly<Record<string, string>>;
  readonly value: string | null;
  /** The lock's hold key: this library's side fields of the holds (`<field>:token`, `<field>:info`, …). */
  readonly side: Readonly<Record<string, string>>;
  /** An earlier version's per-name fencing counter. */
  readonly legacyFence: string | null;
  readonly fairQueue: readonly string[];
  readonly fairQueueLength: number;
  readonly fairDeadlines: ReadonlyMap<string, number>;
  readonly writers: readonly (readonly [string, number])[];
  readonly writersLength: number;
  readonly leases: readonly (readonly [Buffer, number])[];
  readonly leasesLength: number;
  readonly permitQueue: readonly string[];
  readonly permitQueueLength: number;
  readonly permitDeadlines: ReadonlyMap<string, number>;
  /** Holder records (lua/client/record.lua) by client id, of the holders without holder info of their own. */
  readonly records: ReadonlyMap<string, string>;
  /** Read holds' remaining leases by field. */
  readonly readLeases: ReadonlyMap<string, number>;
}

const READS = {
  type: 0,
  pttl: 1,
  hash: 2,
  value: 3,
  side: 4,
  legacyFence: 5,
  fairQueueLength: 6,
  fairQueue: 7,
  fairDeadlines: 8,
  writersLength: 9,
  writers: 10,
  leasesLength: 11,
  leases: 12,
  permitQueueLength: 13,
  permitQueue: 14,
  permitDeadlines: 15,
  time: 16,
} as const;

function readCommands({ lock, fair, readWrite, semaphore }: FamilyKeys): AdminCommand[] {
  const key = lock.lockKey;
  const last = MAX_ENTRIES - 1;
  // Same order as READS. The main key comes first: it routes the MULTI on a Cluster.
  return [
    ['TYPE', key],
    ['PTTL', key],
    ['HGETALL', key],
    ['GET', key],
    ['HGETALL', lock.holdKey],
    ['GET', lock.legacyFenceKey],
    ['LLEN', fair.queueKey],
    ['LRANGE', fair.queueKey, 0, last],
    ['ZRANGE', fair.timeoutKey, 0, 10 * MAX_ENTRIES, 'WITHSCORES'],
    ['ZCARD', readWrite.writersKey],
    ['ZRANGE', readWrite.writersKey, 0, last, 'WITHSCORES'],
    ['ZCARD', semaphore.timeoutKey],
    ['ZRANGE', semaphore.timeoutKey, 0, last, 'WITHSCORES'],
    ['LLEN', semaphore.queueKey],
    ['LRANGE', semaphore.queueKey, 0, last],
    ['ZRANGE', semaphore.deadlinesKey, 0, 10 * MAX_ENTRIES, 'WITHSCORES'],
    ['TIME'],
  ];
}

/** The value of a reply; a WRONGTYPE error (a key of another kind) reads as nothing. */
function valueOf(reply: AdminReply | undefined): unknown {
  if (!reply) return undefined;
  if (reply.error) {
    if (/^WRONGTYPE/.test(reply.error.message)) return undefined;
    throw reply.error;
  }
  return reply.value;
}

function strings(reply: AdminReply | undefined): string[] {
  const value = valueOf(reply);
  return Array.isArray(value) ? value.map(String) : [];
}

/** A `ZRANGE … WITHSCORES` reply as member and score pairs (members as text, or as Buffers for binary ones). */
function scored<T extends string | Buffer>(reply: AdminReply | undefined, binary = false): [T, number][] {
  return pairsOf(valueOf(reply)).map(([member, score]) => [
    (binary ? member : String(member)) as T,
    Number(String(score)),
  ]);
}

function integer(reply: AdminReply | undefined): number {
  return Number(valueOf(reply) ?? 0);
}

/** Reads the keys of `name` in one MULTI (and, for read holds, their timeout keys in a second one). */
async function snapshot(target: AdminTarget, name: string): Promise<Snapshot> {
  const keys = familyKeys(target, name);
  const replies = await transaction(target, keys.lock.lockKey, readCommands(keys), new Set([READS.leases]));
  const hash = hashOf(valueOf(replies[READS.hash]));
  const text = valueOf(replies[READS.value]);
  const legacyFence = valueOf(replies[READS.legacyFence]);
  const base: Omit<Snapshot, 'readLeases' | 'records'> = {
    name,
    keys,
    nowMs: timeReply(valueOf(replies[READS.time])),
    type: String(valueOf(replies[READS.type])),
    pttl: integer(replies[READS.pttl]),
    hash,
    value: typeof text === 'string' ? text : null,
    side: hashOf(valueOf(replies[READS.side])),
    legacyFence: typeof legacyFence === 'string' ? legacyFence : null,
    fairQueue: strings(replies[READS.fairQueue]),
    fairQueueLength: integer(replies[READS.fairQueueLength]),
    fairDeadlines: new Map(scored<string>(replies[READS.fairDeadlines])),
    writers: scored<string>(replies[READS.writers]),
    writersLength: integer(replies[READS.writersLength]),
    leases: scored<Buffer>(replies[READS.leases], true),
    leasesLength: integer(replies[READS.leasesLength]),
    permitQueue: strings(replies[READS.permitQueue]),
    permitQueueLength: integer(replies[READS.permitQueueLength]),
    permitDeadlines: new Map(scored<string>(replies[READS.permitDeadlines])),
  };
  const [leases, records] = await Promise.all([readLeases(target, base), holderRecords(target, base)]);
  return { ...base, readLeases: leases, records };
}

/**
 * The holder records of the lock clients whose holds have no holder info (a young plain-lock hold, a fixed
 * lease): one GET per such client, each routed to its record's slot.
 */
async function holderRecords(
  target: AdminTarget,
  { hash, side }: Pick<Snapshot, 'hash' | 'side'>,
): Promise<Map<string, string>> {
  const records = new Map<string, string>();
  const clients = new Set(parseHolders(hash, 0, new Map(), side).flatMap((h) => (h.who === null ? [h.clientId] : [])));
  await Promise.all(
    [...clients].map(async (clientId) => {
      const key = clientRecordKey(target.prefix, clientId);
      const [reply] = await transaction(target, key, [['GET', key]]);
      const label = valueOf(reply);
      if (typeof label === 'string') records.set(clientId, label);
    }),
  );
  return records;
}

/**
 * Each reader's longest remaining lease, from its per-hold timeout keys (`<timeoutBase>:<owner>:
 * rwlock_timeout:<k>`): a reader whose keys all ran out is dead, kept in the hash by other readers' leases.
 */
async function readLeases(
  target: AdminTarget,
  { hash, keys }: Pick<Snapshot, 'hash' | 'keys'>,
): Promise<Map<string, number>> {
  const leases = new Map<string, number>();
  if (hash['mode'] === undefined) return leases;
  const probes: [string, AdminCommand][] = [];
  for (const holder of parseHolders(hash, 0)) {
    if (holder.mode !== 'read') continue;
    for (let k = 1; k <= holder.holdCount && probes.length < MAX_READ_TIMEOUTS; k++) {
      probes.push([holder.owner, ['PTTL', readTimeoutKey(keys.readWrite.timeoutBase, holder.owner, k)]]);
    }
  }
  if (probes.length === 0) return leases;
  const replies = await transaction(
    target,
    keys.lock.lockKey,
    probes.map(([, command]) => command),
  );
  probes.forEach(([owner], i) => {
    const ttl = Math.max(0, integer(replies[i]));
    leases.set(owner, Math.max(leases.get(owner) ?? 0, ttl));
  });
  return leases;
}

const HASH_KINDS: ReadonlySet<LockKind> = new Set(['lock', 'fair-lock', 'read-write-lock']);

/** The kinds the keys fit, best reading first. */
function detectKinds(s: Snapshot): LockKind[] {
  const permitKinds: LockKind[] = ['semaphore', 'permit-expirable-semaphore'];
  switch (s.type) {
    case 'hash':
      // An application's hash is none of ours (a read-write lock's `mode` may outlive its last holder).
      if (!isLockShaped(s.hash) && Object.keys(s.hash).some((field) => field !== 'mode')) return [];
      if (s.hash['mode'] !== undefined) return ['read-write-lock'];
      return s.fairQueueLength > 0 || s.fairDeadlines.size > 0 ? ['fair-lock'] : ['lock', 'fair-lock'];
    case 'string':
      if (!/^-?\d+$/.test(s.value ?? '')) return [];
      if (s.leasesLength > 0) return ['permit-expirable-semaphore'];
      if (s.permitQueueLength > 0) return permitKinds;
      return [...permitKinds, 'count-down-latch'];
    case 'none':
      // Waiters or leases left behind name the kind; side fields and counters are shared by the three locks.
      if (s.fairQueueLength > 0) return ['fair-lock'];
      if (s.writersLength > 0) return ['read-write-lock'];
      if (s.leasesLength > 0) return ['permit-expirable-semaphore'];
      if (s.permitQueueLength > 0) return permitKinds;
      return s.legacyFence === null && Object.keys(s.side).length === 0 ? [] : ['lock', 'fair-lock', 'read-write-lock'];
    default:
      return [];
  }
}

/** Whether a key of Redis type `type` can be a `kind`. */
function fits(kind: LockKind, type: string): boolean {
  return type === 'none' || type === (HASH_KINDS.has(kind) ? 'hash' : 'string');
}

/** The channels `kind`'s waiters listen on, for this snapshot. */
function channelsOf(s: Snapshot, kind: LockKind): string[] {
  const { lock, fair, readWrite, semaphore, latch } = s.keys;
  switch (kind) {
    case 'lock':
      return [lock.channel];
    case 'fair-lock':
      // Each waiter has its own channel; a release wakes only the head's.
      return s.fairQueue.map((id) => `${fair.channel}:${id}`);
    case 'read-write-lock':
      return [readWrite.channel];
    case 'count-down-latch':
      return [latch.channel];
    default:
      // Queued waiters are woken on the wake channel, while there are any.
      return s.permitQueue.length > 0 ? [semaphore.channel, semaphore.wakeChannel] : [semaphore.channel];
  }
}

function describe(
  s: Snapshot,
  kind: LockKind | null,
  alsoMatches: readonly LockKind[],
  node: string,
  waiting: { readonly connections: number | null; readonly channels: readonly string[] },
  notices: readonly string[] = [],
): LockInfo {
  const isLock = kind !== null && HASH_KINDS.has(kind);
  const owners = isLock && s.type === 'hash' ? parseHolders(s.hash, s.nowMs, s.readLeases, s.side, s.records) : [];
  const exclusive = owners.find((holder) => holder.mode !== 'read');
  const untilDeadline = (score: number | undefined): number | null =>
    score === undefined ? null : Math.round(score - s.nowMs);
  let queue: QueueEntry[] = [];
  let queueLength = 0;
  if (kind === 'fair-lock') {
    queue = s.fairQueue.map((id) => ({ id, permits: null, deadlineInMs: untilDeadline(s.fairDeadlines.get(id)) }));
    queueLength = s.fairQueueLength;
  } else if (kind === 'read-write-lock') {
    queue = s.writers.map(([id, score]) => ({ id, permits: null, deadlineInMs: untilDeadline(score) }));
    queueLength = s.writersLength;
  } else if (kind === 'semaphore' || kind === 'permit-expirable-semaphore') {
    queue = s.permitQueue.map((place) => {
      const { entry: id, deadline } = permitPlace(place);
      return {
        id,
        permits: Number(/^(\d+)\|/.exec(id)?.[1] ?? 0),
        deadlineInMs: untilDeadline(deadline ?? s.permitDeadlines.get(id)),
      };
    });
    queueLength = s.permitQueueLength;
  }
  const expirable = kind === 'permit-expirable-semaphore';
  const permits: Permits | null =
    kind === 'semaphore' || expirable
      ? {
          available: Number(s.value ?? 0),
          out: expirable ? s.leasesLength : null,
          leases: s.leases.map(([id, score]) => ({
            permitId: id.toString('hex'),
            leaseMs: score === NO_LEASE ? null : Math.round(score - s.nowMs),
          })),
        }
      : null;
  const mode = kind === 'read-write-lock' ? s.hash['mode'] : undefined;
  return {
    name: s.name,
    key: s.keys.lock.lockKey,
    type: s.type,
    kind,
    alsoMatches,
    held: isLock ? owners.length > 0 : expirable && s.leasesLength > 0,
    ttlMs: s.pttl >= 0 ? s.pttl : null,
    fencingToken: exclusive ? (s.side[`${exclusive.owner}:token`] ?? s.legacyFence) : null,
    mode: mode === 'read' || mode === 'write' ? mode : null,
    owners,
    queue,
    queueLength,
    permits,
    count: kind === 'count-down-latch' ? Number(s.value ?? 0) : null,
    waitingConnections: waiting.connections,
    channels: waiting.channels,
    slot: keySlot(s.keys.lock.lockKey),
    node,
    notices,
  };
}

/**
 * Reads `name` as `kind`, or as the kind its keys show; throws a PreconditionError when `kind` does not fit
 * the key's type. No subscriber counts (`listLocks` reads many names).
 */
export async function readLock(target: AdminTarget, name: string, kind?: LockKind, node?: string): Promise<LockInfo> {
  const s = await snapshot(target, name);
  const [chosen, also] = choose(s, kind);
  return describe(s, chosen, also, node ?? (await target.nodes.masterOf(s.keys.lock.lockKey)).address, {
    connections: null,
    channels: chosen ? channelsOf(s, chosen) : [],
  });
}

function choose(s: Snapshot, kind: LockKind | undefined): [LockKind | null, LockKind[]] {
  if (kind !== undefined) {
    if (!fits(kind, s.type)) throw new PreconditionError(`${s.name} is a ${s.type}, which a ${kind} never is`);
    return [kind, []];
  }
  const [best = null, ...rest] = detectKinds(s);
  return [best, rest];
}

/**
 * Everything Redis knows about `name`: its kind, holders (with holder info: since when, which host and
 * process), TTL, fencing token, waiters queued in Redis and subscriber connections on its channels,
 * permits or count, and where it lives (slot, node). A name with no keys reads as free (`kind` null when
 * nothing of the family is there). Read only.
 */
export async function inspectLock(client: RedisClient, name: string, options?: InspectOptions): Promise<LockInfo> {
  checkLockName(name);
  const { prefix, kind } = checkOptions(options, ['prefix', 'kind']);
  const target = adminTarget(client, prefix);
  const hint = checkKind(kind, 'options.kind');
  const s = await snapshot(target, name);
  let [chosen, also] = choose(s, hint);
  const node = (await target.nodes.masterOf(s.keys.lock.lockKey)).address;
  const notices: string[] = [];
  let pubsubRefused = false;
  // Subscriber counts where the server allows PUBSUB; without them the reading stands, and says so (once).
  const count = async (channels: readonly string[]): Promise<number | null> => {
    if (pubsubRefused) return null;
    try {
      return (await subscriberCounts(target, channels, notices)).reduce((sum, n) => sum + n, 0);
    } catch (error) {
      const refused = refusalOf(error);
      if (refused === undefined) throw error;
      pubsubRefused = true;
      notices.push(`subscriber connections unknown (${refused}): waiting clients are not counted`);
      return null;
    }
  };
  // A counter alone cannot say whether it counts permits or a latch's count-downs: whoever waits on it can.
  if (chosen === 'semaphore' && also.includes('count-down-latch')) {
    const latchWaiters = await count(channelsOf(s, 'count-down-latch'));
    const permitWaiters = await count(channelsOf(s, 'semaphore'));
    if (latchWaiters !== null && permitWaiters !== null && latchWaiters > permitWaiters)
      [chosen, also] = ['count-down-latch', ['semaphore', 'permit-expirable-semaphore']];
  }
  const channels = chosen ? channelsOf(s, chosen) : [];
  const connections = await count(channels);
  // Each count may meet the same refusal of CLUSTER NODES: said once.
  return describe(s, chosen, also, node, { connections, channels }, [...new Set(notices)]);
}
