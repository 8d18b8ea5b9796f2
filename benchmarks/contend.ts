/**
 * The contention loops. `contend` is shared by scenarios (c) and (f), where each worker process runs it, and
 * (d), where 200 flows run it in one process: take the lock, do a racy read-modify-write of a counter on a
 * separate resource Redis with a 1 ms critical section, release; until the deadline. `contendReadWrite` is
 * (g)'s: the same, but 90 % of the sections only read the counter under the shared (read) side of the lock.
 * `contendSemaphore` is (h)'s: one permit of a semaphore, held 1 ms while counted among the holders on the
 * resource Redis. Times are process.hrtime.bigint(), one monotonic clock for every process on the machine.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { Adapter } from './adapters.ts';

export interface ContendedSection {
  readonly owner: string;
  readonly waitStart: bigint;
  readonly enter: bigint;
  readonly exit: bigint;
  /** (g) only: whether the section read under the shared side or wrote under the exclusive side. */
  readonly kind?: 'read' | 'write';
  /** (h) only: the holders of a permit counted on the resource Redis as this section entered, itself included. */
  readonly holders?: number;
}

export const CRITICAL_SECTION_MS = 1;
export const CONTENDED_LEASE_MS = 10_000;
/** (g): the share of sections that only read. */
export const READ_SHARE = 0.9;
/** (h): the permits of the semaphore. */
export const SEMAPHORE_PERMITS = 3;

export async function contend(
  adapter: Adapter,
  resource: Redis,
  key: string,
  owner: string,
  until: bigint,
): Promise<ContendedSection[]> {
  const sections: ContendedSection[] = [];
  while (process.hrtime.bigint() < until) {
    const waitStart = process.hrtime.bigint();
    const release = await adapter.acquire(key, CONTENDED_LEASE_MS);
    const enter = process.hrtime.bigint();
    const value = Number((await resource.get(`${key}:counter`)) ?? 0);
    await sleep(CRITICAL_SECTION_MS);
    await resource.set(`${key}:counter`, value + 1);
    const exit = process.hrtime.bigint();
    await release();
    sections.push({ owner, waitStart, enter, exit });
  }
  return sections;
}

/** A small seeded generator (mulberry32), so that every library sees the same read/write sequence. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * (g): reads (READ_SHARE of the sections, drawn from `seed`) take the shared side (`acquireShared`, or the
 * plain lock where the adapter has no shared side) and read the counter during a 1 ms section; writes take
 * the exclusive side and do (c)'s racy increment.
 */
export async function contendReadWrite(
  adapter: Adapter,
  resource: Redis,
  key: string,
  owner: string,
  until: bigint,
  seed: number,
): Promise<ContendedSection[]> {
  const sections: ContendedSection[] = [];
  const next = random(seed);
  const counter = `${key}:counter`;
  while (process.hrtime.bigint() < until) {
    const kind = next() < READ_SHARE ? 'read' : 'write';
    const waitStart = process.hrtime.bigint();
    const release =
      kind === 'read' && adapter.acquireShared
        ? await adapter.acquireShared(key, CONTENDED_LEASE_MS)
        : await adapter.acquire(key, CONTENDED_LEASE_MS);
    const enter = process.hrtime.bigint();
    const value = Number((await resource.get(counter)) ?? 0);
    await sleep(CRITICAL_SECTION_MS);
    if (kind === 'write') await resource.set(counter, value + 1);
    const exit = process.hrtime.bigint();
    await release();
    sections.push({ owner, waitStart, enter, exit, kind });
  }
  return sections;
}

/**
 * (h): takes one permit of the semaphore on `key` in the library's auto-renewing mode (no lease given),
 * counts itself in with INCR on the resource Redis (a count above the permits is a holder too many, in any
 * process), holds 1 ms, counts itself out with DECR, and gives the permit back; until the deadline.
 */
export async function contendSemaphore(
  adapter: Adapter,
  resource: Redis,
  key: string,
  owner: string,
  until: bigint,
): Promise<ContendedSection[]> {
  const sections: ContendedSection[] = [];
  const holdersKey = `${key}:holders`;
  while (process.hrtime.bigint() < until) {
    const waitStart = process.hrtime.bigint();
    const release = await adapter.acquire(key);
    const enter = process.hrtime.bigint();
    const holders = await resource.incr(holdersKey);
    await sleep(CRITICAL_SECTION_MS);
    await resource.decr(holdersKey);
    const exit = process.hrtime.bigint();
    await release();
    sections.push({ owner, waitStart, enter, exit, holders });
  }
  return sections;
}
