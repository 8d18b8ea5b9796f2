import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { uniqueName, useRedis } from '../support/fixture.js';

const redis = useRedis();

async function killPubSubConnections(): Promise<void> {
  await redis.admin.client('KILL', 'TYPE', 'pubsub');
}

describe('waiting after pub/sub trouble', () => {
  it('retries every local waiter after the subscriber reconnects (a release sent meanwhile is lost)', async () => {
    const waiter = redis.locks();
    const name = uniqueName();
    // A foreign holder with a long lease: only a release message (or a retry) can let the waiter in soon.
    await redis.admin.hset(name, 'foreign:1', '1');
    await redis.admin.pexpire(name, 30_000);
    let acquiredAt = 0;
    const waiting = waiter.getLock(name).withLock(() => {
      acquiredAt = performance.now();
    });
    await sleep(200);
    await killPubSubConnections();
    // Released while the subscriber is down: the message reaches nobody.
    await redis.admin.del(name);
    await redis.admin.publish(`redisson_lock__channel:{${name}}`, '0');
    const releasedAt = performance.now();
    await waiting;
    expect(acquiredAt - releasedAt).toBeLessThan(1500);
  });

  it('a release with no message (DEL by a third party) is found by the TTL-bounded wait', async () => {
    const waiter = redis.locks();
    const name = uniqueName();
    await redis.admin.hset(name, 'foreign:1', '1');
    await redis.admin.pexpire(name, 800);
    const start = performance.now();
    await waiter.getLock(name).withLock(() => undefined, { waitTime: 5000 });
    const elapsed = performance.now() - start;
    expect(elapsed).toBeGreaterThanOrEqual(700);
    expect(elapsed).toBeLessThan(800 + 300);
  });
});

describe('watchdog batching', () => {
  it('renews many holds with one script call per renewal period', async () => {
    const locks = redis.locks({ watchdogTimeout: 900 });
    const names = Array.from({ length: 200 }, () => uniqueName('batch'));
    const leases = await Promise.all(names.map((name) => locks.getLock(name).acquire()));
    const before = Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.admin.info('commandstats'))?.[1] ?? 0);
    await sleep(1500); // about five renewal periods of 300 ms
    const after = Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.admin.info('commandstats'))?.[1] ?? 0);
    expect(after - before).toBeGreaterThanOrEqual(3);
    expect(after - before).toBeLessThanOrEqual(7);
    for (const name of names) expect(await redis.admin.pttl(name)).toBeGreaterThan(0);
    expect(leases.every((lease) => !lease.signal.aborted)).toBe(true);
    await Promise.all(leases.map((lease) => lease.release()));
  });
});
