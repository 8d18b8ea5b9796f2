import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createLockClient } from '../../src/index.js';
import { clientKind, onGlide, onNodeRedis } from '../support/clients.js';
import { uniqueName, until, useRedis, type Redis } from '../support/fixture.js';

const redis = useRedis();

// An ioredis handshake quirk (CLIENT SETINFO and the INFO ready check of a new connection, spied on through
// ioredis' API): ioredis and iovalkey only; node-redis opens its subscriber by connect(), awaited first.
// An ioredis quirk (a SUBSCRIBE written during the connection's handshake).
describe.runIf(!onNodeRedis && !onGlide)('subscriber connection start-up', () => {
  it('a lock whose waiter queues while the new subscriber connection is in its handshake still gets release messages', async () => {
    // The client under test (ioredis 5 or 6, or iovalkey); standalone: this file is not in the cluster pass.
    const client = redis.client() as unknown as Redis;
    const [a, b] = [uniqueName(), uniqueName()];
    // Spy (pass-through) on the subscriber connection the lock client duplicates, and on b's failed attempts.
    let connected: Promise<unknown> | undefined;
    let readyAt = Infinity;
    const duplicate = client.duplicate.bind(client);
    client.duplicate = (...args: Parameters<Redis['duplicate']>) => {
      const connection = duplicate(...args);
      // A slow handshake (as on a loaded host): ioredis' CLIENT SETINFO replies, and so its INFO ready
      // check, come 300 ms late (iovalkey sends no CLIENT SETINFO: its INFO ready check itself does);
      // meanwhile the connection is in status 'connect'.
      const slowed = clientKind === 'iovalkey' ? 'info' : 'client';
      const command = connection[slowed].bind(connection) as (...a: unknown[]) => Promise<unknown>;
      (connection as unknown as Record<string, unknown>)[slowed] = (...a: unknown[]) =>
        slowed === 'info' || String(a[0]).toUpperCase() === 'SETINFO'
          ? sleep(300).then(() => command(...a))
          : command(...a);
      connected = once(connection, 'connect');
      connection.once('ready', () => (readyAt = performance.now()));
      return connection;
    };
    let bFailedAt = Infinity;
    const evalsha = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { evalsha: unknown }).evalsha = async (...args: unknown[]) => {
      const reply = await evalsha(...args);
      if (args[2] === b && Array.isArray(reply) && reply[0] === 0) bFailedAt = Math.min(bFailedAt, performance.now());
      return reply;
    };
    const locks = createLockClient(client);
    const waits: Promise<unknown>[] = [];
    // Each wait is awaited below; a failed step before that must not leave its rejection (close()) unhandled.
    const waitFor = (wait: Promise<unknown>): void => {
      wait.catch(() => undefined);
      waits.push(wait);
    };
    try {
      // Foreign holders with long leases: only a release message (or a retry) lets a waiter in soon.
      for (const name of [a, b]) {
        await redis.admin.hset(name, 'foreign:1', '1');
        await redis.admin.pexpire(name, 30_000);
      }
      // The first waiter creates the subscriber connection (its SUBSCRIBE waits in the offline queue).
      waitFor(locks.getLock(a).withLock(() => undefined));
      while (!connected) await sleep(1);
      // The socket is up; ioredis' handshake (CLIENT SETINFO, INFO ready check) is still running.
      await connected;
      let acquiredB = 0;
      waitFor(
        locks.getLock(b).withLock(() => {
          acquiredB = performance.now();
        }),
      );
      // b's channel subscribed after the slow handshake (a lost subscription would stay pending).
      const bChannel = `redisson_lock__channel:{${b}}`;
      await until(
        () => locks.waits().some((w) => w.channel === bChannel && w.waiters > 0 && w.subscription === 'active'),
        'b parked on an active subscription',
      );
      // b's waiter queued (and asked for its channel) before the subscriber connection was ready.
      expect(bFailedAt).toBeLessThan(readyAt);
      await redis.admin.del(b);
      await redis.admin.publish(bChannel, '0');
      const releasedAt = performance.now();
      await waits[1];
      // Unwoken, b would sleep until the foreign 30 s lease ran out; the message wakes it in milliseconds.
      expect(acquiredB - releasedAt).toBeLessThan(1000);
      await redis.admin.del(a);
      await redis.admin.publish(`redisson_lock__channel:{${a}}`, '0');
      await waits[0];
    } finally {
      await locks.close();
      await Promise.allSettled(waits);
    }
  });
});
