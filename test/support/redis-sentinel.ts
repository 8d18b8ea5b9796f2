/**
 * A throwaway Redis Sentinel setup for T14 (the lock keeps working through a failover): on free loopback
 * ports, one master and one replica (`startRedisServer`, so a test can kill, pause or restart them) and
 * three sentinels (`redis-server <conf> --sentinel`) that monitor the master with quorum 2 and fail over
 * quickly (`down-after-milliseconds` 1000, `failover-timeout` 3000, `parallel-syncs` 1). Sentinel rewrites
 * its config file, so each gets its own in a temporary directory that `stop()` removes.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { freePort, startRedisServer, type LocalRedis } from './redis-server.js';

export interface Address {
  readonly host: string;
  readonly port: number;
}

export interface SentinelOptions {
  /** @default 'mymaster' */
  readonly masterName?: string;
  /** @default 1000 */
  readonly downAfterMilliseconds?: number;
  /** @default 3000 */
  readonly failoverTimeout?: number;
}

export interface TestSentinel {
  readonly masterName: string;
  readonly sentinels: readonly Address[];
  /** The master at start-up (after a failover it is no longer the master). */
  readonly master: LocalRedis;
  /** The replica at start-up, the node Sentinel promotes when the master fails. */
  readonly replica: LocalRedis;
  /** The master's address as the first sentinel that answers reports it. */
  currentMaster(): Promise<Address>;
  /** Resolves when every sentinel reports the same master other than `fromPort` and it answers ROLE as master. */
  waitForFailover(fromPort: number, timeoutMs: number): Promise<Address>;
  /** Stops the sentinels, the replica and the master (whatever is still running) and removes the files. */
  stop(): Promise<void>;
}

const HOST = '127.0.0.1';
const SENTINELS = 3;
const QUORUM = 2;

const execFileAsync = promisify(execFile);

/** One redis-cli command; rejects when the node does not answer within 2 s. */
async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await execFileAsync('redis-cli', ['-h', HOST, '-p', String(port), ...args], {
    timeout: 2000,
  });
  return stdout.trim();
}

/** `redis-cli --json` (RESP3: Sentinel's replies are maps), or undefined when the node does not answer. */
async function cliJson(port: number, ...args: string[]): Promise<unknown> {
  try {
    return JSON.parse(await cli(port, '--json', ...args)) as unknown;
  } catch {
    return undefined;
  }
}

async function until(condition: () => Promise<boolean>, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()}`);
    await sleep(100);
  }
}

interface SentinelProcess extends Address {
  readonly child: ChildProcess;
  output(): string;
}

function spawnSentinel(
  dir: string,
  port: number,
  masterName: string,
  masterPort: number,
  o: Required<SentinelOptions>,
): SentinelProcess {
  const conf = join(dir, `sentinel-${port}.conf`);
  writeFileSync(
    conf,
    [
      `port ${port}`,
      `bind ${HOST}`,
      `dir ${dir}`,
      `sentinel monitor ${masterName} ${HOST} ${masterPort} ${QUORUM}`,
      `sentinel down-after-milliseconds ${masterName} ${o.downAfterMilliseconds}`,
      `sentinel failover-timeout ${masterName} ${o.failoverTimeout}`,
      `sentinel parallel-syncs ${masterName} 1`,
      '',
    ].join('\n'),
  );
  // Output goes to a file, not a pipe: nothing but the child handle ties it to the test process, and
  // unref() undoes that (stop() and the exit hook kill it).
  const logFile = join(dir, `sentinel-${port}.log`);
  const log = openSync(logFile, 'a');
  const child = spawn('redis-server', [conf, '--sentinel'], { stdio: ['ignore', log, log] });
  closeSync(log);
  child.unref();
  const output = (): string => readFileSync(logFile, 'utf8').slice(-4000);
  return { host: HOST, port, child, output };
}

/** What one sentinel knows of the master: its flags, and how many replicas and other sentinels it sees. */
async function sentinelView(port: number, masterName: string): Promise<string> {
  const master = (await cliJson(port, 'sentinel', 'master', masterName)) as Record<string, unknown> | undefined;
  const replicas = await cliJson(port, 'sentinel', 'replicas', masterName);
  const sentinels = await cliJson(port, 'sentinel', 'sentinels', masterName);
  const count = (list: unknown): number => (Array.isArray(list) ? list.length : -1);
  return `flags=${String(master?.['flags'])} replicas=${count(replicas)} sentinels=${count(sentinels)}`;
}

export async function startRedisSentinel(options: SentinelOptions = {}): Promise<TestSentinel> {
  const o: Required<SentinelOptions> = {
    masterName: 'mymaster',
    downAfterMilliseconds: 1000,
    failoverTimeout: 3000,
    ...options,
  };
  const { masterName } = o;
  const dir = mkdtempSync(join(tmpdir(), 'flowlock-sentinel-'));
  const servers: LocalRedis[] = [];
  const sentinels: SentinelProcess[] = [];

  // Should the test process exit without stop() (a crash, a worker torn down), take no redis along.
  const killAll = (): void => {
    for (const s of sentinels) s.child.kill('SIGKILL');
    for (const server of servers) {
      try {
        process.kill(server.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  process.once('exit', killAll);

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      process.off('exit', killAll);
      await Promise.all(
        sentinels.map(async ({ child }) => {
          if (child.exitCode !== null || child.signalCode !== null) return;
          const exited = once(child, 'exit');
          child.kill('SIGKILL');
          await exited;
        }),
      );
      await Promise.all(servers.map((server) => server.stop()));
      rmSync(dir, { recursive: true, force: true });
    })());

  try {
    // No 5 s wait for more replicas before a diskless full sync.
    const master = await startRedisServer(['--repl-diskless-sync-delay', '0']);
    servers.push(master);
    const replica = await startRedisServer(['--replicaof', HOST, String(master.port)]);
    servers.push(replica);
    await until(
      async () => /master_link_status:up/.test(await cli(replica.port, 'info', 'replication').catch(() => '')),
      10_000,
      () => 'the replica to sync with the master',
    );

    // Sentinels start after the replica is in sync, so that their first INFO of the master lists it.
    const ports = await Promise.all(Array.from({ length: SENTINELS }, () => freePort()));
    for (const port of ports) sentinels.push(spawnSentinel(dir, port, masterName, master.port, o));
    for (const s of sentinels) {
      await until(
        async () => {
          if (s.child.exitCode !== null) throw new Error(`sentinel on ${s.port} exited: ${s.output()}`);
          return (await cli(s.port, 'ping').catch(() => '')) === 'PONG';
        },
        10_000,
        () => `sentinel on ${s.port} to answer: ${s.output()}`,
      );
    }
    // Hello messages (every 2 s, through the master) make the sentinels known to each other.
    const expected = `flags=master replicas=1 sentinels=${SENTINELS - 1}`;
    const views = new Map<number, string>();
    await until(
      async () => {
        for (const s of sentinels) views.set(s.port, await sentinelView(s.port, masterName));
        return [...views.values()].every((view) => view === expected);
      },
      30_000,
      () => `every sentinel to see ${expected}; they see ${JSON.stringify(Object.fromEntries(views))}`,
    );

    const addresses: Address[] = sentinels.map(({ host, port }) => ({ host, port }));
    const masterOf = async (port: number): Promise<Address | undefined> => {
      const reply = await cliJson(port, 'sentinel', 'get-master-addr-by-name', masterName);
      if (!Array.isArray(reply) || reply.length !== 2) return undefined;
      return { host: String(reply[0]), port: Number(reply[1]) };
    };
    return {
      masterName,
      sentinels: addresses,
      master,
      replica,
      async currentMaster() {
        for (const s of addresses) {
          const address = await masterOf(s.port);
          if (address) return address;
        }
        throw new Error('no sentinel answered SENTINEL GET-MASTER-ADDR-BY-NAME');
      },
      async waitForFailover(fromPort, timeoutMs) {
        let found: Address | undefined;
        await until(
          async () => {
            // Every sentinel names the same new master (a client may ask any of them), and it is one.
            const reported = await Promise.all(addresses.map((s) => masterOf(s.port)));
            const first = reported[0];
            if (!first || first.port === fromPort) return false;
            if (!reported.every((a) => a?.host === first.host && a.port === first.port)) return false;
            const role = await cli(first.port, 'role').catch(() => '');
            if (role.split('\n')[0] !== 'master') return false;
            found = first;
            return true;
          },
          timeoutMs,
          () => `every sentinel to report a master other than port ${fromPort}`,
        );
        if (!found) throw new Error('unreachable');
        return found;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
