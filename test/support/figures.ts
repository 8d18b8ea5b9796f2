/**
 * Measured figures of the fault scenarios (bounds met, counts, timings), appended as JSON lines so that
 * `npm run test:soak` and CI can print them as one table (scripts/figures-table.mjs).
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

export const figuresFile = process.env['FIGURES_FILE'] ?? '.vitest-results/figures.jsonl';

/** Scale of the fault scenarios: 1 in CI, larger under `npm run test:soak`. */
export const soak = Number(process.env['SOAK'] ?? 1);

/** The client under test and the topology of the run, so that each matrix leg's figures can be told apart. */
const client = process.env['REDIS_CLIENT'] ?? (process.env['IOREDIS_MAJOR'] === '6' ? 'ioredis6' : 'ioredis5');
const topology = process.env['REDIS_TOPOLOGY'] ?? 'standalone';

export function recordFigures(scenario: string, figures: Record<string, number | string | boolean>): void {
  mkdirSync(dirname(figuresFile), { recursive: true });
  appendFileSync(figuresFile, `${JSON.stringify({ scenario, client, topology, soak, ...figures })}\n`);
}
