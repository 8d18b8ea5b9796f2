// Smoke run of the built package on the runtime floor (the machine's Node 20): loads it through ESM
// `import` and CommonJS `require` (on ioredis, and through ESM on node-redis 6 too), takes, re-enters, waits
// for and releases locks (and semaphores, a latch) against a real redis-server (REDIS_URL, or a throwaway one
// on a free port), runs the `flowlock` command and flowlock/opentelemetry, then checks that the process can
// exit.
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import * as esm from '../../dist/index.js';

const require = createRequire(import.meta.url);
const cjs = require('../../dist/index.cjs');

const [major, minor] = process.versions.node.split('.').map(Number);
assert.ok(major > 20 || (major === 20 && minor >= 19), `runtime floor is Node 20.19, got ${process.version}`);

async function freePort() {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

let server;
let url = process.env.REDIS_URL;
if (!url) {
  const port = await freePort();
  server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  url = `redis://127.0.0.1:${port}`;
  for (
    let i = 0;
    spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' }).stdout.trim() !== 'PONG';
    i++
  ) {
    assert.ok(i < 200, 'redis-server did not start');
    await sleep(25);
  }
}

const checks = [];
try {
  for (const [label, lib] of [
    ['esm', esm],
    ['cjs', cjs],
    ['esm-node-redis', esm],
  ]) {
    assert.equal(typeof lib.createLockClient, 'function', `${label}: createLockClient`);
    const redis = label.endsWith('node-redis') ? await createClient({ url }).connect() : new Redis(url);
    const locks = lib.createLockClient(redis, { watchdogTimeout: 1000 });
    const name = `smoke:${label}:${process.pid}`;
    const lock = locks.getLock(name);
    let nestedCount = 0;
    await lock.withLock(async () => {
      await lock.withLock(async () => {
        nestedCount = await lock.getHoldCount();
      });
    });
    assert.equal(nestedCount, 2, `${label}: re-entry`);

    const lease = await lock.acquire();
    const waiting = locks.run(() => lock.tryLock(2000));
    await sleep(100);
    await lease.release();
    assert.equal(await waiting, true, `${label}: a waiter is woken by the release`);
    await locks.run(async () => {
      await assert.rejects(lock.unlock(), { code: 'LOCK_NOT_HELD' });
    });
    await lock.forceUnlock();

    // Many attempts in flight at once on one client (each listens for the client's close): no warning.
    const warnings = [];
    const onWarning = (warning) => warnings.push(warning);
    process.on('warning', onWarning);
    const busy = await lock.acquire();
    const many = Array.from({ length: 12 }, () => locks.run(() => lock.tryLock(200)));
    assert.deepEqual(await Promise.all(many), Array(12).fill(false), `${label}: 12 waiters time out`);
    await busy.release();
    await sleep(10);
    process.off('warning', onWarning);
    assert.deepEqual(warnings.map(String), [], `${label}: no process warning`);

    // Node 20 has Symbol.asyncDispose but not the `await using` syntax: dispose by hand.
    const disposable = await lock.acquire({ leaseTime: 5000 });
    assert.equal(typeof disposable.fencingToken, 'bigint');
    await disposable[Symbol.asyncDispose]();
    assert.equal(await lock.isLocked(), false, `${label}: asyncDispose released`);
    await assert.rejects(lock.tryLock(), { name: 'NoFlowError' });

    // The family: a fair waiter woken on its own channel, readers together, an upgrade refused.
    const fair = locks.getFairLock(`${name}:fair`);
    const fairLease = await fair.acquire();
    const fairWaiting = locks.run(() => fair.tryLock(2000));
    await sleep(100);
    await fairLease.release();
    assert.equal(await fairWaiting, true, `${label}: a fair waiter is woken by the release`);
    await fair.forceUnlock();
    const rw = locks.getReadWriteLock(`${name}:rw`);
    const readers = await Promise.all([rw.readLock().acquire(), rw.readLock().acquire()]);
    await rw.readLock().withLock(async () => {
      await assert.rejects(
        rw.writeLock().withLock(() => undefined),
        { code: 'LOCK_UPGRADE' },
      );
    });
    await Promise.all(readers.map((reader) => reader.release()));
    assert.equal(await rw.writeLock().withLock(() => 'written'), 'written', `${label}: write after the readers`);

    // Semaphores and the latch: a permit waiter woken by a release, an expirable permit, a latch opened.
    const semaphore = locks.getSemaphore(`${name}:semaphore`);
    assert.equal(await semaphore.trySetPermits(1), true, `${label}: trySetPermits`);
    await semaphore.acquire();
    const permitWaiting = semaphore.tryAcquire(1, 2000);
    await sleep(100);
    await semaphore.release();
    assert.equal(await permitWaiting, true, `${label}: a permit waiter is woken by the release`);
    const expirable = locks.getPermitExpirableSemaphore(`${name}:expirable`);
    await expirable.trySetPermits(1);
    const permit = await expirable.acquire({ leaseTime: 5000 });
    assert.match(permit.permitId, /^[0-9a-f]{32}$/, `${label}: permit id`);
    await assert.rejects(expirable.acquire({ waitTime: 50 }), { code: 'LOCK_ACQUIRE_TIMEOUT' });
    await permit.release();
    await assert.rejects(expirable.release(permit.permitId), { code: 'PERMIT_NOT_HELD' });
    const latch = locks.getCountDownLatch(`${name}:latch`);
    await latch.trySetCount(1);
    const opening = latch.await(2000);
    await sleep(50);
    await latch.countDown();
    assert.equal(await opening, true, `${label}: the latch opens`);
    await locks.close();
    if (label.endsWith('node-redis')) redis.destroy();
    else await redis.quit();
    checks.push(label);
  }

  // The other entry points on the floor: the `flowlock` command (a child process on this same Node) sees a
  // held lock with its holder info, and flowlock/opentelemetry loads and enables without an SDK.
  {
    const redis = new Redis(url);
    const locks = esm.createLockClient(redis, { holderInfo: { app: 'smoke' } });
    const name = `smoke:cli:${process.pid}`;
    // A fair lock records its holder info with the grant (a plain lock's hold at its first renewal).
    const lease = await locks.getFairLock(name).acquire({ leaseTime: 10_000 });
    const cliPath = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
    const cli = spawnSync(process.execPath, [cliPath, 'inspect', name, '--url', url, '--json'], {
      encoding: 'utf8',
    });
    assert.equal(cli.status, 0, `cli: exit code (stderr: ${cli.stderr})`);
    const info = JSON.parse(cli.stdout);
    assert.equal(info.held, true, 'cli: held');
    assert.equal(info.owners.length, 1, 'cli: one owner');
    assert.match(String(info.owners[0].who), /smoke/, 'cli: holder info');
    await lease.release();
    const { FlowlockInstrumentation } = await import('../../dist/opentelemetry.js');
    const instrumentation = new FlowlockInstrumentation();
    instrumentation.enable();
    await locks.getLock(name).withLock(() => undefined);
    instrumentation.disable();
    await locks.close();
    await redis.quit();
    checks.push('cli', 'opentelemetry');
  }
} finally {
  server?.kill('SIGKILL');
}
console.log(`node-floor smoke on ${process.version}: ${checks.join(', ')} ok`);
