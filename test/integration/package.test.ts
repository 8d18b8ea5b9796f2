// The built package (dist/, from `npm run build`) loads no Redis client package: the client libraries are
// optional peers, and a node-redis user must not need ioredis installed (nor the other way round).
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const probe = `
import { registerHooks, createRequire } from 'node:module';
const seen = [];
registerHooks({ resolve(specifier, context, next) { seen.push(specifier); return next(specifier, context); } });
const esm = await import('./dist/index.js');
const cjs = createRequire(import.meta.url)('./dist/index.cjs');
if (typeof esm.createLockClient !== 'function' || typeof cjs.createLockClient !== 'function') process.exit(3);
console.log(JSON.stringify(seen));
`;

describe('the built package', () => {
  it('imports no client package through ESM or CommonJS', () => {
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    const specifiers = JSON.parse(run.stdout) as string[];
    // The probe saw the library's own loads (a hook that sees nothing would prove nothing).
    expect(specifiers).toEqual(expect.arrayContaining(['./dist/index.js', './dist/index.cjs']));
    const clients = specifiers.filter((s) => /^(ioredis|iovalkey|redis|@redis\/|@valkey\/)/.test(s));
    expect(clients).toEqual([]);
  });
});
