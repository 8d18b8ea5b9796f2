// The flake finder: runs test files of one leg of the matrix (by default the files that leg runs in
// `npm run test:all`, scripts/test-legs.mjs) many times and lists every test that failed in
// any run, with how often and its distinct messages. A test that fails by chance shows here before it
// reaches CI. Run it on what you touch before each stop:
//
//   npm run test:repeat -- <leg> [files or filters...] [--times N] [--hog K]
//   npm run test:repeat -- node-redis6 test/integration/cluster.test.ts --times 10 --hog 1
//
// --times N  how many runs (default 5); --hog K  K busy-looping processes beside the runs (default 0), the
// loaded machine CI may be. Vitest's own flags pass through (-t "name" picks tests). Exits 1 if any run failed.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { failuresIn, pickLegs } from './test-legs.mjs';

const args = process.argv.slice(2);
function option(flag, fallback) {
  const at = args.indexOf(flag);
  if (at === -1) return fallback;
  const value = Number(args[at + 1]);
  if (!Number.isInteger(value) || value < 0) {
    console.error(`${flag} takes a whole number, got ${JSON.stringify(args[at + 1])}`);
    process.exit(2);
  }
  args.splice(at, 2);
  return value;
}
const times = option('--times', 5);
const hogs = option('--hog', 0);
const [legName, ...files] = args;
if (!legName) {
  console.error('usage: npm run test:repeat -- <leg> [files...] [--times N] [--hog K]');
  process.exit(2);
}
const [leg] = pickLegs([legName]);

const hogProcesses = Array.from({ length: hogs }, () =>
  spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }),
);
// A folder of its own per call: two flake finders may run at once (the reports stay for a closer look).
mkdirSync('.vitest-results', { recursive: true });
const dir = mkdtempSync('.vitest-results/repeat-');

/** failure text -> runs it happened in */
const failures = new Map();
let failedRuns = 0;
const started = performance.now();
try {
  for (let run = 1; run <= times; run++) {
    const report = `${dir}/${run}.json`;
    const runStarted = performance.now();
    const result = spawnSync(
      'vitest',
      [
        'run',
        ...(files.length > 0 ? files : leg.files),
        '--reporter=dot',
        '--reporter=json',
        `--outputFile.json=${report}`,
      ],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
        shell: process.platform === 'win32',
        env: { ...process.env, ...leg.env, TEST_LEG: leg.name },
      },
    );
    if (result.error)
      throw new Error(`could not start vitest (run through npm run test:repeat): ${result.error.message}`);
    const found = result.status === 0 ? [] : failuresIn(report);
    if (result.status !== 0) failedRuns++;
    for (const failure of found) failures.set(failure, [...(failures.get(failure) ?? []), run]);
    const seconds = Math.round((performance.now() - runStarted) / 1000);
    console.log(
      `run ${run}/${times} (${leg.name}${hogs ? `, ${hogs} hog(s)` : ''}): ${result.status === 0 ? 'passed' : `FAILED, ${found.length} failure(s)`} in ${seconds} s`,
    );
  }
} finally {
  for (const hog of hogProcesses) hog.kill();
}

const minutes = ((performance.now() - started) / 60_000).toFixed(1);
console.log(`\n${times - failedRuns} of ${times} runs passed (${minutes} min; reports in ${dir})`);
for (const [failure, runs] of [...failures].sort((a, b) => b[1].length - a[1].length)) {
  console.log(`  ${runs.length}x (runs ${runs.join(', ')}) ${failure}`);
}
process.exit(failedRuns > 0 ? 1 : 0);
