// The test matrix `npm test` runs after the build: every client library on a standalone server (the
// integration suite, Sentinel and the faults included; unit and model tests once), and a Redis Cluster for
// one ioredis and one node-redis version. Legs run one after another (2-core CI machines); all run even when
// one fails, and the exit code says whether any did. `node scripts/test-matrix.mjs node-redis6 cluster:ioredis5`
// runs only the named legs.
import { spawnSync } from 'node:child_process';

/** The files that run on a cluster: everything whose subject a cluster changes. */
const clusterFiles = [
  'adapter',
  'lock',
  'waiting',
  'expiry',
  'client',
  'scripts',
  'redisson-interop',
  'process',
  'multi-lock',
  'fair-lock',
  'read-write-lock',
  'semaphore',
  'permit-expirable-semaphore',
  'count-down-latch',
  'cluster',
  'faults/clients',
  'diagnostics',
  'admin',
  'cli',
].map((name) => `test/integration/${name}.test.ts`);

const legs = [
  { name: 'ioredis5', env: { REDIS_CLIENT: 'ioredis5' }, files: [] },
  { name: 'ioredis6', env: { REDIS_CLIENT: 'ioredis6' }, files: ['test/integration'] },
  { name: 'node-redis6', env: { REDIS_CLIENT: 'node-redis6' }, files: ['test/integration'] },
  { name: 'node-redis5', env: { REDIS_CLIENT: 'node-redis5' }, files: ['test/integration'] },
  { name: 'iovalkey', env: { REDIS_CLIENT: 'iovalkey' }, files: ['test/integration'] },
  { name: 'cluster:ioredis5', env: { REDIS_CLIENT: 'ioredis5', REDIS_TOPOLOGY: 'cluster' }, files: clusterFiles },
  { name: 'cluster:node-redis6', env: { REDIS_CLIENT: 'node-redis6', REDIS_TOPOLOGY: 'cluster' }, files: clusterFiles },
];

const only = process.argv.slice(2);
const unknown = only.filter((name) => !legs.some((leg) => leg.name === name));
if (unknown.length > 0) {
  console.error(`unknown legs: ${unknown.join(', ')}; legs: ${legs.map((leg) => leg.name).join(', ')}`);
  process.exit(2);
}

const results = [];
for (const leg of legs.filter((l) => only.length === 0 || only.includes(l.name))) {
  console.log(`\n--- test leg ${leg.name}: vitest run ${leg.files.join(' ') || '(all)'}`);
  const started = performance.now();
  const run = spawnSync('vitest', ['run', ...leg.files], {
    stdio: 'inherit',
    shell: process.platform === 'win32',
    env: { ...process.env, ...leg.env, TEST_LEG: leg.name },
  });
  results.push({ leg: leg.name, ok: run.status === 0, seconds: Math.round((performance.now() - started) / 1000) });
}

console.log('\n--- test matrix');
for (const { leg, ok, seconds } of results) console.log(`${ok ? 'passed' : 'FAILED'}  ${leg}  (${seconds} s)`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
