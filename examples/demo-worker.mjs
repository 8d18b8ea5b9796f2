// One contender of scene 1 of demo.mjs: takes the lock `demo:counter` a few times, increments a shared
// counter inside each critical section, and reports every section to the parent over IPC.
// Started by demo.mjs as: fork('demo-worker.mjs', [redisUrl, workerName, rounds], { serialization: 'advanced' }).
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createLockClient } from '../dist/index.js';

const COUNTER_KEY = 'demo:counter:value';

const [redisUrl, name, rounds = '3'] = process.argv.slice(2);
if (!process.send || !redisUrl || !name) {
  console.error('demo-worker.mjs is started by examples/demo.mjs');
  process.exit(2);
}

let finished = false;
// Without the parent nobody reads the reports, so stop instead of contending for nothing.
process.on('disconnect', () => {
  if (!finished) process.exit(1);
});

const redis = new Redis(redisUrl);
const locks = createLockClient(redis);
const lock = locks.getLock('demo:counter');

/** Sends one event; `at` is process.hrtime.bigint(), the system's monotonic clock, comparable across processes. */
const report = (event, at, details = {}) =>
  new Promise((resolve, reject) => {
    process.send({ worker: name, event, at, ...details }, (error) => (error ? reject(error) : resolve()));
  });

await redis.ping();
await report('ready', process.hrtime.bigint());
await once(process, 'message'); // "go": every worker starts contending at the same moment

for (let round = 0; round < Number(rounds); round++) {
  await lock.withLock(async (_signal, lease) => {
    const enteredAt = process.hrtime.bigint();
    await report('acquired', enteredAt, { token: lease.fencingToken });

    // A deliberately racy read-modify-write: only the lock keeps increments from getting lost.
    const before = Number(await redis.get(COUNTER_KEY));
    await sleep(25);
    await redis.set(COUNTER_KEY, before + 1);

    // Timestamped as the critical section ends, just before withLock gives the lock back.
    await report('released', process.hrtime.bigint(), { from: before, to: before + 1 });
  });
  await sleep(Math.random() * 10);
}

finished = true;
await locks.close();
await redis.quit();
process.disconnect();
