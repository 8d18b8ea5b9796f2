/** Checkers for the fault tests: overlap of critical sections, fencing order, handoff statistics, hygiene. */
import type { Redis } from 'ioredis';

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
  const channel = `redisson_lock__channel:{${name}}`;
  const channels = ((await redis.pubsub('CHANNELS')) as string[]).filter((c) => c === channel);
  return { keys: keys.filter((k) => !/flowlock:(fence|released):/.test(k)), channels };
}
