/**
 * The Redis layout contract (DESIGN.md, "Redis layout"): Redisson's keys hold exactly Redisson's data, this
 * library's side fields live in keys of its own beside them, and fencing tokens keep rising from a counter
 * shared per key prefix and hash slot, across clients, restarts and clients of the previous layouts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createLockClient, type LockClient } from '../../src/index.js';
import { fairLockKeys, keySlot, lockKeys, readWriteLockKeys } from '../../src/redis/keys.js';
import { newRedis, onCluster, QUICK_RENEWAL, recorded, uniqueName, until, useRedis } from '../support/fixture.js';
import { OldLayoutLock } from '../support/old-layout.js';
import { clusterMasters, migrateSlot, redisCli, slotOwner } from '../support/redis-cluster.js';
import { startRedisServer } from '../support/redis-server.js';
import { RedissonFairLock, RedissonReadWriteLock, unlockLatch } from '../support/redisson.js';

const redis = useRedis();

/** The owner field of the flow that runs `fn`'s first hold (from the client's own snapshot). */
function ownerOf(locks: { holds(): readonly { owner: string }[] }, index = 0): string {
  return locks.holds()[index]?.owner ?? '';
}

describe("Redis layout: Redisson's hashes hold only Redisson's fields", () => {
  it('an uncontended hold: the owner field, nothing else, and no key of its own until its first renewal', async () => {
    const locks = redis.locks({ holderInfo: { app: 'layout' } });
    const name = uniqueName('layout');
    const lease = await locks.getLock(name).acquire();
    expect(await redis.admin.hgetall(name)).toEqual({ [ownerOf(locks)]: '1' });
    expect(await redis.admin.exists(lockKeys('', name, onCluster).holdKey)).toBe(0);
    await lease.release();
  });

  it('a re-entered lock: the owner field and its count, nothing else; side fields in the hold key', async () => {
    const locks = redis.locks({ holderInfo: { app: 'layout' }, ...QUICK_RENEWAL });
    const name = uniqueName('layout');
    const keys = lockKeys('', name, onCluster);
    await locks.run(async () => {
      const lock = locks.getLock(name);
      const lease = await lock.acquire();
      await lock.lock();
      await recorded(redis.admin, locks, name);
      const owner = ownerOf(locks);
      expect(await redis.admin.hgetall(name)).toEqual({ [owner]: '2' });
      const side = await redis.admin.hgetall(keys.holdKey);
      expect(Object.keys(side).sort()).toEqual([`${owner}:acq`, `${owner}:info`, `${owner}:token`]);
      expect(side[`${owner}:token`]).toBe(lease.fencingToken.toString());
      // The hold key lives as long as the hold, no longer.
      const [lockTtl, holdTtl] = [await redis.admin.pttl(name), await redis.admin.pttl(keys.holdKey)];
      expect(holdTtl).toBeGreaterThan(0);
      expect(holdTtl).toBeLessThanOrEqual(30_000);
      expect(Math.abs(holdTtl - lockTtl)).toBeLessThan(5_000);
      await lock.unlock();
      expect(await redis.admin.hgetall(name)).toEqual({ [owner]: '1' });
      await lease.release();
    });
    expect(await redis.admin.exists(name, keys.holdKey)).toBe(0);
  });

  it("a re-entered fair lock with waiters: the holder's field only; the queue is Redisson's", async () => {
    const holder = redis.locks();
    const name = uniqueName('layout');
    const keys = fairLockKeys('', name, onCluster);
    const java = new RedissonFairLock(redis.admin, name);
    // Wrapped: a promise returned bare would be awaited by run(), and it waits for this very hold.
    const { waiting } = await holder.run(async () => {
      const lock = holder.getFairLock(name);
      await lock.lock();
      await lock.lock();
      expect(await java.tryAcquire(30_000, 60_000)).not.toBeNull();
      const ours = redis.locks().getFairLock(name).acquire();
      await until(async () => (await redis.admin.llen(keys.queueKey)) === 2, 'two waiters queued');
      expect(await redis.admin.hgetall(name)).toEqual({ [ownerOf(holder)]: '2' });
      await lock.unlock();
      await lock.unlock();
      return { waiting: ours };
    });
    // The Java waiter is first: it takes the lock, ours follows after its release.
    expect(await java.tryAcquire(30_000, 60_000)).toBeNull();
    expect(await java.unlock()).toBe(1);
    await (await waiting).release();
    expect(await redis.admin.exists(name, keys.holdKey, keys.queueKey)).toBe(0);
  });

  it("a write hold alone: Java's readLock().isLocked() says false, as it must; a downgrade says true", async () => {
    const locks = redis.locks();
    const name = uniqueName('layout');
    const java = new RedissonReadWriteLock(redis.admin, name);
    const rw = locks.getReadWriteLock(name);
    await rw.writeLock().withLock(async () => {
      const writer = ownerOf(locks);
      expect(await redis.admin.hgetall(name)).toEqual({ mode: 'write', [writer]: '1' });
      expect(await java.readIsLocked()).toBe(false);
      expect(await java.writeIsLocked()).toBe(true);
      await rw.readLock().withLock(async () => {
        const reader = writer.slice(0, -':write'.length);
        expect(await redis.admin.hgetall(name)).toEqual({ mode: 'write', [writer]: '1', [reader]: '1' });
        expect(await java.readIsLocked()).toBe(true);
      });
    });
    expect(await redis.admin.exists(name, readWriteLockKeys('', name, onCluster).holdKey)).toBe(0);
    expect(await java.readIsLocked()).toBe(false);
  });

  it("readers of both libraries: counts only; Redisson's unlock latch answers its resent unlock", async () => {
    const locks = redis.locks();
    const name = uniqueName('layout');
    const keys = readWriteLockKeys('', name, onCluster);
    const java = new RedissonReadWriteLock(redis.admin, name);
    expect(await java.tryReadLock(30_000)).toBeNull();
    expect(await java.tryReadLock(30_000)).toBeNull();
    const reader = locks.getReadWriteLock(name).readLock();
    await locks.run(async () => {
      await reader.lock();
      await reader.lock();
      const owner = ownerOf(locks);
      expect(await redis.admin.hgetall(name)).toEqual({ mode: 'read', [java.owner]: '2', [owner]: '2' });
      expect(await java.readIsLocked()).toBe(true);
      // Java's unlock, resent with the same request id, is answered from its latch: one hold less, not two.
      const requestId = 'resent-unlock';
      expect(await java.readUnlock(requestId)).toBe(0);
      expect(await java.readUnlock(requestId)).toBe(0);
      expect(await redis.admin.hget(name, java.owner)).toBe('1');
      expect(await redis.admin.get(unlockLatch(name, requestId))).toBe('0');
      expect(await redis.admin.pttl(unlockLatch(name, requestId))).toBeGreaterThan(0);
      await reader.unlock();
      await reader.unlock();
    });
    // Our reader left: what remains is exactly Java's, and Java's last unlock frees the lock.
    expect(await redis.admin.hgetall(name)).toEqual({ mode: 'read', [java.owner]: '1' });
    expect(await redis.admin.exists(keys.holdKey)).toBe(0);
    expect(await java.readUnlock()).toBe(1);
    expect(await redis.admin.exists(name)).toBe(0);
  });

  it("a Java writer's unlock (HLEN == 1) frees the lock our reader left; our writer waits for Java's reader", async () => {
    const locks = redis.locks();
    const name = uniqueName('layout');
    const java = new RedissonReadWriteLock(redis.admin, name);
    expect(await java.tryWriteLock(30_000)).toBeNull();
    expect(await java.writeUnlock()).toBe(1);
    expect(await redis.admin.exists(name)).toBe(0);
    expect(await java.tryReadLock(30_000)).toBeNull();
    const writing = locks.getReadWriteLock(name).writeLock().acquire({ waitTime: 10_000 });
    await until(
      async () => (await redis.admin.zcard(readWriteLockKeys('', name, onCluster).writersKey)) === 1,
      'our writer registered',
    );
    expect(await java.readUnlock()).toBe(1);
    const lease = await writing;
    expect(await java.readIsLocked()).toBe(false);
    await lease.release();
  });
});

describe('fencing tokens from a shared counter', () => {
  it('rise across clients for each name, with one counter per slot, in the slot of the locks', async () => {
    const [one, two] = [redis.locks(), redis.locks()];
    const names = Array.from({ length: 6 }, () => uniqueName('fence'));
    const tokens: bigint[] = [];
    for (let round = 0; round < 3; round++) {
      for (const [i, name] of names.entries()) {
        const locks = i % 2 === 0 ? one : two;
        tokens.push(await locks.getLock(name).withLock((_s, lease) => lease.fencingToken));
      }
    }
    // Each lock's tokens rise, whichever client drew them.
    for (const [i, name] of names.entries()) {
      const own = tokens.filter((_, k) => k % names.length === i);
      for (let k = 1; k < own.length; k++) expect(own[k], name).toBeGreaterThan(own[k - 1] ?? 0n);
    }
    for (const name of names) {
      const keys = lockKeys('', name, onCluster);
      // In the lock's slot on every topology: the acquire script touches one slot (proxy-sharded endpoints).
      expect(keySlot(keys.fenceKey)).toBe(keySlot(name));
      expect(await redis.admin.exists(name, keys.holdKey, keys.legacyFenceKey)).toBe(0);
    }
    expect(await redis.admin.pttl(lockKeys('', names[0] ?? '', onCluster).fenceKey)).toBe(-1);
  });

  it('keep rising for a lock that left nothing behind, and when the counter is lost (the clock floor)', async () => {
    const locks = redis.locks();
    const name = uniqueName('fence');
    const keys = lockKeys('', name, onCluster);
    const first = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
    expect(await redis.admin.exists(name, keys.holdKey, keys.legacyFenceKey)).toBe(0);
    await redis.admin.del(keys.fenceKey);
    const second = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
    expect(second).toBeGreaterThan(first);
  });

  it.skipIf(onCluster)('keep rising from the per-prefix counter of earlier versions to the per-slot one', async () => {
    const locks = redis.locks();
    const name = uniqueName('fence');
    // Earlier versions drew every token of a prefix from one counter off a Cluster, which runs ahead of the
    // clock only by the grants of one microsecond: one drawn there just now, by the same rule
    // max(counter + 1, server clock in µs)...
    const oldKey = 'flowlock:fencing';
    const [seconds, micros] = (await redis.admin.time()).map(Number);
    const clock = BigInt(seconds ?? 0) * 1_000_000n + BigInt(micros ?? 0);
    const previous = BigInt((await redis.admin.get(oldKey)) ?? '0');
    const old = previous + 1n > clock ? previous + 1n : clock;
    await redis.admin.set(oldKey, old.toString());
    // ... and the next one, from the new counter of the lock's slot, which starts empty, rises above it.
    expect(await redis.admin.exists(lockKeys('', name).fenceKey)).toBe(0);
    const next = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
    expect(next).toBeGreaterThan(old);
    await redis.admin.del(oldKey);
  });

  it.skipIf(onCluster)('keep rising after a restart without persistence', async () => {
    const server = await startRedisServer();
    const client = newRedis(server);
    client.on('error', () => undefined);
    const locks = createLockClient(client);
    try {
      const name = uniqueName('fence');
      // A counter far ahead of the clock, as after a burst: lost with the restart, the clock floor remains.
      await client.set(lockKeys('', name).fenceKey, String(BigInt(Date.now()) * 1000n + 5_000_000n));
      const before = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
      await server.kill();
      await server.restart();
      await until(async () => (await client.ping().catch(() => '')) === 'PONG', 'the client reconnected');
      // The restart took less than the 5 s the counter was ahead: wait out the rest, then tokens rise.
      const wait = Number(before / 1000n) - Date.now() + 50;
      if (wait > 0) await sleep(wait);
      const after = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
      expect(after).toBeGreaterThan(before);
    } finally {
      await locks.close();
      client.disconnect();
      await server.stop();
    }
  });

  it.runIf(onCluster)('keep rising when the slot moves to another master: its counter moves with it', async () => {
    const locks = redis.locks();
    const name = uniqueName('fence');
    const keys = lockKeys('', name, true);
    const slot = keySlot(name);
    const target = redis.target;
    const seed = target.topology === 'cluster' ? (target.nodes[0]?.port ?? 0) : 0;
    const before = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
    const from = slotOwner(seed, slot);
    const to = clusterMasters(seed).find((master) => master.id !== from.id);
    if (!to) throw new Error('no second master');
    // Far ahead of the clock: only the migrated counter can make the next token exceed it.
    const ahead = BigInt(Date.now() + 3_600_000) * 1000n;
    await redis.admin.set(keys.fenceKey, ahead.toString());
    await migrateSlot(slot, from, to);
    expect(redisCli(to.port, 'get', keys.fenceKey)).toBe(ahead.toString());
    const after = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
    expect(after).toBe(ahead + 1n);
    expect(after).toBeGreaterThan(before);
  });

  it('mixed with clients of the previous layout: they exclude each other and tokens keep rising', async () => {
    const locks = redis.locks();
    const name = uniqueName('fence');
    const old = new OldLayoutLock(redis.admin, name);
    const oldFirst = await old.tryAcquire(30_000);
    expect(oldFirst).toBeDefined();
    // The old client holds: a new client waits, and the old client's fields stay in its own hold's hash.
    expect(await locks.run(() => locks.getLock(name).tryLock())).toBe(false);
    expect(Object.keys(await redis.admin.hgetall(name))).toContain(`${old.owner}:acq`);
    expect(await old.release()).toBe(0);
    const newFirst = await locks.getLock(name).withLock(async (_s, lease) => {
      // And a new hold excludes the old client.
      expect(await old.tryAcquire(30_000)).toBeUndefined();
      return lease.fencingToken;
    });
    expect(newFirst).toBeGreaterThan(oldFirst ?? 0n);
    // An old per-name counter ahead of the clock (grants faster than the clock, a clock that stepped back):
    // the new token still exceeds it, and the old client's next one exceeds the new one.
    const ahead = BigInt(Date.now() + 3_600_000) * 1000n;
    await redis.admin.set(old.fenceKey, ahead.toString());
    const newSecond = await locks.getLock(name).withLock((_s, lease) => lease.fencingToken);
    expect(newSecond).toBe(ahead + 1n);
    const oldSecond = await old.tryAcquire(30_000);
    expect(oldSecond).toBeGreaterThan(newSecond);
    expect(await old.release()).toBe(0);
    await redis.admin.del(old.fenceKey);
  });

  it("with previousLayout 'retired': no acquisition reads or moves a per-name counter, and tokens still rise", async () => {
    const shared = redis.locks();
    const retired = redis.locks({ previousLayout: 'retired' });
    // Per-name counters of the previous layout far ahead of the clock: a client that shares that layout
    // draws a token above each (the test above); one that retired it leaves them as they are.
    const ahead = BigInt(Date.now() + 3_600_000) * 1000n;
    const names = { plain: uniqueName('retired'), fair: uniqueName('retired'), rw: uniqueName('retired') };
    const legacyKeys = [
      lockKeys('', names.plain, onCluster).legacyFenceKey,
      fairLockKeys('', names.fair, onCluster).legacyFenceKey,
      readWriteLockKeys('', names.rw, onCluster).legacyFenceKey,
    ];
    for (const key of legacyKeys) await redis.admin.set(key, ahead.toString());
    const tokens = async (locks: LockClient): Promise<bigint[]> => {
      const drawn: bigint[] = [];
      const rw = locks.getReadWriteLock(names.rw);
      // A lean grant (the uncontended cycle), a re-entered one (its outer hold non-lean), a fair grant, a write
      // grant, and a read hold's token (the last one drawn for the lock).
      await locks.getLock(names.plain).withLock((_s, lease) => void drawn.push(lease.fencingToken));
      await locks
        .getLock(names.plain)
        .withLock(() => locks.getLock(names.plain).withLock((_s, lease) => void drawn.push(lease.fencingToken)));
      await locks.getFairLock(names.fair).withLock((_s, lease) => void drawn.push(lease.fencingToken));
      await rw.writeLock().withLock((_s, lease) => void drawn.push(lease.fencingToken));
      await rw.readLock().withLock((_s, lease) => void drawn.push(lease.fencingToken));
      return drawn;
    };
    const fromRetired = await tokens(retired);
    for (const token of fromRetired) expect(token).toBeLessThan(ahead);
    for (const key of legacyKeys) expect(await redis.admin.get(key)).toBe(ahead.toString());
    // Tokens keep rising from the shared counter (and the clock) alone.
    const again = await tokens(retired);
    for (const [i, token] of again.entries()) expect(token).toBeGreaterThan(fromRetired[i] ?? 0n);
    // The default client still counts with the per-name counters, as a rolling upgrade needs.
    for (const token of await tokens(shared)) expect(token).toBeGreaterThan(ahead);
    for (const key of legacyKeys) await redis.admin.del(key);
  });
});
