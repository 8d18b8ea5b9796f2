// Least privilege: every primitive of a lock client with `keyPrefix: 'svc:'` runs as an ACL user confined to
// `~svc:*` and `&svc:*` with only the commands docs/where-it-runs.md lists (the page's lines are applied as
// written: test/support/acl-rules.ts), on the client under test (`REDIS_CLIENT`) and the topology of the leg,
// and the server's ACL LOG stays empty: no command, key or channel outside the rule, the client libraries'
// own handshakes included. A permission taken away fails the call at once with a LockPermissionError naming
// the lock (the refusal as its cause), not a hang. The CLI's read-only commands run as the read-only user.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LockPermissionError, type LockClient, type LockClientOptions } from '../../src/index.js';
import type { LockInfo } from '../../src/admin/index.js';
import { aclLinesFor, grantedCommands, serverVersion } from '../support/acl-rules.js';
import { cliUrls, runCli, type CliRun } from '../support/cli.js';
import {
  elapsedSince,
  everyNode,
  newRedis,
  onCluster,
  until,
  uniqueName,
  useRedis,
  type Redis,
} from '../support/fixture.js';

const redis = useRedis();
const PREFIX = 'svc:';
const SERVICE = 'locks-svc';
const READ_ONLY = 'locks-ro';
const PASSWORD = 'change-me';
/** How fast a refused call must fail: one round trip and a NOSCRIPT retry, on a loaded machine. */
const REFUSAL_MS = 2000;

let version: [number, number];
/** Every server of the topology, replicas included (ACL users are per server; CLUSTER NODES names them all). */
const servers: Redis[] = [];

async function connectServers(): Promise<void> {
  const [first] = everyNode(redis.admin);
  if (!onCluster || !first) {
    servers.push(redis.admin as Redis);
    return;
  }
  // Node connections of the file's own, closed after it (the fixture's admin Cluster client may not know every
  // replica yet).
  for (const line of String(await first.call('CLUSTER', 'NODES')).split('\n')) {
    const [, host, port] = /^\S+ ([^:\s]+):(\d+)@/.exec(line) ?? [];
    if (host !== undefined && port !== undefined) servers.push(newRedis({ host, port: Number(port) }));
  }
}

/** Applies the page's lines of `user` that this server takes, as user `as` (the same rule under another name). */
async function createUser(user: string, as = user, ...more: string[]): Promise<void> {
  for (const node of servers) {
    for (const { args } of aclLinesFor(user, version)) {
      await node.call('ACL', 'SETUSER', as, ...args.slice(2));
    }
    if (more.length > 0) await node.call('ACL', 'SETUSER', as, ...more);
  }
}

/** `reason object` of every ACL LOG entry of `user`, on every node. */
async function denials(user: string): Promise<string[]> {
  const found: string[] = [];
  for (const node of servers) {
    for (const entry of (await node.call('ACL', 'LOG')) as unknown[][]) {
      const fields = new Map<string, unknown>();
      for (let i = 0; i + 1 < entry.length; i += 2) fields.set(String(entry[i]), entry[i + 1]);
      if (fields.get('username') === user)
        found.push(`${String(fields.get('reason'))} ${String(fields.get('object'))}`);
    }
  }
  return found;
}

beforeAll(async () => {
  version = serverVersion(await redis.admin.info('server'));
  await connectServers();
  await createUser(SERVICE);
  await createUser(READ_ONLY);
});

afterAll(() => {
  if (onCluster) for (const server of servers) server.disconnect();
});

beforeEach(async () => {
  for (const node of servers) await node.call('ACL', 'LOG', 'RESET');
});

/** A lock client under prefix `svc:` on a new client of the leg's library, logged in as `user`. */
function locksAs(user: string, options: LockClientOptions = {}): LockClient {
  // A lease of 1.5 s renewed every 500 ms: the holds below that outlast it are kept by the watchdog only.
  return redis.locks({ keyPrefix: PREFIX, watchdogTimeout: 1500, ...options }, { username: user, password: PASSWORD });
}

/** Resolves once `locks` has a waiter whose channel is subscribed (the server took its SUBSCRIBE). */
async function subscribedWaiter(locks: LockClient): Promise<void> {
  await until(() => locks.waits().some((wait) => wait.subscription === 'active'), 'a subscribed waiter', 5000);
}

describe('the lock client rule', () => {
  it('grants every command the Lua scripts call (they run with the caller’s permissions)', () => {
    const lua = fileURLToPath(new URL('../../lua', import.meta.url));
    const called = new Set<string>();
    for (const file of readdirSync(lua, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.lua'))) {
      const source = readFileSync(join(lua, file), 'utf8');
      for (const match of source.matchAll(/redis\.p?call\(\s*'([A-Za-z]+)'/g)) called.add(match[1]!.toLowerCase());
      // The release announcement's command comes as an argument: PUBLISH, or SPUBLISH on a Redis 7+ Cluster.
      for (const match of source.matchAll(/'(S?PUBLISH)'/g)) called.add(match[1]!.toLowerCase());
    }
    expect(called.size).toBeGreaterThan(20);
    const granted = grantedCommands(SERVICE);
    expect([...called].filter((command) => !granted.has(command))).toEqual([]);
  });

  it('runs a lock, re-entered and renewed, and a waiter woken by pub/sub', async () => {
    const locks = locksAs(SERVICE);
    const other = locksAs(SERVICE);
    const name = uniqueName();
    const lock = locks.getLock(name);
    await lock.withLock(async () => {
      await lock.withLock(async () => expect(await lock.getHoldCount()).toBe(2));
      await sleep(2000); // longer than the lease: held now only because the watchdog renewed it
      expect(await lock.remainTimeToLive()).toBeGreaterThan(0);
    });
    const held = await lock.acquire();
    const waiting = other.getLock(name).acquire({ waitTime: 10_000 });
    waiting.catch(() => undefined); // awaited below; a failure before that must not go unhandled
    await subscribedWaiter(other);
    await held.release();
    await (await waiting).release();
    await locks.run(async () => expect(await lock.tryLock(0, 10_000)).toBe(true));
    expect(await lock.isLocked()).toBe(true);
    expect(await lock.forceUnlock()).toBe(true);
    await Promise.all([locks.close(), other.close()]);
    expect(await denials(SERVICE)).toEqual([]);
  });

  it('runs a fair lock with a queued waiter', async () => {
    const locks = locksAs(SERVICE);
    const other = locksAs(SERVICE);
    const name = uniqueName('fair');
    const held = await locks.getFairLock(name).acquire();
    const waiting = other.getFairLock(name).acquire({ waitTime: 10_000 });
    waiting.catch(() => undefined);
    await subscribedWaiter(other);
    await held.release();
    await (await waiting).release();
    await other.getFairLock(name).withLock(() => sleep(700)); // renewed once
    await Promise.all([locks.close(), other.close()]);
    expect(await denials(SERVICE)).toEqual([]);
  });

  it('runs a read-write lock: readers together, a writer waiting for them', async () => {
    const locks = locksAs(SERVICE);
    const other = locksAs(SERVICE);
    const name = uniqueName('rw');
    const reading = await locks.getReadWriteLock(name).readLock().acquire();
    const alsoReading = await other.getReadWriteLock(name).readLock().acquire();
    const writing = other.getReadWriteLock(name).writeLock().acquire({ waitTime: 10_000 });
    writing.catch(() => undefined);
    await subscribedWaiter(other);
    await sleep(700); // the read holds and the waiting writer renewed
    await reading.release();
    await alsoReading.release();
    await (await writing).release();
    await Promise.all([locks.close(), other.close()]);
    expect(await denials(SERVICE)).toEqual([]);
  });

  it('runs a semaphore with a queued waiter', async () => {
    const locks = locksAs(SERVICE);
    const other = locksAs(SERVICE);
    const name = uniqueName('semaphore');
    const semaphore = locks.getSemaphore(name);
    expect(await semaphore.trySetPermits(1)).toBe(true);
    await semaphore.acquire();
    const waiting = other.getSemaphore(name).tryAcquire(1, 10_000);
    waiting.catch(() => undefined);
    await subscribedWaiter(other);
    await semaphore.release();
    expect(await waiting).toBe(true);
    await other.getSemaphore(name).release();
    await semaphore.addPermits(2);
    expect(await semaphore.availablePermits()).toBe(3);
    expect(await semaphore.drainPermits()).toBe(3);
    await Promise.all([locks.close(), other.close()]);
    expect(await denials(SERVICE)).toEqual([]);
  });

  it('runs a permit-expirable semaphore: a renewed permit, a waiter, a leased permit', async () => {
    const locks = locksAs(SERVICE);
    const other = locksAs(SERVICE);
    const name = uniqueName('permits');
    const semaphore = locks.getPermitExpirableSemaphore(name);
    expect(await semaphore.trySetPermits(1)).toBe(true);
    const permit = await semaphore.acquire();
    const waiting = other.getPermitExpirableSemaphore(name).acquire({ waitTime: 10_000, leaseTime: 5000 });
    waiting.catch(() => undefined);
    await subscribedWaiter(other);
    await sleep(700); // renewed once
    await permit.release();
    await (await waiting).release();
    await Promise.all([locks.close(), other.close()]);
    expect(await denials(SERVICE)).toEqual([]);
  });

  it('runs a count-down latch with a waiter', async () => {
    const locks = locksAs(SERVICE);
    const other = locksAs(SERVICE);
    const latch = locks.getCountDownLatch(uniqueName('latch'));
    expect(await latch.trySetCount(1)).toBe(true);
    const opened = other.getCountDownLatch(latch.name).await(10_000);
    opened.catch(() => undefined);
    await subscribedWaiter(other);
    await latch.countDown();
    expect(await opened).toBe(true);
    expect(await latch.getCount()).toBe(0);
    await Promise.all([locks.close(), other.close()]);
    expect(await denials(SERVICE)).toEqual([]);
  });

  it('runs a multi-lock, renewed, and close() releases what is still held', async () => {
    const locks = locksAs(SERVICE);
    const names = [uniqueName('a'), uniqueName('b'), uniqueName('c')];
    await locks.getMultiLock(names).withLock(() => sleep(700));
    const lock = locks.getLock(uniqueName('left'));
    await lock.acquire();
    await locks.close();
    expect(await redis.admin.exists(PREFIX + lock.name)).toBe(0);
    expect(await denials(SERVICE)).toEqual([]);
  });
});

describe('a permission taken away', () => {
  it('without +evalsha and +eval, fails the acquire at once, naming the lock', async () => {
    // Both: a GLIDE client sends a script's first call by EVAL (see src/redis/glide.ts), the others by EVALSHA.
    await createUser(SERVICE, 'locks-noscript', '-evalsha', '-eval');
    const lock = locksAs('locks-noscript').getLock(uniqueName('noscript'));
    const started = performance.now();
    const error = await lock.withLock(() => undefined).catch((e: unknown) => e);
    expect(elapsedSince(started)).toBeLessThan(REFUSAL_MS);
    expect(error).toBeInstanceOf(LockPermissionError);
    expect(error).toMatchObject({ code: 'LOCK_PERMISSION_DENIED', lockName: lock.name });
    expect((error as Error).message).toContain(`"${lock.name}"`);
    expect((error as { cause: Error }).cause.message).toMatch(/eval/i);
  });

  it('without the channels, fails the release at once, naming the lock; a waiter is bounded by its wait', async (context) => {
    if (version[0] === 6 && version[1] < 2) context.skip(); // Redis 6.0 has no channel rules
    await createUser(SERVICE, 'locks-nochannel', 'resetchannels');
    const locks = locksAs('locks-nochannel');
    const lock = locks.getLock(uniqueName('nochannel'));
    const held = await lock.acquire();
    // The waiter's SUBSCRIBE is refused: it re-checks every second instead, and its wait ends by its waitTime.
    const waited = performance.now();
    const waiter = locksAs('locks-nochannel');
    expect(await waiter.run(() => waiter.getLock(lock.name).tryLock(1000))).toBe(false);
    expect(elapsedSince(waited)).toBeLessThan(1000 + REFUSAL_MS);
    const started = performance.now();
    const error = await held.release().catch((e: unknown) => e);
    expect(elapsedSince(started)).toBeLessThan(REFUSAL_MS);
    expect(error).toBeInstanceOf(LockPermissionError);
    expect(error).toMatchObject({ code: 'LOCK_PERMISSION_DENIED', lockName: lock.name });
    expect((error as { cause: Error }).cause.message).toMatch(/channel/i);
  });

  it('with a key prefix outside the user’s keys, fails the acquire at once, naming the lock', async () => {
    const lock = locksAs(SERVICE, { keyPrefix: 'other:' }).getLock(uniqueName('outside'));
    const started = performance.now();
    const error = await lock.acquire().catch((e: unknown) => e);
    expect(elapsedSince(started)).toBeLessThan(REFUSAL_MS);
    expect(error).toBeInstanceOf(LockPermissionError);
    expect(error).toMatchObject({ lockName: lock.name });
    expect((error as { cause: Error }).cause.message).toMatch(/key/i);
  });
});

/** `flowlock <args>` as the read-only user on the leg's server (every master as a seed on a cluster). */
function flowlock(args: readonly string[]): Promise<CliRun> {
  return runCli([...cliUrls(redis.target, `${READ_ONLY}:${PASSWORD}@`), '--prefix', PREFIX, ...args]);
}

describe('the CLI read-only rule', () => {
  it('lists, inspects, watches and checks the locks of the prefix', async () => {
    const locks = locksAs(SERVICE);
    const name = uniqueName('cli');
    const held = await locks.getLock(name).acquire();
    const semaphore = locks.getSemaphore(uniqueName('cli-semaphore'));
    await semaphore.trySetPermits(2);

    const list = await flowlock(['list', '--json']);
    expect(list, list.stderr).toMatchObject({ code: 0 });
    expect(list.stdout).toContain(name);
    const inspect = await flowlock(['inspect', name, '--json']);
    expect(inspect, inspect.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(inspect.stdout) as LockInfo).toMatchObject({ name, held: true });
    const inspectSemaphore = await flowlock(['inspect', semaphore.name]);
    expect(inspectSemaphore, inspectSemaphore.stderr).toMatchObject({ code: 0 });
    const watch = await flowlock(['watch', '--duration', '1s', '--json']);
    expect(watch, watch.stderr).toMatchObject({ code: 0 });
    expect(watch.stdout).toContain(name);
    // doctor fails a check that a test server fails (no persistence, no replicas): exit 3, never an error.
    const doctor = await flowlock(['doctor']);
    expect([0, 3], doctor.stderr).toContain(doctor.code);
    for (const run of [list, inspect, watch, doctor])
      expect(run.stderr).not.toMatch(/NOPERM|PermissionDenied|\n\s+at /);

    await held.release();
    await locks.close();
    // CONFIG GET is left out of the rule (it shows every setting, passwords too): doctor and watch say so
    // (Redis 6.0's ACL LOG names the command without its subcommand).
    expect((await denials(READ_ONLY)).filter((denial) => !/^command config(\|get)?$/.test(denial))).toEqual([]);
  });
});
