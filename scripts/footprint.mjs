/**
 * `node scripts/footprint.mjs [--names=N] [--parallel=P] [--dist=DIR]` (after `npm run build`): the
 * footprint test (test/integration/footprint.test.ts) at scale, on a throwaway redis-server. Locks N
 * distinct names (default 100 000) of every kind once: plain, fair, read-write (read, then write with a
 * downgrade), semaphore, expirable semaphore, latch; then waits until every key with a TTL has run out and
 * prints the key count and used_memory before, during and after, and what is left without a TTL (the shared
 * fencing counter and the semaphores' permit counts, the user's state, which it then deletes).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';

const argv = process.argv.slice(2);
const option = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const names = Number(option('names') ?? 100_000);
const parallel = Number(option('parallel') ?? 100);
const dist = resolve(option('dist') ?? 'dist');
const port = 20000 + Math.floor(Math.random() * 20000);

const server = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
const redis = new Redis({ port, lazyConnect: true });
for (let tries = 0; ; tries++) {
  try {
    await redis.connect();
    break;
  } catch (error) {
    if (tries > 50) throw error;
    await sleep(100);
  }
}
const { createLockClient } = await import(pathToFileURL(`${dist}/index.js`).href);
const locks = createLockClient(redis);

async function footprint() {
  const keys = await redis.dbsize();
  const usedMemory = Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1] ?? 0);
  let persistent = 0;
  const examples = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'COUNT', 10_000);
    cursor = next;
    const pipeline = redis.pipeline();
    for (const key of batch) pipeline.pttl(key);
    const ttls = (await pipeline.exec()) ?? [];
    batch.forEach((key, i) => {
      if (ttls[i]?.[1] === -1) {
        persistent++;
        if (examples.length < 5) examples.push(key);
      }
    });
  } while (cursor !== '0');
  return { keys, usedMemory, persistent, examples };
}

const user = [];
async function useOnce(name) {
  await locks.getLock(`${name}:lock`).withLock(() => undefined);
  await locks.getFairLock(`${name}:fair`).withLock(() => undefined);
  const rw = locks.getReadWriteLock(`${name}:rw`);
  await rw.readLock().withLock(() => undefined);
  await rw.writeLock().withLock(() => rw.readLock().withLock(() => undefined));
  const sem = locks.getSemaphore(`${name}:sem`);
  await sem.trySetPermits(1);
  await sem.acquire();
  await sem.release();
  const permits = locks.getPermitExpirableSemaphore(`${name}:permits`);
  await permits.trySetPermits(1);
  await permits.withPermit(() => undefined);
  const latch = locks.getCountDownLatch(`${name}:latch`);
  await latch.trySetCount(1);
  await latch.countDown();
  user.push(`${name}:sem`, `${name}:permits`);
}

const show = (what, f) =>
  console.log(
    `${what.padEnd(7)} keys ${String(f.keys).padStart(8)}  used_memory ${(f.usedMemory / 1024).toFixed(0).padStart(8)} KB` +
      `  without TTL ${f.persistent}${f.examples.length ? ` (${f.examples.join(', ')}${f.persistent > f.examples.length ? ', …' : ''})` : ''}`,
  );

await useOnce('warm');
await redis.del(...user.splice(0));
const before = await footprint();
show('before', before);
const started = performance.now();
for (let i = 0; i < names; i += parallel) {
  const batch = Array.from({ length: Math.min(parallel, names - i) }, (_, k) => `order:${i + k}`);
  await Promise.all(batch.map(useOnce));
}
const during = await footprint();
show('during', during);
console.log(`        ${names} names x 6 kinds in ${((performance.now() - started) / 1000).toFixed(1)} s`);
for (let i = 0; i < user.length; i += 10_000) await redis.del(...user.slice(i, i + 10_000));
const waitStart = performance.now();
for (;;) {
  const now = await footprint();
  if (now.keys === now.persistent) break;
  await sleep(1000);
}
const after = await footprint();
show('after', after);
console.log(`        every TTL ran out ${((performance.now() - waitStart) / 1000).toFixed(1)} s after the last use`);
await locks.close();
redis.disconnect();
server.kill();
await once(server, 'exit');
