// Prints the figures recorded by the fault scenarios (test/support/figures.ts) as a Markdown table.
import { existsSync, readFileSync } from 'node:fs';

const file = process.argv[2] ?? '.vitest-results/figures.jsonl';
if (!existsSync(file)) {
  console.log(`no figures in ${file}`);
  process.exit(0);
}
const rows = readFileSync(file, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((line) => JSON.parse(line));
console.log('| scenario | figures |\n| --- | --- |');
for (const { scenario, ...figures } of rows) {
  const text = Object.entries(figures)
    .map(([key, value]) => `${key}=${typeof value === 'number' && !Number.isInteger(value) ? value.toFixed(1) : value}`)
    .join(', ');
  console.log(`| ${scenario} | ${text} |`);
}
