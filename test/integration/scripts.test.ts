import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { lockKeys } from '../../src/redis/keys.js';
import { LockScripts } from '../../src/redis/scripts.js';
import { isGlideClient, isNodeRedisClient, ping } from '../support/clients.js';
import { everyNode, onCluster, uniqueName, useRedis } from '../support/fixture.js';

const redis = useRedis();

/** SCRIPT FLUSH on the server, or on every node of a cluster (each caches its own scripts). */
async function flushScripts(): Promise<void> {
  await Promise.all(everyNode(redis.admin).map((node) => node.script('FLUSH')));
}

describe('script runner', () => {
  it('survives SCRIPT FLUSH between calls (EVALSHA falls back to EVAL)', async () => {
    const locks = redis.locks();
    const lock = locks.getLock(uniqueName());
    for (let i = 0; i < 3; i++) {
      await flushScripts();
      await lock.withLock(async () => {
        await flushScripts();
        await lock.withLock(() => undefined);
        await flushScripts();
      });
    }
    expect(await lock.isLocked()).toBe(false);
  });

  it('never defines commands on the caller’s client', async () => {
    const client = redis.client();
    // A GLIDE client is created asynchronously: its own fields exist once it answers.
    if (isGlideClient(client)) await ping(client);
    const ownBefore = Object.getOwnPropertyNames(client).sort();
    const { createLockClient } = await import('../../src/index.js');
    const locks = createLockClient(client);
    await locks.getLock(uniqueName()).withLock(() => undefined);
    await locks.close();
    if (isNodeRedisClient(client) || isGlideClient(client)) {
      // node-redis defines scripts only from createClient's `scripts` option, and GLIDE has no script
      // commands: the client gains no property.
      expect(Object.getOwnPropertyNames(client).sort()).toEqual(ownBefore);
    } else {
      // ioredis keeps commands made by defineCommand in `scriptsSet`.
      expect((client as unknown as { scriptsSet: object }).scriptsSet).toEqual({});
    }
    expect((client as unknown as Record<string, unknown>)['acquire']).toBeUndefined();
  });
});

describe('idempotency: a resent command does not count twice', () => {
  it('acquire: the same request id re-entering twice raises the count once', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    const owner = ['c:1'];
    const first = await scripts.acquire(keys, 10_000, randomUUID(), owner, false);
    const reentry = randomUUID();
    const second = await scripts.acquire(keys, 10_000, reentry, owner, false);
    const resent = await scripts.acquire(keys, 10_000, reentry, owner, false);
    expect(first).toMatchObject({ acquired: true, holdCount: 1 });
    expect(second).toMatchObject({ acquired: true, holdCount: 2 });
    expect(resent).toEqual(second);
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('2');
  });

  it('acquire: a resent first acquire does not take a second hold or a second token', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    const id = randomUUID();
    const first = await scripts.acquire(keys, 10_000, id, ['c:1'], false);
    const resent = await scripts.acquire(keys, 10_000, id, ['c:1'], false);
    expect(resent).toEqual(first);
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('1');
  });

  it('release: a resent decrement or final release changes nothing more', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    const dec = randomUUID();
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId: dec })).toMatchObject({
      remaining: 1,
      ownerIndex: 0,
    });
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId: dec })).toMatchObject({
      remaining: 1,
      ownerIndex: 0,
    });
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('1');
    const last = randomUUID();
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId: last })).toMatchObject({
      remaining: 0,
      ownerIndex: 0,
    });
    // Another owner takes the lock; the resent final release must not touch it, and still reports success.
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:2'], false);
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId: last })).toMatchObject({
      remaining: 0,
      ownerIndex: 0,
    });
    expect(await redis.admin.hget(keys.lockKey, 'c:2')).toBe('1');
  });

  it('release: a release whose memo is already there answers from it and changes nothing (SET NX, then GET)', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], true);
    const requestId = randomUUID();
    // What an earlier run of this very release left: "<remaining> <ownerIndex>".
    await redis.admin.set(keys.releaseMemoPrefix + requestId, '3 2', 'PX', 10_000);
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId })).toMatchObject({
      remaining: 3,
      ownerIndex: 1,
    });
    expect(await redis.admin.hgetall(keys.lockKey)).toEqual({ 'c:1': '1' });
    // Through the shared release path too (a hold of several).
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId })).toMatchObject({
      remaining: 3,
      ownerIndex: 1,
    });
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('2');
  });

  it('lean acquire: no side fields; a resend takes the hold afresh, once, with a higher token', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    const id = randomUUID();
    const first = await scripts.acquire(keys, 10_000, id, ['c:1'], true);
    expect(first).toMatchObject({ acquired: true, holdCount: 1, ownerIndex: 0 });
    expect(await redis.admin.exists(keys.holdKey)).toBe(0);
    const resent = await scripts.acquire(keys, 10_000, id, ['c:1'], true);
    expect(resent).toMatchObject({ acquired: true, holdCount: 1, ownerIndex: 0 });
    if (first.acquired && resent.acquired) expect(resent.token).toBeGreaterThan(first.token);
    expect(await redis.admin.hgetall(keys.lockKey)).toEqual({ 'c:1': '1' });
  });

  it("lean fast paths: the grant's token is the server clock in µs and its grantedAt; a counter ahead of the clock wins", async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    const [seconds] = (await redis.admin.time()) as [string | number, string | number];
    const grant = await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], true);
    if (!grant.acquired) throw new Error('not granted');
    // The integer reply: a token of 16 digits (no exponent form, no digit lost), the clock of the grant.
    expect(grant).toMatchObject({ holdCount: 1, ownerIndex: 0, grantedAt: String(grant.token) });
    expect(grant.token / 1_000_000n).toBeGreaterThanOrEqual(BigInt(seconds));
    expect(await redis.admin.get(keys.fenceKey)).toBe(String(grant.token));
    expect(await redis.admin.pttl(keys.lockKey)).toBeGreaterThan(9_000);
    // The uncontended release's integer reply: freed, by the first owner, nobody subscribed.
    expect(await scripts.release(keys, 'one', ['c:1'])).toEqual({ remaining: 0, ownerIndex: 0, woken: 0 });
    expect(await redis.admin.exists(keys.lockKey)).toBe(0);
    // A counter ahead of the clock (grants within a microsecond, a clock stepped back): counter + 1, and the
    // grant's clock apart.
    const ahead = grant.token + 10n ** 12n;
    await redis.admin.set(keys.fenceKey, String(ahead));
    const next = await scripts.acquire(keys, 10_000, randomUUID(), ['c:2'], true);
    if (!next.acquired) throw new Error('not granted');
    expect(next.token).toBe(ahead + 1n);
    expect(BigInt(next.grantedAt ?? '0')).toBeGreaterThanOrEqual(grant.token);
    expect(BigInt(next.grantedAt ?? '0')).toBeLessThan(ahead);
    expect(await redis.admin.get(keys.fenceKey)).toBe(String(ahead + 1n));
  });

  it('lean acquire over a hold its owner gave up: one hold, and the given-up side fields are gone', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    expect(await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], true)).toMatchObject({ holdCount: 1 });
    expect(await redis.admin.hgetall(keys.lockKey)).toEqual({ 'c:1': '1' });
    expect(await redis.admin.exists(keys.holdKey)).toBe(0);
  });

  it("release: a resent final release leaves the same owner's next hold alone", async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], true);
    const last = randomUUID();
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId: last })).toMatchObject({ remaining: 0 });
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], true);
    expect(await scripts.release(keys, 'one', ['c:1'], { requestId: last })).toMatchObject({
      remaining: 0,
      ownerIndex: 0,
    });
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('1');
  });

  it('undo names a lean grant by "~<id>": it drops the grant, and not a hold re-entered since', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    const lean = randomUUID();
    await scripts.acquire(keys, 10_000, lean, ['c:1'], true);
    expect(await scripts.release(keys, 'undo', ['c:1'], { undoId: lean })).toMatchObject({ remaining: -1 });
    expect(await scripts.release(keys, 'undo', ['c:1'], { undoId: `~${lean}` })).toMatchObject({ remaining: 0 });
    expect(await redis.admin.exists(keys.lockKey)).toBe(0);

    const again = randomUUID();
    await scripts.acquire(keys, 10_000, again, ['c:1'], true);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    expect(await scripts.release(keys, 'undo', ['c:1'], { undoId: `~${again}` })).toMatchObject({ remaining: -1 });
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('2');
  });

  it('reports the holder PTTL when another owner holds the lock', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = lockKeys('', uniqueName(), onCluster);
    await scripts.acquire(keys, 10_000, randomUUID(), ['c:1'], false);
    const other = await scripts.acquire(keys, 10_000, randomUUID(), ['c:2'], false);
    expect(other.acquired).toBe(false);
    if (!other.acquired) expect(other.pttl).toBeGreaterThan(9000);
  });
});
