import { defineConfig } from 'vitest/config';

// `npm run test:partitions` (test/partitions/partitions.test.ts): network namespaces need root, and the
// scenarios share one test network, one Redis host and one PostgreSQL schema, so they run in one file, in
// order. Bounds on hangs, not on speed: the whole file takes about a minute and a half.
export default defineConfig({
  test: {
    include: ['test/partitions/**/*.test.ts'],
    maxWorkers: 1,
    testTimeout: 120_000,
    hookTimeout: 60_000,
    setupFiles: ['test/support/setup.ts'],
    reporters: process.env['CI'] ? ['default', 'json'] : ['default'],
    outputFile: { json: '.vitest-results/partitions.json' },
  },
});
