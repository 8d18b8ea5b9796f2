// The built `flowlock` command (dist/cli.js, from `npm run build`) run as a child process against real Redis (a
// 3-master Cluster under REDIS_TOPOLOGY=cluster): its output and exit code for each command, with locks held by
// lock clients of REDIS_CLIENT, by Redisson's layout written directly, and by every primitive of the family.
// Each run must end by itself (connections closed, no timers left): a run still going after 20 s fails.
import { type ChildProcess } from 'node:child_process';
import { execFileSync, spawn as spawnChild } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LockInfo } from '../../src/admin/index.js';
import { keySlot, lockKeys } from '../../src/redis/keys.js';
import { freePort, startRedisServer, type LocalRedis } from '../support/redis-server.js';
import { makeCertificates, startTlsServer } from '../support/tls.js';
import { proxyBelowFloor, versionBelowFloor } from '../support/proxy.js';
import {
  elapsedSince,
  isCluster,
  newRedis,
  onCluster,
  uniqueName,
  recorded,
  until as waitFor,
  useRedis,
  type Client,
  type Redis,
} from '../support/fixture.js';
import { clientKind, clientPackage } from '../support/clients.js';
import { CLI, cliUrls, runCli, startCli, type CliRun } from '../support/cli.js';
import { RedissonReadWriteLock, redissonOwner } from '../support/redisson.js';
import { codeBlocks, root } from '../../scripts/docs-code.mjs';

const redis = useRedis();
const manifest = (await import('../../package.json', { with: { type: 'json' } })).default;

beforeAll(() => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build first`);
});

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

type Run = CliRun;

/** The --url flags of the test's Redis: the server, or every master of the cluster as seeds. */
const urls = (): string[] => cliUrls(redis.target);

/** Starts `flowlock <args>` (test/support/cli.ts), killed after the test. */
function start(args: readonly string[], env: NodeJS.ProcessEnv = {}, nodeArgs: readonly string[] = []): ChildProcess {
  const child = startCli(args, { env, nodeArgs });
  cleanup.push(() => child.kill('SIGKILL'));
  return child;
}

/** Runs `flowlock <args>` to its end (killed after 20 s: code null). */
const flowlock = (
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
  nodeArgs: readonly string[] = [],
): Promise<Run> => runCli(args, { env, nodeArgs });

/** `flowlock <args> --json`, parsed. */
async function json<T>(args: readonly string[]): Promise<T> {
  const run = await flowlock([...urls(), ...args, '--json']);
  expect(run.stderr).not.toMatch(/^flowlock:/);
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout) as T;
}

const label = (app?: string): string => `${hostname()} pid ${process.pid}${app ? ` (${app})` : ''}`;
/** The label as a RegExp source. */
const labelPattern = (app: string): string => label(app).replace(/[.()]/g, '\\$&');

function masters(client: Client): Redis[] {
  return isCluster(client) ? client.nodes('master') : [client];
}

/**
 * For holds that must outlast CLI runs: holder info is written with a hold's first renewal, 2 s in (within
 * recorded()'s 10 s), and a 6 s lease outlives the stalls a loaded machine gives the test process while a CLI
 * runs (with a 900 ms watchdog a hold inspected there was seen gone: FREE).
 */
const STEADY_RENEWAL = { watchdogTimeout: 6000 } as const;

/**
 * Resolves once `predicate` holds, polling every 20 ms, or fails after `ms`. A predicate that runs the command
 * takes 0.5 to 2 s a call on a loaded machine: it gets a few tries.
 */
async function until(predicate: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const started = performance.now();
  while (!(await predicate())) {
    if (elapsedSince(started) > ms) throw new Error(`condition not met within ${ms} ms`);
    await sleep(20);
  }
}

describe('flowlock inspect', () => {
  it('shows a flowlock hold: owner, re-entered hold count, holder info, TTL, fencing, slot and waiters', async () => {
    // A wait far longer than the CLI runs below take on a loaded machine (a 10 s wait ran out before them).
    const locks = redis.locks({ holderInfo: { app: 'billing' }, ...STEADY_RENEWAL });
    const name = uniqueName('cli');
    const lock = locks.getLock(name);
    await locks.run(async () => {
      const lease = await lock.acquire();
      await lock.lock();
      await recorded(redis.admin, locks, name);
      const waiting = redis.locks().getLock(name).acquire({ waitTime: 120_000 });
      waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
      await until(async () => ((await json<LockInfo>(['inspect', name])).waitingConnections ?? 0) >= 1);
      const run = await flowlock([...urls(), 'inspect', name]);
      expect(run.code).toBe(0);
      const lines = run.stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(
        new RegExp(`^${name}  HELD  lock \\(or fair lock\\)  ttl \\d+\\.\\ds  fencing ${lease.fencingToken}$`),
      );
      expect(lines[1]).toMatch(
        new RegExp(
          `^  owner    ${locks.clientId}:\\d+  holds 2  since \\d\\d:\\d\\d:\\d\\dZ \\(\\d+\\.\\ds\\)  ${labelPattern('billing')}$`,
        ),
      );
      expect(lines[2]).toMatch(new RegExp(`^  key      ${name}  slot ${keySlot(name)} @ 127\\.0\\.0\\.1:\\d+$`));
      expect(lines[3]).toBe(`  waiting  1 subscriber connection on redisson_lock__channel:{${name}}`);
      expect(lines).toHaveLength(4);
      const parsed = await json<LockInfo>(['inspect', name]);
      expect(parsed).toMatchObject({ name, held: true, fencingToken: lease.fencingToken.toString() });
      expect(parsed.owners[0]).toMatchObject({ clientId: locks.clientId, holdCount: 2, who: label('billing') });
      await lock.unlock();
      await lease.release();
      await (await waiting).release();
    });
  });

  it('shows a freed lock as nothing left of it, like a name never used', async () => {
    const locks = redis.locks();
    const name = uniqueName('cli');
    const lease = await locks.getLock(name).acquire();
    await lease.release();
    const free = await flowlock([...urls(), 'inspect', name]);
    expect(free).toMatchObject({ code: 0, stderr: '' });
    expect(free.stdout).toMatch(new RegExp(`^${name}  FREE  `));
    expect(await json<LockInfo>(['inspect', name])).toMatchObject({ held: false, kind: null, fencingToken: null });
    const never = uniqueName('never');
    expect((await flowlock([...urls(), 'inspect', never])).stdout).toBe(
      `${never}  FREE  (nothing of it in Redis: never locked, or freed)\n`,
    );
    expect((await json<LockInfo>(['inspect', never])).held).toBe(false);
  });

  it('shows a lock held by a Redisson (Java) client as an owner without info', async () => {
    const name = uniqueName('java');
    const owner = redissonOwner();
    await redis.admin.hset(name, owner, 1);
    await redis.admin.pexpire(name, 30_000);
    const run = await flowlock([...urls(), 'inspect', name]);
    expect(run.code).toBe(0);
    expect(run.stdout.split('\n')[1]).toBe(`  owner    ${owner}  holds 1  (no owner info)`);
  });

  it('shows a fair lock with its queue', async () => {
    const name = uniqueName('fair');
    const holder = redis.locks({ holderInfo: { app: 'jobs' } });
    const lease = await holder.getFairLock(name).acquire();
    const waiting = redis.locks().getFairLock(name).acquire({ waitTime: 120_000 });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    // Queued first, then subscribed: wait for both.
    await until(async () => {
      const { queueLength, waitingConnections } = await json<LockInfo>(['inspect', name]);
      return queueLength === 1 && (waitingConnections ?? 0) >= 1;
    });
    const run = await flowlock([...urls(), 'inspect', name]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`^${name}  HELD  fair lock  ttl `));
    expect(run.stdout).toMatch(/\n {2}queue {4}1 waiting: \S+:w\d+ \(\d+\.\ds left\)\n/);
    expect(run.stdout).toMatch(/\n {2}waiting {2}1 subscriber connection on redisson_lock__channel:\{.*\}:\S+:w\d+\n/);
    await lease.release();
    await (await waiting).release();
  });

  it('shows a read-write lock read by two owners (one Redisson), then written', async () => {
    const name = uniqueName('rw');
    const locks = redis.locks({ holderInfo: { app: 'catalog' } });
    const read = await locks.getReadWriteLock(name).readLock().acquire();
    const java = new RedissonReadWriteLock(redis.admin, name);
    expect(await java.tryReadLock(30_000)).toBeNull();
    const reading = await flowlock([...urls(), 'inspect', name]);
    expect(reading.stdout).toMatch(new RegExp(`^${name}  HELD  read-write lock \\(read\\)  ttl `));
    expect(reading.stdout).toMatch(
      new RegExp(
        `\\n  owner    ${locks.clientId}:\\d+  read  holds 1  lease \\d+\\.\\ds  since .*${labelPattern('catalog')}\\n`,
      ),
    );
    expect(reading.stdout).toContain(`\n  owner    ${java.owner}  read  holds 1  lease `);
    expect(reading.stdout).toMatch(/\(no owner info\)\n/);
    await read.release();
    await java.readUnlock();
    const write = await locks.getReadWriteLock(name).writeLock().acquire();
    const writing = await flowlock([...urls(), 'inspect', name]);
    expect(writing.stdout).toMatch(
      new RegExp(`^${name}  HELD  read-write lock \\(write\\)  ttl \\d+\\.\\ds  fencing ${write.fencingToken}\\n`),
    );
    expect(writing.stdout).toMatch(new RegExp(`\\n  owner    ${locks.clientId}:\\d+:write  write  holds 1  since `));
    await write.release();
  });

  it('shows the semaphores and the count-down latch', async () => {
    const locks = redis.locks();
    const pool = uniqueName('sem');
    await locks.getSemaphore(pool).trySetPermits(5);
    await locks.getSemaphore(pool).acquire({ permits: 2 });
    const semaphore = await flowlock([...urls(), 'inspect', pool]);
    expect(semaphore.stdout).toMatch(
      new RegExp(
        `^${pool}  AVAILABLE  semaphore \\(or permit-expirable semaphore, count-down latch\\)  3 available\\n`,
      ),
    );
    const leases = uniqueName('permits');
    const expirable = locks.getPermitExpirableSemaphore(leases);
    await expirable.trySetPermits(2);
    const permit = await expirable.acquire({ leaseTime: 60_000 });
    const permits = await flowlock([...urls(), 'inspect', leases]);
    expect(permits.stdout).toMatch(new RegExp(`^${leases}  HELD  permit-expirable semaphore  1 available, 1 out\\n`));
    expect(permits.stdout).toMatch(new RegExp(`\\n  permit   ${permit.permitId}  lease \\d+\\.\\ds left\\n`));
    const boot = uniqueName('latch');
    await locks.getCountDownLatch(boot).trySetCount(2);
    // Far longer than the CLI runs below take on a loaded machine (a 10 s wait ran out before the last one).
    const awaiting = redis.locks().getCountDownLatch(boot).await({ waitTime: 120_000 });
    awaiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => (await json<LockInfo>(['inspect', boot])).kind === 'count-down-latch');
    const latch = await flowlock([...urls(), 'inspect', boot]);
    expect(latch.stdout).toMatch(
      new RegExp(`^${boot}  COUNTING  count-down latch \\(or semaphore, permit-expirable semaphore\\)  count 2\\n`),
    );
    expect(latch.stdout).toContain(`  waiting  1 subscriber connection on redisson_countdownlatch__channel__{${boot}}`);
    const asLatch = await flowlock([...urls(), 'inspect', pool, '--kind', 'count-down-latch']);
    expect(asLatch.stdout).toMatch(new RegExp(`^${pool}  COUNTING  count-down latch  count 3\\n`));
    await locks.getCountDownLatch(boot).countDown();
    await locks.getCountDownLatch(boot).countDown();
    expect(await awaiting).toBe(true);
  });
});

describe('flowlock list', () => {
  it('lists every held lock across all masters, oldest first, with the scan cost on stderr', async () => {
    const label = `cli${Math.random().toString(36).slice(2, 8)}`;
    const locks = redis.locks({ holderInfo: { app: 'lister' }, ...STEADY_RENEWAL });
    // Enough names that, on the cluster, every master holds some.
    const names = Array.from({ length: 9 }, (_, i) => `test:${label}:${i}`);
    const slotsOf = names.map((name) => keySlot(name));
    if (onCluster) {
      const admin = redis.admin;
      if (!isCluster(admin)) throw new Error('expected a cluster');
      expect(new Set(slotsOf.map((slot) => admin.slots[slot]?.[0])).size).toBe(3);
    }
    const leases = [];
    for (const name of names) leases.push(await locks.getLock(name).acquire());
    for (const name of names) await recorded(redis.admin, locks, name);
    await redis.admin.hset(`test:${label}:app`, 'field', 'not a lock');
    const run = await flowlock([...urls(), 'list', '--match', `test:${label}:*`]);
    expect(run.code).toBe(0);
    const [header, ...rows] = run.stdout.trimEnd().split('\n');
    expect(header).toMatch(/^NAME +KIND +OWNER +HOLDS +TTL +AGE +WHO$/);
    expect(rows).toHaveLength(names.length);
    // Oldest first: the acquisition order.
    expect(rows.map((row) => row.split(/ +/)[0])).toEqual(names);
    for (const row of rows)
      expect(row).toMatch(
        new RegExp(`^test:${label}:\\d +lock +\\S+ +1 +\\d+\\.\\ds +\\d+\\.\\ds +${labelPattern('lister')}$`),
      );
    expect(run.stderr).toMatch(
      new RegExp(
        `^9 held locks · scanned [\\d,]+ keys on ${onCluster ? '3 masters' : '1 master'} in \\d+\\.\\d\\ds \\(\\d+ SCAN calls?\\)\\n$`,
      ),
    );
    const parsed = await json<LockInfo[]>(['list', '--match', `test:${label}:*`, '--limit', '4']);
    expect(parsed).toHaveLength(4);
    for (const info of parsed) expect(info.held).toBe(true);
    await Promise.all(leases.map((lease) => lease.release()));
    const none = await flowlock([...urls(), 'list', '--match', `test:${label}:*`]);
    expect(none).toMatchObject({ code: 0, stdout: '' });
    expect(none.stderr).toMatch(/^0 held locks · /);
    // --all also finds names by the per-name fencing counters an earlier version left.
    await Promise.all(names.map((name) => redis.admin.set(lockKeys('', name, onCluster).legacyFenceKey, '1')));
    const all = await flowlock([...urls(), 'list', '--all', '--match', `test:${label}:*`]);
    expect(all.stdout.trimEnd().split('\n').slice(1)).toHaveLength(names.length);
    expect(all.stderr).toMatch(/^9 locks \(0 held\) · /);
  });
});

describe('flowlock unlock', () => {
  it('refuses without --owner or --force and shows the holder (exit 3)', async () => {
    const locks = redis.locks({ holderInfo: { app: 'billing' }, ...STEADY_RENEWAL });
    const name = uniqueName('cli');
    const lease = await locks.getLock(name).acquire();
    await recorded(redis.admin, locks, name);
    const run = await flowlock([...urls(), 'unlock', name]);
    expect(run.code).toBe(3);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(
      new RegExp(
        `^${name} is held by ${locks.clientId}:\\d+ \\(1 hold, \\d+\\.\\ds, ${labelPattern('billing')}\\)\\.\\nRefusing without --owner or --force`,
      ),
    );
    expect(lease.signal.aborted).toBe(false);
    const notHeld = await flowlock([...urls(), 'unlock', uniqueName('free'), '--force', '--yes']);
    expect(notHeld.code).toBe(3);
    expect(notHeld.stderr).toMatch(/is not held/);
    await lease.release();
  });

  it('releases by --owner (compare-and-release) and wakes a waiting client', async () => {
    const holder = redis.locks({ watchdogTimeout: 3000 });
    const name = uniqueName('cli');
    const lease = await holder.getLock(name).acquire();
    let woken = 0;
    const waiting = redis
      .locks()
      .getLock(name)
      // Far longer than the five CLI runs before the release take on a loaded machine (a 20 s wait ran out
      // before it: "woke 0 waiting connections").
      .acquire({ waitTime: 120_000 })
      .then((next) => {
        woken = performance.now();
        return next;
      });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => ((await json<LockInfo>(['inspect', name])).waitingConnections ?? 0) >= 1);
    const owner = (await json<LockInfo>(['inspect', name])).owners[0]?.owner ?? '';
    const mismatch = await flowlock([...urls(), 'unlock', name, '--owner', `${owner}0`, '--yes']);
    expect(mismatch.code).toBe(3);
    expect(mismatch.stderr).toBe(`${name} is not held by ${owner}0: it is held by ${owner}.\n`);
    const noYes = await flowlock([...urls(), 'unlock', name, '--owner', owner]);
    expect(noYes.code).toBe(2);
    expect(noYes.stderr).toMatch(/needs --yes when stdin is not a terminal/);
    const before = performance.now();
    const run = await flowlock([...urls(), 'unlock', name, '--owner', owner, '--yes']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`^released ${name} \\(owner \\S+:\\d+, woke 1 waiting connection\\)\\n$`));
    const next = await waiting;
    // Woken by the release message while the command ran, long before the holder's lease (30 s) ran out.
    expect(woken - before).toBeLessThan(run.ms + 1000);
    // The former holder learns it at its next renewal (every second), which finds it gone.
    await until(() => lease.signal.aborted);
    expect(lease.signal.reason).toMatchObject({
      reason: expect.stringMatching(/found it held by another owner or gone/),
    });
    await next.release();
  });

  it('forces a lock free (--force --yes) and prints JSON with --json', async () => {
    const locks = redis.locks();
    const name = uniqueName('cli');
    await locks.getLock(name).acquire();
    const run = await flowlock([...urls(), 'unlock', name, '--force', '--yes']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(
      new RegExp(`^released ${name} by force \\(held by \\S+:\\d+; its waiters were woken\\)\\n$`),
    );
    expect((await json<LockInfo>(['inspect', name])).held).toBe(false);
    const again = await locks.getLock(name).acquire();
    const forced = await json<{ released: boolean; kind: string }>(['unlock', name, '--force', '--yes']);
    expect(forced).toMatchObject({ released: true, kind: 'lock' });
    expect(again.signal.aborted).toBe(false);
  });
});

describe('flowlock doctor', () => {
  it('exits 0 on a noeviction server and 3 when maxmemory-policy is allkeys-lru', async () => {
    const ok = await flowlock([...urls(), 'doctor']);
    expect(ok.code).toBe(0);
    const lines = ok.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      onCluster
        ? /^✔ redis \d+\.\d+\.\d+ · SPUBLISH available · cluster 3 masters$/
        : /^✔ redis \d+\.\d+\.\d+ · standalone · classic pub\/sub$/,
    );
    expect(lines[1]).toBe('✔ maxmemory-policy noeviction');
    expect(lines[2]).toMatch(/^! appendonly no/);
    expect(lines[3]).toMatch(
      onCluster ? /^! 3 replicas, replication is asynchronous — a failover can lose/ : /^✔ no replicas$/,
    );
    expect(lines[4]).toMatch(/^(!|✔) notify-keyspace-events/);
    expect(lines[5]).toMatch(/^✔ clock offset to server -?\d+ ms \(±\d+ ms\)/);
    const node = masters(redis.admin)[0]!;
    await node.config('SET', 'maxmemory-policy', 'allkeys-lru');
    cleanup.push(() => node.config('SET', 'maxmemory-policy', 'noeviction'));
    const failing = await flowlock([...urls(), 'doctor']);
    expect(failing.code).toBe(3);
    expect(failing.stdout).toMatch(/\n✖ maxmemory-policy .*allkeys-lru.* — lock keys can be evicted/);
    const report = JSON.parse((await flowlock([...urls(), 'doctor', '--json'])).stdout) as { ok: boolean };
    expect(report.ok).toBe(false);
  });
});

describe('flowlock watch', () => {
  it('logs an acquisition, a release and an expiry as NDJSON, and stops on SIGINT', async () => {
    const locks = redis.locks({ holderInfo: { app: 'watched' }, ...STEADY_RENEWAL });
    const [marker, name] = [uniqueName('cliwatch'), uniqueName('cliwatch')];
    // A lock held from the start: its `held` event says that the watch is running.
    const held = await locks.getLock(marker).acquire();
    const child = start([...urls(), 'watch', marker, name, '--interval', '100ms', '--json']);
    const events: { type: string; name: string; holder?: { who: string }; owner?: string; proof?: string }[] = [];
    let buffered = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) events.push(JSON.parse(line) as (typeof events)[number]);
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    await until(() => events.some((e) => e.type === 'held' && e.name === marker));
    const lease = await locks.getLock(name).acquire();
    // Seen at once (the hold's holder info comes with its first renewal, 2 s in: maybe not yet).
    await until(() => events.some((e) => e.type === 'acquired' && e.name === name));
    await recorded(redis.admin, locks, name);
    await lease.release();
    await until(() => events.some((e) => e.type === 'released'));
    const owner = redissonOwner();
    await redis.admin.hset(name, owner, 1);
    // Long enough for the watch (polling every 100 ms, in another process) to see it held on a loaded machine.
    await redis.admin.pexpire(name, 1500);
    await until(() => events.some((e) => e.type === 'expired' && e.owner === owner));
    child.kill('SIGINT');
    expect(await exited).toBe(0);
    expect(stderr).toBe('');
    expect(events.filter((e) => e.name === name).map((e) => e.type)).toEqual([
      'acquired',
      'released',
      'acquired',
      'expired',
    ]);
    await held.release();
  });

  it('stops after --duration and after --limit events', async () => {
    const name = uniqueName('cliwatch');
    const locks = redis.locks(STEADY_RENEWAL);
    const lease = await locks.getLock(name).acquire();
    await recorded(redis.admin, locks, name);
    const timed = await flowlock([...urls(), 'watch', name, '--duration', '1s', '--interval', '200ms']);
    expect(timed.code).toBe(0);
    expect(timed.ms).toBeGreaterThanOrEqual(1000);
    expect(timed.ms).toBeLessThan(8000);
    expect(timed.stdout).toMatch(
      new RegExp(
        `^\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z  ${name}  held {6}\\S+:\\d+  fencing ${lease.fencingToken}  since \\d\\d:\\d\\d:\\d\\dZ  `,
      ),
    );
    const limited = await flowlock([...urls(), 'watch', name, '--limit', '1']);
    expect(limited.code).toBe(0);
    expect(limited.stdout.trimEnd().split('\n')).toHaveLength(1);
    await lease.release();
  });
});

describe('flowlock: usage, help and errors', () => {
  it('exits 2 on usage errors, before connecting', async () => {
    const port = await freePort();
    const unreachable = ['--url', `redis://127.0.0.1:${port}`];
    const cases: [string[], RegExp][] = [
      [[], /a command is needed/],
      [['frobnicate'], /unknown command "frobnicate"/],
      [['list', '--bogus'], /Unknown option '--bogus'/],
      [['inspect', 'x', '--force'], /--force is not an option of inspect/],
      [['inspect'], /inspect takes one lock name/],
      [['inspect', 'a', 'b'], /inspect takes one lock name/],
      [['inspect', 'flowlock:fence'], /name must not contain "flowlock:"/],
      [['inspect', 'x', '--kind', 'mutex'], /--kind must be one of lock, fair-lock/],
      [['list', '--limit', '0'], /--limit must be a whole number >= 1/],
      [['watch', '--interval', 'soon'], /--interval must be a duration/],
      [['doctor', '--timeout', '-1'], /--timeout/],
      [['doctor', '--prefix', 'a{b'], /--prefix may contain one complete hash tag/],
      [['unlock', 'x', '--owner', 'o', '--force'], /--owner or --force, not both/],
      [['--url', 'http://x', 'doctor'], /the scheme must be redis:\/\/ or rediss:\/\//],
    ];
    for (const [args, message] of cases) {
      const run = await flowlock([...unreachable, ...args]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr, args.join(' ')).toMatch(message);
      expect(run.stderr).toMatch(/Run flowlock --help for usage\.\n$/);
    }
  });

  it('prints help and the version (exit 0)', async () => {
    const help = await flowlock(['--help']);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toMatch(/^Usage: flowlock <command> \[options\]/);
    expect(help.stdout).toMatch(/Exit codes: 0 done, 1 runtime error, 2 usage error, 3 precondition not met\./);
    const unlockHelp = await flowlock(['unlock', '-h']);
    expect(unlockHelp.stdout).toMatch(/^Usage: flowlock unlock <name> \(--owner <id> \| --force\)/);
    expect(await flowlock(['--version'])).toMatchObject({ code: 0, stdout: `${manifest.version}\n` });
  });

  it('says "connection refused" at once when nothing listens (exit 1), GLIDE too', async () => {
    const port = await freePort();
    // A timeout far above the bound: the refusal must not wait for it (GLIDE alone would retry until then).
    const run = await flowlock(['--url', `redis://127.0.0.1:${port}`, '--timeout', '15s', 'doctor']);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      `flowlock: connecting to 127.0.0.1:${port}: connection refused (is Redis listening there?)\n`,
    );
    expect(run.ms).toBeLessThan(10_000);
  });

  it('connects as a Cluster client with --cluster, which a standalone server refuses (exit 1)', async () => {
    const run = await flowlock([...urls(), '--cluster', 'doctor']);
    if (onCluster) {
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/cluster 3 masters/);
    } else {
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(/^flowlock: connecting as a Cluster client \(--cluster\): /);
    }
  });

  it('takes the URL from FLOWLOCK_REDIS_URL, then REDIS_URL (a cluster node: detected)', async () => {
    const [, url = ''] = urls();
    expect((await flowlock(['doctor'], { FLOWLOCK_REDIS_URL: url })).code).toBe(0);
    expect((await flowlock(['doctor'], { REDIS_URL: url })).code).toBe(0);
  });

  it('builds flowlock/admin without loading a client package (ESM and CommonJS)', async () => {
    const probe =
      "import { registerHooks, createRequire } from 'node:module';" +
      'const seen = []; registerHooks({ resolve(s, c, next) { seen.push(s); return next(s, c); } });' +
      "const esm = await import('./dist/admin.js'); const cjs = createRequire(import.meta.url)('./dist/admin.cjs');" +
      "if (typeof esm.inspectLock !== 'function' || typeof cjs.listLocks !== 'function') process.exit(3);" +
      'console.log(JSON.stringify(seen));';
    const child = spawnChild(process.execPath, ['--input-type=module', '-e', probe], {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    expect(await new Promise((resolve) => child.on('close', resolve))).toBe(0);
    const specifiers = JSON.parse(stdout) as string[];
    expect(specifiers).toEqual(expect.arrayContaining(['./dist/admin.js', './dist/admin.cjs']));
    expect(specifiers.filter((s) => /^(ioredis|iovalkey|redis|@redis\/)/.test(s))).toEqual([]);
  });

  it('says which packages it can use when no client package can be loaded (exit 1)', async () => {
    const run = await flowlock([...urls(), 'doctor'], { FLOWLOCK_TEST_ONLY_CLIENT: 'none' });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(
      'flowlock: flowlock needs a Redis client package: npm install ioredis (or iovalkey, redis, @valkey/valkey-glide)\n',
    );
  });
});

describe('flowlock: hostile names cannot forge output (issue 22, item 5)', () => {
  const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  it('escapes control characters of names, owners and errors in list, inspect, unlock and watch', async () => {
    const label = `cliesc${Math.random().toString(36).slice(2, 8)}`;
    const locks = redis.locks();
    // A name with a newline that would print a whole invented row, one with ANSI escapes, and a plain one.
    const forged = `${label}:1\n${label}:42  lock  deadbeef…:1  1  30.0s  1.0s  evil pid 1`;
    const ansi = `${label}:\u001b[2J\u001b[31mred\u001b[0m`;
    const plain = `${label}:plain`;
    const leases = await Promise.all([forged, ansi, plain].map((name) => locks.getLock(name).acquire()));
    cleanup.push(() => Promise.all(leases.map((lease) => lease.release())));
    // An owner field written by anyone (the library refuses control characters only in what it writes).
    const written = `${label}:written`;
    const owner = `x\u001b]0;title\u0007\n${label}:99:1`;
    await redis.admin.hset(written, owner, 1);
    await redis.admin.pexpire(written, 30_000);
    const quoted = (text: string): string =>
      JSON.stringify(text).replaceAll('\u001b', '\\u001b').replaceAll('\u0007', '\\u0007');
    const escapes = (text: string): boolean => text.includes('\u001b') || text.includes('\u0007');

    const listed = await flowlock([...urls(), 'list', '--match', `${label}:*`]);
    expect(listed.code).toBe(0);
    expect(escapes(listed.stdout)).toBe(false);
    const rows = listed.stdout.trimEnd().split('\n');
    // Header and one row per held lock: the newline made no row of its own.
    expect(rows).toHaveLength(5);
    expect(rows.filter((row) => row.startsWith(quoted(forged)))).toHaveLength(1);
    expect(rows.filter((row) => row.startsWith(quoted(ansi)))).toHaveLength(1);
    expect(rows.filter((row) => row.startsWith(`${plain} `))).toHaveLength(1);
    expect(rows.filter((row) => row.startsWith(`${label}:42`))).toEqual([]);

    const inspected = await flowlock([...urls(), 'inspect', forged]);
    expect(inspected.code).toBe(0);
    expect(inspected.stdout.split('\n')[0]).toMatch(new RegExp(`^${escapeRegExp(quoted(forged))}  HELD  `));
    expect(inspected.stdout).toContain(`  key      ${quoted(forged)}  slot `);
    const hostileOwner = await flowlock([...urls(), 'inspect', written]);
    expect(escapes(hostileOwner.stdout)).toBe(false);
    expect(hostileOwner.stdout).toContain(`  owner    ${quoted(owner)}  holds 1  (no owner info)\n`);
    // headline, owner, key, waiting: no line of the owner's own.
    expect(hostileOwner.stdout.trimEnd().split('\n')).toHaveLength(4);

    // The refusal (stderr) and an error message carry the name too.
    const refused = await flowlock([...urls(), 'unlock', written]);
    expect(refused.code).toBe(3);
    expect(escapes(refused.stderr)).toBe(false);
    expect(refused.stderr.split('\n')[0]).toBe(`${written} is held by ${quoted(owner)} (1 hold).`);
    const semaphore = `${label}:sem\n${label}:42 released`;
    await locks.getSemaphore(semaphore).trySetPermits(1);
    const notALock = await flowlock([...urls(), 'unlock', semaphore, '--force', '--yes']);
    expect(notALock.code).toBe(3);
    expect(notALock.stderr).toBe(`flowlock: ${quoted(semaphore)} is a semaphore: it has no holder to release\n`);

    const watched = await flowlock([...urls(), 'watch', `${label}:*`, '--limit', '4']);
    expect(watched.code).toBe(0);
    expect(escapes(watched.stdout)).toBe(false);
    const lines = watched.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    for (const line of lines) expect(line).toMatch(/^\d\d:\d\d:\d\d\.\d{3}Z {2}\S+.* {2}held {6}/);
    expect(lines.filter((line) => line.includes(`  ${quoted(forged)}  held`))).toHaveLength(1);
    // JSON output keeps the names as they are (JSON escapes them itself).
    const parsed = await json<LockInfo>(['inspect', forged]);
    expect(parsed.name).toBe(forged);
  });
});

describe('flowlock: durations beyond what a timer can wait (issue 22, item 6)', () => {
  it('refuses --duration, --timeout and --interval above 2^31 - 1 ms (exit 2), naming the flag and the maximum', async () => {
    const port = await freePort();
    const unreachable = ['--url', `redis://127.0.0.1:${port}`];
    for (const args of [
      ['watch', '--duration', '600h'],
      ['inspect', 'x', '--timeout', '600h'],
      ['watch', '--interval', '2147483648'],
    ]) {
      const run = await flowlock([...unreachable, ...args]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(
        new RegExp(`^flowlock: ${args.at(-2)} must be at most 2147483647 ms \\(about 596h\\), got "${args.at(-1)}"`),
      );
    }
    // The maximum itself is taken (it fails only at connecting: nothing listens on the port).
    const longest = await flowlock([...unreachable, 'doctor', '--timeout', '2147483647']);
    expect(longest.code).toBe(1);
  });
});

describe('flowlock inspect: an exhausted semaphore (issue 22, item 7)', () => {
  it('says no permit is free and how many waiters want how many permits', async () => {
    const pool = uniqueName('exhausted');
    const locks = redis.locks();
    const semaphore = locks.getSemaphore(pool);
    await semaphore.trySetPermits(1);
    await semaphore.acquire();
    const controller = new AbortController();
    const waiting = redis
      .locks()
      .getSemaphore(pool)
      .acquire({ permits: 2, signal: controller.signal })
      .catch(() => undefined);
    cleanup.push(
      () => waiting,
      () => controller.abort(),
    );
    await waitFor(async () => (await json<LockInfo>(['inspect', pool])).queueLength === 1, 'the waiter queued');
    const run = await flowlock([...urls(), 'inspect', pool]);
    expect(run.code).toBe(0);
    const [headline] = run.stdout.split('\n');
    expect(headline).not.toMatch(/AVAILABLE/);
    expect(headline).toMatch(
      new RegExp(`^${pool}  NO PERMIT FREE  semaphore.*  0 available  1 waiter wants 2 permits$`),
    );
  });
});

describe('flowlock watch: holds shorter than --interval (issue 22, item 8)', () => {
  type Event = {
    type: string;
    name: string;
    holds?: number;
    proof?: string;
    owner?: string;
    holder?: { owner: string; who: string };
  };

  /** `flowlock watch <args>` running, its events (JSON) or lines as they come, and its exit. */
  /**
   * How long a watch takes to report its first hold (ms): a CLI process starting, on GLIDE's cluster client with
   * its native client, slot discovery and subscriptions on every master; a loaded 2-core machine stretched that
   * past 10 s once (the cluster:glide leg beside another suite, 2026-11-29). What the tests time is after it.
   */
  const WATCH_STARTED_MS = 20_000;

  function watching(args: readonly string[], asJson: boolean) {
    const child = start([...urls(), 'watch', ...args, ...(asJson ? ['--json'] : [])]);
    const events: Event[] = [];
    const lines: string[] = [];
    let buffered = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const complete = buffered.split('\n');
      buffered = complete.pop() ?? '';
      for (const line of complete) {
        lines.push(line);
        if (asJson) events.push(JSON.parse(line) as Event);
      }
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    return { child, events, lines, exited, stderr: () => stderr };
  }

  it('reports a 300 ms hold between two reads, without its holder, from its release message', async () => {
    const locks = redis.locks();
    const [marker, name] = [uniqueName('brief'), uniqueName('brief')];
    // Held from the start: its `held` event says that the watch is running.
    const held = await locks.getLock(marker).acquire();
    cleanup.push(() => held.release());
    // Reads 10 s apart: only the release message can tell of the hold.
    const json = watching([marker, name, '--interval', '10s'], true);
    const human = watching([marker, name, '--interval', '10s', '--limit', '2'], false);
    await waitFor(() => json.events.some((e) => e.type === 'held' && e.name === marker), 'the JSON watch', 10_000);
    await waitFor(() => human.lines.length === 1, 'the human watch', 10_000);
    const lease = await locks.getLock(name).acquire();
    await sleep(300);
    await lease.release();
    await waitFor(() => json.events.some((e) => e.name === name), 'an event of the hold', 5000);
    expect(json.events.filter((e) => e.name === name)).toEqual([
      expect.objectContaining({ type: 'brief', name, holds: 1, proof: 'message' }),
    ]);
    expect(await human.exited).toBe(0);
    expect(human.lines[1]).toMatch(
      new RegExp(
        // No fencing token: a free lock keeps none (the shared counter is not the name's).
        `^\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z  ${name}  brief {5}a hold acquired and released between two reads  ` +
          `\\(holder not seen; release message\\)$`,
      ),
    );
    json.child.kill('SIGINT');
    expect(await json.exited).toBe(0);
    expect(json.stderr()).toBe('');
  });

  // On a Redis 7 Cluster a glob hears no release messages (shard channels have no patterns): README says so.
  it.skipIf(onCluster)(
    'reports a brief hold of a name matched by a glob (watch with no names: every lock)',
    async () => {
      const locks = redis.locks();
      const marker = uniqueName('brief');
      const name = uniqueName('briefglob');
      const held = await locks.getLock(marker).acquire();
      cleanup.push(() => held.release());
      const watch = watching(['--interval', '10s'], true);
      await waitFor(
        () => watch.events.some((e) => e.type === 'held' && e.name === marker),
        'the watch',
        WATCH_STARTED_MS,
      );
      const lease = await locks.getLock(name).acquire();
      await sleep(300);
      await lease.release();
      await waitFor(() => watch.events.some((e) => e.name === name), 'an event of the hold', 5000);
      expect(watch.events.filter((e) => e.name === name)).toEqual([
        expect.objectContaining({ type: 'brief', holds: 1, proof: 'message' }),
      ]);
      watch.child.kill('SIGINT');
      expect(await watch.exited).toBe(0);
    },
  );

  /** Turns on the keyspace events `watch --events` reads (expired and hash commands) on every master, for this test. */
  async function withHashEvents(): Promise<void> {
    const nodes = masters(redis.admin);
    const before = await Promise.all(
      nodes.map(async (node) => ((await node.config('GET', 'notify-keyspace-events')) as string[])[1] ?? ''),
    );
    cleanup.push(() =>
      Promise.all(nodes.map((node, i) => node.config('SET', 'notify-keyspace-events', before[i] ?? ''))),
    );
    await Promise.all(nodes.map((node) => node.config('SET', 'notify-keyspace-events', 'Eghx')));
  }

  it('reports a fair lock held and released between two reads with --events (it publishes no release)', async () => {
    await withHashEvents();
    const locks = redis.locks();
    const [marker, name] = [uniqueName('brief'), uniqueName('brieffair')];
    const held = await locks.getLock(marker).acquire();
    cleanup.push(() => held.release());
    const watch = watching([marker, name, '--interval', '10s', '--events'], true);
    await waitFor(
      () => watch.events.some((e) => e.type === 'held' && e.name === marker),
      'the watch',
      WATCH_STARTED_MS,
    );
    // A fair lock with no waiter publishes nothing on release: only the hash event of its acquire tells.
    const lease = await locks.getFairLock(name).acquire();
    await sleep(300);
    // The watch (another process) reads the hold on its hash event: released before that read, it would be
    // gone unseen, which a stalled machine can cause, not the watch.
    await waitFor(() => watch.events.some((e) => e.name === name && e.type === 'acquired'), 'the acquire', 5000);
    await lease.release();
    await waitFor(() => watch.events.some((e) => e.name === name && e.type === 'released'), 'the release', 8000);
    expect(watch.events.filter((e) => e.name === name).map((e) => e.type)).toEqual(['acquired', 'released']);
    watch.child.kill('SIGINT');
    expect(await watch.exited).toBe(0);
  });

  it('names the owner of a 300 ms hold with --events when the server publishes hash events', async () => {
    await withHashEvents();
    const locks = redis.locks({ holderInfo: { app: 'brief' } });
    const [marker, name] = [uniqueName('brief'), uniqueName('brief')];
    const held = await locks.getLock(marker).acquire();
    cleanup.push(() => held.release());
    const watch = watching([marker, name, '--interval', '10s', '--events'], true);
    await waitFor(
      () => watch.events.some((e) => e.type === 'held' && e.name === marker),
      'the watch',
      WATCH_STARTED_MS,
    );
    const lease = await locks.getLock(name).acquire();
    await sleep(300);
    // Seen held before the release (see the fair lock's test); well before its first renewal at 10 s.
    await waitFor(() => watch.events.some((e) => e.name === name && e.type === 'acquired'), 'the acquire', 5000);
    await lease.release();
    await waitFor(() => watch.events.some((e) => e.name === name && e.type === 'released'), 'the release', 5000);
    const events = watch.events.filter((e) => e.name === name);
    expect(events.map((e) => e.type)).toEqual(['acquired', 'released']);
    // The owner field, and who it is (host, pid, app) from its client's holder record: a plain lock's hold
    // records holder info of its own only at its first renewal, which a 300 ms hold does not live to see.
    expect(events[0]?.holder).toMatchObject({
      clientId: locks.clientId,
      who: label('brief'),
      since: null,
    });
    expect(events[1]?.owner).toBe(events[0]?.holder?.owner);
    watch.child.kill('SIGINT');
    expect(await watch.exited).toBe(0);
    expect(watch.stderr()).toBe('');
  });
});

describe.skipIf(onCluster)('flowlock where the server blocks commands (issue 36, item 5)', () => {
  // As managed services do: CONFIG, CLIENT, DEBUG and CLUSTER renamed away for everyone, and a least-privilege
  // user without INFO, PUBSUB and DBSIZE whose channels are the lock channels only (its scripts publish there,
  // but no pattern subscription or keyspace channel is allowed; Redis 6.0 has no channel rules).
  let server: LocalRedis;
  let admin: Redis;
  let channelRules = true;
  const url = (user = ''): string[] => ['--url', `redis://${user}127.0.0.1:${server.port}`];
  const LIMITED = 'limited:pw@';

  beforeAll(async () => {
    const blocked = ['CONFIG', 'CLIENT', 'DEBUG', 'CLUSTER'].flatMap((command) => ['--rename-command', command, '']);
    server = await startRedisServer(blocked);
    admin = newRedis(server);
    const rules = ['limited', 'on', '>pw', '~*', '+@all', '-info', '-pubsub', '-dbsize'];
    try {
      await admin.call('ACL', 'SETUSER', ...rules, 'resetchannels', '&redisson_*');
    } catch {
      channelRules = false;
      await admin.call('ACL', 'SETUSER', ...rules);
    }
  });
  afterAll(async () => {
    admin.disconnect();
    await server.stop();
  });

  /** A lock of `name` held by a lock client of REDIS_CLIENT on the restricted server. */
  async function held(name: string): Promise<void> {
    const lease = await redis.locks({}, { port: server.port }).getLock(name).acquire();
    cleanup.push(() => lease.release().catch(() => undefined));
  }

  /** `flowlock <args>`, checked to have ended by itself without a stack trace. */
  async function run(args: readonly string[]): Promise<Run> {
    const result = await flowlock(args);
    expect(result.code).not.toBeNull();
    expect(result.stderr).not.toMatch(/\n\s+at /);
    return result;
  }

  it('reads, lists, watches, unlocks and cleans up with CONFIG, CLIENT, DEBUG and CLUSTER renamed away', async () => {
    const name = uniqueName('blocked');
    await held(name);
    const inspected = await run([...url(), 'inspect', name]);
    expect([inspected.code, inspected.stderr]).toEqual([0, '']);
    expect(inspected.stdout).toMatch(new RegExp(`^${name}  HELD  `));
    const listed = await run([...url(), 'list']);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(name);
    const doctor = await run([...url(), 'doctor']);
    expect(doctor.code).toBe(0);
    expect(doctor.stdout).toMatch(/^✔ (redis|valkey) \S+ · standalone · classic pub\/sub$/m);
    expect(doctor.stdout).toMatch(/^\? notify-keyspace-events unknown \(CONFIG GET denied\) — /m);
    const watched = await run([...url(), 'watch', name, '--events', '--duration', '1s']);
    expect(watched.code).toBe(0);
    expect(watched.stderr).toMatch(/^flowlock: notify-keyspace-events unknown on \S+ \(CONFIG GET denied\): /m);
    expect(watched.stdout).toMatch(new RegExp(`  ${name}  held  `));
    const unlocked = await run([...url(), 'unlock', name, '--force', '--yes']);
    expect([unlocked.code, unlocked.stderr]).toEqual([0, '']);
    expect(unlocked.stdout).toMatch(new RegExp(`^released ${name} by force`));
    expect((await run([...url(), 'cleanup', '--yes'])).code).toBe(0);
  });

  // GLIDE reads INFO to connect: the user gets the reason, and which client packages do without it.
  it.runIf(clientKind === 'glide')('says why a user without INFO cannot connect through GLIDE (exit 1)', async () => {
    const result = await run([...url(LIMITED), 'inspect', uniqueName('blocked')]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^flowlock: connecting to .*'info'.* \(Valkey GLIDE reads INFO to connect, /);
  });

  it.skipIf(clientKind === 'glide')(
    'says what a user without INFO, PUBSUB, DBSIZE and most channels leaves unread, and goes on',
    async () => {
      const name = uniqueName('blocked');
      await held(name);
      const noInfo =
        /^flowlock: cannot tell whether the server runs in cluster mode \(INFO refused: NOPERM .*\): connected as a standalone client/m;

      const inspected = await run([...url(LIMITED), 'inspect', name]);
      expect(inspected.code).toBe(0);
      expect(inspected.stdout).toMatch(new RegExp(`^${name}  HELD  `));
      expect(inspected.stdout).not.toMatch(/^ {2}waiting/m);
      expect(inspected.stderr).toMatch(noInfo);
      expect(inspected.stderr).toMatch(
        /^flowlock: subscriber connections unknown \(NOPERM .*\): waiting clients are not counted$/m,
      );
      const json = await run([...url(LIMITED), 'inspect', name, '--json']);
      expect(JSON.parse(json.stdout)).toMatchObject({ held: true, waitingConnections: null });

      const listed = await run([...url(LIMITED), 'list']);
      expect(listed.code).toBe(0);
      expect(listed.stdout).toContain(name);
      expect(listed.stderr).toMatch(/^flowlock: keys on 127\.0\.0\.1:\d+ not counted \(NOPERM .*\)$/m);

      const doctor = await run([...url(LIMITED), 'doctor']);
      expect(doctor.code).toBe(0);
      const lines = doctor.stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(
        /^\? server version unknown \(INFO refused on \S+: NOPERM .*\) — flowlock needs Redis 6\.0 \(Valkey 7\.2\) or later/,
      );
      expect(lines[1]).toMatch(/^\? maxmemory-policy unknown \(INFO refused on /);
      expect(lines[2]).toMatch(/^\? persistence unknown \(INFO refused on /);
      expect(lines[3]).toMatch(/^\? replicas unknown \(INFO refused on /);
      expect(lines[4]).toMatch(/^\? notify-keyspace-events unknown \(CONFIG GET denied\)/);
      expect(lines[5]).toMatch(/^✔ clock offset to server/);

      const watched = await run([...url(LIMITED), 'watch', name, '--events', '--duration', '1s']);
      expect(watched.code).toBe(0);
      expect(watched.stdout).toMatch(new RegExp(`  ${name}  held  `));
      if (channelRules) {
        expect(watched.stderr).toMatch(
          /^flowlock: release messages unheard \(PSUBSCRIBE refused on \S+: NOPERM .*\): releases and new holders show at the next read$/m,
        );
        expect(watched.stderr).toMatch(
          /^flowlock: keyspace notifications unheard \(SUBSCRIBE refused on \S+: NOPERM .*\): expirations are inferred from TTLs/m,
        );
      }

      const unlocked = await run([...url(LIMITED), 'unlock', name, '--force', '--yes']);
      expect(unlocked.code).toBe(0);
      expect(unlocked.stdout).toMatch(new RegExp(`^released ${name} by force`));
      expect(unlocked.stderr).toMatch(/^flowlock: subscriber connections unknown \(NOPERM /m);

      // What the main job needs, refused: its message and exit 1, still no stack trace.
      await admin.call('ACL', 'SETUSER', 'limited', '-scan');
      cleanup.push(() => admin.call('ACL', 'SETUSER', 'limited', '+scan'));
      const refused = await run([...url(LIMITED), 'list']);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/^flowlock: NOPERM .*'scan'/m);
    },
  );

  it('fails doctor on a server that reports a version below the floor, naming both (exit 3)', async () => {
    const info = await admin.info('server');
    const { fake, product } = versionBelowFloor(info);
    const proxy = await proxyBelowFloor(server.port, info);
    cleanup.push(() => proxy.close());
    const doctor = await run(['--url', `redis://127.0.0.1:${proxy.port}`, 'doctor']);
    expect(doctor.code).toBe(3);
    expect(doctor.stdout.split('\n')[0]).toBe(
      `✖ ${product.toLowerCase()} ${fake} · standalone · classic pub/sub — ${product} ${fake} is below ` +
        "flowlock's floor, Redis 6.0 (Valkey 7.2): the lock scripts use commands it does not have (locks would " +
        'fail with UnsupportedServerError)',
    );
  });
});

describe.skipIf(onCluster)('flowlock: TLS, passwords and what the errors say (issue 39, item 4)', () => {
  let dir: string;
  let tlsServer: LocalRedis;
  let authServer: LocalRedis;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowlock-cli-tls-'));
    makeCertificates(dir);
    tlsServer = await startTlsServer(dir);
    // The password is set once the server is up (startRedisServer's readiness check connects without one).
    authServer = await startRedisServer();
    execFileSync('redis-cli', ['-p', String(authServer.port), 'CONFIG', 'SET', 'requirepass', 'cli-secret']);
  }, 60_000);
  afterAll(async () => {
    await tlsServer.stop();
    await authServer.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const ca = (): string => join(dir, 'ca.crt');
  /** Where this leg's client library takes a private CA from, and the variable it ignores. */
  const caVariable = clientKind === 'glide' ? 'SSL_CERT_FILE' : 'NODE_EXTRA_CA_CERTS';
  const otherVariable = clientKind === 'glide' ? 'NODE_EXTRA_CA_CERTS' : 'SSL_CERT_FILE';

  it('says to use rediss:// when a redis:// URL reaches a TLS port', async () => {
    const run = await flowlock(['--url', `redis://127.0.0.1:${tlsServer.port}`, '--timeout', '2s', 'list']);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      new RegExp(
        `^flowlock: connecting to 127\\.0\\.0\\.1:${tlsServer.port}: .*; the server speaks TLS on this port: use a rediss:// URL\n$`,
      ),
    );
  });

  it(`says the certificate is not trusted and names ${caVariable}, then connects with it`, async () => {
    const url = `rediss://localhost:${tlsServer.port}`;
    const untrusted = await flowlock(['--url', url, '--timeout', '2s', 'list'], { [otherVariable]: ca() });
    expect(untrusted.code).toBe(1);
    expect(untrusted.stderr).toMatch(/; TLS: the server's certificate is not trusted \(SELF_SIGNED_CERT_IN_CHAIN\); /);
    expect(untrusted.stderr).toContain(`${caVariable}=/path/to/ca.pem`);
    expect(untrusted.stderr).not.toContain('\\u000a');
    expect(untrusted.stderr.trimEnd().split('\n')).toHaveLength(1);

    const trusted = await flowlock(['--url', url, 'list'], { [caVariable]: ca() });
    expect(trusted.stderr).not.toMatch(/^flowlock:/m);
    expect(trusted.code).toBe(0);
  });

  it(`runs the TLS page's ${clientPackage} sample as written, with the private CA in code`, async () => {
    const block = codeBlocks().find(
      (candidate) => candidate.file === 'docs/operations/tls.md' && candidate.code.includes(`from '${clientPackage}'`),
    );
    if (!block) throw new Error(`docs/operations/tls.md has no sample for ${clientPackage}`);
    // A module of this package, so that `flowlock` resolves to dist/ (as the docs tests run theirs).
    mkdirSync(join(root, '.scratch'), { recursive: true });
    const file = join(root, '.scratch', `${uniqueName('tls-sample').replace(/:/g, '-')}.mts`);
    writeFileSync(file, block.code);
    cleanup.push(() => rmSync(file, { force: true }));
    const child = spawnChild(process.execPath, ['--no-warnings', file], {
      env: { ...process.env, REDIS_URL: `rediss://localhost:${tlsServer.port}`, REDIS_CA_FILE: ca() },
    });
    cleanup.push(() => child.kill('SIGKILL'));
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(output).toBe('held over TLS\n');
    expect(code).toBe(0);
  });

  it('says a rediss:// URL reached a port without TLS', async () => {
    const [, plain = ''] = urls();
    const run = await flowlock(['--url', plain.replace('redis://', 'rediss://'), '--timeout', '2s', 'list']);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      /; TLS: no handshake on this port \(.*\): for a port without TLS, use a redis:\/\/ URL\n$/,
    );
  });

  it('says where the password goes on NOAUTH (URL or REDISCLI_AUTH), and takes it from either', async () => {
    const url = `redis://127.0.0.1:${authServer.port}`;
    const run = await flowlock(['--url', url, 'list']);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^flowlock: connecting to 127\.0\.0\.1:\d+: .*NOAUTH.* \(the server wants a password: /);
    expect(run.stderr).toContain('redis://:password@host:port');
    expect(run.stderr).toContain('REDISCLI_AUTH');
    expect(run.stderr).not.toContain('\\u000a');
    expect(run.stderr.trimEnd().split('\n')).toHaveLength(1);
    const wrong = await flowlock(['--url', url, 'list'], { REDISCLI_AUTH: 'not-it' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/(WRONGPASS.*was refused|NOAUTH.*wants a password)/);
    expect((await flowlock(['--url', url, 'list'], { REDISCLI_AUTH: 'cli-secret' })).code).toBe(0);
    expect((await flowlock(['--url', `redis://:cli-secret@127.0.0.1:${authServer.port}`, 'list'])).code).toBe(0);
  });
});
