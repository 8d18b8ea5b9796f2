// Plays a Java service using Redisson's RLock through its wire protocol: the holder is a hash field
// `<uuid>:<threadId>` with a count, released by DEL + PUBLISH "0" on redisson_lock__channel:{name}.
import { once } from 'node:events';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  masterOf,
  newRedis,
  shardedChannels,
  publishRelease,
  uniqueName,
  until,
  useRedis,
  type Cluster,
} from '../support/fixture.js';
import { recordFigures } from '../support/figures.js';
import { RedissonLock } from '../support/redisson.js';

const redis = useRedis();

/** A connection to the master owning `channel`'s slot, where a Redisson client sends its SSUBSCRIBE. */
function shardListener(channel: string): ReturnType<typeof newRedis> {
  const { host = '127.0.0.1', port = 6379 } = masterOf(redis.admin as Cluster, channel).options;
  const listener = newRedis({ host, port });
  onTestFinished(() => listener.disconnect());
  return listener;
}

describe('Redisson interoperability', () => {
  it('a foreign Redisson holder blocks us, and its release wakes our waiter', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const java = new RedissonLock(redis.admin, name);
    expect(await java.tryLock(30_000)).toBeNull();
    const lock = locks.getLock(name);
    expect(await locks.run(() => lock.tryLock())).toBe(false);
    let acquiredAt = 0;
    const waiting = lock.withLock(async () => {
      acquiredAt = performance.now();
      expect(await redis.admin.hexists(name, java.owner)).toBe(0);
    });
    waiting.catch(() => undefined); // awaited below; a failed wait before that must not leave it unhandled
    // Parked on an active subscription: from now on only the release message (or a timer) wakes it.
    await until(
      () => locks.waits().some((w) => w.waiters > 0 && w.subscription === 'active'),
      'our waiter parked on an active subscription',
    );
    const releasedAt = performance.now();
    await redis.admin.del(name);
    // Redisson on a Redis 7 cluster announces by SPUBLISH (its default shardedSubscriptionMode AUTO).
    await publishRelease(redis.admin, `redisson_lock__channel:{${name}}`);
    await waiting;
    // Without the message our waiter would sleep until the foreign 30 s lease ran out (on a cluster: until its
    // 2 s re-check, due about 2 s after it parked just now); the message wakes it in milliseconds (the figure
    // records it). 1 s tells the two apart on a loaded machine.
    recordFigures('Redisson release wakes our waiter', { wakeMs: Math.round(acquiredAt - releasedAt) });
    expect(acquiredAt - releasedAt).toBeLessThan(1000);
  });

  it('our hold blocks a Redisson client, and our release publishes 0 on its channel', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const channel = `redisson_lock__channel:{${name}}`;
    // Redisson listens by SSUBSCRIBE on a Redis 7 cluster (shardedSubscriptionMode AUTO), else by SUBSCRIBE.
    const listener = shardedChannels ? shardListener(channel) : redis.redis();
    if (shardedChannels) await listener.ssubscribe(channel);
    else await listener.subscribe(channel);
    const lease = await locks.getLock(name).acquire({ leaseTime: 10_000 });
    expect(await new RedissonLock(redis.admin, name).tryLock(30_000)).toBeGreaterThan(9000);
    const message = once(listener, shardedChannels ? 'smessage' : 'message');
    await lease.release();
    expect(await message).toEqual([channel, '0']);
    expect(await new RedissonLock(redis.admin, name).tryLock(30_000)).toBeNull();
  });
});
