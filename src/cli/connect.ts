/**
 * The `flowlock` command's connection: ioredis (or iovalkey, its fork) loaded when a command runs, since both
 * are optional peer dependencies; a standalone client, or a Cluster client when `--cluster` says so or the
 * server reports `cluster_enabled:1`. The password comes from the URL or from REDISCLI_AUTH (as for
 * redis-cli), never from a flag, which `ps` and shell history would show. Connections fail fast instead of
 * reconnecting: a command that cannot reach Redis ends with an error.
 */
import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { CliError } from './errors.js';

type RedisConstructor = new (options: RedisOptions) => Redis;
type ClusterConstructor = new (seeds: { host: string; port: number }[], options: ClusterOptions) => Cluster;

interface ClientLibrary {
  readonly name: string;
  readonly Redis: RedisConstructor;
  readonly Cluster: ClusterConstructor;
}

/** ioredis, else iovalkey, by dynamic import; a clear error when neither is installed. */
async function loadLibrary(): Promise<ClientLibrary> {
  for (const name of ['ioredis', 'iovalkey']) {
    let loaded: Record<string, unknown>;
    try {
      loaded = (await import(name)) as Record<string, unknown>;
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') continue;
      throw error;
    }
    // ESM namespace of a CommonJS package: named exports, or all of them on `default`.
    const exports = (loaded['Redis'] ? loaded : (loaded['default'] ?? {})) as Record<string, unknown>;
    const Redis = exports['Redis'] ?? exports['default'];
    const Cluster = exports['Cluster'];
    if (typeof Redis === 'function' && typeof Cluster === 'function') {
      return { name, Redis: Redis as RedisConstructor, Cluster: Cluster as ClusterConstructor };
    }
  }
  throw new CliError(1, 'flowlock needs a Redis client package: npm install ioredis (or iovalkey)');
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

interface Endpoint {
  readonly host: string;
  readonly port: number;
  readonly options: RedisOptions;
}

/** A `redis://` or `rediss://` URL as connection options; a bad URL is a usage error. */
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
  const password = parsed.password ? decodeURIComponent(parsed.password) : settings.env['REDISCLI_AUTH'];
  const options: RedisOptions = {
    connectTimeout: settings.timeoutMs,
    commandTimeout: settings.timeoutMs,
    // Fail fast: a command that cannot reach Redis reports it instead of waiting for a reconnection.
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    lazyConnect: true,
  };
  if (parsed.username) options.username = decodeURIComponent(parsed.username);
  if (password) options.password = password;
  if (db !== '') options.db = Number(db);
  if (parsed.protocol === 'rediss:') options.tls = {};
  // URL keeps IPv6 literals in brackets; the socket wants them bare.
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1';
  return { host, port: Number(parsed.port || 6379), options };
}

/** An open client for the command, and how to close it. */
export interface Connection {
  readonly client: Redis | Cluster;
  close(): Promise<void>;
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

async function close(client: Redis | Cluster): Promise<void> {
  await client.quit().catch(() => client.disconnect());
}

/** Connects and waits until ready, within the timeout; disconnects on failure. */
async function opened<T extends Redis | Cluster>(client: T, what: string, ms: number): Promise<T> {
  // The cause of a failed connection comes as an 'error' event; connect() itself only says it closed.
  let cause: Error | undefined;
  client.on('error', (error: Error) => (cause ??= error));
  try {
    await withTimeout(client.connect(), ms, what);
    return client;
  } catch (error) {
    client.disconnect();
    if (error instanceof CliError) throw error;
    throw new CliError(1, `${what}: ${(cause ?? (error as Error)).message}`);
  }
}

/** Connects as the settings say; rejects with a CliError (exit code 1 or 2) or the client's error. */
export async function connect(settings: ConnectionSettings): Promise<Connection> {
  const endpoints = settings.urls.map((url) => endpoint(url, settings));
  const [first] = endpoints;
  if (!first) throw new CliError(2, 'no --url');
  const library = await loadLibrary();
  if (!settings.cluster) {
    const { host, port, options } = first;
    const client = await opened(
      new library.Redis({ ...options, host, port }),
      `connecting to ${host}:${port}`,
      settings.timeoutMs,
    );
    // Without --cluster, the server says what it is.
    if (!/^cluster_enabled:1/m.test(String(await client.call('INFO', 'cluster')))) {
      if (endpoints.length > 1) {
        await close(client);
        throw new CliError(2, 'several --url are Cluster seeds, but the server is not in cluster mode');
      }
      return { client, close: () => close(client) };
    }
    await close(client);
  }
  // A Cluster has database 0 only; its nodes are reached with the first URL's credentials and TLS.
  const redisOptions: RedisOptions = { ...first.options };
  delete redisOptions.db;
  delete redisOptions.lazyConnect;
  const cluster = new library.Cluster(
    endpoints.map(({ host, port }) => ({ host, port })),
    { redisOptions, lazyConnect: true, clusterRetryStrategy: () => null, slotsRefreshTimeout: settings.timeoutMs },
  );
  const what = settings.cluster ? 'connecting as a Cluster client (--cluster)' : 'connecting to the cluster';
  const client = await opened(cluster, what, settings.timeoutMs);
  return { client, close: () => close(client) };
}
