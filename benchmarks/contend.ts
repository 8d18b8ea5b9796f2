/**
 * The contention loop shared by scenario (c), where each worker process runs it, and (d), where 200 flows
 * run it in one process: take the lock, do a racy read-modify-write of a counter on a separate resource
 * Redis with a 1 ms critical section, release; until the deadline. Times are process.hrtime.bigint(), one
 * monotonic clock for every process on the machine.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { Adapter } from './adapters.ts';

export interface ContendedSection {
  readonly owner: string;
  readonly waitStart: bigint;
  readonly enter: bigint;
  readonly exit: bigint;
}

export const CRITICAL_SECTION_MS = 1;
export const CONTENDED_LEASE_MS = 10_000;

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
