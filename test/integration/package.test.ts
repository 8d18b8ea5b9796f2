// The built package (dist/, from `npm run build`) loads no Redis client package: the client libraries are
// optional peers, and a node-redis user must not need ioredis installed (nor the other way round). Nor does
// its main entry load OpenTelemetry, which only `flowlock/opentelemetry` needs (an optional peer as well).
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
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

  it('publishes types of the public API only, and a strict consumer compiles against them', () => {
    // The machinery behind the public classes (their constructors are @internal, stripped by tsup.config.ts)
    // stays out of the published declarations: a user's editor offers only what the docs document.
    const declarations = readFileSync('dist/index.d.ts', 'utf8');
    for (const internal of ['WaitQueues', 'Watchdog', 'LockContext', 'RedisAdapter', 'LockScripts', 'QuorumNodes']) {
      expect(declarations).not.toMatch(new RegExp(`\\b${internal}\\b`));
    }
    // Nor do the doc comments point at files the package lacks (the source tree, the tests, the README's
    // former sections): the published comments are the API reference's text.
    for (const file of readdirSync('dist').filter((name) => name.endsWith('.d.ts'))) {
      const comments = readFileSync(join('dist', file), 'utf8')
        .split('\n')
        .filter((line) => !/^\s*(import|export) /.test(line));
      expect(comments.filter((line) => /\b[\w-]+\.ts\b|\bsrc\/|\btest\/|README/.test(line))).toEqual([]);
    }
    // A consumer inside the package's scope imports it by name: resolved through the exports map to dist/.
    const consumer = join('.vitest-consumer', 'consumer.ts');
    mkdirSync(dirname(consumer), { recursive: true });
    writeFileSync(
      consumer,
      `import { createLockClient, createQuorumLockClient, LockLostError, type RedisClient } from 'flowlock';
import { FlowlockInstrumentation } from 'flowlock/opentelemetry';
export async function use(redis: RedisClient): Promise<bigint> {
  const locks = createLockClient(redis, { watchdogTimeout: 10_000 });
  const token = await locks.getLock('a').withLock((signal, lease) => (signal.aborted ? 0n : lease.fencingToken));
  await using permit = await locks.getPermitExpirableSemaphore('s').acquire({ waitTime: 100 });
  const ok: boolean = await locks.getReadWriteLock('rw').readLock().tryLock(0, 1000);
  await locks.getCountDownLatch('l').await(ok ? 10 : 20);
  await createQuorumLockClient([redis]).close();
  new FlowlockInstrumentation().disable();
  void permit;
  if (token === 0n) throw new LockLostError('a', 'lost');
  await locks.close();
  return token;
}
`,
    );
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    // The strictest settings a user may have (skipLibCheck off: our declarations are checked too).
    const options = [
      '--ignoreConfig',
      '--noEmit',
      '--strict',
      '--exactOptionalPropertyTypes',
      '--skipLibCheck',
      'false',
    ];
    const target = [
      '--module',
      'nodenext',
      '--target',
      'es2022',
      '--lib',
      'es2022,esnext.disposable',
      '--types',
      'node',
    ];
    const run = spawnSync(process.execPath, [tsc, ...options, ...target, consumer], { encoding: 'utf8' });
    expect(run.stdout + run.stderr).toBe('');
    expect(run.status).toBe(0);
  }, 60_000);
});
