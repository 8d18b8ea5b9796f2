import { fork } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { onCluster, uniqueName, useRedis } from '../support/fixture.js';

const redis = useRedis();
const root = join(import.meta.dirname, '..', '..');

describe('a process using the library', () => {
  // The child process connects a standalone ioredis client by redis.server's URL: no such server on a cluster.
  it.skipIf(onCluster)('exits by itself within 1.8 s of close(), leaving no keys or channels', async () => {
    expect(existsSync(join(root, 'dist', 'index.js')), 'run `npm run build` first').toBe(true);
    const name = uniqueName('exit');
    const child = fork(join(root, 'test', 'fixtures', 'exit-after-close.mjs'), [redis.server.url, name], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const [message] = (await once(child, 'message')) as [{ waited: boolean; watchdogLost: boolean; closedAt: number }];
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(code).toBe(0);
    // Below LINGER_MS (2 s), the shortest library timer that could keep the process alive if it lost its
    // unref(); the rest is room for a loaded machine.
    expect(Date.now() - message.closedAt).toBeLessThan(1800);
    expect(message.waited).toBe(false);
    expect(message.watchdogLost).toBe(true);
    expect(await redis.admin.exists(name, `${name}:watchdog`)).toBe(0);
    // close() gave the expirable permit back; nobody is queued for permits any more.
    expect(await redis.admin.get(`${name}:permits`)).toBe('1');
    expect(await redis.admin.exists(`{${name}:permits}:timeout`)).toBe(0);
    expect(await redis.admin.keys(`*permit-queue*${name}*`)).toEqual([]);
    expect(await redis.admin.pubsub('CHANNELS', `*${name}*`)).toEqual([]);
  });
});
