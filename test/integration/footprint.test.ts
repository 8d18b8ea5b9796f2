/**
 * The footprint contract (DESIGN.md, "A bounded footprint"): locking many distinct names of every kind once
 * leaves Redis as it found it once the memos' window (30 s) has passed, but for the shared fencing counters
 * and the user's own state (a semaphore's permit count). scripts/footprint.mjs runs the same with 100 000
 * names.
 */
import { describe, expect, it } from 'vitest';
import type { LockClient } from '../../src/index.js';
import { clientKind } from '../support/clients.js';
import { isCluster, uniqueName, until, useRedis, type Client, type Redis } from '../support/fixture.js';

const redis = useRedis();

/** Distinct names per kind. */
const NAMES = 2000;
/** Locks in flight at once. */
const PARALLEL = 50;
/** The memos' window (MEMO_MS) and the server's active expiry after it. */
const WINDOW_MS = 30_000 + 30_000;

function masters(admin: Client): Redis[] {
  return isCluster(admin) ? admin.nodes('master') : [admin];
}

interface Footprint {
  readonly keys: number;
  /** used_memory without the replication backlog and the clients' buffers. */
  readonly usedMemory: number;
  /** Keys with no expiry. */
  readonly persistent: ReadonlySet<string>;
}

async function footprint(admin: Client): Promise<Footprint> {
  let keys = 0;
  let usedMemory = 0;
  const persistent = new Set<string>();
  for (const node of masters(admin)) {
    keys += await node.dbsize();
    const memory = await node.info('memory');
    const field = (name: string): number => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(memory)?.[1] ?? 0);
    // Buffers are not the keys' footprint: a replica's backlog fills with the writes and stays allocated.
    usedMemory +=
      field('used_memory') -
      field('mem_replication_backlog') -
      field('mem_clients_slaves') -
      field('mem_clients_normal');
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'COUNT', 1000);
      cursor = next;
      const ttls = await Promise.all(batch.map((key) => node.pttl(key)));
      batch.forEach((key, i) => {
        if (ttls[i] === -1) persistent.add(key);
      });
    } while (cursor !== '0');
  }
  return { keys, usedMemory, persistent };
}

/** Takes and gives back every kind once on `name`'s variants; `user` collects the keys that are user state. */
async function useOnce(locks: LockClient, name: string, user: string[]): Promise<void> {
  await locks.getLock(`${name}:lock`).withLock(() => undefined);
  await locks.getFairLock(`${name}:fair`).withLock(() => undefined);
  const rw = locks.getReadWriteLock(`${name}:rw`);
  await rw.readLock().withLock(() => rw.readLock().withLock(() => undefined));
  await rw.writeLock().withLock(() => rw.readLock().withLock(() => undefined));
  const sem = locks.getSemaphore(`${name}:sem`);
  await sem.trySetPermits(1);
  await sem.acquire();
  await sem.release();
  const permits = locks.getPermitExpirableSemaphore(`${name}:permits`);
  await permits.trySetPermits(1);
  await permits.withPermit(() => undefined);
  const latch = locks.getCountDownLatch(`${name}:latch`);
  await latch.trySetCount(1);
  await latch.countDown();
  user.push(`${name}:sem`, `${name}:permits`);
}

// What stays in Redis is the scripts' doing, not the client library's: once on a server (the ioredis 5 leg) and
// once on the Cluster (cluster:ioredis5). It waits out the 30 s memo window, which every leg would pay again.
describe.skipIf(clientKind !== 'ioredis5')('footprint', () => {
  it(
    `${NAMES} names of every kind, used once, leave nothing but the shared counters and the user's permits`,
    async () => {
      const locks = redis.locks();
      const user: string[] = [];
      // Warm up: the scripts are cached and the counters exist before the baseline is taken.
      await useOnce(locks, uniqueName('warm'), user);
      const before = await footprint(redis.admin);
      const label = uniqueName('footprint');
      for (let i = 0; i < NAMES; i += PARALLEL) {
        const batch = Array.from({ length: Math.min(PARALLEL, NAMES - i) }, (_, k) => `${label}:${i + k}`);
        await Promise.all(batch.map((name) => useOnce(locks, name, user)));
      }
      const during = await footprint(redis.admin);
      expect(during.keys).toBeGreaterThan(before.keys + 2 * NAMES);
      // Every key but the counters and the user's permit counts expires: nothing else is without a TTL.
      const counters = [...during.persistent].filter((key) => /flowlock:fencing/.test(key));
      // At most one per hash slot, on every topology (one slot per script call).
      expect(counters.length).toBeLessThanOrEqual(16384);
      const unexplained = [...during.persistent].filter(
        (key) => !before.persistent.has(key) && !counters.includes(key) && !user.includes(key),
      );
      expect(unexplained).toEqual([]);
      // The user's state is theirs: deleted here, what is left must all run out within the window.
      for (const key of user) await redis.admin.del(key);
      await until(
        async () => {
          const now = await footprint(redis.admin);
          return now.keys === now.persistent.size;
        },
        'every key with a TTL ran out',
        WINDOW_MS,
      );
      const after = await footprint(redis.admin);
      expect([...after.persistent].filter((key) => !before.persistent.has(key) && !counters.includes(key))).toEqual([]);
      // On a Cluster, the counters of the slots the names fell in are new (one per slot at most).
      const newCounters = counters.filter((key) => !before.persistent.has(key)).length;
      expect(after.keys).toBeLessThanOrEqual(before.keys + newCounters);
      // Memory back to where it was, give or take the allocator's slack (a few hundred KB per server on a
      // 1-3 MB base) and those counters (a key each, with a Cluster's slot bookkeeping).
      const slack = 512 * 1024 * masters(redis.admin).length + 250 * newCounters;
      expect(after.usedMemory).toBeLessThan(before.usedMemory + slack);
    },
    WINDOW_MS + 120_000,
  );
});
