/**
 * The `flowlock` command's connection, on whichever supported client library is installed (ioredis, iovalkey,
 * node-redis, Valkey GLIDE; tried in that order, loaded when a command runs, since all are optional peer
 * dependencies): a standalone client, or a Cluster client when `--cluster` says so or the server reports
 * `cluster_enabled:1`. The password comes from the URL or from REDISCLI_AUTH (as for redis-cli), never from a
 * flag, which `ps` and shell history would show. Connections fail fast instead of reconnecting: a command
 * that cannot reach Redis ends with an error, which says what went wrong where the library does not
 * (connection refused, a TLS mismatch or an untrusted certificate: ./diagnose.ts; where the password goes).
 */
import type { RedisClient } from '../options.js';
import { refusalOf } from '../admin/target.js';
import { authHint, diagnose, tcpProbe } from './diagnose.js';
import { CliError } from './errors.js';

/** The packages the command can use, in the order it tries them. */
const LIBRARIES = ['ioredis', 'iovalkey', 'redis', '@valkey/valkey-glide'] as const;

/** One server to connect to, from a URL. */
interface Endpoint {
  readonly host: string;
  readonly port: number;
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly db: number | undefined;
  readonly tls: boolean;
}

/** A client the command opened: the client itself, its INFO, and how to close it. */
interface Opened {
  readonly client: RedisClient;
  info(section: string): Promise<string>;
  close(): Promise<void>;
}

/** How one client library opens a standalone or a Cluster client, within `timeoutMs`. */
interface ClientLibrary {
  readonly name: string;
  standalone(endpoint: Endpoint, timeoutMs: number, what: string): Promise<Opened>;
  cluster(endpoints: readonly Endpoint[], timeoutMs: number, what: string): Promise<Opened>;
}

type Exports = Record<string, unknown>;
type Constructor = new (...args: unknown[]) => unknown;

/** The first installed library of LIBRARIES; a clear error naming them all when none is. */
async function loadLibrary(): Promise<ClientLibrary> {
  for (const name of LIBRARIES) {
    let loaded: Exports;
    try {
      loaded = (await import(name)) as Exports;
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') continue;
      throw error;
    }
    // ESM namespace of a CommonJS package: named exports, or all of them on `default`.
    const named = (key: string): unknown => loaded[key] ?? (loaded['default'] as Exports | undefined)?.[key];
    if (name === 'redis') return nodeRedis(named);
    if (name === '@valkey/valkey-glide') return glide(named);
    const Redis = named('Redis') ?? loaded['default'];
    const Cluster = named('Cluster');
    if (typeof Redis === 'function' && typeof Cluster === 'function') {
      return ioredis(name, Redis as Constructor, Cluster as Constructor);
    }
  }
  throw new CliError(
    1,
    'flowlock needs a Redis client package: npm install ioredis (or iovalkey, redis, @valkey/valkey-glide)',
  );
}

async function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new CliError(1, `${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A refused connection: nothing listens at the address. */
function refusal(what: string): CliError {
  return new CliError(1, `${what}: connection refused (is Redis listening there?)`);
}

/** A connection failure as the command reports it: `what`, and the library's reason. */
function failed(error: unknown, what: string, cause?: Error): CliError {
  if (error instanceof CliError) return error;
  return new CliError(1, `${what}: ${(cause ?? (error as Error)).message}`);
}

/**
 * Connects `client` within `timeoutMs`; on failure abandons it and rejects with the library's reason, which
 * comes as an 'error' event (connect() itself only says it closed).
 */
async function connected(
  client: { on(event: 'error', listener: (error: Error) => void): unknown; connect(): Promise<unknown> },
  abandon: () => void,
  timeoutMs: number,
  what: string,
): Promise<void> {
  let cause: Error | undefined;
  client.on('error', (error: Error) => (cause ??= error));
  try {
    await withTimeout(client.connect(), timeoutMs, what);
  } catch (error) {
    abandon();
    throw failed(error, what, cause);
  }
}

interface IoredisLike {
  on(event: 'error', listener: (error: Error) => void): unknown;
  connect(): Promise<unknown>;
  call(...args: string[]): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
}

/** ioredis or iovalkey: `Redis` and `Cluster`, connected lazily so that a failure is caught here. */
function ioredis(name: string, Redis: Constructor, Cluster: Constructor): ClientLibrary {
  const options = (endpoint: Endpoint, timeoutMs: number): Record<string, unknown> => ({
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    // Fail fast: a command that cannot reach Redis reports it instead of waiting for a reconnection.
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    lazyConnect: true,
    // Its ready check reads INFO, and warns on the console where INFO is denied: connect() reads INFO itself.
    enableReadyCheck: false,
    ...(endpoint.username ? { username: endpoint.username } : {}),
    ...(endpoint.password ? { password: endpoint.password } : {}),
    ...(endpoint.tls ? { tls: {} } : {}),
  });
  const open = async (client: IoredisLike, timeoutMs: number, what: string): Promise<Opened> => {
    await connected(client, () => client.disconnect(), timeoutMs, what);
    return {
      client: client as unknown as RedisClient,
      info: async (section) => String(await client.call('INFO', section)),
      close: async () => {
        await client.quit().catch(() => client.disconnect());
      },
    };
  };
  return {
    name,
    standalone: (endpoint, timeoutMs, what) => {
      const { host, port, db } = endpoint;
      const client = new Redis({ ...options(endpoint, timeoutMs), host, port, ...(db === undefined ? {} : { db }) });
      return open(client as IoredisLike, timeoutMs, what);
    },
    cluster: (endpoints, timeoutMs, what) => {
      const [first] = endpoints;
      // A Cluster's nodes are reached with the first URL's credentials and TLS.
      const redisOptions = first ? options(first, timeoutMs) : {};
      delete redisOptions['lazyConnect'];
      const client = new Cluster(
        endpoints.map(({ host, port }) => ({ host, port })),
        { redisOptions, lazyConnect: true, clusterRetryStrategy: () => null, slotsRefreshTimeout: timeoutMs },
      );
      return open(client as IoredisLike, timeoutMs, what);
    },
  };
}

interface NodeRedisLike {
  on(event: 'error', listener: (error: Error) => void): unknown;
  connect(): Promise<unknown>;
  sendCommand(...args: unknown[]): Promise<unknown>;
  close?(): Promise<unknown>;
  quit(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<unknown>;
}

/** node-redis (`redis`): `createClient` and `createCluster`, without reconnecting. */
function nodeRedis(named: (key: string) => unknown): ClientLibrary {
  const createClient = named('createClient') as (options: unknown) => NodeRedisLike;
  const createCluster = named('createCluster') as (options: unknown) => NodeRedisLike;
  const socket = (endpoint: Endpoint, timeoutMs: number): Record<string, unknown> => ({
    host: endpoint.host,
    port: endpoint.port,
    connectTimeout: timeoutMs,
    // Fail fast: no reconnection.
    reconnectStrategy: false,
    ...(endpoint.tls ? { tls: true } : {}),
  });
  // node-redis 5.8 and later ask a RESP3 server for Redis Enterprise's maintenance notifications at connect
  // (CLIENT MAINT_NOTIFICATIONS) and ignore a refusal; a Redis 6.x server checks the ACL before it finds no
  // such subcommand, so every run as a user of the read-only rule left a refusal in its ACL LOG. A command
  // that runs for seconds has no use for them; earlier versions ignore the option.
  const quiet = { maintNotifications: 'disabled' };
  const credentials = (endpoint: Endpoint): Record<string, unknown> => ({
    ...(endpoint.username ? { username: endpoint.username } : {}),
    ...(endpoint.password ? { password: endpoint.password } : {}),
  });
  const close = async (client: NodeRedisLike): Promise<void> => {
    try {
      await (client.close ? client.close() : client.quit());
    } catch {
      client.destroy?.();
    }
  };
  const open = async (client: NodeRedisLike, timeoutMs: number, what: string): Promise<Opened> => {
    await connected(client, () => client.destroy?.(), timeoutMs, what);
    return {
      client: client as unknown as RedisClient,
      info: async (section) => String(await client.sendCommand(['INFO', section])),
      close: () => close(client),
    };
  };
  return {
    name: 'redis',
    standalone: (endpoint, timeoutMs, what) =>
      open(
        createClient({
          socket: socket(endpoint, timeoutMs),
          ...credentials(endpoint),
          ...(endpoint.db === undefined ? {} : { database: endpoint.db }),
          disableOfflineQueue: true,
          ...quiet,
        }),
        timeoutMs,
        what,
      ),
    cluster: (endpoints, timeoutMs, what) => {
      const [first] = endpoints;
      return open(
        createCluster({
          rootNodes: endpoints.map((endpoint) => ({ socket: { host: endpoint.host, port: endpoint.port } })),
          // Every node with the first URL's credentials and TLS.
          defaults: first
            ? {
                ...credentials(first),
                ...quiet,
                socket: { ...socket(first, timeoutMs), host: undefined, port: undefined },
              }
            : quiet,
        }),
        timeoutMs,
        what,
      );
    },
  };
}

interface GlideLike {
  customCommand(args: string[]): Promise<unknown>;
  close(): void;
}

interface GlideClass {
  createClient(config: Record<string, unknown>): Promise<GlideLike>;
}

/** Valkey GLIDE: `GlideClient` and `GlideClusterClient` (GLIDE connects when it creates a client). */
function glide(named: (key: string) => unknown): ClientLibrary {
  // GLIDE's core logs to stdout by default, a WARN for each NOSCRIPT the script runner answers with EVAL: it
  // would break the command's output (--json above all). The command reports its own errors.
  (named('Logger') as { setLoggerConfig?(level: string): void } | undefined)?.setLoggerConfig?.('off');
  const config = (endpoints: readonly Endpoint[], timeoutMs: number): Record<string, unknown> => {
    const [first] = endpoints;
    return {
      addresses: endpoints.map(({ host, port }) => ({ host, port })),
      requestTimeout: timeoutMs,
      advancedConfiguration: { connectionTimeout: timeoutMs },
      ...(first?.password
        ? { credentials: { password: first.password, ...(first.username ? { username: first.username } : {}) } }
        : {}),
      ...(first?.tls ? { useTLS: true } : {}),
    };
  };
  const open = async (
    Class: GlideClass,
    settings: Record<string, unknown>,
    timeoutMs: number,
    what: string,
  ): Promise<Opened> => {
    let client: GlideLike;
    // GLIDE retries a refused connection until its timeout and then says only that it timed out: where
    // nothing listens at any address, the command says so at once.
    const addresses = settings['addresses'] as readonly { host: string; port: number }[];
    const probes = await Promise.all(addresses.map((address) => tcpProbe({ ...address, tls: false }, timeoutMs)));
    if (probes.every((probe) => probe === 'refused')) throw refusal(what);
    try {
      client = await withTimeout(Class.createClient(settings), timeoutMs, what);
    } catch (error) {
      const failure = failed(error, what);
      // GLIDE reads INFO as it connects: a user without INFO cannot connect through it at all.
      if (/permission\w*.{0,40}'info'/i.test(failure.message)) {
        failure.message +=
          ' (Valkey GLIDE reads INFO to connect, which this user may not run: allow INFO, or install ioredis, ' +
          'iovalkey or redis, which flowlock uses first)';
      }
      throw failure;
    }
    return {
      client: client as unknown as RedisClient,
      info: async (section) => String(await client.customCommand(['INFO', section])),
      close: () => {
        client.close();
        return Promise.resolve();
      },
    };
  };
  return {
    name: '@valkey/valkey-glide',
    standalone: (endpoint, timeoutMs, what) =>
      open(
        named('GlideClient') as GlideClass,
        { ...config([endpoint], timeoutMs), ...(endpoint.db === undefined ? {} : { databaseId: endpoint.db }) },
        timeoutMs,
        what,
      ),
    cluster: (endpoints, timeoutMs, what) =>
      open(named('GlideClusterClient') as GlideClass, config(endpoints, timeoutMs), timeoutMs, what),
  };
}

/** Where and how to connect: what the global flags say. */
export interface ConnectionSettings {
  /** Redis URLs (several: Cluster seeds). */
  readonly urls: readonly string[];
  /** Connect as a Cluster client; undefined: as the server says. */
  readonly cluster: true | undefined;
  /** Milliseconds for connecting and for each command. */
  readonly timeoutMs: number;
  readonly env: NodeJS.ProcessEnv;
}

/** The URLs to use: the flags', else $FLOWLOCK_REDIS_URL, $REDIS_URL, redis://127.0.0.1:6379. */
export function defaultUrls(flags: readonly string[], env: NodeJS.ProcessEnv): string[] {
  if (flags.length > 0) return [...flags];
  return [env['FLOWLOCK_REDIS_URL'] || env['REDIS_URL'] || 'redis://127.0.0.1:6379'];
}

/** A `redis://` or `rediss://` URL as an endpoint; a bad URL is a usage error. */
function endpoint(url: string, settings: ConnectionSettings): Endpoint {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new CliError(2, `--url ${url} is not a URL (redis://[user:password@]host[:port][/db])`);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new CliError(2, `--url ${url}: the scheme must be redis:// or rediss://`);
  }
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) throw new CliError(2, `--url ${url}: the path must be a database number`);
  return {
    // URL keeps IPv6 literals in brackets; the socket wants them bare.
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1',
    port: Number(parsed.port || 6379),
    username: parsed.username ? decodeURIComponent(parsed.username) : undefined,
    password: parsed.password ? decodeURIComponent(parsed.password) : settings.env['REDISCLI_AUTH'] || undefined,
    db: db === '' ? undefined : Number(db),
    tls: parsed.protocol === 'rediss:',
  };
}

/** An open client for the command, and how to close it. */
export interface Connection {
  readonly client: RedisClient;
  /** The client library that opened it. */
  readonly library: string;
  /** What could not be read while connecting, for stderr (INFO refused: the server's mode assumed). */
  readonly notices: readonly string[];
  close(): Promise<void>;
}

/** The server's INFO `section`, or the refusal of INFO (any other failure rejects). */
async function infoOrRefusal(opened: Opened, section: string): Promise<{ info?: string; refused?: string }> {
  try {
    return { info: await opened.info(section) };
  } catch (error) {
    const refused = refusalOf(error);
    if (refused === undefined) throw error;
    return { refused };
  }
}

/** Connects as the settings say; rejects with a CliError (exit code 1 or 2) or the client's error. */
export async function connect(settings: ConnectionSettings): Promise<Connection> {
  const endpoints = settings.urls.map((url) => endpoint(url, settings));
  const [first] = endpoints;
  if (!first) throw new CliError(2, 'no --url');
  const library = await loadLibrary();
  try {
    return await open(library, endpoints, settings);
  } catch (error) {
    throw await explained(error, library.name, first, settings);
  }
}

/**
 * A failure to connect, with what the library left unsaid: where the password goes (NOAUTH, WRONGPASS), and
 * otherwise what a probe of the first address finds (refused, a TLS mismatch, an untrusted certificate).
 */
async function explained(
  error: unknown,
  library: string,
  endpoint: Endpoint,
  settings: ConnectionSettings,
): Promise<unknown> {
  if (error instanceof CliError && error.exitCode !== 1) return error;
  const what = `connecting to ${endpoint.host}:${endpoint.port}`;
  const message = error instanceof Error ? error.message : String(error);
  // The library's own errors after it connected (the INFO read here) come without saying where.
  const text = error instanceof CliError ? message : `${what}: ${message}`;
  const auth = authHint(message);
  if (auth !== undefined) return new CliError(1, `${text} (${auth})`);
  const finding = await diagnose(endpoint, library, settings.env, Math.min(settings.timeoutMs, 1000));
  if (finding.refused) return refusal(what);
  if (finding.hint !== undefined) return new CliError(1, `${text.replace(/\.$/, '')}; ${finding.hint}`);
  return error instanceof CliError ? error : new CliError(1, text);
}

/** Connects as the settings say (connect() explains a failure). */
async function open(
  library: ClientLibrary,
  endpoints: readonly Endpoint[],
  settings: ConnectionSettings,
): Promise<Connection> {
  const [first] = endpoints;
  if (!first) throw new CliError(2, 'no --url');
  const { timeoutMs } = settings;
  const notices: string[] = [];
  if (!settings.cluster) {
    const opened = await library.standalone(first, timeoutMs, `connecting to ${first.host}:${first.port}`);
    // Without --cluster, the server says what it is; where it refuses INFO, several URLs say Cluster seeds.
    let clusterMode: boolean;
    try {
      const { info, refused } = await infoOrRefusal(opened, 'cluster');
      clusterMode = info === undefined ? endpoints.length > 1 : /^cluster_enabled:1/m.test(info);
      if (refused !== undefined) {
        notices.push(
          `cannot tell whether the server runs in cluster mode (INFO refused: ${refused}): connected as a ` +
            `${clusterMode ? 'Cluster' : 'standalone'} client (--cluster, or several --url, for a Cluster)`,
        );
      }
    } catch (error) {
      await opened.close();
      throw error;
    }
    if (!clusterMode) {
      if (endpoints.length > 1) {
        await opened.close();
        throw new CliError(2, 'several --url are Cluster seeds, but the server is not in cluster mode');
      }
      return { client: opened.client, library: library.name, notices, close: () => opened.close() };
    }
    await opened.close();
  }
  return openCluster(library, endpoints, settings, notices);
}

/** A Cluster client on `endpoints` (a Cluster has database 0 only). */
async function openCluster(
  library: ClientLibrary,
  endpoints: readonly Endpoint[],
  settings: ConnectionSettings,
  notices: readonly string[],
): Promise<Connection> {
  const what = settings.cluster ? 'connecting as a Cluster client (--cluster)' : 'connecting to the cluster';
  const opened = await library.cluster(endpoints, settings.timeoutMs, what);
  return { client: opened.client, library: library.name, notices, close: () => opened.close() };
}
