import { configDefaults, defineConfig } from 'vitest/config';

// REDIS_TOPOLOGY=cluster runs the useRedis() files on a Redis Cluster, and REDIS_CLIENT picks the client
// library under test (test/support/fixture.ts, clients.ts); the matrix is scripts/test-matrix.mjs.
const topology = process.env['REDIS_TOPOLOGY'];
const client = process.env['REDIS_CLIENT'] ?? (process.env['IOREDIS_MAJOR'] === '6' ? 'ioredis6' : 'ioredis5');

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The partition suite needs root and runs alone: `npm run test:partitions` (test/partitions/vitest.config.ts).
    exclude: [...configDefaults.exclude, 'test/partitions/**'],
    // Each integration file starts its own redis-server (a fault file also up to 9 worker processes). Three files
    // at a time on 2 cores: most of a file's time is spent waiting (leases running out, failovers, reconnects),
    // not computing. Measured on the ioredis 6 leg of `npm run test:all` here: 177 s wall with two workers,
    // 130 s with three, 113 s with four; the processes used 1.05 cores on average with two, 1.4 with three.
    // Four stretches the longest files to a minute and leaves less room for a CPU hog beside the run; three
    // keeps the machine below full while a file waits. The tests wait for states rather than times, so the
    // load of three files (and of a hog beside them) is what they are written for.
    maxWorkers: 3,
    // A bound on a hang, not on speed: the heaviest scenarios take 10 to 20 s on an idle machine.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Vitest fails the run on any unhandled rejection or uncaught exception (dangerouslyIgnoreUnhandledErrors
    // stays false); test/support/setup.ts adds the same check inside every worker.
    setupFiles: ['test/support/setup.ts'],
    // CI adds up the JSON reports of every run (each client library, standalone and cluster) into one closing
    // line (scripts/test-summary.mjs reads every .json file of the folder).
    reporters: process.env['CI'] ? ['default', 'json'] : ['default'],
    outputFile: {
      json: `.vitest-results/${client}${topology ? `-${topology}` : ''}.json`,
    },
  },
});
