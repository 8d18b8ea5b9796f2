// The docs' code runs as written. Every TypeScript block of README.md and docs/**/*.md marked ```ts run is a
// complete program: it runs here in a fresh process against the built package and a real redis-server
// (`REDIS_URL`), and must exit 0. `npm run docs:check` type checks every block, these included. The README's
// loss-logging recipe once compiled, read well and logged nothing: it gets a test of its own below, which
// makes a hold get lost and checks the line it logs.
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { codeBlocks, root, type CodeBlock } from '../../scripts/docs-code.mjs';
import { clientKind } from '../support/clients.js';
import { uniqueName, useRedis } from '../support/fixture.js';

const redis = useRedis();
const blocks = codeBlocks();

/** The first TypeScript block of README.md after the line that starts with `heading`. */
function recipe(heading: string): CodeBlock {
  const at = readFileSync(join(root, 'README.md'), 'utf8')
    .split('\n')
    .findIndex((line) => line.startsWith(heading));
  if (at === -1) throw new Error(`README.md has no line starting with ${JSON.stringify(heading)}`);
  const block = blocks.find((candidate) => candidate.file === 'README.md' && candidate.line > at + 1);
  if (!block) throw new Error(`no TypeScript block after ${JSON.stringify(heading)}`);
  return block;
}

/**
 * Runs `code` as a TypeScript module of this package (Node strips the types; `flowlock` resolves to dist/ by
 * the package's own name) and resolves with its standard output.
 */
function runModule(code: string, env: Record<string, string>): Promise<string> {
  const dir = join(root, '.scratch');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${uniqueName('docs-code').replace(/:/g, '-')}.mts`);
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

// The examples use ioredis (some node-redis or iovalkey as well) whatever the leg's client library: once, on
// the ioredis 5 leg.
describe.skipIf(clientKind !== 'ioredis5')('docs code', () => {
  const runnable = blocks.filter((block) => block.flags.includes('run'));

  it('has runnable examples to run', () => {
    expect(runnable.length).toBeGreaterThan(8);
  });

  it.each(runnable.map((block) => [`${block.file}:${block.line}`, block] as const))('%s runs', async (_, block) => {
    await runModule(block.code, { REDIS_URL: redis.server.url });
  });

  it('the README loss logger logs a lost lock, with its reason', async () => {
    const name = uniqueName('recipe');
    const code = [
      recipe('## Log lost locks').code,
      // A hold that another party deletes: the next renewal finds it gone.
      `import { Redis } from 'ioredis';`,
      `import { createLockClient } from 'flowlock';`,
      `const redis = new Redis(process.env.REDIS_URL!);`,
      // Renewed after 1 s, lost at 3 s unrenewed: a stalled child still sees the renewal find the key gone.
      `const locks = createLockClient(redis, { watchdogTimeout: 3000 });`,
      `const lease = await locks.getLock(${JSON.stringify(name)}).acquire();`,
      `await redis.del(${JSON.stringify(name)});`,
      `if (!lease.signal.aborted) await new Promise((resolve) => lease.signal.addEventListener('abort', resolve));`,
      `await locks.close();`,
      `await redis.quit();`,
    ].join('\n');
    const lines = (await runModule(code, { REDIS_URL: redis.server.url }))
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines).toContainEqual(expect.objectContaining({ msg: 'lock lost', lock: name, reason: 'renewal_rejected' }));
  });
});
