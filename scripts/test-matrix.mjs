// The test matrix `npm test` runs after the build: every client library on a standalone server (the
// integration suite, Sentinel and the faults included; the unit tests once; the model tests on ioredis 5 and
// GLIDE), and a Redis Cluster for ioredis 5, node-redis 6 and GLIDE (scripts/test-legs.mjs). Legs run one
// after another (2-core machines: a leg's own files already keep both cores busy); all run even when one
// fails, and the exit code says whether any did. `node scripts/test-matrix.mjs node-redis6 cluster:ioredis5`
// runs only the named legs.
//
// How the matrix grows: a new client library or topology is one more entry in test-legs.mjs; on a cluster it
// runs the files whose subject a cluster changes. A leg costs 3 to 4 minutes, one with the model tests about
// 6; `.ci/run`'s other steps about 10, so CI's 90 minutes leave room for about a third more legs.
import { spawnSync } from 'node:child_process';
import { failuresIn, legs, pickLegs, reportOf } from './test-legs.mjs';

const only = process.argv.slice(2);
const results = [];
for (const leg of only.length > 0 ? pickLegs(only) : legs) {
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
    // Named from the leg's JSON report, so the closing table says what failed even where CI keeps only the
    // tail of a long log.
    failures: ok ? [] : failuresIn(reportOf(leg)),
  });
}

console.log('\n--- test matrix');
for (const { leg, ok, seconds, failures } of results) {
  console.log(`${ok ? 'passed' : 'FAILED'}  ${leg}  (${seconds} s)`);
  for (const failure of failures) console.log(`    ${failure}`);
}
process.exit(results.every((r) => r.ok) ? 0 : 1);
