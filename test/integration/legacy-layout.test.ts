/**
 * What the previous Redis layout left, and its removal: `flowlock doctor` (checkServer) reports the per-name
 * fencing counters and the side fields in lock hashes, `flowlock cleanup` refuses without --yes and with it
 * removes them, carrying the counters' values into the shared counters so that tokens keep rising.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { checkServer, findLegacyLayout, removeLegacyLayout } from '../../src/admin/index.js';
import { lockKeys } from '../../src/redis/keys.js';
import { onCluster, uniqueName, useRedis } from '../support/fixture.js';
import { OldLayoutLock } from '../support/old-layout.js';

const redis = useRedis();
const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));

/** The --url flags of the test's Redis. */
function urls(): string[] {
  const target = redis.target;
  if (target.topology === 'cluster')
    return target.nodes.flatMap(({ host, port }) => ['--url', `redis://${host}:${port}`]);
  if (target.topology === 'standalone') return ['--url', `redis://${target.host}:${target.port}`];
  throw new Error('no sentinel here');
}

/** Runs `flowlock <args> --json` to its end: exit code and stdout. */
async function flowlock(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...urls(), ...args, '--json'], {
    env: { ...process.env, NO_COLOR: '1', FLOWLOCK_REDIS_URL: '', REDIS_URL: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr };
}

describe('the previous layout: reported and removed', () => {
  it('doctor reports per-name counters and side fields; cleanup refuses without --yes, then removes them', async () => {
    const names = Array.from({ length: 5 }, () => uniqueName('legacy'));
    for (const name of names) {
      const old = new OldLayoutLock(redis.admin, name);
      await old.tryAcquire(30_000);
      await old.release();
    }
    // One lock a client of the previous layout holds now: its side fields sit in the lock hash.
    const held = new OldLayoutLock(redis.admin, uniqueName('legacy'));
    await held.tryAcquire(30_000);
    // And one whose name holds "flowlock:", which the previous version allowed (now refused): still a lock.
    const oddlyNamed = new OldLayoutLock(redis.admin, `app:flowlock:${uniqueName('legacy')}`);
    await oddlyNamed.tryAcquire(30_000);
    // One old counter far ahead of the clock: its value must survive the cleanup in the shared counter.
    const ahead = BigInt(Date.now() + 3_600_000) * 1000n;
    await redis.admin.set(lockKeys('', names[0] ?? '', onCluster).legacyFenceKey, ahead.toString());

    const found = await findLegacyLayout(redis.redis(), { prefix: '' });
    expect(found).toMatchObject({ fenceKeys: 7, lockHashes: 2, fields: 4 });
    const report = await checkServer(redis.redis());
    expect(report.checks.find((check) => check.id === 'legacy-layout')).toMatchObject({ status: 'warn' });
    expect(report.checks.find((check) => check.id === 'legacy-layout')?.summary).toMatch(/^7 per-name fencing/);

    const refused = await flowlock(['cleanup']);
    expect(refused.code).toBe(3);
    expect(JSON.parse(refused.stdout)).toMatchObject({ fenceKeys: 7, lockHashes: 2 });
    expect(refused.stderr).toMatch(/--yes/);
    expect(await findLegacyLayout(redis.redis(), { prefix: '' })).toMatchObject({ fenceKeys: 7 });

    const removed = await flowlock(['cleanup', '--yes']);
    expect(removed.code).toBe(0);
    expect(JSON.parse(removed.stdout)).toEqual({ fenceKeys: 7, lockHashes: 2, fields: 4 });
    expect(await findLegacyLayout(redis.redis(), { prefix: '' })).toMatchObject({ fenceKeys: 0, lockHashes: 0 });
    // The held lock's hash keeps its owner (Redisson's layout), only the side fields went.
    expect(await redis.admin.hgetall(held.name)).toEqual({ [held.owner]: '1' });
    expect(await redis.admin.hgetall(oddlyNamed.name)).toEqual({ [oddlyNamed.owner]: '1' });
    const checks = (await checkServer(redis.redis())).checks;
    expect(checks.find((check) => check.id === 'legacy-layout')).toMatchObject({ status: 'ok' });
    // Tokens still exceed what the removed counter had handed out.
    const locks = redis.locks();
    const token = await locks.getLock(names[0] ?? '').withLock((_s, lease) => lease.fencingToken);
    expect(token).toBeGreaterThan(ahead);
    // Nothing left to remove: a second run removes nothing.
    expect(await removeLegacyLayout(redis.redis())).toEqual({ fenceKeys: 0, lockHashes: 0, fields: 0 });
  });
});
