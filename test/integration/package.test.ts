// The built package (dist/, from `npm run build`) loads no Redis client package: the client libraries are
// optional peers, and a node-redis user must not need ioredis installed (nor the other way round). Nor does
// its main entry load OpenTelemetry, which only `flowlock/opentelemetry` needs (an optional peer as well).
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/**
 * Imports `esm` and requires `cjs` in a fresh process, checks that `exportName` is a function in both, and
 * returns every specifier resolved meanwhile.
 */
function specifiersLoadedBy(esm: string, cjs: string, exportName: string): string[] {
  const probe = `
import { registerHooks, createRequire } from 'node:module';
const seen = [];
registerHooks({ resolve(specifier, context, next) { seen.push(specifier); return next(specifier, context); } });
const esm = await import(${JSON.stringify(esm)});
const cjs = createRequire(import.meta.url)(${JSON.stringify(cjs)});
if (typeof esm[${JSON.stringify(exportName)}] !== 'function' || typeof cjs[${JSON.stringify(exportName)}] !== 'function') process.exit(3);
console.log(JSON.stringify(seen));
`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8' });
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  return JSON.parse(run.stdout) as string[];
}

const clientPackage = (s: string): boolean => /^(ioredis|iovalkey|redis|@redis\/|@valkey\/)/.test(s);

describe('the built package', () => {
  it('imports no client package and nothing of OpenTelemetry through ESM or CommonJS', () => {
    const specifiers = specifiersLoadedBy('./dist/index.js', './dist/index.cjs', 'createLockClient');
    // The probe saw the library's own loads (a hook that sees nothing would prove nothing).
    expect(specifiers).toEqual(expect.arrayContaining(['./dist/index.js', './dist/index.cjs']));
    expect(specifiers.filter(clientPackage)).toEqual([]);
    expect(specifiers.filter((s) => s.startsWith('@opentelemetry/'))).toEqual([]);
  });

  it('exports flowlock/opentelemetry, which loads @opentelemetry/api and no client package', () => {
    // By the package's own name: resolved through its exports map (import and require), as a user's import is.
    const entry = 'flowlock/opentelemetry';
    const specifiers = specifiersLoadedBy(entry, entry, 'FlowlockInstrumentation');
    expect(specifiers).toEqual(expect.arrayContaining(['flowlock/opentelemetry', '@opentelemetry/api']));
    expect(specifiers.filter((s) => s.startsWith('@opentelemetry/') && s !== '@opentelemetry/api')).toEqual([]);
    expect(specifiers.filter(clientPackage)).toEqual([]);
  });
});
