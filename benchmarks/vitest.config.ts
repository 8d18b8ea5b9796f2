import { defineConfig } from 'vitest/config';

// `npm run bench:adapter`: the adapter-overhead and instrumentation-overhead measurements (benchmarks/*.bench.ts), apart from the tests.
export default defineConfig({
  test: {
    include: ['benchmarks/*.bench.ts'],
    maxWorkers: 1,
    testTimeout: 600_000,
    hookTimeout: 60_000,
  },
});
