// Adds up Vitest's JSON reports into the closing line CI reads: "tests: N passed, N failed". Every .json file
// of the folder counts, one per run (<client>.json, <client>-<topology>.json: see vitest.config.ts).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2] ?? '.vitest-results';
let passed = 0;
let failed = 0;
let skipped = 0;
const reports = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();
for (const file of reports) {
  const report = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  passed += report.numPassedTests;
  failed += report.numFailedTests;
  skipped += report.numPendingTests + report.numTodoTests;
  console.log(`${file}: ${report.numPassedTests} passed, ${report.numFailedTests} failed`);
}
console.log(`tests: ${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exitCode = failed > 0 || passed === 0 ? 1 : 0;
