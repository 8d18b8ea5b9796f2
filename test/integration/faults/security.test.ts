// Least privilege (an ACL user with only what the library needs; ACL LOG stays empty) and TLS (the
// subscriber connection, a duplicate, inherits TLS and credentials). Certificates are made here by openssl.
// The lock client runs on the client under test (`REDIS_CLIENT`); `admin` is ioredis 5.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLockClient } from '../../../src/index.js';
import { type LocalRedis } from '../../support/redis-server.js';
import { makeCertificates, startTlsServer } from '../../support/tls.js';
import { newRedis, type Redis, until } from '../../support/fixture.js';
import { newTestClient, onGlide } from '../../support/clients.js';

/** The README's least-privilege rule for keyPrefix `app:`. */
export const LOCK_USER_RULE = [
  'on',
  '>locker-secret',
  'resetkeys',
  '~app:*',
  'resetchannels',
  '&app:*',
  '-@all',
  '+evalsha',
  '+eval',
  '+exists',
  '+pttl',
  '+get',
  '+hget',
  '+hgetall',
  '+subscribe',
  '+unsubscribe',
  '+info',
  '+ping',
  '+hello',
  // called inside the scripts (every primitive's)
  '+hset',
  '+hexists',
  '+hmget',
  '+hincrby',
  '+hdel',
  '+pexpire',
  '+set',
  '+del',
  '+incrby',
  '+incr',
  '+mget',
  '+decrby',
  '+decr',
  '+lindex',
  '+lpop',
  '+lpush',
  '+rpush',
  '+lrange',
  '+lrem',
  '+zadd',
  '+zcard',
  '+zrange',
  '+zrem',
  '+zremrangebyscore',
  '+zscore',
  '+publish',
  '+time',
];

let dir: string;
let server: LocalRedis;
let admin: Redis;
let tls: { ca: Buffer; servername: string };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'flowlock-tls-'));
  makeCertificates(dir);
  // Plaintext is off: every connection, the subscriber's included, must speak TLS.
  server = await startTlsServer(dir, [
    '--user',
    'admin',
    'on',
    '>admin-secret',
    '~*',
    '&*',
    '+@all',
    '--user',
    'default',
    'off',
  ]);
  tls = { ca: readFileSync(join(dir, 'ca.crt')), servername: 'localhost' };
  admin = newRedis(server, { tls, username: 'admin', password: 'admin-secret' });
  // A GLIDE subscriber asks its connections' CLIENT IDs (GLIDE announces no reconnect): docs' GLIDE addition.
  await admin.acl('SETUSER', 'locker', ...LOCK_USER_RULE, ...(onGlide ? ['+client|id'] : []));
  await admin.acl('LOG', 'RESET');
});
afterAll(async () => {
  admin.disconnect();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('least privilege over TLS', () => {
  it('runs a full workload as the ACL user, with the subscriber on TLS and the same credentials', async () => {
    const credentials = { username: 'locker', password: 'locker-secret' };
    const redis = newTestClient(
      { topology: 'standalone', host: server.host, port: server.port },
      {
        ioredis: { tls, ...credentials },
        nodeRedis: { ...credentials, socket: { tls: true, ...tls } },
        glide: {
          credentials,
          useTLS: true,
          advancedConfiguration: { tlsAdvancedConfiguration: { rootCertificates: tls.ca } },
        },
      },
    );
    // A lease of 1.5 s (renewed every 500 ms): the holds below outlast it, so only renewals keep them, and a
    // stall of the loaded machine shorter than about a second does not lose them.
    const locks = createLockClient(redis.client, { keyPrefix: 'app:', watchdogTimeout: 1500 });
    const lock = locks.getLock('order:42');
    await lock.withLock(async () => {
      await lock.withLock(async () => {
        expect(await lock.getHoldCount()).toBe(2);
      });
      await sleep(2000); // longer than the lease: held now only if the watchdog renewed it
      expect(await lock.remainTimeToLive()).toBeGreaterThan(0);
    });
    const held = await lock.acquire();
    const waiting = locks.run(() => lock.tryLock(5000));
    waiting.catch(() => undefined); // awaited below; a failure before that must not go unhandled
    // The subscriber connection (a new TLS connection: handshake, AUTH, SUBSCRIBE) runs as the ACL user.
    await until(
      async () => /user=locker/.test(String(await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub'))),
      'the TLS subscriber connection up as user locker',
    );
    await held.release();
    expect(await waiting).toBe(true);
    await lock.forceUnlock();
    expect(await lock.isLocked()).toBe(false);

    // The rest of the family, each with a waiter woken by a release.
    const fair = locks.getFairLock('jobs');
    const fairHeld = await fair.acquire();
    const fairWaiting = locks.run(() => fair.tryLock(5000));
    await sleep(50);
    await fairHeld.release();
    expect(await fairWaiting).toBe(true);
    await fair.forceUnlock();
    const rw = locks.getReadWriteLock('catalog');
    const reader = await rw.readLock().acquire();
    const writer = rw.writeLock().withLock(() => 'written', { waitTime: 5000 });
    await sleep(50);
    await reader.release();
    expect(await writer).toBe('written');
    const semaphore = locks.getSemaphore('pool');
    await semaphore.trySetPermits(1);
    await semaphore.acquire();
    const permitWaiting = semaphore.tryAcquire(1, 5000);
    await sleep(50);
    await semaphore.release();
    expect(await permitWaiting).toBe(true);
    await semaphore.release();
    expect(await semaphore.availablePermits()).toBe(1);
    await semaphore.addPermits(1);
    expect(await semaphore.drainPermits()).toBe(2);
    const expirable = locks.getPermitExpirableSemaphore('exports');
    await expirable.trySetPermits(1);
    const permit = await expirable.acquire();
    const expirableWaiting = expirable.acquire({ waitTime: 5000 });
    expirableWaiting.catch(() => undefined); // awaited below
    await sleep(2000); // longer than the lease: the permit is still ours only if the watchdog renewed it
    await permit.release();
    await (await expirableWaiting).release();
    const latch = locks.getCountDownLatch('boot');
    await latch.trySetCount(1);
    const opening = latch.await(5000);
    await sleep(50);
    await latch.countDown();
    expect(await opening).toBe(true);
    expect(await latch.getCount()).toBe(0);
    await locks.close();
    await redis.close();
    expect(await admin.acl('LOG')).toEqual([]);
  });
});
