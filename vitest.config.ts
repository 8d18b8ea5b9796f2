import { defineConfig } from 'vitest/config';

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
  },
});
