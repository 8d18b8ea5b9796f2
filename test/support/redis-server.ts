/**
 * Redis for tests. `useRedis()` gives a file one server: `REDIS_URL` when set, else a `redis-server` from
 * PATH started on a free loopback port, else a Testcontainers Redis when a Docker engine is reachable.
 * `startRedisServer()` always starts a local process, for tests that inject faults (kill, pause, restart).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface TestRedis {
  readonly host: string;
  readonly port: number;
  readonly url: string;
  stop(): Promise<void>;
}

export interface LocalRedis extends TestRedis {
  readonly pid: number;
  /** SIGKILL: the server dies at once, without saving. */
  kill(): Promise<void>;
  /** SIGSTOP: the server stops answering but keeps its sockets. */
  pause(): void;
  /** SIGCONT after `pause()`. */
  resume(): void;
  /** Starts a server again on the same port (after `kill()` or `stop()`), empty unless persistence was on. */
  restart(): Promise<void>;
}

const NO_REDIS_MESSAGE =
  'No Redis for the integration tests. Provide one of: (1) REDIS_URL=redis://host:port, ' +
  '(2) `redis-server` on PATH (Debian: apt-get install redis-server), ' +
  '(3) a reachable Docker engine for Testcontainers (@testcontainers/redis).';

/** Options only Redis 7+ knows (Redis 6 refuses to start with them): DEBUG is allowed there by default. */
export function hasRedisServerBinary(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  await once(server, 'close');
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

async function waitForPing(port: number, child: ChildProcess, log: () => string, tls: boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}: ${log()}`);
    if (tls) {
      // Authentication and certificates are the test's business: the server's own word that it is up will do.
      if (/Ready to accept connections/.test(log())) return;
    } else {
      // Our server, not another one that took the port first (a parallel test file's): ours then exits
      // with "Address already in use", and the caller starts it again on another port.
      const info = spawnSync('redis-cli', ['-p', String(port), 'info', 'server'], { encoding: 'utf8' });
      if (Number(/^process_id:(\d+)/m.exec(info.stdout)?.[1]) === child.pid) return;
    }
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer: ${log()}`);
    await sleep(25);
  }
}

/**
 * The major version of the `redis-server` on PATH (e.g. 6 for a 6.2 build from /opt/redis-builds), whose
 * options differ: before 7.0 DEBUG needs no `--enable-debug-command` (which it refuses), and a Cluster
 * node's bus is always on port + 10000 (no `--cluster-port`).
 */
export const serverMajor = ((): (() => number) => {
  let major: number | undefined;
  return () =>
    (major ??= Number(
      /v=(\d+)\./.exec(spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout)?.[1] ?? 7,
    ));
})();

/** A free port whose port + 10000 (a pre-7.0 Cluster node's bus) is free too. */
async function freePortWithBus(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (port + 10000 > 65535) continue;
    const bus = createServer();
    bus.listen(port + 10000, '127.0.0.1');
    const free = await Promise.race([once(bus, 'listening').then(() => true), once(bus, 'error').then(() => false)]);
    if (free) {
      bus.close();
      await once(bus, 'close');
      return port;
    }
  }
}

/**
 * Starts `redis-server` on a free loopback port (DEBUG allowed locally, nothing saved unless `args` say so).
 * For a TLS-only server pass `--port 0 --tls-port P ...` in `args` and `{ port: P, tls: true }`.
 */
export async function startRedisServer(
  args: readonly string[] = [],
  listen: { port?: number; tls?: boolean; clusterBus?: boolean } = {},
): Promise<LocalRedis> {
  const legacyBus = listen.clusterBus === true && serverMajor() < 7;
  const pickPort = legacyBus ? freePortWithBus : freePort;
  let port = listen.port ?? (await pickPort());
  // A cluster node's bus port defaults to port + 10000, which may be taken or above 65535: pick one too
  // (before 7.0 it cannot be chosen: the port is picked with it).
  let busPort = listen.clusterBus && !legacyBus ? await freePort() : undefined;
  const dir = mkdtempSync(join(tmpdir(), 'flowlock-redis-'));
  let child: ChildProcess;
  let output = '';

  const launch = async (): Promise<void> => {
    output = '';
    child = spawn(
      'redis-server',
      [
        ...(listen.port === undefined ? ['--port', String(port)] : []),
        ...(busPort === undefined ? [] : ['--cluster-port', String(busPort)]),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        ...(serverMajor() >= 7 ? ['--enable-debug-command', 'local'] : []),
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await waitForPing(port, child, () => output, listen.tls === true);
  };

  const exited = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
  };

  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (error) {
      // A free port can be taken by another process (a parallel test file) before redis-server binds it.
      if (listen.port !== undefined || attempt === 5 || !output.includes('Address already in use')) throw error;
      port = await pickPort();
      if (busPort !== undefined) busPort = await freePort();
    }
  }
  return {
    host: '127.0.0.1',
    port,
    url: `redis://127.0.0.1:${port}`,
    get pid() {
      return child.pid ?? -1;
    },
    async kill() {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await exited();
    },
    pause() {
      child.kill('SIGSTOP');
    },
    resume() {
      child.kill('SIGCONT');
    },
    async restart() {
      await exited();
      await launch();
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        await exited();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One Redis for a test file, by the first available of REDIS_URL, redis-server, Testcontainers. */
export async function startTestRedis(): Promise<TestRedis> {
  const fromEnv = process.env['REDIS_URL'];
  if (fromEnv) {
    const url = new URL(fromEnv);
    return { host: url.hostname, port: Number(url.port || 6379), url: fromEnv, stop: () => Promise.resolve() };
  }
  if (hasRedisServerBinary()) return startRedisServer();
  try {
    const { RedisContainer } = await import('@testcontainers/redis');
    const container = await new RedisContainer('redis:7').start();
    return {
      host: container.getHost(),
      port: container.getPort(),
      url: container.getConnectionUrl(),
      stop: async () => {
        await container.stop();
      },
    };
  } catch (error) {
    throw new Error(NO_REDIS_MESSAGE, { cause: error });
  }
}
