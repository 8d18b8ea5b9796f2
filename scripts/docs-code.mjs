// The TypeScript blocks of README.md and docs/**/*.md, for `npm run docs:check` (type checks every one against
// the built package) and test/integration/readme-recipes.test.ts (runs the ones marked `run`).
//
// A block's info string is ```ts or ```typescript, then flags separated by spaces:
//   run       a complete program: it runs against a real redis-server (REDIS_URL) in the tests
//   no-check  a fragment that cannot compile on its own; the Markdown next to it says why (keep these rare)
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

export const root = join(import.meta.dirname, '..');

/** Generated or vendored material under docs/ that holds no blocks of ours. */
const skip = new Set(['node_modules', '.vitepress', 'api']);

function markdownFiles(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((entry) => {
      if (skip.has(entry)) return [];
      const path = join(dir, entry);
      const stat = statSync(path);
      if (stat.isDirectory()) return markdownFiles(path);
      return entry.endsWith('.md') ? [path] : [];
    });
}

/** `{ file, line, flags, code }` for every ```ts / ```typescript block, `file` relative to the repository. */
export function codeBlocks() {
  const files = [join(root, 'README.md'), ...markdownFiles(join(root, 'docs'))];
  const blocks = [];
  for (const path of files) {
    const lines = readFileSync(path, 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      const open = /^(\s*)```(ts|typescript)(\s.*)?$/.exec(lines[i]);
      if (!open) continue;
      const indent = open[1].length;
      const close = lines.findIndex((line, j) => j > i && line.trim() === '```');
      if (close === -1) throw new Error(`${relative(root, path)}:${i + 1}: a code block that never closes`);
      blocks.push({
        file: relative(root, path),
        line: i + 1,
        flags: (open[3] ?? '').trim().split(/\s+/).filter(Boolean),
        code: lines
          .slice(i + 1, close)
          .map((line) => line.slice(indent))
          .join('\n'),
      });
      i = close;
    }
  }
  return blocks;
}
