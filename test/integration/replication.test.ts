/**
 * syncReplicas on a master with one replica: a grant the replica acknowledged stands; with the replica
 * paused (SIGSTOP) a grant is undone and the acquisition fails with LockNotReplicatedError.
 */
import { spawnSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLockClient,
  LockNotReplicatedError,
  LockPermissionError,
  type LockClient,
  type LockClientOptions,
} from '../../src/index.js';
import { newTestClient, sendCommand, type TestClient } from '../support/clients.js';
import { elapsedSince, newRedis, uniqueName, until, type Redis } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

let master: LocalRedis;
let replica: LocalRedis;
let admin: Redis;
const opened: { connection: TestClient; locks: LockClient }[] = [];

/** A lock client on a new client under test (`REDIS_CLIENT`) of the master; `connection` is that client. */
function lockSetup(options: LockClientOptions): { locks: LockClient; connection: TestClient } {
  const connection = newTestClient({ topology: 'standalone', host: master.host, port: master.port });
  const locks = createLockClient(connection.client, options);
  opened.push({ connection, locks });
  return { locks, connection };
}

function lockClient(options: LockClientOptions): LockClient {
  return lockSetup(options).locks;
}

beforeAll(async () => {
  master = await startRedisServer();
  replica = await startRedisServer(['--replicaof', '127.0.0.1', String(master.port)]);
  admin = newRedis(master);
  const deadline = Date.now() + 10_000;
  while (
    !/master_link_status:up/.test(
      spawnSync('redis-cli', ['-p', String(replica.port), 'info', 'replication']).stdout.toString(),
    )
  ) {
    if (Date.now() > deadline) throw new Error('the replica did not sync');
    await sleep(50);
  }
});

afterAll(async () => {
  for (const { connection, locks } of opened) {
    await locks.close();
    await connection.close();
  }
  admin.disconnect();
  replica.resume();
  await replica.stop();
  await master.stop();
});

describe('syncReplicas', () => {
  it('confirms a grant that the replica acknowledged; the replica has the key at once', async () => {
    const locks = lockClient({ syncReplicas: { replicas: 1, timeout: 1000 } });
    const name = uniqueName('sync');
    const replicaRedis = newRedis(replica);
    try {
      await locks.getLock(name).withLock(async () => {
        expect(await replicaRedis.exists(name)).toBe(1);
        // A re-entry is confirmed the same way.
        await locks.getLock(name).withLock(async () => {
          expect(await replicaRedis.hvals(name)).toContain('2');
        });
      });
    } finally {
      replicaRedis.disconnect();
    }
  });

  it('undoes the grant and fails with LockNotReplicatedError while the replica cannot acknowledge', async () => {
    const locks = lockClient({ syncReplicas: { replicas: 1, timeout: 200 } });
    const plain = lockClient({});
    const name = uniqueName('sync');
    replica.pause();
    try {
      const started = performance.now();
      const error: unknown = await locks
        .getLock(name)
        .acquire({ waitTime: 2000 })
        .catch((e: unknown) => e);
      const elapsed = elapsedSince(started);
      expect(error).toBeInstanceOf(LockNotReplicatedError);
      expect(error).toMatchObject({ code: 'LOCK_NOT_REPLICATED', lockName: name, replicas: 1, acknowledged: 0 });
      // WAIT's timeout, not the wait time, bounds it.
      expect(elapsed).toBeGreaterThanOrEqual(190);
      expect(elapsed).toBeLessThan(1500);
      expect(await admin.exists(name)).toBe(0);

      // Without syncReplicas the same grant stands on the master alone: the risk the option narrows.
      await plain.getLock(name).withLock(async () => {
        expect(await admin.exists(name)).toBe(1);
      });
    } finally {
      replica.resume();
    }
    // Once the replica is back, grants are confirmed again.
    await expect(locks.getLock(name).withLock(() => 'ok', { waitTime: 5000 })).resolves.toBe('ok');
  });

  it('confirms or undoes fair-lock and write-lock grants the same way, leaving no hold behind', async () => {
    const locks = lockClient({ syncReplicas: { replicas: 1, timeout: 200 } });
    const name = uniqueName('sync');
    const fair = locks.getFairLock(`${name}:fair`);
    const write = locks.getReadWriteLock(`${name}:rw`).writeLock();
    const read = locks.getReadWriteLock(`${name}:rw`).readLock();
    expect(await fair.withLock(() => 'fair')).toBe('fair');
    expect(await write.withLock(() => 'write')).toBe('write');
    replica.pause();
    try {
      for (const lock of [fair, write, read]) {
        const error: unknown = await lock.acquire({ waitTime: 1000 }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockNotReplicatedError);
      }
      expect(await admin.exists(`${name}:fair`)).toBe(0);
      expect(await admin.exists(`${name}:rw`)).toBe(0);
    } finally {
      replica.resume();
    }
  });

  it('confirms or undoes semaphore grants the same way, giving the permits back', async () => {
    const locks = lockClient({ syncReplicas: { replicas: 1, timeout: 200 } });
    const name = uniqueName('sync');
    const sem = locks.getSemaphore(`${name}:sem`);
    const ps = locks.getPermitExpirableSemaphore(`${name}:pes`);
    await sem.trySetPermits(1);
    await ps.trySetPermits(1);
    expect(await sem.tryAcquire()).toBe(true);
    await sem.release();
    await (await ps.acquire()).release();
    replica.pause();
    try {
      const semError: unknown = await sem.tryAcquire(1, 1000).catch((e: unknown) => e);
      expect(semError).toBeInstanceOf(LockNotReplicatedError);
      const psError: unknown = await ps.acquire({ waitTime: 1000 }).catch((e: unknown) => e);
      expect(psError).toBeInstanceOf(LockNotReplicatedError);
      expect(await admin.get(`${name}:sem`)).toBe('1');
      expect(await admin.get(`${name}:pes`)).toBe('1');
      expect(await admin.zcard(`{${name}:pes}:timeout`)).toBe(0);
    } finally {
      replica.resume();
    }
  });

  it('undoes an unacknowledged re-entry and keeps the outer hold', async () => {
    const locks = lockClient({ syncReplicas: { replicas: 1, timeout: 200 } });
    const name = uniqueName('sync');
    await locks.run(async () => {
      const lock = locks.getLock(name);
      expect(await lock.tryLock()).toBe(true);
      replica.pause();
      try {
        await expect(lock.tryLock()).rejects.toBeInstanceOf(LockNotReplicatedError);
        expect(await lock.getHoldCount()).toBe(1);
        // Its attempt is awaited past the 50 ms wait time (which bounds waiting for a holder): the grant is
        // undone once, by #grant, and not again by the caller (a second undo would take the outer hold too).
        await expect(lock.tryLock({ waitTime: 50 })).rejects.toBeInstanceOf(LockNotReplicatedError);
        // The grant (a hold count of 2) is undone once WAIT times out, 200 ms and a server tick after it ran.
        await until(async () => (await lock.getHoldCount()) === 1, 'the re-entry undone', 5000);
        await sleep(400);
        expect(await lock.getHoldCount()).toBe(1);
        expect(await admin.exists(name)).toBe(1);
      } finally {
        replica.resume();
      }
      await lock.unlock();
    });
    expect(await admin.exists(name)).toBe(0);
  });

  it('says the ACL refusal when the user may not ask CLIENT ID (which checks WAIT), leaving no key', async () => {
    const user = uniqueName('acl').replaceAll(':', '-');
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw', 'allkeys', '+@all', '-client|id');
    try {
      const connection = newTestClient(
        { topology: 'standalone', host: master.host, port: master.port },
        { username: user, password: 'pw' },
      );
      const locks = createLockClient(connection.client, { syncReplicas: { replicas: 1, timeout: 1000 } });
      opened.push({ connection, locks });
      const name = uniqueName('sync');
      const error: unknown = await locks
        .getLock(name)
        .acquire()
        .catch((e: unknown) => e);
      // Not "0 of 1 replicas acknowledged", which would be untrue: the server's refusal, as every refusal.
      expect(error).toBeInstanceOf(LockPermissionError);
      expect(error).toMatchObject({ code: 'LOCK_PERMISSION_DENIED', lockName: name });
      expect(await admin.exists(name)).toBe(0);
    } finally {
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('refuses a grant whose WAIT was cut off by a dropped connection, and leaves no key', async () => {
    const { locks, connection } = lockSetup({ syncReplicas: { replicas: 1, timeout: 2000 } });
    const name = uniqueName('sync');
    const id = await sendCommand(connection.client, ['CLIENT', 'ID']);
    replica.pause();
    try {
      const acquiring = locks
        .getLock(name)
        .acquire()
        .catch((e: unknown) => e);
      // Granted, and WAIT blocked on the paused replica: the connection's last command is WAIT.
      await until(async () => /\bcmd=wait\b/.test(String(await admin.client('LIST', 'ID', String(id)))), 'WAIT sent');
      // The connection drops while WAIT waits; ioredis resends WAIT on the new connection, node-redis rejects
      // it. Whatever that answers (a WAIT on the new connection proves nothing about the grant: it wrote
      // nothing), the grant is refused.
      await admin.client('KILL', 'ID', String(id));
      expect(await acquiring).toBeInstanceOf(LockNotReplicatedError);
      expect(await admin.exists(name)).toBe(0);
    } finally {
      replica.resume();
    }
  });
});
