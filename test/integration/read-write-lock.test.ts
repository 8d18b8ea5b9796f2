import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  createLockClient,
  LockClientClosedError,
  LockLostError,
  LockUpgradeError,
  type LockClient,
} from '../../src/index.js';
import { LockScripts } from '../../src/redis/scripts.js';
import { readWriteLockKeys } from '../../src/redis/keys.js';
import { dropClient } from '../support/clients.js';
import {
  elapsedSince,
  onCluster,
  shardedChannels,
  scriptCalls,
  serverNow,
  uniqueName,
  until,
  untilQuiet,
  useRedis,
} from '../support/fixture.js';
import { listenerFor, RedissonReadWriteLock } from '../support/redisson.js';

const redis = useRedis();

/**
 * Whether a waiter of `locks` is parked on an active subscription: from then on a release message wakes it
 * (before, it re-checks every second; on a cluster it re-checks every 2 s anyway).
 */
function parked(locks: LockClient): boolean {
  return locks.waits().some((wait) => wait.waiters > 0 && wait.subscription === 'active');
}

/** Messages on the lock's channel, collected by a subscriber of the topology. */
async function listen(name: string): Promise<string[]> {
  const channel = readWriteLockKeys('', name, onCluster).channel;
  const subscriber = listenerFor(redis.admin, channel);
  const messages: string[] = [];
  if (shardedChannels) {
    subscriber.on('smessage', (_c: string, m: string) => messages.push(m));
    await subscriber.ssubscribe(channel);
  } else {
    subscriber.on('message', (_c: string, m: string) => messages.push(m));
    await subscriber.subscribe(channel);
  }
  return messages;
}

describe('RReadWriteLock', () => {
  it('lets many flows read at once, in Redisson’s layout, and excludes writers while they do', async () => {
    const locks = redis.locks();
    const name = uniqueName('rw');
    const rw = locks.getReadWriteLock(name);
    const a = await rw.readLock().acquire({ leaseTime: 5000 });
    // The hash the first read hold created has that hold's lease: a lone reader that dies frees the lock.
    expect(await redis.admin.pttl(name)).toBeGreaterThan(4000);
    const b = await rw.readLock().acquire();
    const hash = await redis.admin.hgetall(name);
    expect(hash['mode']).toBe('read');
    const owners = Object.keys(hash).filter((field) => /^[^:]+:\d+$/.test(field) || /:\d+$/.test(field));
    expect(owners.length).toBeGreaterThanOrEqual(2);
    const timeoutBase = readWriteLockKeys('', name, onCluster).timeoutBase;
    for (const owner of Object.keys(hash).filter((f) => f !== 'mode' && !/:(acq|rel|info)$/.test(f))) {
      expect(await redis.admin.pttl(`${timeoutBase}:${owner}:rwlock_timeout:1`)).toBeGreaterThan(0);
    }
    expect(await locks.run(() => rw.writeLock().tryLock())).toBe(false);
    expect(await rw.readLock().isLocked()).toBe(true);
    expect(await rw.writeLock().isLocked()).toBe(false);
    await a.release();
    expect(await redis.admin.hget(name, 'mode')).toBe('read');
    await b.release();
    expect(await redis.admin.exists(name)).toBe(0);
    const write = await rw.writeLock().acquire();
    expect(await rw.writeLock().isLocked()).toBe(true);
    expect(await locks.run(() => rw.readLock().tryLock())).toBe(false);
    expect(await redis.admin.hget(name, 'mode')).toBe('write');
    await write.release();
  });

  it('is reentrant per flow, allows write -> read downgrade, refuses read -> write upgrade at once', async () => {
    const locks = redis.locks();
    const name = uniqueName('rw');
    const rw = locks.getReadWriteLock(name);
    await rw.writeLock().withLock(async () => {
      await rw.writeLock().withLock(async () => {
        expect(await rw.writeLock().getHoldCount()).toBe(2);
      });
      // Downgrade: the writing flow may read.
      await rw.readLock().withLock(async () => {
        expect(await rw.readLock().getHoldCount()).toBe(1);
        expect(await redis.admin.hget(name, 'mode')).toBe('write');
      });
    });
    expect(await redis.admin.exists(name)).toBe(0);
    await rw.readLock().withLock(async () => {
      await rw.readLock().withLock(async () => {
        expect(await rw.readLock().getHoldCount()).toBe(2);
      });
      const started = performance.now();
      await expect(rw.writeLock().withLock(() => undefined)).rejects.toBeInstanceOf(LockUpgradeError);
      // A child flow inherits the read hold: it would wait for it too.
      await expect(locks.run(() => rw.writeLock().tryLock(5000))).rejects.toBeInstanceOf(LockUpgradeError);
      expect(elapsedSince(started)).toBeLessThan(1000);
    });
    // Outside the reading flow, the write lock is free again.
    expect(await locks.run(() => rw.writeLock().tryLock())).toBe(true);
  });

  it('a write release publishes 1 and wakes every waiting reader; the last read release publishes 0', async () => {
    const name = uniqueName('rw');
    const messages = await listen(name);
    const writer = redis.locks().getReadWriteLock(name).writeLock();
    const lease = await writer.acquire();
    const readerClients = [redis.locks(), redis.locks(), redis.locks()];
    const readers = readerClients.map((locks) => locks.getReadWriteLock(name).readLock().acquire());
    for (const reader of readers) reader.catch(() => undefined); // awaited below
    await until(() => readerClients.every(parked), 'every reader parked on an active subscription');
    const releasedAt = performance.now();
    await lease.release();
    const held = await Promise.all(readers);
    // Unwoken, the readers would sleep until the writer's 30 s lease ran out (on a cluster: until their 2 s
    // re-check, due about 2 s after they parked just now); the message wakes them in milliseconds.
    expect(elapsedSince(releasedAt)).toBeLessThan(1000);
    expect(await redis.admin.hget(name, 'mode')).toBe('read');
    for (const hold of held) await hold.release();
    await until(() => messages.length >= 2, 'the two release messages');
    expect(messages).toEqual(['1', '0']);
  });

  it('write grants carry rising fencing tokens; reads report the latest', async () => {
    const locks = redis.locks();
    const rw = locks.getReadWriteLock(uniqueName('rw'));
    const first = await rw.writeLock().withLock((_s, lease) => lease.fencingToken);
    const read = await rw.readLock().withLock((_s, lease) => lease.fencingToken);
    const second = await rw.writeLock().withLock((_s, lease) => lease.fencingToken);
    expect(read).toBe(first);
    expect(second).toBeGreaterThan(first);
  });

  it('a stream of our readers does not starve a writer', async () => {
    const name = uniqueName('rw');
    const clients = [redis.locks(), redis.locks(), redis.locks()];
    let stop = false;
    let reads = 0;
    // Overlapping readers: at every moment one of them holds the read lock.
    const readers = clients.map(async (client, i) => {
      await sleep(i * 15);
      while (!stop) {
        await client
          .getReadWriteLock(name)
          .readLock()
          .withLock(async () => {
            reads++;
            await sleep(40);
          });
      }
    });
    await until(() => reads >= 6, 'the readers overlap');
    const started = performance.now();
    const writer = redis.locks().getReadWriteLock(name).writeLock();
    await writer.withLock(() => undefined, { waitTime: 5000 });
    const waited = elapsedSince(started);
    stop = true;
    await Promise.all(readers);
    // At most the readers already in (40 ms each) and a few round trips; a starved writer would wait out its
    // 5 s waitTime and fail above.
    expect(waited).toBeLessThan(2000);
  });

  it("a dead reader's hold runs out although other readers keep the lock (Redisson #7098)", async () => {
    const name = uniqueName('rw');
    // Renewed every second, a lease of 3 s: the live reader renews twice while the dead reader's keys live on
    // (a renewal that extended them, Redisson's bug, would keep them forever), and a stall has to last 2 s to
    // lose the live hold.
    const watchdogTimeout = 3000;
    const deadRedis = redis.client();
    const dead = createLockClient(deadRedis, { watchdogTimeout });
    onTestFinished(() => dead.close());
    await dead.getReadWriteLock(name).readLock().acquire();
    const live = redis.locks({ watchdogTimeout });
    const liveHold = await live.getReadWriteLock(name).readLock().acquire();
    dropClient(deadRedis);
    const timeoutBase = readWriteLockKeys('', name, onCluster).timeoutBase;
    const deadOwner = `${dead.clientId}:`;
    const deadKeys = async (): Promise<number> => {
      const fields = Object.keys(await redis.admin.hgetall(name)).filter(
        (f) => f.startsWith(deadOwner) && !/:(acq|rel|info)$/.test(f),
      );
      let alive = 0;
      for (const field of fields) alive += await redis.admin.exists(`${timeoutBase}:${field}:rwlock_timeout:1`);
      return alive;
    };
    expect(await deadKeys()).toBe(1);
    // The live reader's watchdog renews the lock, but not the dead reader's hold.
    await until(async () => (await deadKeys()) === 0, 'the dead reader’s hold ran out');
    expect(await redis.admin.exists(name)).toBe(1);
    const writerClient = redis.locks();
    const writing = writerClient.getReadWriteLock(name).writeLock().acquire({ waitTime: 10_000 });
    writing.catch(() => undefined); // awaited below
    await until(() => parked(writerClient), 'the writer parked on an active subscription');
    const releasedAt = performance.now();
    await liveHold.release();
    const write = await writing;
    // Unwoken, the writer would retry when the read hold's lease ran out (2 s or more: renewed every second
    // to 3 s), on a cluster at its 2 s re-check; the message wakes it in milliseconds.
    expect(elapsedSince(releasedAt)).toBeLessThan(1000);
    await write.release();
  });

  it('shares with Redisson readers, excludes Redisson writers, and each side wakes the other', async () => {
    const name = uniqueName('rw');
    const java = new RedissonReadWriteLock(redis.admin, name);
    const locks = redis.locks();
    const rw = locks.getReadWriteLock(name);
    // Each wake below would otherwise come only when a 30 s lease ran out (ours, or the Java side's; on a
    // cluster our waiter's 2 s re-check): 1 s tells a message's wake from those on a loaded machine.
    // A Java reader and ours read together.
    expect(await java.tryReadLock(30_000)).toBeNull();
    const ours = await rw.readLock().acquire({ waitTime: 0 });
    // Our writer waits for both; the Java reader's release alone does not let it in.
    let wroteAt = 0;
    const writing = rw.writeLock().withLock(() => {
      wroteAt = performance.now();
    });
    writing.catch(() => undefined); // awaited below
    await until(() => parked(locks), 'our writer parked on an active subscription');
    expect(await java.readUnlock()).toBe(0);
    await sleep(100); // the message of that release (if it let the writer in, within milliseconds)
    expect(wroteAt).toBe(0);
    const releasedAt = performance.now();
    await ours.release();
    await writing;
    expect(wroteAt - releasedAt).toBeLessThan(1000);
    // A Java writer excludes our reader; its release (message 1) wakes it.
    expect(await java.tryWriteLock(30_000)).toBeNull();
    let readAt = 0;
    const reading = rw.readLock().withLock(() => {
      readAt = performance.now();
    });
    reading.catch(() => undefined); // awaited below
    await until(() => parked(locks), 'our reader parked on an active subscription');
    expect(readAt).toBe(0);
    const javaReleasedAt = performance.now();
    expect(await java.writeUnlock()).toBe(1);
    await reading;
    expect(readAt - javaReleasedAt).toBeLessThan(1000);
    // Our writer's release wakes a waiting Java writer.
    const lease = await rw.writeLock().acquire();
    const javaWriter = new RedissonReadWriteLock(redis.admin, name);
    const javaWaiting = javaWriter.lock('write', 30_000);
    javaWaiting.catch(() => undefined); // awaited below
    // Time for the Java writer to subscribe and try: if our release overtakes that, it simply gets the lock.
    await sleep(100);
    const ourReleaseAt = performance.now();
    await lease.release();
    await javaWaiting;
    expect(elapsedSince(ourReleaseAt)).toBeLessThan(1000);
    expect(await javaWriter.writeUnlock()).toBe(1);
  });

  it('force-unlocks one side only, and local holders of that side lose their hold', async () => {
    const locks = redis.locks();
    const rw = locks.getReadWriteLock(uniqueName('rw'));
    const read = await rw.readLock().acquire();
    expect(await rw.writeLock().forceUnlock()).toBe(false);
    expect(read.signal.aborted).toBe(false);
    expect(await rw.readLock().forceUnlock()).toBe(true);
    expect(read.signal.aborted).toBe(true);
    const write = await rw.writeLock().acquire();
    expect(await rw.writeLock().forceUnlock()).toBe(true);
    expect(write.signal.aborted).toBe(true);
  });

  it('answers resent read and write acquires and releases from their memos', async () => {
    const scripts = new LockScripts(redis.adapter());
    const keys = readWriteLockKeys('', uniqueName('rw'), onCluster);
    // Always guessing a first hold: a re-entry is told its count, and sent again with its timeout key.
    const read = (id: string): Promise<unknown> =>
      scripts.readAcquire(keys, 10_000, id, ['c:1'], { index: 0, count: 1 });
    await read('a1');
    expect(await read('a2')).toEqual(await read('a2'));
    expect(await redis.admin.hget(keys.lockKey, 'c:1')).toBe('2');
    // Guessing no hold: told the count, and sent again with the timeout keys.
    const readRelease = (id: string): ReturnType<LockScripts['readRelease']> =>
      scripts.readRelease(keys, 'one', ['c:1'], { requestId: id });
    expect(await readRelease('r1')).toMatchObject({ remaining: 1 });
    expect(await readRelease('r1')).toMatchObject({ remaining: 1 });
    expect(await readRelease('r2')).toMatchObject({ remaining: 0 });
    expect(await readRelease('r2')).toMatchObject({ remaining: 0 });
    expect(await redis.admin.exists(keys.lockKey)).toBe(0);
    const write = (id: string): Promise<unknown> =>
      scripts.run(
        'read-write-lock/write-acquire',
        [keys.lockKey, keys.writersKey, keys.holdKey, keys.fenceKey, keys.legacyFenceKey],
        [10_000, id, 0, '', 'c:1:write'],
      );
    await write('w1');
    expect(await write('w2')).toEqual(await write('w2'));
    expect(await redis.admin.hget(keys.lockKey, 'c:1:write')).toBe('2');
  });

  /**
   * A reader holds, a writer registers and waits 1.5 s, a new reader parks behind it; `deleteRegistry`
   * deletes the registry meanwhile. Once the writer gives up, the new reader must come in at once.
   */
  async function writerGivesUp(deleteRegistry: boolean): Promise<void> {
    const name = uniqueName('rw');
    const keys = readWriteLockKeys('', name, onCluster);
    const reader = await redis.locks().getReadWriteLock(name).readLock().acquire();
    const writerClient = redis.locks();
    const writer = writerClient.getReadWriteLock(name).writeLock();
    // A single attempt (it does not register) loads the write script: below, each script call is an attempt.
    expect(await writerClient.run(() => writer.tryLock(0))).toBe(false);
    // Each waiter below is left parked with its attempts done (the first, and the one its subscription's
    // settling wakes it for) before the next step: an attempt after the registry's deletion would register
    // the writer again, or let the reader in before the writer gives up, and the test would prove nothing.
    const settle = async (locks: LockClient, since: number, what: string): Promise<void> => {
      await until(async () => parked(locks) && (await scriptCalls(redis.admin)) >= since + 2, what);
      await untilQuiet(() => scriptCalls(redis.admin), 'script calls');
    };
    const giveUp = new AbortController();
    const reason = new Error('the writer gives up');
    let since = await scriptCalls(redis.admin);
    const writing = writer.acquire({ signal: giveUp.signal });
    const gaveUp = expect(writing).rejects.toBe(reason);
    await settle(writerClient, since, 'the writer registered and parked');
    expect(await redis.admin.zcard(keys.writersKey)).toBe(1);
    // A new reader waits for the registered writer.
    let readAt = 0;
    const readerClient = redis.locks();
    since = await scriptCalls(redis.admin);
    const reading = readerClient
      .getReadWriteLock(name)
      .readLock()
      .withLock(() => {
        readAt = performance.now();
      });
    reading.catch(() => undefined); // awaited below
    await settle(readerClient, since, 'the new reader parked behind the writer');
    expect(readAt).toBe(0);
    if (deleteRegistry) await redis.admin.del(keys.writersKey);
    giveUp.abort(reason);
    await gaveUp;
    const gaveUpAt = performance.now();
    await reading;
    // Unwoken, the reader would sleep until the first reader's 30 s lease ran out; the writer's leaving wakes
    // it in milliseconds. (On a cluster its 2 s re-check may fall within this second too.)
    expect(readAt - gaveUpAt).toBeLessThan(1000);
    // The leave is sent as the writer gives up, not awaited by it: the reader it woke may look before the
    // leave's reply is read. Left behind, a registration would hold back readers for 30 s.
    await until(async () => (await redis.admin.zcard(keys.writersKey)) === 0, 'the registration gone', 2000);
    await reader.release();
  }

  it('a writer that gives up leaves the registry at once and lets the readers it held back in', async () => {
    await writerGivesUp(false);
  });

  it('a writer that gives up wakes the readers it held back even when its registration was deleted', async () => {
    // The model test's finding (seed 599965144): with the registry gone, the leave found nothing to remove
    // and announced nothing, and the held-back reader slept until the first reader's 30 s lease.
    await writerGivesUp(true);
  });

  it('expires the registry of waiting writers with its latest deadline: a writer that dies waiting leaves no key', async () => {
    const name = uniqueName('rw');
    const keys = readWriteLockKeys('', name, onCluster);
    const reader = await redis.locks().getReadWriteLock(name).readLock().acquire();
    // Registrations that live 30 s and 60 s past their attempts (their clients' watchdogTimeout).
    const waiting = [redis.locks(), redis.locks({ watchdogTimeout: 60_000 })].map((locks) =>
      locks.getReadWriteLock(name).writeLock().acquire({ waitTime: 2000 }),
    );
    const outcomes = waiting.map((acquiring) => acquiring.catch((error: unknown) => error));
    await until(async () => (await redis.admin.zcard(keys.writersKey)) === 2, 'both writers registered');
    const [, latest] = await redis.admin.zrange(keys.writersKey, -1, -1, 'WITHSCORES');
    const untilLatest = Number(latest) - (await serverNow(redis.admin));
    const ttl = await redis.admin.pttl(keys.writersKey);
    // Not before the latest deadline (the 60 s writer's), nor long after it.
    expect(ttl).toBeGreaterThan(untilLatest - 1000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    for (const outcome of await Promise.all(outcomes)) expect(outcome).toBeInstanceOf(Error);
    await reader.release();
  });

  it('close() releases read and write holds and leaves no registration behind', async () => {
    const name = uniqueName('rw');
    const keys = readWriteLockKeys('', name, onCluster);
    const a = redis.locks();
    await a.getReadWriteLock(name).readLock().acquire();
    const b = redis.locks();
    const waiting = b.getReadWriteLock(name).writeLock().acquire();
    const outcome = waiting.catch((error: unknown) => error);
    await until(async () => (await redis.admin.zcard(keys.writersKey)) === 1, 'the writer registered');
    await b.close();
    expect(await outcome).toBeInstanceOf(LockClientClosedError);
    await a.close();
    expect(await redis.admin.exists(name)).toBe(0);
    expect(await redis.admin.zcard(keys.writersKey)).toBe(0);
    const fields = await redis.admin.hgetall(name);
    expect(fields).toEqual({});
  });

  it('withLock on either side rejects with LockLostError carrying the result when the hold was lost', async () => {
    const rw = redis.locks().getReadWriteLock(uniqueName('rw'));
    for (const lock of [rw.readLock(), rw.writeLock()]) {
      const error = await lock
        .withLock(async () => {
          await lock.forceUnlock();
          return 'done';
        })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).result).toBe('done');
    }
  });
});
