/** Checkers for the fault tests: overlap of critical sections, fencing order, handoff statistics, hygiene. */
import type { Redis } from 'ioredis';
import { redissonPrefixName } from '../../src/redis/keys.ts';

export interface Section {
  readonly owner: string;
  readonly enter: bigint;
  readonly exit: bigint;
  readonly token?: bigint | undefined;
}

/** Pairs of sections of different owners whose [enter, exit] intervals overlap (C1). */
export function overlaps(sections: readonly Section[]): [Section, Section][] {
  const sorted = [...sections].sort((a, b) => (a.enter < b.enter ? -1 : a.enter > b.enter ? 1 : 0));
  const found: [Section, Section][] = [];
  let latest: Section | undefined;
  for (const section of sorted) {
    if (latest && section.enter < latest.exit && section.owner !== latest.owner) found.push([latest, section]);
    if (!latest || section.exit > latest.exit) latest = section;
  }
  return found;
}

/** Whether tokens rise strictly in the order sections were entered (C2). */
export function tokensRise(sections: readonly Section[]): boolean {
  const sorted = [...sections].sort((a, b) => (a.enter < b.enter ? -1 : 1));
  for (let i = 1; i < sorted.length; i++) {
    const before = sorted[i - 1]?.token;
    const after = sorted[i]?.token;
    if (before === undefined || after === undefined || after <= before) return false;
  }
  return true;
}

/** Gaps in ms between one section's exit and the next section's enter, in time order. */
export function handoffGaps(sections: readonly Section[]): number[] {
  const sorted = [...sections].sort((a, b) => (a.enter < b.enter ? -1 : 1));
  const gaps: number[] = [];
  for (let i = 1; i < sorted.length; i++) {
    const previous = sorted[i - 1];
    const current = sorted[i];
    if (previous && current) gaps.push(Number(current.enter - previous.exit) / 1e6);
  }
  return gaps;
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

/**
 * Keys of lock `name` and its release channel left on the server (C6). The fencing counter (persistent by
 * design) and release memos (they expire after 30 s) are documented leftovers and not counted.
 */
export async function leftovers(redis: Redis, name: string): Promise<{ keys: string[]; channels: string[] }> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch.filter((key) => key === name || key.includes(`{${name}}`)));
  } while (cursor !== '0');
  const channel = redissonPrefixName('redisson_lock__channel', name);
  const channels = ((await redis.pubsub('CHANNELS')) as string[]).filter((c) => c === channel);
  return { keys: keys.filter((k) => !/flowlock:(fence|released):/.test(k)), channels };
}

/** A section of a read-write lock (`read` or `write`; a plain or fair lock's section counts as `write`). */
export interface KindedSection extends Section {
  readonly kind: 'read' | 'write' | 'lock';
  /** Readers: the counter value they read. */
  readonly value?: number | undefined;
}

const byEnter = <S extends Section>(a: S, b: S): number => (a.enter < b.enter ? -1 : a.enter > b.enter ? 1 : 0);

/**
 * Pairs of sections of different owners whose [enter, exit] intervals overlap although at least one of
 * them writes: a reader beside a writer, or two writers. Readers beside readers are the point of the lock.
 */
export function rwOverlaps(sections: readonly KindedSection[]): [KindedSection, KindedSection][] {
  const sorted = [...sections].sort(byEnter);
  const found: [KindedSection, KindedSection][] = [];
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!;
    for (let j = i + 1; j < sorted.length && sorted[j]!.enter < a.exit; j++) {
      const b = sorted[j]!;
      if (a.owner !== b.owner && (a.kind !== 'read' || b.kind !== 'read')) found.push([a, b]);
    }
  }
  return found;
}

/** The most sections inside [enter, exit] at one instant (readers of a read-write lock, permit holders). */
export function maxConcurrent(sections: readonly { readonly enter: bigint; readonly exit: bigint }[]): number {
  // At equal times an exit comes before an enter: touching sections do not count as concurrent.
  const events = sections
    .flatMap((s) => [
      { at: s.enter, delta: 1 },
      { at: s.exit, delta: -1 },
    ])
    .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.delta - b.delta));
  let inside = 0;
  let most = 0;
  for (const event of events) {
    inside += event.delta;
    most = Math.max(most, inside);
  }
  return most;
}

/**
 * Readers that did not see the latest write: each reader must read the counter as the number of write
 * sections that exited before it entered, and its lease must carry the fencing token of the latest of
 * them (0 before any). Sound only when rwOverlaps() found nothing: every writer is then wholly before or
 * wholly after each reader, and a writer granted before a reader's grant released before it.
 */
export function staleReads(sections: readonly KindedSection[]): KindedSection[] {
  const writers = sections.filter((s) => s.kind !== 'read').sort((a, b) => (a.exit < b.exit ? -1 : 1));
  const readers = sections.filter((s) => s.kind === 'read').sort(byEnter);
  const stale: KindedSection[] = [];
  let before = 0;
  let latest = 0n;
  for (const reader of readers) {
    while (before < writers.length && writers[before]!.exit < reader.enter) {
      const token = writers[before]!.token ?? 0n;
      if (token > latest) latest = token;
      before++;
    }
    // Before the first recorded write, a read carries the token of whatever write grant came last, which
    // need not be a recorded section (a holder killed before the run): only its count is checked then.
    if (reader.value !== before || (before > 0 && reader.token !== latest)) stale.push(reader);
  }
  return stale;
}

/**
 * The fair lock's queue and fencing counter read atomically (MULTI: LRANGE redisson_lock_queue:{name},
 * GET of the shared fencing counter): `fence` is the token of the latest grant made before the snapshot (the
 * run locks one name on its server).
 */
export interface QueueSnapshot {
  readonly queue: readonly string[];
  readonly fence: bigint;
}

/** A grant the fair lock's FIFO forbids: `granted` got the lock (token) while `waiting` was queued ahead. */
export interface OrderViolation {
  readonly waiting: string;
  readonly granted: string;
  readonly grantedToken: bigint;
  readonly waitingToken: bigint;
  readonly snapshotFence: bigint;
}

/**
 * Grants out of the fair lock's queue order. Each owner must run one waiting flow (its waiter id is then
 * `<clientId>:w0`, and its entry in the queue always belongs to its next section); `owners` maps client
 * ids to section owners. The check uses fencing tokens, not clocks, so it has no timing slack: tokens rise
 * on every grant, so the grants made after a snapshot are exactly the sections with a token above its
 * `fence` (the holder at that instant has `fence` itself). For every owner Y queued in a snapshot, its
 * next grant is its first section with a token above `fence`; FIFO allows, between the snapshot and that
 * grant, one grant to each owner queued ahead of Y and none to anybody else (an owner not in the queue
 * then could only enter it behind Y). Owners queued but never granted again (killed) constrain nothing.
 * A waiter purged for missing its refreshes, or the loss of the queue (a restart), breaks the premise.
 */
export function fifoViolations(
  snapshots: readonly QueueSnapshot[],
  sections: readonly Section[],
  owners: ReadonlyMap<string, string>,
): OrderViolation[] {
  const tokens = new Map<string, bigint[]>();
  for (const section of sections) {
    if (section.token === undefined) continue;
    let list = tokens.get(section.owner);
    if (!list) tokens.set(section.owner, (list = []));
    list.push(section.token);
  }
  for (const list of tokens.values()) list.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  /** Index of the first token above `t`. */
  const firstAbove = (list: readonly bigint[], t: bigint): number => {
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid]! > t) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  const found = new Map<string, OrderViolation>();
  for (const { queue, fence } of snapshots) {
    const order = queue.map((id) => owners.get(id.replace(/:w\d+$/, '')));
    order.forEach((waiting, position) => {
      if (waiting === undefined) return;
      const own = tokens.get(waiting) ?? [];
      const waitingToken = own[firstAbove(own, fence)];
      if (waitingToken === undefined) return;
      const ahead = new Set(order.slice(0, position));
      for (const [granted, list] of tokens) {
        if (granted === waiting) continue;
        const from = firstAbove(list, fence);
        const between = list.slice(from, firstAbove(list, waitingToken - 1n));
        const allowed = ahead.has(granted) ? 1 : 0;
        for (const grantedToken of between.slice(allowed)) {
          found.set(`${grantedToken}/${waitingToken}`, {
            waiting,
            granted,
            grantedToken,
            waitingToken,
            snapshotFence: fence,
          });
        }
      }
    });
  }
  return [...found.values()];
}

// ---- Counted permits (semaphores) ----

/** A critical section under a semaphore: [enter, exit] inside the grant, `requested` when the wait began. */
export interface PermitSection {
  readonly owner: string;
  readonly requested: bigint;
  readonly enter: bigint;
  readonly exit: bigint;
}

/**
 * Stalls of a semaphore of `permits` permits: the stretches of time (ms) during which some section was
 * waiting (between its `requested` and its `enter`) while fewer than `permits` sections were inside. Every
 * handoff shows one (a release's round trip, the waiter's wake and attempt); a wake-up lost and never
 * recovered shows as one that lasts until the next release. Longest first.
 */
export function permitStalls(sections: readonly PermitSection[], permits: number): number[] {
  const events = sections
    .flatMap((s) => [
      { at: s.requested, inside: 0, waiting: 1 },
      { at: s.enter, inside: 1, waiting: -1 },
      { at: s.exit, inside: -1, waiting: 0 },
    ])
    .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
  const stalls: number[] = [];
  let inside = 0;
  let waiting = 0;
  let since: bigint | undefined;
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!;
    inside += event.inside;
    waiting += event.waiting;
    // Events at one instant settle together before the state is judged.
    if (events[i + 1]?.at === event.at) continue;
    const stalled = waiting > 0 && inside < permits;
    if (stalled && since === undefined) since = event.at;
    if (!stalled && since !== undefined) {
      stalls.push(Number(event.at - since) / 1e6);
      since = undefined;
    }
  }
  return stalls.sort((a, b) => b - a);
}

/**
 * Names of the connections that have a pub/sub subscription now (`CLIENT LIST TYPE pubsub`, classic,
 * pattern or shard channels): a worker that names its connection (ioredis `connectionName`, which the
 * library's pub/sub duplicate inherits) is listed once one of its flows waits, whatever the channel.
 */
export async function subscribedClients(redis: Redis): Promise<Set<string>> {
  const list = String(await redis.call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
  const names = new Set<string>();
  for (const line of list.split('\n')) {
    const field = (key: string): string => new RegExp(`(?:^| )${key}=(\\S*)`).exec(line)?.[1] ?? '';
    const subscriptions = Number(field('sub') || 0) + Number(field('psub') || 0) + Number(field('ssub') || 0);
    if (subscriptions > 0 && field('name') !== '') names.add(field('name'));
  }
  return names;
}
