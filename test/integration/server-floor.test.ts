// A server below the floor (Redis 6.0, Valkey 7.2) gets UnsupportedServerError, on REDIS_CLIENT's client.
// There is no Redis 5 here, so the proof has two real halves: the script error is a real server's own refusal
// (a redis-server started with PEXPIRE renamed away: the lock scripts call a command it does not have, as
// a server below the floor lacks a command form), and the version is a real INFO reply whose version line a
// proxy edits on its way to the client, to a same-length version below the floor (RESP lengths stay right).
// The decision itself is unit-tested on INFO replies recorded from 6.0.20 to 7.4.1 and Valkey 8.0.1
// (test/unit/server-version.test.ts); run this file with PATH=/opt/redis-builds/<build>:$PATH for each build.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnsupportedServerError } from '../../src/index.js';
import { checkServer } from '../../src/admin/index.js';
import { onGlide } from '../support/clients.js';
import { newRedis, onCluster, uniqueName, useRedis, type Client, type Redis } from '../support/fixture.js';
import { proxyBelowFloor, versionBelowFloor, type TcpProxy } from '../support/proxy.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

const redis = useRedis();

/**
 * The server's refusal the acquire meets: PEXPIRE renamed away, or on a server without a form the scripts send
 * (SET ... GET before Redis 6.2, while the scripts still use it) its syntax error, which comes first.
 */
const REFUSED = /unknown (redis )?command|syntax error/i;

/** INFO calls on the server so far, before this one (which counts from the next reading on). */
async function infoCalls(admin: Client): Promise<number> {
  return Number(/^cmdstat_info:calls=(\d+)/m.exec(await admin.info('commandstats'))?.[1] ?? 0);
}

/**
 * An ACL user `noinfo` (password pw) that may run everything but INFO, on every key and channel (Redis 6.0 has
 * no channel rules: `&*` is 6.2+).
 */
async function userWithoutInfo(admin: Client): Promise<void> {
  const rules = ['noinfo', 'on', '>pw', '~*', '+@all', '-info'];
  try {
    await admin.call('ACL', 'SETUSER', ...rules, '&*');
  } catch {
    await admin.call('ACL', 'SETUSER', ...rules);
  }
}

describe.skipIf(onCluster)('a server below the floor', () => {
  /** A real server without PEXPIRE: every acquire script meets a command the server does not have. */
  let refusing: LocalRedis;
  let refusingAdmin: Redis;
  let info: string;
  let proxy: TcpProxy;

  beforeAll(async () => {
    refusing = await startRedisServer(['--rename-command', 'PEXPIRE', '']);
    refusingAdmin = newRedis(refusing);
    info = await refusingAdmin.info('server');
    proxy = await proxyBelowFloor(refusing.port, info);
    await userWithoutInfo(refusingAdmin);
  });
  afterAll(async () => {
    await proxy.close();
    refusingAdmin.disconnect();
    await refusing.stop();
  });

  it('rejects the call that met the refusal with UnsupportedServerError naming the version found and the floor', async () => {
    const { fake, product } = versionBelowFloor(info);
    const locks = redis.locks({}, { port: proxy.port });
    const failure = await locks
      .getLock(uniqueName('floor'))
      .acquire()
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(failure).toBeInstanceOf(UnsupportedServerError);
    const error = failure as UnsupportedServerError;
    expect(error.code).toBe('UNSUPPORTED_SERVER');
    expect(error.name).toBe('UnsupportedServerError');
    expect([error.server, error.version]).toEqual([product, fake]);
    expect(error.message).toMatch(
      new RegExp(
        `^${product} ${fake.replaceAll('.', '\\.')} is below flowlock's floor, Redis 6\\.0 \\(Valkey 7\\.2\\)`,
      ),
    );
    // The server's own error, unchanged.
    expect((error.cause as Error).message).toMatch(REFUSED);

    // INFO was read once, at that first refusal: the next refused call is judged without another read.
    const before = await infoCalls(refusingAdmin);
    await expect(locks.getLock(uniqueName('floor')).acquire()).rejects.toBeInstanceOf(UnsupportedServerError);
    // + 1: the first reading's own INFO.
    expect(await infoCalls(refusingAdmin)).toBe(before + 1);
  });

  it('leaves the server its own error where its version is at the floor or above (a command blocked there)', async () => {
    const locks = redis.locks({}, { port: refusing.port });
    const failure = await locks
      .getLock(uniqueName('floor'))
      .acquire()
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(failure).toBeInstanceOf(Error);
    expect(failure).not.toBeInstanceOf(UnsupportedServerError);
    expect((failure as Error).message).toMatch(REFUSED);
  });

  // GLIDE reads INFO to connect: a user without INFO has no GLIDE client at all.
  it.skipIf(onGlide)('leaves the server its own error where INFO is denied: nothing is judged', async () => {
    const locks = redis.locks({}, { port: proxy.port, username: 'noinfo', password: 'pw' });
    const failure = await locks
      .getLock(uniqueName('floor'))
      .acquire()
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(failure).not.toBeInstanceOf(UnsupportedServerError);
    expect((failure as Error).message).toMatch(REFUSED);
  });

  it('fails doctor, naming the version found and the floor', async () => {
    const { fake, product } = versionBelowFloor(info);
    const report = await checkServer(redis.client({ port: proxy.port }));
    expect(report.ok).toBe(false);
    expect(report.server.version).toBe(fake);
    const server = report.checks.find((check) => check.id === 'server');
    expect(server?.status).toBe('fail');
    expect(server?.detail).toMatch(`${product} ${fake} is below flowlock's floor, Redis 6.0 (Valkey 7.2)`);
  });
});

describe.skipIf(onCluster)('a server at the floor or above', () => {
  it('passes doctor with its own version (a Valkey by valkey_version)', async () => {
    const { real, product } = versionBelowFloor(await redis.admin.info('server'));
    const report = await checkServer(redis.client());
    const server = report.checks.find((check) => check.id === 'server');
    expect(server?.status).toBe('ok');
    expect(report.server).toMatchObject({ product: product.toLowerCase(), version: real });
  });

  it('adds no INFO read to script calls that succeed', async () => {
    const locks = redis.locks();
    const lock = locks.getLock(uniqueName('floor'));
    // The first lock operation reads INFO memory once (the eviction warning, src/client.ts): not counted.
    await (await lock.acquire()).release();
    const before = await infoCalls(redis.admin);
    for (let i = 0; i < 5; i++) await (await lock.acquire()).release();
    expect(await infoCalls(redis.admin)).toBe(before + 1);
  });

  // GLIDE reads INFO to connect (see above).
  it.skipIf(onGlide)('takes and releases a lock for a user that may not run INFO', async () => {
    await userWithoutInfo(redis.admin);
    const locks = redis.locks({}, { username: 'noinfo', password: 'pw' });
    const lock = locks.getLock(uniqueName('floor'));
    const lease = await lock.acquire();
    expect(await lock.isLocked()).toBe(true);
    await lease.release();
    expect(await lock.isLocked()).toBe(false);
  });
});
