// Per-client faults and quirks that the adapters must absorb (../shared/CLIENTS.md), run for every client
// library against the same server or cluster whatever REDIS_CLIENT says: a client keyPrefix (keys and
// channels alike, across libraries), and a shard channel's slot migrating under a waiter (node-redis 5
// loses the subscription without a word; the adapter must notice). Lost replies (resend or rejection) are
// T7 in network.test.ts, which runs on the client under test.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { createLockClient, type LockClient, type LockClientOptions } from '../../../src/index.js';
import { keySlot, lockKeys } from '../../../src/redis/keys.js';
import { newTestClient, type ClientKind, type ClientOptions } from '../../support/clients.js';
import { channelSubscribers, isCluster, onCluster, uniqueName, until, useRedis } from '../../support/fixture.js';
import { recordFigures } from '../../support/figures.js';
import { clusterMasters, migrateSlot, slotOwner } from '../../support/redis-cluster.js';

const redis = useRedis();
const KINDS: readonly ClientKind[] = ['ioredis5', 'ioredis6', 'iovalkey', 'node-redis5', 'node-redis6', 'glide'];

function locksOn(kind: ClientKind, clientOptions: ClientOptions = {}, options: LockClientOptions = {}): LockClient {
  const created = newTestClient(redis.target, clientOptions, kind);
  const locks = createLockClient(created.client, options);
  cleanups.push(async () => {
    await locks.close();
    await created.close();
  });
  return locks;
}

const cleanups: (() => Promise<unknown>)[] = [];
async function cleanUp(): Promise<void> {
  for (const step of cleanups.splice(0).reverse()) await step().catch(() => undefined);
}
// Also after a failed test: its clients and their waiting calls must not leak into the next one.
afterEach(cleanUp);

/**
 * Subscribers of `channel`: on a standalone server PUBSUB NUMSUB; on a cluster SHARDNUMSUB on the slot's
 * master (`sharded`), or NUMSUB added up over the nodes (a classic subscription lives on any one of them).
 */
async function subscribers(channel: string, sharded: boolean): Promise<number> {
  const admin = redis.admin;
  if (!isCluster(admin) || sharded) return channelSubscribers(admin, channel);
  const counts = await Promise.all(
    admin
      .nodes('all')
      .map(async (node) => Number(((await node.pubsub('NUMSUB', channel)) as [string, number | string])[1])),
  );
  return counts.reduce((sum, n) => sum + n, 0);
}

/** Milliseconds from `release()` until `waiting` resolved. */
async function wakeDelay(release: () => Promise<unknown>, waiting: Promise<unknown>): Promise<number> {
  const released = performance.now();
  await release();
  await waiting;
  return performance.now() - released;
}

describe('a client keyPrefix', () => {
  // node-redis has keyPrefix only from 6.1 on, GLIDE none: their clients are left out.
  it.each(KINDS.filter((kind) => kind !== 'node-redis5' && kind !== 'glide'))(
    '%s: keys and channels carry it; locks and wake-ups are shared with clients of other libraries',
    async (kind) => {
      const prefixed = locksOn(kind, { keyPrefix: 'app:' });
      // The same names through the lock client's own keyPrefix on a client without one (ioredis), and a
      // node-redis 6 client with the same client prefix. On a Cluster iovalkey listens and announces on
      // classic channels (it cannot subscribe to shard channels): its partners are iovalkey clients there.
      const classicOnly = onCluster && kind === 'iovalkey';
      const viaOption = locksOn(classicOnly ? 'iovalkey' : 'ioredis5', {}, { keyPrefix: 'app:' });
      const nodeRedis = locksOn(classicOnly ? 'iovalkey' : 'node-redis6', { keyPrefix: 'app:' });
      const name = uniqueName('prefix');
      const delays: number[] = [];
      for (const [holder, waiter] of [
        [prefixed, viaOption],
        [viaOption, prefixed],
        [prefixed, nodeRedis],
      ] as const) {
        const lease = await holder.getLock(name).acquire({ leaseTime: 30_000 });
        expect(await redis.admin.exists(`app:${name}`)).toBe(1);
        expect(await redis.admin.exists(name)).toBe(0);
        expect(await waiter.run(() => waiter.getLock(name).tryLock(0, 5000))).toBe(false);
        const waiting = waiter.run(() => waiter.getLock(name).tryLock(10_000, 5000));
        waiting.catch(() => undefined); // awaited below
        // The waiter's subscription is on the prefixed channel, as the server names it.
        const channel = lockKeys('app:', name, onCluster).channel;
        await expect.poll(() => subscribers(channel, !classicOnly), { timeout: 5000, interval: 20 }).toBe(1);
        // The waiter knows it is subscribed too (no 1 s re-check of a pending subscription is left).
        await until(() => waiter.waits()[0]?.subscription === 'active', 'the waiter subscribed');
        // The lease is 30 s (and a cluster's re-check 2 s): only the release message can wake the waiter
        // within the bound below.
        delays.push(await wakeDelay(() => lease.release(), waiting));
        expect(await waiting).toBe(true);
        await waiter.getLock(name).forceUnlock();
      }
      recordFigures(`client keyPrefix wake-ups (${kind})`, { maxMs: Math.max(...delays) });
      for (const delay of delays) expect(delay).toBeLessThan(1000);
      // A semaphore's permits and its wake-ups too.
      const semaphore = prefixed.getSemaphore(name);
      expect(await semaphore.trySetPermits(1)).toBe(true);
      expect(await redis.admin.get(`app:${name}`)).toBe('1');
      await semaphore.acquire();
      const waitingPermit = nodeRedis.getSemaphore(name).tryAcquire({ waitTime: 10_000 });
      waitingPermit.catch(() => undefined); // awaited below
      await until(() => nodeRedis.waits()[0]?.subscription === 'active', 'the permit waiter subscribed');
      expect(await wakeDelay(() => semaphore.release(), waitingPermit)).toBeLessThan(1000);
      await cleanUp();
    },
    30_000,
  );
});

describe('a shard channel’s slot migrates while a waiter waits', () => {
  it.runIf(onCluster).each(KINDS)(
    '%s: the waiter’s subscription follows the slot, and the release still wakes it',
    async (kind) => {
      const admin = redis.admin;
      if (!isCluster(admin)) throw new Error('not a cluster');
      const seed = admin.nodes('master')[0]?.options.port ?? 0;
      // iovalkey's Cluster cannot subscribe to shard channels: its waiters listen on classic channels, and
      // only releases announced there (by iovalkey clients) reach them.
      const sharded = kind !== 'iovalkey';
      const holder = locksOn(sharded ? 'ioredis5' : 'iovalkey');
      const waiter = locksOn(kind);
      const name = uniqueName(`migrate-${kind}`);
      const channel = lockKeys('', name, true).channel;
      const slot = keySlot(name);
      const from = slotOwner(seed, slot);
      const to = clusterMasters(seed).find((master) => master.id !== from.id);
      if (!to) throw new Error('no other master');
      const subscribersOn = async (port: number): Promise<number> => {
        const node = admin.nodes('master').find((n) => n.options.port === port);
        if (!node) return 0;
        const reply = sharded ? await node.pubsub('SHARDNUMSUB', channel) : await node.pubsub('NUMSUB', channel);
        return Number((reply as [string, number | string])[1]);
      };
      const lease = await holder.getLock(name).acquire({ leaseTime: 30_000 });
      const waiting = waiter.run(() => waiter.getLock(name).tryLock(25_000, 5000));
      waiting.catch(() => undefined); // awaited below
      if (sharded) await expect.poll(() => subscribersOn(from.port), { timeout: 5000, interval: 20 }).toBe(1);
      else await expect.poll(() => subscribers(channel, false), { timeout: 5000, interval: 20 }).toBe(1);
      await sleep(50);
      const migrated = performance.now();
      await migrateSlot(slot, from, to);
      let followedMs = 0;
      if (sharded) {
        // Redis dropped the subscription on the old owner; it must come back on the new one (ioredis,
        // node-redis 6 and GLIDE follow the move; node-redis 5 is caught by the adapter's slot check).
        await expect.poll(() => subscribersOn(to.port), { timeout: 10_000, interval: 50 }).toBe(1);
        followedMs = performance.now() - migrated;
      }
      await sleep(300);
      const delay = await wakeDelay(() => lease.release(), waiting);
      expect(await waiting).toBe(true);
      recordFigures(`shard channel slot migration under a waiter (${kind})`, {
        subscriptionFollowedMs: Math.round(followedMs),
        wakeMs: Math.round(delay),
      });
      expect(delay).toBeLessThan(1000);
      await migrateSlot(slot, to, from);
      await cleanUp();
    },
    60_000,
  );
});
