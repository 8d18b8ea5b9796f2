// The legs of the test matrix, shared by scripts/test-matrix.mjs (every leg once) and scripts/test-repeat.mjs
// (chosen files of one leg, many times), and how a leg's JSON report names its failed tests.
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
  'faults/glide',
  'diagnostics',
  'admin',
  'cli',
  'redis-layout',
  'footprint',
  'legacy-layout',
  'acl',
].map((name) => `test/integration/${name}.test.ts`);

/**
 * Each leg: its name, the environment that picks the client library and topology (vitest.config.ts,
 * test/support/clients.ts), and its files (none: all of them, unit and model tests included).
 */
export const legs = [
  { name: 'ioredis5', env: { REDIS_CLIENT: 'ioredis5' }, files: [] },
  { name: 'ioredis6', env: { REDIS_CLIENT: 'ioredis6' }, files: ['test/integration'] },
  { name: 'node-redis6', env: { REDIS_CLIENT: 'node-redis6' }, files: ['test/integration'] },
  { name: 'node-redis5', env: { REDIS_CLIENT: 'node-redis5' }, files: ['test/integration'] },
  { name: 'iovalkey', env: { REDIS_CLIENT: 'iovalkey' }, files: ['test/integration'] },
  // GLIDE runs the model tests too (ioredis 5 runs them with the unit tests): its connections fail calls and
  // reconnect in their own way, which the models' faults reach.
  { name: 'glide', env: { REDIS_CLIENT: 'glide' }, files: ['test/integration', 'test/model'] },
  // The model tests on a cluster put every key of a run on one master (test/model/world.ts, modelSite); not on
  // node-redis, whose queues the models cannot see (docs/internals/model-tests.md).
  {
    name: 'cluster:ioredis5',
    env: { REDIS_CLIENT: 'ioredis5', REDIS_TOPOLOGY: 'cluster' },
    files: [...clusterFiles, 'test/model'],
  },
  { name: 'cluster:node-redis6', env: { REDIS_CLIENT: 'node-redis6', REDIS_TOPOLOGY: 'cluster' }, files: clusterFiles },
  {
    name: 'cluster:glide',
    env: { REDIS_CLIENT: 'glide', REDIS_TOPOLOGY: 'cluster' },
    files: [...clusterFiles, 'test/model'],
  },
];

/** The legs named in `names`, in matrix order; exits with a usage line (status 2) on an unknown name. */
export function pickLegs(names) {
  const unknown = names.filter((name) => !legs.some((leg) => leg.name === name));
  if (unknown.length > 0) {
    console.error(`unknown legs: ${unknown.join(', ')}; legs: ${legs.map((leg) => leg.name).join(', ')}`);
    process.exit(2);
  }
  return legs.filter((leg) => names.includes(leg.name));
}

/** The JSON report a leg writes under CI=1, as vitest.config.ts names it. */
export function reportOf(leg) {
  const { REDIS_CLIENT: client, REDIS_TOPOLOGY: topology } = leg.env;
  return `.vitest-results/${client}${topology ? `-${topology}` : ''}.json`;
}

/**
 * What failed in a run, read from its Vitest JSON report: `file > full test name: first line of the message`
 * (a file that failed outside any test, in a hook or on an escaped error, names the file).
 */
export function failuresIn(reportFile) {
  if (!existsSync(reportFile))
    return [`(no JSON report ${reportFile}: Vitest writes it under CI=1, and not when it did not start)`];
  const report = JSON.parse(readFileSync(reportFile, 'utf8'));
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
