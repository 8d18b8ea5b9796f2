/**
 * The Redis client under test, one axis of the test matrix: `REDIS_CLIENT` = `ioredis5` (the default),
 * `ioredis6`, `iovalkey`, `node-redis5`, `node-redis6` or `glide` (`IOREDIS_MAJOR=6` still means `ioredis6`). The
 * integration tests build the lock's clients here, from a few neutral options that each library spells its
 * own way; their own inspection connections stay ioredis 5 (fixture.ts).
 */
import { Cluster as Cluster5, Redis as Redis5, type ClusterOptions, type RedisOptions } from 'ioredis';
import { Cluster as Cluster6, Redis as Redis6 } from 'ioredis6';
import { Cluster as ValkeyCluster, Redis as ValkeyRedis } from 'iovalkey';
import { GlideClient, GlideClusterClient, Logger, type GlideClientConfiguration } from '@valkey/valkey-glide';
import * as nodeRedis6 from 'redis';
import * as nodeRedis5 from 'redis5';
import type { NodeRedisClient, RedisClient } from '../../src/index.js';

export type ClientKind = 'ioredis5' | 'ioredis6' | 'iovalkey' | 'node-redis5' | 'node-redis6' | 'glide';
const KINDS: readonly ClientKind[] = ['ioredis5', 'ioredis6', 'iovalkey', 'node-redis5', 'node-redis6', 'glide'];

function kindFromEnv(): ClientKind {
  const value = process.env['REDIS_CLIENT'] ?? (process.env['IOREDIS_MAJOR'] === '6' ? 'ioredis6' : 'ioredis5');
  if (!(KINDS as readonly string[]).includes(value)) {
    throw new Error(`REDIS_CLIENT must be one of ${KINDS.join(', ')}, not "${value}"`);
  }
  return value as ClientKind;
}

export const clientKind: ClientKind = kindFromEnv();

/** The npm package of `clientKind`: what the CLI's tests leave installed (test/fixtures/only-client.mjs). */
export const clientPackage =
  clientKind === 'glide'
    ? '@valkey/valkey-glide'
    : clientKind.startsWith('node-redis')
      ? 'redis'
      : clientKind === 'iovalkey'
        ? 'iovalkey'
        : 'ioredis';

// GLIDE's core logs every NOSCRIPT and every reconnect as a warning (thousands of lines in a run with faults):
// its errors are enough to follow a failure.
Logger.setLoggerConfig('error');
/** The client family: the ioredis API (ioredis, iovalkey), node-redis' or GLIDE's. */
export const onNodeRedis = clientKind.startsWith('node-redis');
/** Valkey GLIDE: no keyPrefix, no connection events or state, no offline queue switch, no Sentinel. */
export const onGlide = clientKind === 'glide';

export interface Address {
  readonly host: string;
  readonly port: number;
}

/** Where a client connects: one server, a cluster's seed nodes, or Sentinels and the master's name. */
export type Target =
  | ({ readonly topology: 'standalone' } & Address)
  | { readonly topology: 'cluster'; readonly nodes: readonly Address[] }
  | { readonly topology: 'sentinel'; readonly sentinels: readonly Address[]; readonly masterName: string };

/** What tests ask of a client, in no library's words. */
export interface ClientOptions {
  /** Put before every key by the client itself. @default none */
  readonly keyPrefix?: string;
  /** Connect only when first used (ioredis' lazyConnect; node-redis clients are connected here anyway). */
  readonly lazyConnect?: boolean;
  /** Milliseconds between reconnect attempts; `false`: never reconnect. @default the library's own */
  readonly reconnectMs?: number | false;
  /** Fail commands at once while disconnected instead of queueing them. @default false */
  readonly noOfflineQueue?: boolean;
  /**
   * Reject a command whose connection broke rather than send it again after a reconnect (ioredis'
   * maxRetriesPerRequest 0; node-redis never sends a written command again). @default false
   */
  readonly noRetry?: boolean;
  /** Another port than the target's (a proxy in front of a standalone server). @default the target's */
  readonly port?: number;
  readonly username?: string;
  readonly password?: string;
  /** Options with no neutral word (TLS, a command timeout), for ioredis 5 and 6 and iovalkey, applied last. */
  readonly ioredis?: RedisOptions;
  /**
   * The same for node-redis 5 and 6: merged into the client's (or the nodes') options, its `socket` into the
   * socket options; e.g. `{ username, socket: { tls: true, ca }, commandOptions: { timeout } }`.
   */
  readonly nodeRedis?: Readonly<Record<string, unknown>> & { readonly socket?: Readonly<Record<string, unknown>> };
  /** The same for GLIDE: merged into the creation config, e.g. `{ requestTimeout: 1000 }`. */
  readonly glide?: Readonly<Record<string, unknown>>;
}

/** A client under test and how to close it whatever state it is in. */
export interface TestClient {
  readonly client: RedisClient;
  close(): Promise<void>;
  /**
   * GLIDE only, which shows no queue of its own: the calls made on the client that have not settled (a call
   * waiting for a reconnect included).
   */
  readonly inFlight?: () => number;
}

/** A new client of `REDIS_CLIENT` on `target`; node-redis clients are connecting when this returns. */
export function newTestClient(target: Target, options: ClientOptions = {}, kind = clientKind): TestClient {
  if (kind === 'glide') return glideClient(target, options);
  return kind.startsWith('node-redis') ? nodeRedisClient(target, options, kind) : ioredisClient(target, options, kind);
}

type Glide = GlideClient | GlideClusterClient;

/** The GLIDE creation config for `target` and `options` (no Sentinel, no keyPrefix, no offline-queue switch). */
function glideConfig(target: Target, options: ClientOptions): GlideClientConfiguration {
  if (target.topology === 'sentinel') throw new Error('GLIDE has no Sentinel support');
  if (options.keyPrefix !== undefined) throw new Error('GLIDE has no keyPrefix');
  if (options.noOfflineQueue) throw new Error('GLIDE has no switch for its queue while disconnected');
  const addresses =
    target.topology === 'cluster'
      ? target.nodes.map(({ host, port }) => ({ host, port }))
      : [{ host: target.host, port: options.port ?? target.port }];
  // GLIDE's default requestTimeout of 250 ms is a command timeout, which the other libraries' clients in these
  // tests do not have: tests that stall the server for seconds would see it fail their calls. 10 s leaves
  // their bounds to the library, as on the other libraries; faults/glide.test.ts runs GLIDE's short timeouts.
  const config: GlideClientConfiguration = { addresses, requestTimeout: 10_000 };
  if (options.lazyConnect) config.lazyConnect = true;
  if (options.password !== undefined) {
    config.credentials = { password: options.password, ...(options.username ? { username: options.username } : {}) };
  }
  // GLIDE always reconnects; `reconnectMs` sets its (constant) pause between attempts.
  if (typeof options.reconnectMs === 'number') {
    config.connectionBackoff = { numberOfRetries: 1, factor: options.reconnectMs, exponentBase: 1 };
  }
  return { ...config, ...options.glide };
}

/**
 * A GLIDE client, which GLIDE creates asynchronously (`createClient`): this hands out, at once, a proxy of the
 * client being created, as node-redis clients are handed out while connecting. Until it exists its methods
 * wait for it; then every property is the client's own (its class, its `config`, its methods bound to it).
 */
function glideClient(target: Target, options: ClientOptions): TestClient & { invoked(): boolean } {
  const config = glideConfig(target, options);
  const Class: typeof GlideClient | typeof GlideClusterClient =
    target.topology === 'cluster' ? GlideClusterClient : GlideClient;
  const created: Promise<Glide> = Class.createClient(config);
  let client: Glide | undefined;
  let invoked = false;
  let inFlight = 0;
  const counted = (result: unknown): unknown => {
    if (!(result instanceof Promise)) return result;
    inFlight++;
    const settled = (): void => {
      inFlight--;
    };
    result.then(settled, settled);
    return result;
  };
  const settled = created.then(
    (c) => {
      client = c;
    },
    () => undefined,
  );
  const proxy = new Proxy(Object.create(Class.prototype) as Glide, {
    get(shell, property) {
      if (client) {
        const value: unknown = Reflect.get(client, property);
        if (typeof value !== 'function' || property === 'constructor') return value;
        return (...args: unknown[]) => {
          invoked = true;
          return counted((value as (...a: unknown[]) => unknown).apply(client, args));
        };
      }
      if (property === 'config') return config;
      const method: unknown = Reflect.get(shell, property);
      if (typeof method !== 'function' || property === 'constructor') return method;
      return (...args: unknown[]) => {
        invoked = true;
        return counted(created.then((c) => (Reflect.get(c, property) as (...a: unknown[]) => unknown).apply(c, args)));
      };
    },
    ownKeys: (shell) => (client ? Reflect.ownKeys(client) : Reflect.ownKeys(shell)),
    getOwnPropertyDescriptor: (shell, property) =>
      client ? Reflect.getOwnPropertyDescriptor(client, property) : Reflect.getOwnPropertyDescriptor(shell, property),
  });
  return {
    client: proxy,
    invoked: () => invoked,
    inFlight: () => inFlight,
    close: async () => {
      await settled;
      client?.close();
    },
  };
}

function ioredisClient(target: Target, options: ClientOptions, kind: ClientKind): TestClient {
  const Redis = (kind === 'ioredis6' ? Redis6 : kind === 'iovalkey' ? ValkeyRedis : Redis5) as unknown as typeof Redis5;
  const Cluster = (kind === 'ioredis6'
    ? Cluster6
    : kind === 'iovalkey'
      ? ValkeyCluster
      : Cluster5) as unknown as typeof Cluster5;
  const redisOptions: RedisOptions = {};
  if (options.keyPrefix !== undefined) redisOptions.keyPrefix = options.keyPrefix;
  if (options.username !== undefined) redisOptions.username = options.username;
  if (options.password !== undefined) redisOptions.password = options.password;
  if (options.reconnectMs !== undefined) {
    const delay = options.reconnectMs;
    redisOptions.retryStrategy = () => (delay === false ? null : delay);
  }
  if (options.noOfflineQueue) redisOptions.enableOfflineQueue = false;
  if (options.noRetry) redisOptions.maxRetriesPerRequest = 0;
  Object.assign(redisOptions, options.ioredis);
  let client: Redis5 | Cluster5;
  if (target.topology === 'cluster') {
    const clusterOptions: ClusterOptions = { redisOptions };
    if (options.lazyConnect !== undefined) clusterOptions.lazyConnect = options.lazyConnect;
    if (options.keyPrefix !== undefined) clusterOptions.keyPrefix = options.keyPrefix;
    client = new Cluster(
      target.nodes.map(({ host, port }) => ({ host, port })),
      clusterOptions,
    );
  } else {
    if (options.lazyConnect !== undefined) redisOptions.lazyConnect = options.lazyConnect;
    client =
      target.topology === 'sentinel'
        ? new Redis({
            ...redisOptions,
            sentinels: target.sentinels.map(({ host, port }) => ({ host, port })),
            name: target.masterName,
            sentinelRetryStrategy: () => 100,
          })
        : new Redis({ ...redisOptions, host: target.host, port: options.port ?? target.port });
  }
  client.on('error', () => undefined);
  return {
    client,
    close: () =>
      client.quit().then(
        () => undefined,
        () => client.disconnect(),
      ),
  };
}

interface NodeRedisHandle {
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  connect(): Promise<unknown>;
  destroy(): void;
  readonly isOpen: boolean;
}

function nodeRedisClient(target: Target, options: ClientOptions, kind: ClientKind): TestClient {
  const lib = kind === 'node-redis5' ? (nodeRedis5 as unknown as typeof nodeRedis6) : nodeRedis6;
  const { socket: ownSocket, ...own } = options.nodeRedis ?? {};
  const socket: Record<string, unknown> = { ...ownSocket };
  if (options.reconnectMs !== undefined) {
    const delay = options.reconnectMs;
    socket['reconnectStrategy'] = delay === false ? false : () => delay;
  }
  const common: Record<string, unknown> = {};
  if (options.keyPrefix !== undefined) common['keyPrefix'] = options.keyPrefix;
  if (options.username !== undefined) common['username'] = options.username;
  if (options.password !== undefined) common['password'] = options.password;
  if (options.noOfflineQueue) common['disableOfflineQueue'] = true;
  Object.assign(common, own);
  let client: NodeRedisHandle;
  if (target.topology === 'cluster') {
    client = lib.createCluster({
      rootNodes: target.nodes.map(({ host, port }) => ({ socket: { host, port } })),
      defaults: { ...common, socket },
      ...(options.keyPrefix === undefined ? {} : { keyPrefix: options.keyPrefix }),
    });
  } else if (target.topology === 'sentinel') {
    client = lib.createSentinel({
      name: target.masterName,
      sentinelRootNodes: target.sentinels.map(({ host, port }) => ({ host, port })),
      nodeClientOptions: { ...common, socket },
      ...(options.keyPrefix === undefined ? {} : { keyPrefix: options.keyPrefix }),
    });
  } else {
    client = lib.createClient({
      ...common,
      socket: { ...socket, host: target.host, port: options.port ?? target.port },
    });
  }
  client.on('error', () => undefined);
  // node-redis clients are connected by their user; commands sent meanwhile wait for the connection.
  const connected = client.connect().then(
    () => true,
    () => false,
  );
  return {
    client: client as unknown as RedisClient,
    close: async () => {
      await connected;
      try {
        // A sentinel's destroy() returns a promise; a client's returns nothing.
        await Promise.resolve(client.destroy() as unknown);
      } catch {
        // Already closed.
      }
    },
  };
}

/** Whether `client` is a node-redis client, cluster or sentinel (else ioredis' API or GLIDE's). */
export function isNodeRedisClient(client: RedisClient): client is NodeRedisClient {
  return typeof (client as { isOpen?: unknown }).isOpen === 'boolean' && !('status' in client);
}

/** Whether `client` is a GLIDE client (or the proxy of one being created, see glideClient). */
export function isGlideClient(client: RedisClient): boolean {
  return typeof (client as { customCommand?: unknown }).customCommand === 'function';
}

function asGlide(client: RedisClient): Glide {
  return client as unknown as Glide;
}

interface IoredisCalls {
  readonly status: string;
  call(...args: string[]): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
}

interface NodeRedisCalls {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  readonly slots?: unknown;
  readonly getMasterNode?: unknown;
  sendCommand(...args: unknown[]): Promise<unknown>;
  close(): Promise<unknown>;
  destroy(): unknown;
}

/**
 * One command by its words on a client under test, e.g. `['CLIENT', 'ID']` (on a cluster: to any node
 * unless the command names a key where its client routes by one).
 */
export function sendCommand(client: RedisClient, args: readonly string[]): Promise<unknown> {
  if (isGlideClient(client)) return asGlide(client).customCommand([...args]);
  if (!isNodeRedisClient(client)) return (client as unknown as IoredisCalls).call(...args);
  const nodeRedis = client as unknown as NodeRedisCalls;
  // A node-redis cluster takes (firstKey, isReadonly, args), a sentinel (isReadonly, args), a client (args).
  if (Array.isArray(nodeRedis.slots)) return nodeRedis.sendCommand(undefined, false, [...args]);
  if (typeof nodeRedis.getMasterNode === 'function') return nodeRedis.sendCommand(false, [...args]);
  return nodeRedis.sendCommand([...args]);
}

/** PING on a client under test: its connection is up once this resolves. */
export async function ping(client: RedisClient): Promise<string> {
  if (isGlideClient(client)) return String(await asGlide(client).ping());
  return String(await (client as unknown as { ping(): Promise<unknown> }).ping());
}

/** Whether a client under test is connected and ready (ioredis' status 'ready', node-redis' isReady). */
export function isReady(client: RedisClient): boolean {
  // GLIDE shows no connection state: a client that exists is as ready as it will say.
  if (isGlideClient(client)) return true;
  return isNodeRedisClient(client)
    ? ((client as unknown as NodeRedisCalls).isReady ?? client.isOpen)
    : (client as unknown as IoredisCalls).status === 'ready';
}

/** Closes a client under test gracefully, as its user would: ioredis' quit(), node-redis' close(). */
export async function quitClient(client: RedisClient): Promise<void> {
  if (isGlideClient(client)) asGlide(client).close();
  else if (isNodeRedisClient(client)) await (client as unknown as NodeRedisCalls).close();
  else await (client as unknown as IoredisCalls).quit();
}

/** Drops a client under test's connection at once, for good: ioredis' disconnect(), node-redis' destroy(). */
export function dropClient(client: RedisClient): void {
  if (isGlideClient(client)) {
    asGlide(client).close();
  } else if (isNodeRedisClient(client)) {
    if (client.isOpen) void Promise.resolve((client as unknown as NodeRedisCalls).destroy()).catch(() => undefined);
  } else {
    (client as unknown as IoredisCalls).disconnect();
  }
}

/** A client under test that has not connected, and tells whether anything made it connect. */
export interface IdleTestClient extends TestClient {
  /** Still unconnected: ioredis' status 'wait' (lazyConnect), a node-redis client never connected (!isOpen). */
  untouched(): boolean;
}

/**
 * A client of `kind` on `target` that does not connect by itself: a lazyConnect ioredis client, or a
 * node-redis client whose connect() nobody called. For checks that must come before any I/O.
 */
export function idleTestClient(target: Target, kind = clientKind): IdleTestClient {
  if (kind === 'glide') {
    // A lazy GLIDE client connects on its first command: untouched while nothing called a method of it.
    const created = glideClient(target, { lazyConnect: true });
    return { client: created.client, untouched: () => !created.invoked(), close: () => created.close() };
  }
  if (kind.startsWith('node-redis')) {
    const lib = kind === 'node-redis5' ? (nodeRedis5 as unknown as typeof nodeRedis6) : nodeRedis6;
    let client: NodeRedisHandle;
    if (target.topology === 'cluster') {
      client = lib.createCluster({ rootNodes: target.nodes.map(({ host, port }) => ({ socket: { host, port } })) });
    } else if (target.topology === 'sentinel') {
      client = lib.createSentinel({
        name: target.masterName,
        sentinelRootNodes: target.sentinels.map(({ host, port }) => ({ host, port })),
      });
    } else {
      client = lib.createClient({ socket: { host: target.host, port: target.port } });
    }
    client.on('error', () => undefined);
    return {
      client: client as unknown as RedisClient,
      untouched: () => !client.isOpen,
      close: () => {
        if (client.isOpen) dropClient(client as unknown as RedisClient);
        return Promise.resolve();
      },
    };
  }
  const { client } = ioredisClient(target, { lazyConnect: true }, kind);
  return {
    client,
    untouched: () => (client as unknown as IoredisCalls).status === 'wait',
    // Not quit(): a lazy client would connect to send QUIT.
    close: () => {
      dropClient(client);
      return Promise.resolve();
    },
  };
}
