// Plays a Java service using Redisson's RLock through its wire protocol: the holder is a hash field
// `<uuid>:<threadId>` with a count, released by DEL + PUBLISH "0" on redisson_lock__channel:{name}.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  masterOf,
  newRedis,
  onCluster,
  publishRelease,
  uniqueName,
  useRedis,
  type Cluster,
} from '../support/fixture.js';

const redis = useRedis();

// Redisson's tryLockInnerAsync script (RedissonLock, leaseTime given): nil when acquired, else the PTTL.
const REDISSON_TRY_LOCK = `
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);`;

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
    const foreignOwner = `${randomUUID()}:57`;
    expect(await redis.admin.eval(REDISSON_TRY_LOCK, 1, name, 30_000, foreignOwner)).toBeNull();
    const lock = locks.getLock(name);
    expect(await locks.run(() => lock.tryLock())).toBe(false);
    let acquiredAt = 0;
    const waiting = lock.withLock(async () => {
      acquiredAt = performance.now();
      expect(await redis.admin.hexists(name, foreignOwner)).toBe(0);
    });
    await sleep(300);
    const releasedAt = performance.now();
    await redis.admin.del(name);
    // Redisson on a Redis 7 cluster announces by SPUBLISH (its default shardedSubscriptionMode AUTO).
    await publishRelease(redis.admin, `redisson_lock__channel:{${name}}`);
    await waiting;
    expect(acquiredAt - releasedAt).toBeLessThan(100);
  });

  it('our hold blocks a Redisson client, and our release publishes 0 on its channel', async () => {
    const locks = redis.locks();
    const name = uniqueName();
    const channel = `redisson_lock__channel:{${name}}`;
    // Redisson listens by SSUBSCRIBE on a Redis 7 cluster (shardedSubscriptionMode AUTO), else by SUBSCRIBE.
    const listener = onCluster ? shardListener(channel) : redis.redis();
    if (onCluster) await listener.ssubscribe(channel);
    else await listener.subscribe(channel);
    const lease = await locks.getLock(name).acquire({ leaseTime: 10_000 });
    const pttl = await redis.admin.eval(REDISSON_TRY_LOCK, 1, name, 30_000, `${randomUUID()}:1`);
    expect(pttl).toBeGreaterThan(9000);
    const message = once(listener, onCluster ? 'smessage' : 'message');
    await lease.release();
    expect(await message).toEqual([channel, '0']);
    expect(await redis.admin.eval(REDISSON_TRY_LOCK, 1, name, 30_000, `${randomUUID()}:1`)).toBeNull();
  });
});
