/**
 * Redis servers for the fault tests that drive worker processes (test/integration/faults: exclusion, holder,
 * fair lock, read-write lock, semaphore, latch). Each of those files needs the same frame: local
 * `redis-server` processes it may pause, kill or restart (so not `useRedis()`, which may hand out a shared
 * or containerised Redis), admin connections to inspect them, and a list of cleanup steps run after every
 * test so that a failed test cannot leave workers or clients behind for the next one. `useFaultServers()`
 * registers the vitest hooks for that frame once, instead of a copy in every file.
 */
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createLockClient, type LockClient, type LockClientOptions } from '../../src/index.js';
import { newTestClient } from './clients.js';
import { newRedis, type Redis } from './fixture.js';
import { startRedisServer, type LocalRedis } from './redis-server.js';

/**
 * How late a worker process's timer (or the test's own poll) can run on a loaded 2-core machine: the slack the
 * fault tests add to a bound computed from leases and renewal periods.
 */
export const LATE_MS = 700;

export interface FaultServersOptions {
  /**
   * Also start a resource server, for the fenced resource and counters the workers write to. It is a server
   * of its own so that faults injected into the lock server (pause, kill, SCRIPT FLUSH) leave the record of
   * what happened intact.
   */
  readonly resource?: boolean;
  /** Options of every `client()`, under those a call passes (the file's lease, usually). */
  readonly clientOptions?: LockClientOptions;
}

export interface FaultServers {
  /** The lock server (started in `beforeAll`, stopped in `afterAll`). */
  readonly lock: LocalRedis;
  /** Connection to the lock server, for the test's own commands; kept for the file. */
  readonly admin: Redis;
  /** The resource server: only with `resource: true`. */
  readonly resource: LocalRedis;
  /** Connection to the resource server: only with `resource: true`. */
  readonly resourceAdmin: Redis;
  /** Runs `step` after the current test; steps run last registered first, and their errors are ignored. */
  readonly cleanup: (step: () => unknown) => void;
  /**
   * Refuses new connections to the lock server (CONFIG SET maxclients 1; the open ones stay) until the
   * function this resolves to is called (or the test ends): a connection killed meanwhile stays away however
   * soon its client reconnects (node-redis at once, ioredis after its retryStrategy's delay).
   */
  readonly refuseConnections: () => Promise<() => Promise<void>>;
  /**
   * A lock client on a new connection of the client under test (`REDIS_CLIENT`, clients.ts) to the lock
   * server, closed (then its connection) after the test.
   */
  readonly client: (options?: LockClientOptions) => LockClient;
}

export function useFaultServers(options: FaultServersOptions = {}): FaultServers {
  let lock: LocalRedis | undefined;
  let resource: LocalRedis | undefined;
  let admin: Redis | undefined;
  let resourceAdmin: Redis | undefined;
  const steps: (() => unknown)[] = [];

  beforeAll(async () => {
    // Both at once: each start waits for its server to answer, and these files are slow enough already.
    [lock, resource] = await Promise.all([
      startRedisServer(),
      options.resource ? startRedisServer() : Promise.resolve(undefined),
    ]);
    admin = newRedis(lock);
    if (resource) resourceAdmin = newRedis(resource);
  });
  afterEach(async () => {
    // Reverse order: a later step may depend on an earlier one (a connection on a server started in the test).
    for (const step of steps.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
  });
  afterAll(async () => {
    admin?.disconnect();
    resourceAdmin?.disconnect();
    await Promise.all([lock?.stop(), resource?.stop()]);
  });

  // Getters, because the servers exist only once `beforeAll` has run, after the file has called this.
  const started = <T>(value: T | undefined, what: string): T => {
    if (value === undefined) throw new Error(`the ${what} is not started yet`);
    return value;
  };
  const requested = <T>(value: T | undefined): T => {
    if (!options.resource) throw new Error('there is no resource server: pass { resource: true }');
    return started(value, 'resource server');
  };
  const servers: FaultServers = {
    get lock() {
      return started(lock, 'lock server');
    },
    get admin() {
      return started(admin, 'lock server');
    },
    get resource() {
      return requested(resource);
    },
    get resourceAdmin() {
      return requested(resourceAdmin);
    },
    cleanup(step) {
      steps.push(step);
    },
    async refuseConnections() {
      const admin = servers.admin;
      const [, limit] = (await admin.config('GET', 'maxclients')) as [string, string];
      await admin.config('SET', 'maxclients', '1');
      let refusing = true;
      const admit = async (): Promise<void> => {
        if (!refusing) return;
        refusing = false;
        await admin.config('SET', 'maxclients', limit);
      };
      steps.push(admit);
      return admit;
    },
    client(clientOptions = {}) {
      // Fault tests break connections on purpose: newTestClient ignores the client's error events, and the
      // lock client reports what matters through its own API.
      const { host, port } = servers.lock;
      const redis = newTestClient({ topology: 'standalone', host, port });
      const locks = createLockClient(redis.client, { ...options.clientOptions, ...clientOptions });
      steps.push(async () => {
        await locks.close();
        await redis.close();
      });
      return locks;
    },
  };
  return servers;
}
