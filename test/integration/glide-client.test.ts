// What a GLIDE client does that no other client library does. One made with `defaultDecoder: Decoder.Bytes`
// answers every call with Buffers unless the call asks for text: the adapter asks for text on every call of its
// own (issue 38, item 4: `writeLock().isLocked()` compared a Buffer with 'write' and said false while the write
// lock was held). And GLIDE's core logs a WARN line for every error reply, NOSCRIPT included, into the user's
// logs (issue 37, item 7): a new process must print none in normal operation.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Decoder } from '@valkey/valkey-glide';
import { describe, expect, it } from 'vitest';
import { onGlide } from '../support/clients.js';
import { onCluster, uniqueName, useRedis } from '../support/fixture.js';

const redis = useRedis();

describe.skipIf(!onGlide)('a GLIDE client whose default decoder is Bytes', () => {
  it("answers every primitive's queries as with the default decoder", async () => {
    const locks = redis.locks({}, { glide: { defaultDecoder: Decoder.Bytes } });
    const rw = locks.getReadWriteLock(uniqueName('rw'));
    const lock = locks.getLock(uniqueName());
    const fair = locks.getFairLock(uniqueName('fair'));
    await locks.run(async () => {
      await rw.writeLock().lock();
      expect(await rw.writeLock().isLocked()).toBe(true);
      expect(await rw.writeLock().isHeldByCurrentFlow()).toBe(true);
      expect(await rw.readLock().isLocked()).toBe(false);
      expect(await rw.writeLock().getHoldCount()).toBe(1);
      await rw.writeLock().unlock();
      await rw.readLock().lock();
      expect(await rw.readLock().isLocked()).toBe(true);
      expect(await rw.writeLock().isLocked()).toBe(false);
      await rw.readLock().unlock();

      expect(await lock.tryLock()).toBe(true);
      expect(await lock.isLocked()).toBe(true);
      expect(await lock.getHoldCount()).toBe(1);
      expect(await lock.remainTimeToLive()).toBeGreaterThan(0);
      await lock.unlock();
      expect(await lock.isLocked()).toBe(false);

      expect(await fair.tryLock()).toBe(true);
      expect(await fair.isLocked()).toBe(true);
      await fair.unlock();
    });

    const semaphore = locks.getSemaphore(uniqueName('sem'));
    expect(await semaphore.trySetPermits(3)).toBe(true);
    expect(await semaphore.tryAcquire(2)).toBe(true);
    expect(await semaphore.availablePermits()).toBe(1);
    expect(await semaphore.drainPermits()).toBe(1);
    await semaphore.release(2);
    expect(await semaphore.availablePermits()).toBe(2);

    const expirable = locks.getPermitExpirableSemaphore(uniqueName('pes'));
    expect(await expirable.trySetPermits(2)).toBe(true);
    const permit = await expirable.acquire({ leaseTime: 10_000 });
    expect(typeof permit.permitId).toBe('string');
    expect(await expirable.availablePermits()).toBe(1);
    await permit.release();
    expect(await expirable.availablePermits()).toBe(2);

    const latch = locks.getCountDownLatch(uniqueName('latch'));
    expect(await latch.trySetCount(2)).toBe(true);
    expect(await latch.getCount()).toBe(2);
    await latch.countDown();
    expect(await latch.getCount()).toBe(1);
  });
});

describe.skipIf(!onGlide || onCluster)("GLIDE's own log in a new process", () => {
  it('shows no NOSCRIPT warning: each script is sent by EVAL first', async () => {
    // A server that has no script cached yet, as after a deploy to a fresh server.
    await redis.admin.script('FLUSH');
    const fixture = fileURLToPath(new URL('../fixtures/glide-first-scripts.mjs', import.meta.url));
    const child = spawn(process.execPath, [fixture, redis.server.host, String(redis.server.port)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, output).toBe(0);
    expect(output).not.toMatch(/NoScriptError|NOSCRIPT/);
  });
});
