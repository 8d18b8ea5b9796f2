/**
 * What the previous Redis layout left, and its removal: `flowlock doctor` (checkServer) reports the per-name
 * fencing counters and the side fields in lock hashes, `flowlock cleanup` refuses without --yes and with it
 * removes them, carrying the counters' values into the shared counters so that tokens keep rising.
 */
import { describe, expect, it } from 'vitest';
import { checkServer, findLegacyLayout, removeLegacyLayout } from '../../src/admin/index.js';
import { lockKeys } from '../../src/redis/keys.js';
import { onCluster, uniqueName, useRedis } from '../support/fixture.js';
import { cliUrls, runCli, type CliRun } from '../support/cli.js';
import { OldLayoutLock } from '../support/old-layout.js';

const redis = useRedis();
/** Runs `flowlock <args> --json` on the test's Redis to its end (test/support/cli.ts). */
function flowlock(args: readonly string[]): Promise<CliRun> {
  return runCli([...cliUrls(redis.target), ...args, '--json']);
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
