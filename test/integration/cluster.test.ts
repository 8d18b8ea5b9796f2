// The lock on a 3-master Redis Cluster (one replica each) through an ioredis Cluster client: keys of one
// lock share a slot (no CROSSSLOT, also with a key prefix and braces in names), waiters are woken by
// sharded pub/sub (Redis 7), and the watchdog renews per slot.
import { spawnSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster as Cluster5 } from 'ioredis';
import { Cluster as Cluster6 } from 'ioredis6';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLockClient, type LockClient, type LockClientOptions } from '../../src/index.js';
import { keySlot } from '../../src/keys.js';
import { ioredisMajor, uniqueName } from '../support/fixture.js';

const Cluster = (ioredisMajor === 6 ? Cluster6 : Cluster5) as unknown as typeof Cluster5;
type Cluster = Cluster5;
import { startRedisCluster, type TestCluster } from '../support/redis-cluster.js';

let cluster: TestCluster;
const cleanup: (() => unknown)[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster(3, 1);
}, 60_000);
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
});
afterAll(async () => {
  await cluster.stop();
});

function clusterClient(): Cluster {
  const client = new Cluster(cluster.nodes.slice(0, 3).map((n) => ({ host: n.host, port: n.port })));
  client.on('error', () => undefined);
  cleanup.push(() => {
    client.disconnect();
  });
  return client;
}

function shardChannelsOn(port: number): string[] {
  const out = spawnSync('redis-cli', ['-p', String(port), 'pubsub', 'shardchannels'], { encoding: 'utf8' }).stdout;
  return out.split('\n').filter(Boolean);
}

function locksOn(options: LockClientOptions = {}): LockClient {
  const locks = createLockClient(clusterClient(), options);
  cleanup.push(() => locks.close());
  return locks;
}

describe('Redis Cluster', () => {
  it('takes, re-enters and releases locks in many slots, with rising tokens', async () => {
    const locks = locksOn();
    const names = Array.from({ length: 30 }, (_, i) => `${uniqueName('cl')}:${i}`);
    expect(new Set(names.map((n) => keySlot(n))).size).toBeGreaterThan(10);
    for (const name of names) {
      await locks.getLock(name).withLock(async (_signal, outer) => {
        await locks.getLock(name).withLock(async (_s, inner) => {
          expect(inner.fencingToken).toBe(outer.fencingToken);
          expect(await locks.getLock(name).getHoldCount()).toBe(2);
        });
      });
      expect(await locks.getLock(name).isLocked()).toBe(false);
    }
  });

  it('works with a key prefix and names with braces (no CROSSSLOT reaches the caller)', async () => {
    const prefixed = locksOn({ keyPrefix: 'app:' });
    const plain = locksOn();
    for (const name of ['order:1', 'a{b}c', 'x}y', '{}', 'glob*?']) {
      for (const locks of [prefixed, plain]) {
        const lease = await locks.getLock(name).acquire({ leaseTime: 5000 });
        const waiting = locks.getLock(name).acquire({ leaseTime: 5000 });
        await sleep(50);
        await lease.release();
        await (await waiting).release();
        expect(await locks.getLock(name).forceUnlock()).toBe(false);
      }
    }
  });

  it('wakes a waiter of another client within 100 ms of the release', async () => {
    const holder = locksOn();
    const waiter = locksOn();
    const name = uniqueName('cl-wake');
    const lease = await holder.getLock(name).acquire({ leaseTime: 30_000 });
    let acquiredAt = 0;
    const waiting = waiter.getLock(name).withLock(() => {
      acquiredAt = performance.now();
    });
    await sleep(300);
    // Redis 7 cluster: the waiter subscribed by sharded pub/sub, on the node that owns the lock's slot.
    const shardChannels = cluster.nodes.map((node) => shardChannelsOn(node.port));
    expect(shardChannels.flat()).toContain(`redisson_lock__channel:{${name}}`);
    const releasedAt = performance.now();
    await lease.release();
    await waiting;
    expect(acquiredAt - releasedAt).toBeLessThan(100);
  });

  it('keeps locks in many slots alive for 3+ watchdog timeouts, renewing per slot', async () => {
    const locks = locksOn({ watchdogTimeout: 900 });
    const names = Array.from({ length: 40 }, (_, i) => `${uniqueName('cl-wd')}:${i}`);
    const leases = await Promise.all(names.map((name) => locks.getLock(name).acquire()));
    await sleep(3000);
    expect(leases.every((lease) => !lease.signal.aborted)).toBe(true);
    const probe = clusterClient();
    for (const name of names) {
      const ttl = await probe.pttl(name);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(900);
    }
    await Promise.all(leases.map((lease) => lease.release()));
  });
});
