/**
 * Per-file test fixture: one Redis for the file, ioredis clients and lock clients that are closed after
 * each test, and helpers that read the server's own counters. `IOREDIS_MAJOR=6` runs on ioredis 6.
 */
import { randomUUID } from 'node:crypto';
import { Redis as IORedis5, type RedisOptions } from 'ioredis';
import { Redis as IORedis6 } from 'ioredis6';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createLockClient, type LockClient, type LockClientOptions } from '../../src/index.js';
import { startTestRedis, type TestRedis } from './redis-server.js';

export type Redis = IORedis5;
export const ioredisMajor = process.env['IOREDIS_MAJOR'] === '6' ? 6 : 5;
const RedisClass = (ioredisMajor === 6 ? IORedis6 : IORedis5) as unknown as typeof IORedis5;

export function newRedis(server: { host: string; port: number }, options: RedisOptions = {}): Redis {
  return new RedisClass({ host: server.host, port: server.port, ...options });
}

export function uniqueName(label = 'lock'): string {
  return `test:${label}:${randomUUID().slice(0, 8)}`;
}

export interface RedisFixture {
  readonly server: TestRedis;
  /** A new ioredis client, quit after the test. */
  redis(options?: RedisOptions): Redis;
  /** A lock client on a new ioredis client, closed after the test. */
  locks(options?: LockClientOptions, redisOptions?: RedisOptions): LockClient;
  /** An admin connection for inspecting the server (kept for the file). */
  readonly admin: Redis;
}

export function useRedis(start: () => Promise<TestRedis> = startTestRedis): RedisFixture {
  let server: TestRedis | undefined;
  let admin: Redis | undefined;
  const redisClients: Redis[] = [];
  const lockClients: LockClient[] = [];

  beforeAll(async () => {
    server = await start();
    admin = newRedis(server);
  });
  afterEach(async () => {
    await Promise.all(lockClients.splice(0).map((c) => c.close()));
    await Promise.all(redisClients.splice(0).map((c) => c.quit().catch(() => c.disconnect())));
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.stop();
  });

  const fixture: RedisFixture = {
    get server() {
      if (!server) throw new Error('the Redis server is not started yet');
      return server;
    },
    get admin() {
      if (!admin) throw new Error('the Redis server is not started yet');
      return admin;
    },
    redis(options = {}) {
      const client = newRedis(fixture.server, options);
      client.on('error', () => undefined);
      redisClients.push(client);
      return client;
    },
    locks(options, redisOptions) {
      const client = createLockClient(fixture.redis(redisOptions), options);
      lockClients.push(client);
      return client;
    },
  };
  return fixture;
}

/** Calls per command from `INFO commandstats` (e.g. `{ evalsha: 12, subscribe: 1 }`). */
export async function commandCalls(redis: Redis): Promise<Record<string, number>> {
  const info = await redis.info('commandstats');
  const calls: Record<string, number> = {};
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    calls[match[1] ?? ''] = Number(match[2]);
  }
  return calls;
}

export function elapsedSince(start: number): number {
  return performance.now() - start;
}
