// `node scripts/check-pack.mjs` (the end of `npm run check:package`, after `npm run build`): what `npm pack` would
// put in the tarball is exactly what the package can reach, and docs/operations/package.md quotes its size.
//
// Reachable: every file package.json's `exports`, `main`, `module`, `types` and `bin` name, each relative
// import/require/`export from` of those files (the shared ESM chunks, the types' shared declarations), the
// source map of every JavaScript file, `lua/` (the scripts as written, for audit) and README.md, package.json.
// A file the tarball holds beyond that (a stale build's leftover, an entry nothing names) or one it lacks
// fails the check. The docs' figures (files, packed MB, unpacked MB) must be within TOLERANCE of the measure.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';

const root = join(import.meta.dirname, '..');
const DOC = 'docs/operations/package.md';
/** Relative difference allowed between the docs' sizes and the tarball's: code changes move them a little. */
const TOLERANCE = 0.1;

const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const problems = [];

// --ignore-scripts: `prepack` would build again; `npm run check:package` has just built.
const [pack] = JSON.parse(
  execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }),
);
const packed = new Set(pack.files.map((file) => file.path));

/** Every string target of an `exports` tree. */
const targets = (value) =>
  typeof value === 'string' ? [value] : value && typeof value === 'object' ? Object.values(value).flatMap(targets) : [];
const bin = typeof manifest.bin === 'string' ? [manifest.bin] : Object.values(manifest.bin ?? {});
const named = [...targets(manifest.exports), manifest.main, manifest.module, manifest.types, ...bin]
  .filter(Boolean)
  .map((path) => normalize(path));

const reachable = new Set(['package.json', 'README.md']);
const queue = [...named];
while (queue.length > 0) {
  const file = queue.pop();
  if (reachable.has(file)) continue;
  reachable.add(file);
  if (!existsSync(join(root, file))) {
    problems.push(`${file} is named by package.json or imported, but does not exist (run npm run build)`);
    continue;
  }
  if (/\.(c|m)?js$/.test(file) && existsSync(join(root, `${file}.map`))) reachable.add(`${file}.map`);
  const text = readFileSync(join(root, file), 'utf8');
  // Relative specifiers of import/export ... from, import(), require(): the bundles' and types' own files.
  for (const [, specifier] of text.matchAll(/(?:from\s*|import\s*\(\s*|require\s*\(\s*)["'](\.{1,2}\/[^"']+)["']/g)) {
    const target = normalize(join(dirname(file), specifier));
    // A declaration file's `./x.js` is `./x.d.ts` (`./x.cjs`: `./x.d.cts`).
    queue.push(/\.d\.c?ts$/.test(file) ? target.replace(/\.(c?)js$/, '.d.$1ts') : target);
  }
}
for (const file of packed) if (file.startsWith('lua/')) reachable.add(file);

const extra = [...packed].filter((file) => !reachable.has(file)).sort();
const missing = [...reachable].filter((file) => !packed.has(file)).sort();
if (extra.length > 0) problems.push(`the tarball holds files nothing reaches: ${extra.join(', ')}`);
if (missing.length > 0) problems.push(`the tarball lacks files the package reaches: ${missing.join(', ')}`);
if (![...packed].some((file) => file.startsWith('lua/'))) problems.push('the tarball holds no lua/ scripts');

const mb = (bytes) => bytes / 1e6;
const measured = { files: pack.entryCount, packed: mb(pack.size), unpacked: mb(pack.unpackedSize) };
const quote = /\*\*(\d+)\s+files,\s+a\s+(\d+(?:\.\d+)?)\s+MB\s+tarball,\s+(\d+(?:\.\d+)?)\s+MB\s+unpacked\*\*/.exec(
  readFileSync(join(root, DOC), 'utf8'),
);
const real = `${measured.files} files, a ${measured.packed.toFixed(2)} MB tarball, ${measured.unpacked.toFixed(1)} MB unpacked`;
if (!quote) {
  problems.push(`${DOC} quotes no "**N files, a X MB tarball, Y MB unpacked**" (the tarball: ${real})`);
} else {
  const [, files, packedMb, unpackedMb] = quote.map(Number);
  const off = (said, is) => Math.abs(said - is) / is > TOLERANCE;
  if (off(files, measured.files) || off(packedMb, measured.packed) || off(unpackedMb, measured.unpacked)) {
    problems.push(
      `${DOC} says ${files} files, ${packedMb} MB packed, ${unpackedMb} MB unpacked; the tarball is ${real} ` +
        `(more than ${TOLERANCE * 100} % apart: update the page)`,
    );
  }
}

if (problems.length > 0) {
  for (const problem of problems) console.error(`✖ ${problem}`);
  process.exit(1);
}
console.log(`check-pack: the tarball holds what the package reaches and no more: ${real} (${DOC} agrees)`);
