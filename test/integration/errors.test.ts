// Errors that say what happened (issue 37, item 5): a call Redis did not answer names the lock and says so,
// on every client library, with the client's own error as `cause` (node-redis' TimeoutError has an empty
// message; GLIDE's says only "timed out"); an unlock of a hold whose lease ran out says it was lost.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LockNotHeldError, RedisUnavailableError } from '../../src/index.js';
import { onCluster, uniqueName, until, useRedis } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

let server: LocalRedis | undefined;
const redis = useRedis(async () => (server = await startRedisServer()));

describe('errors that say what happened', () => {
  it.skipIf(onCluster)(
    'a call Redis does not answer: RedisUnavailableError names the lock, cause the client error',
    async () => {
      // Each library's command timeout, 500 ms.
      const locks = redis.locks(
        {},
        {
          ioredis: { commandTimeout: 500 },
          nodeRedis: { commandOptions: { timeout: 500 } },
          glide: { requestTimeout: 500 },
        },
      );
      const name = uniqueName('unanswered');
      await locks.getLock(uniqueName('warm-up')).isLocked();
      if (!server) throw new Error('no local server');
      const local = server;
      // Redis down: the call waits in the client's offline queue (or its reconnect) until its command timeout.
      await local.kill();
      try {
        const error = await locks
          .run(() => locks.getLock(name).tryLock())
          .then(
            () => undefined,
            (thrown: unknown) => thrown,
          );
        expect(error).toBeInstanceOf(RedisUnavailableError);
        const unavailable = error as RedisUnavailableError;
        expect(unavailable).toMatchObject({ code: 'LOCK_REDIS_UNAVAILABLE', lockName: name });
        expect(unavailable.message).toMatch(
          new RegExp(
            `^Lock "${name}": (Redis did not answer in time|the connection to Redis is closed) \\(the Redis client said \\w+`,
          ),
        );
        expect(unavailable.cause).toBeInstanceOf(Error);
        const cause = unavailable.cause as Error;
        expect(unavailable.message).toContain(cause.name === 'Error' ? cause.constructor.name : cause.name);
      } finally {
        await local.restart();
      }
    },
  );

  it('an unlock after the lease ran out says the hold was lost, and why', async () => {
    const locks = redis.locks();
    const name = uniqueName('ran-out');
    const lock = locks.getLock(name);
    await locks.run(async () => {
      const lease = await lock.acquire({ leaseTime: 100 });
      await until(() => lease.signal.aborted, 'the lease ran out', 5000);
      await sleep(10);
      const error = await lock.unlock().then(
        () => undefined,
        (thrown: unknown) => thrown,
      );
      expect(error).toBeInstanceOf(LockNotHeldError);
      expect((error as Error).message).toBe(
        `Lock "${name}" is no longer held by the current flow: it was lost (its lease time ran out before it was ` +
          'released); nothing was changed',
      );
    });
  });
});
