// The test matrix after the build, in two sizes (which files each leg runs: scripts/test-legs.mjs):
//   npm test           `node scripts/test-matrix.mjs`: what a contributor runs. Every file once on ioredis 5,
//                      standalone (unit, integration, and the model tests briefly), then the files where the
//                      client libraries differ on each other client library.
//   npm run test:all   `node scripts/test-matrix.mjs --all`: what CI runs, a superset of npm test. Every client
//                      library on a standalone server (Sentinel and the connection faults included), a Redis
//                      Cluster for ioredis 5, node-redis 6 and GLIDE, and the model tests at their own budgets
//                      on GLIDE, standalone and on the Cluster.
// Legs run one after another (2-core machines: a leg's own two Vitest workers, and the redis-servers and worker
// processes of its files, already keep both cores busy); all run even when one fails, and the exit code says
// whether any did. Leg names after the options run only those legs: `node scripts/test-matrix.mjs --all
// node-redis6 cluster:ioredis5`.
import { spawnSync } from 'node:child_process';
import { failuresIn, legsOf, pickLegs, reportOf } from './test-legs.mjs';

const args = process.argv.slice(2);
const suite = args.includes('--all') ? 'all' : 'quick';
const only = args.filter((arg) => arg !== '--all');
const results = [];
const started = performance.now();
for (const leg of only.length > 0 ? pickLegs(only, suite) : legsOf(suite)) {
  console.log(`\n--- test leg ${leg.name}: vitest run ${leg.files.join(' ') || '(all)'}`);
  const legStarted = performance.now();
  const run = spawnSync('vitest', ['run', ...leg.files], {
    stdio: 'inherit',
    shell: process.platform === 'win32',
    env: { ...process.env, ...leg.env, TEST_LEG: leg.name },
  });
  const ok = run.status === 0;
  results.push({
    leg: leg.name,
    ok,
    seconds: Math.round((performance.now() - legStarted) / 1000),
    // Named from the leg's JSON report, so the closing table says what failed even where CI keeps only the
    // tail of a long log.
    failures: ok
      ? []
      : run.error
        ? [`could not start vitest (run through npm test or npm run test:all): ${run.error.message}`]
        : failuresIn(reportOf(leg)),
  });
}

console.log(`\n--- test matrix (${suite === 'all' ? 'npm run test:all' : 'npm test'})`);
for (const { leg, ok, seconds, failures } of results) {
  console.log(`${ok ? 'passed' : 'FAILED'}  ${leg}  (${seconds} s)`);
  for (const failure of failures) console.log(`    ${failure}`);
}
console.log(`total ${Math.round((performance.now() - started) / 1000)} s`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
