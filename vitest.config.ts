import { defineConfig } from 'vitest/config';

// REDIS_TOPOLOGY=cluster runs the useRedis() files on a Redis Cluster, and REDIS_CLIENT picks the client
// library under test (test/support/fixture.ts, clients.ts); the matrix is scripts/test-matrix.mjs.
const topology = process.env['REDIS_TOPOLOGY'];
const client = process.env['REDIS_CLIENT'] ?? (process.env['IOREDIS_MAJOR'] === '6' ? 'ioredis6' : 'ioredis5');

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each integration file starts its own redis-server; two at a time keeps timing bounds honest on 2 cores.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 30_000,
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
