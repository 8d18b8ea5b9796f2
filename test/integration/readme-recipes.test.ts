// The README's recipes run as written: each is cut out of README.md and run in a fresh process against the
// built package and a real redis-server, with only what the README leaves to the reader (a `logger`) around
// it. The loss-logging recipe once compiled, read well and logged nothing; this is what catches that.
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { clientKind } from '../support/clients.js';
import { uniqueName, useRedis } from '../support/fixture.js';

const root = join(import.meta.dirname, '..', '..');
const redis = useRedis();

/** The first ```ts block after the README line that starts with `heading`. */
function recipe(heading: string): string {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const at = readme.split('\n').findIndex((line) => line.startsWith(heading));
  if (at === -1) throw new Error(`README.md has no line starting with ${JSON.stringify(heading)}`);
  const rest = readme.split('\n').slice(at + 1);
  const open = rest.findIndex((line) => line.trim() === '```ts');
  const close = rest.findIndex((line, i) => i > open && line.trim() === '```');
  if (open === -1 || close === -1) throw new Error(`no \`\`\`ts block after ${JSON.stringify(heading)}`);
  return rest.slice(open + 1, close).join('\n');
}

/**
 * Runs `code` as a TypeScript module of this package (Node strips the types; `flowlock` resolves to dist/ by
 * the package's own name) and resolves with its standard output.
 */
function runModule(code: string, env: Record<string, string>): Promise<string> {
  const dir = join(root, '.scratch');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${uniqueName('recipe').replace(/:/g, '-')}.mts`);
  writeFileSync(file, code);
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--no-warnings', file],
      { env: { ...process.env, ...env }, timeout: 30_000, encoding: 'utf8' },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

// The recipes use ioredis whatever the leg's client library: once, on the ioredis 5 leg.
describe.skipIf(clientKind !== 'ioredis5')('README recipes', () => {
  it('the loss logger logs a lost lock, with its reason', async () => {
    const name = uniqueName('recipe');
    const code = [
      // What the README leaves to the reader: a pino-like logger.
      `const logger = { warn: (fields: object, msg: string) => console.log(JSON.stringify({ msg, ...fields })) };`,
      recipe('A pino recipe'),
      // A hold that another party deletes: the next renewal finds it gone.
      `import { Redis } from 'ioredis';`,
      `import { createLockClient } from 'flowlock';`,
      `const redis = new Redis(process.env.RECIPE_REDIS_URL!);`,
      `const locks = createLockClient(redis, { watchdogTimeout: 900 });`,
      `const lease = await locks.getLock(${JSON.stringify(name)}).acquire();`,
      `await redis.del(${JSON.stringify(name)});`,
      `await new Promise((resolve) => lease.signal.addEventListener('abort', resolve));`,
      `await locks.close();`,
      `await redis.quit();`,
    ].join('\n');
    const lines = (await runModule(code, { RECIPE_REDIS_URL: redis.server.url }))
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines).toContainEqual(expect.objectContaining({ msg: 'lock lost', lock: name, reason: 'renewal_rejected' }));
  });
});
