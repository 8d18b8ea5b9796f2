// `npm run docs:check`: every TypeScript block of README.md and docs/**/*.md (scripts/docs-code.mjs) is written
// out as a module of its own and type checked, strictly, against the built package: `flowlock`,
// `flowlock/admin` and `flowlock/opentelemetry` resolve to dist/ through the package's own `exports` (a module
// inside a package may import the package by its name). Run `npm run build` first.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { codeBlocks, root } from './docs-code.mjs';

if (!existsSync(join(root, 'dist', 'index.d.ts'))) {
  console.error('docs:check needs the built package: run `npm run build` first');
  process.exit(1);
}

const dir = join(root, '.scratch', 'docs-check');
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });

const blocks = codeBlocks();
const checked = [];
let skipped = 0;
for (const block of blocks) {
  if (block.flags.includes('no-check')) {
    skipped++;
    continue;
  }
  const name = `${block.file.replace(/[^a-zA-Z0-9]+/g, '-')}-L${block.line}.mts`;
  // The source position first, so that a compiler error names the Markdown it came from.
  writeFileSync(join(dir, name), `// ${block.file}:${block.line}\n${block.code}\n`);
  checked.push({ name, ...block });
}

writeFileSync(
  join(dir, 'tsconfig.json'),
  JSON.stringify(
    {
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2023', 'ESNext.Disposable', 'DOM'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        types: ['node'],
        typeRoots: [join(root, 'node_modules', '@types')],
        strict: true,
        exactOptionalPropertyTypes: true,
        noUncheckedIndexedAccess: true,
        isolatedModules: true,
        verbatimModuleSyntax: true,
        skipLibCheck: true,
        noEmit: true,
      },
      include: ['*.mts'],
    },
    null,
    2,
  ),
);

try {
  execFileSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', join(dir, 'tsconfig.json'), '--pretty', 'false'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
} catch (error) {
  // Name each failing block by its Markdown file and line; the line in the message is the block's line + 1.
  const out = `${error.stdout ?? ''}${error.stderr ?? ''}`;
  for (const line of out.split('\n').filter(Boolean)) {
    const at = checked.find((block) => line.includes(block.name));
    if (!at) {
      console.error(line);
      continue;
    }
    const position = /\.mts\((\d+),(\d+)\)/.exec(line);
    const mdLine = position ? at.line + Number(position[1]) - 1 : at.line;
    console.error(`${at.file}:${mdLine}: ${line.slice(line.indexOf(':', line.indexOf('.mts')) + 1).trim()}`);
  }
  console.error(`\ndocs:check: the blocks above do not compile (generated modules in ${dir})`);
  process.exit(1);
}
const runnable = checked.filter((block) => block.flags.includes('run')).length;
console.log(
  `docs:check: ${checked.length} TypeScript blocks compile against the built package (${runnable} of them runnable, run by test/integration/readme-recipes.test.ts); ${skipped} marked no-check`,
);
