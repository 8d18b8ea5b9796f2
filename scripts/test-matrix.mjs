// The test matrix `npm test` runs after the build: every client library on a standalone server (the
// integration suite, Sentinel and the faults included; unit and model tests once), and a Redis Cluster for
// one ioredis and one node-redis version. Legs run one after another (2-core CI machines); all run even when
// one fails, and the exit code says whether any did. `node scripts/test-matrix.mjs node-redis6 cluster:ioredis5`
// runs only the named legs.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';

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
  const ok = run.status === 0;
  results.push({
    leg: leg.name,
    ok,
    seconds: Math.round((performance.now() - started) / 1000),
    failures: ok ? [] : failuresOf(leg),
  });
}

/**
 * What failed in a leg, read from its JSON report (CI writes one: vitest.config.ts), so the matrix's closing
 * table names the tests even where only the tail of a long log is kept.
 */
function failuresOf(leg) {
  const { REDIS_CLIENT: client, REDIS_TOPOLOGY: topology } = leg.env;
  const file = `.vitest-results/${client}${topology ? `-${topology}` : ''}.json`;
  if (!existsSync(file)) return ['(no JSON report: run with CI=1 to name the failed tests)'];
  const report = JSON.parse(readFileSync(file, 'utf8'));
  const firstLine = (text) =>
    String(text ?? '')
      .split('\n')
      .find((line) => line.trim() !== '') ?? '';
  const failures = [];
  for (const result of report.testResults ?? []) {
    const path = String(result.name).replace(`${process.cwd()}/`, '');
    const failed = (result.assertionResults ?? []).filter((a) => a.status === 'failed');
    for (const a of failed)
      failures.push(`${path} > ${a.fullName}: ${firstLine(a.failureMessages?.[0])}`.slice(0, 400));
    if (failed.length === 0 && result.status === 'failed')
      failures.push(`${path}: ${firstLine(result.message)}`.slice(0, 400));
  }
  return failures;
}

console.log('\n--- test matrix');
for (const { leg, ok, seconds, failures } of results) {
  console.log(`${ok ? 'passed' : 'FAILED'}  ${leg}  (${seconds} s)`);
  for (const failure of failures) console.log(`    ${failure}`);
}
process.exit(results.every((r) => r.ok) ? 0 : 1);
