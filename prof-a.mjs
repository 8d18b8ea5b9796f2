import { Redis } from 'ioredis';
import { randomUUID } from 'node:crypto';
const { createLockClient } = await import('/work/main/dist/index.js');
const redis = new Redis({ port: 6379 });
const mode = process.argv[2];
const locks = createLockClient(redis, { watchdogTimeout: 30000 });
redis.defineCommand('cad', { numberOfKeys: 1, lua: "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0" });
const lock = locks.getLock('bench:prof-a');
const cyc = mode === 'base'
  ? async () => { const t = randomUUID(); await redis.set('bench:prof-b', t, 'PX', 10000, 'NX'); await redis.cad('bench:prof-b', t); }
  : mode === 'withlock' ? () => lock.withLock(() => undefined, { leaseTime: 10000 })
  : async () => { const l = await lock.acquire({ leaseTime: 10000 }); await l.release(); };
for (let i = 0; i < 2000; i++) await cyc();
const N = 20000; const c0 = process.cpuUsage(); const t0 = performance.now();
for (let i = 0; i < N; i++) await cyc();
const c = process.cpuUsage(c0);
console.log(mode, 'cpu µs/cycle', ((c.user + c.system) / N).toFixed(1), 'wall', ((performance.now() - t0) * 1000 / N).toFixed(1));
await locks.close(); redis.disconnect();
