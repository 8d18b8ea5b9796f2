/**
 * An endpoint that keeps every request in one hash slot and looks standalone: a proxy-sharded database behind
 * one address (Azure Managed Redis with its Enterprise policy, a multi-shard Redis Cloud database) or a
 * cluster-mode server with every slot on one node (ElastiCache Serverless), reached by a standalone client.
 * Played by a real cluster-enabled redis-server that owns all 16 384 slots: it answers CROSSSLOT for a call
 * whose keys lie in several slots, as those endpoints do, and runs everything else.
 *
 * With no key prefix, or one with a hash tag, every primitive runs there (every script call of the standalone
 * layout stays in one slot, the watchdog's renewals included). With a prefix without a hash tag, Redisson's
 * names of a lock hash apart from the lock's key: the first call is refused with a LockCrossSlotError that
 * says how to fix it, before anything is written (not after an acquire whose release would then be refused).
 */
import { describe, expect, it } from 'vitest';
import { LockCrossSlotError } from '../../src/index.js';
import { everyPrimitive } from '../support/every-primitive.js';
import { onCluster, uniqueName, useRedis, type Redis } from '../support/fixture.js';
import { startOneNodeCluster } from '../support/redis-cluster.js';

const redis = useRedis(startOneNodeCluster);

describe.skipIf(onCluster)('an endpoint that keeps every request in one hash slot, reached as standalone', () => {
  it('runs every primitive without a key prefix, and with a prefix that has a hash tag', async () => {
    for (const keyPrefix of ['', '{app}:']) {
      // Renewals every 500 ms: the multi-lock's hold of 1.2 s sees two.
      await everyPrimitive(redis.locks({ keyPrefix, watchdogTimeout: 1500 }), 1200);
    }
    // Nothing was refused: the server counts each refused call as an error reply.
    const stats = await (redis.admin as Redis).info('errorstats');
    expect(stats).not.toMatch(/CROSSSLOT/);
  });

  it('refuses a key prefix without a hash tag at the first call, before writing anything, and says why', async () => {
    const admin = redis.admin as Redis;
    await admin.flushall();
    const locks = redis.locks({ keyPrefix: 'app:' });
    const name = uniqueName('one-slot-refused');
    const refusal = await locks
      .getLock(name)
      .acquire()
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(refusal).toBeInstanceOf(LockCrossSlotError);
    expect(refusal).toMatchObject({ code: 'LOCK_CROSS_SLOT', keyPrefix: 'app:', lockName: name });
    expect((refusal as Error).message).toContain('keyPrefix "app:" has no hash tag');
    expect((refusal as Error).message).toContain('"{app}:"');
    expect(String((refusal as Error).cause)).toMatch(/CROSSSLOT|CrossSlot/);
    expect(await admin.dbsize()).toBe(0);
    // Every later call of the client is refused alike, naming its own lock; other primitives too.
    const semaphore = locks.getSemaphore(uniqueName('one-slot-refused'));
    await expect(semaphore.trySetPermits(1)).rejects.toMatchObject({
      name: 'LockCrossSlotError',
      lockName: semaphore.name,
    });
    expect(await admin.dbsize()).toBe(0);
  });
});
