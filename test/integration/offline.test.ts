// While Redis is down, with the clients' default settings (ioredis and node-redis queue commands offline
// instead of failing them): a renewal that goes unanswered is reported as an error event before the hold's
// deadline (which still keeps it), and `waits()` does not call a subscription active whose connection is down.
import diagnostics from 'node:diagnostics_channel';
import { beforeAll, describe, expect, it } from 'vitest';
import { LockRenewalUnansweredError } from '../../src/index.js';
import { commandCalls, onCluster, uniqueName, until, useRedis } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

let server: LocalRedis | undefined;
const redis = useRedis(async () => (server = await startRedisServer()));

// The admin connection reconnects while the server is down: its errors are expected here.
beforeAll(() => {
  redis.admin.on('error', () => undefined);
});

function localServer(): LocalRedis {
  if (!server) throw new Error('no local server');
  return server;
}

describe.skipIf(onCluster)('while Redis is down (issue 22, items 3 and 4)', () => {
  it('an unanswered renewal is a renew:error event before the deadline, and the hold is kept until then', async () => {
    const errors: unknown[] = [];
    const onError = (message: unknown): void => {
      errors.push((message as { error: unknown }).error);
    };
    diagnostics.subscribe('tracing:flowlock:renew:error', onError);
    try {
      const locks = redis.locks({ watchdogTimeout: 6000 });
      const name = uniqueName('offline-renew');
      const lease = await locks.getLock(name).acquire();
      await localServer().kill();
      await until(() => errors.length > 0 || lease.signal.aborted, 'a renewal error or the loss', 10_000);
      // Reported (about 3 s after the acquisition) while the hold is still kept (until about 6 s after it).
      expect(lease.signal.aborted).toBe(false);
      expect(locks.holds()).toMatchObject([{ name, renewing: true }]);
      expect(errors[0]).toBeInstanceOf(LockRenewalUnansweredError);
      expect(errors[0]).toMatchObject({ code: 'LOCK_RENEWAL_UNANSWERED', name: 'LockRenewalUnansweredError' });
      await until(() => lease.signal.aborted, 'the loss at the deadline', 10_000);
    } finally {
      diagnostics.unsubscribe('tracing:flowlock:renew:error', onError);
      await localServer().restart();
    }
  });

  it('waits() reports a subscription whose connection is down as not active, and active once restored', async () => {
    const name = uniqueName('offline-waits');
    const holder = redis.locks();
    await holder.getLock(name).acquire({ leaseTime: 60_000 });
    const locks = redis.locks();
    const scriptCalls = async (): Promise<number> => {
      const calls = await commandCalls(redis.admin);
      return (calls['evalsha'] ?? 0) + (calls['eval'] ?? 0);
    };
    const before = await scriptCalls();
    const waiting = locks.run(() => locks.getLock(name).tryLock(30_000));
    // Settled whatever happens below: a failed assertion leaves no rejection unhandled.
    const outcome = waiting.catch((error: unknown) => error);
    let down = false;
    try {
      await until(() => locks.waits()[0]?.subscription === 'active', 'an active subscription', 5000);
      // Its attempts are done (the first, and the one after subscribing): it is parked, with no call in
      // flight that the kill could fail (node-redis would end the wait with that error).
      await until(async () => (await scriptCalls()) >= before + 2, 'two attempts', 5000);
      await redis.admin.ping();
      await localServer().kill();
      down = true;
      await until(() => locks.waits()[0]?.subscription !== 'active', 'the subscription no longer active', 3000);
      expect(locks.waits()).toMatchObject([{ waiters: 1, subscription: 'pending' }]);
    } finally {
      if (down) await localServer().restart();
    }
    // The restarted server is empty: the waiter takes the lock once its client is back.
    expect(await outcome).toBe(true);
  });
});
