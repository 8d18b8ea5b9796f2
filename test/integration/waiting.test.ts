import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { waitFor, WaitQueues } from '../../src/machinery/waiting.js';
import { lockKeys } from '../../src/redis/keys.js';
import { LockScripts } from '../../src/redis/scripts.js';
import {
  channelSubscribers,
  commandCalls,
  elapsedSince,
  everyNode,
  onCluster,
  publishRelease,
  uniqueName,
  until,
  useRedis,
} from '../support/fixture.js';
import { TcpProxy } from '../support/proxy.js';

const redis = useRedis();

/** Kills every pub/sub connection (on each node of a cluster, where a client subscribes per master). */
async function killPubSubConnections(): Promise<void> {
  await Promise.all(everyNode(redis.admin).map((node) => node.client('KILL', 'TYPE', 'pubsub')));
}

async function evalshaCalls(): Promise<number> {
  return (await commandCalls(redis.admin))['evalsha'] ?? 0;
}

describe('waiting after pub/sub trouble', () => {
  it('retries every local waiter after the subscriber reconnects (a release sent meanwhile is lost)', async () => {
    const waiter = redis.locks();
    const name = uniqueName();
    // A foreign holder with a long lease: only a release message (or a retry) can let the waiter in soon.
    await redis.admin.hset(name, 'foreign:1', '1');
    await redis.admin.pexpire(name, 30_000);
    let acquiredAt = 0;
    const waiting = waiter.getLock(name).withLock(() => {
      acquiredAt = performance.now();
    });
    waiting.catch(() => undefined); // awaited below
    // Subscribed, so that the kill below takes a live subscription away.
    await until(
      () => waiter.waits().some((w) => w.waiters > 0 && w.subscription === 'active'),
      'the waiter parked on an active subscription',
    );
    await killPubSubConnections();
    // Released while the subscriber is down: the message reaches nobody.
    await redis.admin.del(name);
    await publishRelease(redis.admin, `redisson_lock__channel:{${name}}`);
    const releasedAt = performance.now();
    await waiting;
    expect(acquiredAt - releasedAt).toBeLessThan(1500);
  });

  it.runIf(!onCluster)(
    'a release sent while the subscriber reconnects is not slept through, however fast the client resubscribes',
    async () => {
      // Issue 38.3: node-redis and GLIDE resubscribe by themselves, and a resubscription no check of the
      // adapter saw left the waiter parked until its deadline. The kill and the release go in one pipeline: the
      // server has sent the release before the subscriber could even reconnect, so only the adapter's notice of
      // the reconnect can wake the waiter. Several rounds: a subscriber must notice every reconnect, not the first.
      const waiter = redis.locks();
      for (let round = 0; round < 3; round++) {
        const name = uniqueName();
        await redis.admin.hset(name, 'foreign:1', '1');
        await redis.admin.pexpire(name, 30_000);
        let acquiredAt = 0;
        const waiting = waiter.getLock(name).withLock(
          () => {
            acquiredAt = performance.now();
          },
          { waitTime: 10_000 },
        );
        waiting.catch(() => undefined); // awaited below
        await until(
          async () => (await channelSubscribers(redis.admin, `redisson_lock__channel:{${name}}`)) === 1,
          'the waiter subscribed on the server',
        );
        const releasedAt = performance.now();
        await redis.admin
          .pipeline()
          .client('KILL', 'TYPE', 'pubsub')
          .del(name)
          .publish(`redisson_lock__channel:{${name}}`, '0')
          .exec();
        await waiting;
        // The re-check after a reconnect comes within a second or two; the deadline is 10 s away.
        expect(acquiredAt - releasedAt).toBeLessThan(3000);
      }
    },
  );

  it.runIf(!onCluster)(
    'a waiter whose SUBSCRIBE lost its reply with the connection is subscribed again after the reconnect',
    async () => {
      // node-redis restores after a reconnect only the channels whose SUBSCRIBE was answered, and GLIDE fails
      // the call; either way the reconnect's "restored" must not mark that channel's queue subscribed (its
      // waiters would then sleep out the holder's lease, as one did in CI's T11a on node-redis 5).
      const proxy = await TcpProxy.start(redis.server.port);
      onTestFinished(() => proxy.close());
      const locks = redis.locks({}, { port: proxy.port });
      const [first, name] = [uniqueName(), uniqueName()];
      // Foreign holders with long leases: only a release message (or a retry) lets a waiter in soon.
      for (const held of [first, name]) {
        await redis.admin.hset(held, 'foreign:1', '1');
        await redis.admin.pexpire(held, 30_000);
      }
      // A first wait opens the subscriber connection, so that the next SUBSCRIBE is the second one on it.
      locks
        .getLock(first)
        .withLock(() => undefined)
        .catch(() => undefined); // ends with the client
      await until(
        () => locks.waits().some((w) => w.name === first && w.subscription === 'active'),
        'the first waiter parked on an active subscription',
      );
      proxy.dropReplyTo(/\r\nS?SUBSCRIBE\r\n/i);
      let acquiredAt = 0;
      const waiting = locks.getLock(name).withLock(() => {
        acquiredAt = performance.now();
      });
      waiting.catch(() => undefined); // awaited below
      await until(() => proxy.pendingDrops === 0, 'the reply to the SUBSCRIBE dropped');
      const channel = `redisson_lock__channel:{${name}}`;
      // Subscribed on the server again (not only said to be), within a few reconnects and re-checks.
      await until(async () => (await channelSubscribers(redis.admin, channel)) === 1, 'the channel subscribed again');
      await until(
        () => locks.waits().some((w) => w.name === name && w.subscription === 'active'),
        'the waiter parked on an active subscription',
      );
      await redis.admin.del(name);
      await publishRelease(redis.admin, channel);
      const releasedAt = performance.now();
      await waiting;
      // Woken by the message; the re-check of a queue not subscribed comes each second.
      expect(acquiredAt - releasedAt).toBeLessThan(1000);
    },
  );

  it('a subscriber closed while it reconnects leaves no unhandled rejection', async () => {
    // ioredis' own resubscription after a reconnect (autoResubscribe) handles no error: a client closed
    // before its reply rejected it unhandled ("Connection is closed.") in the user's process (found by the
    // model test). The subscriber restores its channels itself, and handles the outcome.
    const escaped: unknown[] = [];
    const record = (error: unknown): void => {
      escaped.push(error);
    };
    process.on('unhandledRejection', record);
    try {
      for (let round = 0; round < 15; round++) {
        const name = uniqueName();
        await redis.admin.hset(name, 'foreign:1', '1');
        await redis.admin.pexpire(name, 30_000);
        const clients = Array.from({ length: 8 }, () => redis.locks());
        // Each wait ends rejected by its client's close() below.
        const waits = clients.map((c) => c.run(() => c.getLock(name).tryLock({ waitTime: 10_000 })).catch(() => false));
        await until(
          () => clients.every((c) => c.waits().some((w) => w.subscription === 'active')),
          'every waiter parked on an active subscription',
        );
        await killPubSubConnections();
        // Each client is closed at another moment of its subscriber's reconnect (ioredis retries after 50 ms).
        await Promise.all(
          clients.map(async (c, i) => {
            await sleep(30 + i * 12 + (round % 3) * 4);
            await c.close();
          }),
        );
        await Promise.all(waits);
        await redis.admin.del(name);
      }
      await sleep(100);
    } finally {
      process.off('unhandledRejection', record);
    }
    expect(escaped.map(String)).toEqual([]);
  });

  it('a release with no message (DEL by a third party) is found by the TTL-bounded wait', async () => {
    const waiter = redis.locks();
    const name = uniqueName();
    await redis.admin.hset(name, 'foreign:1', '1');
    // Timed from before the TTL is set: the PEXPIRE's reply may come late.
    const start = performance.now();
    await redis.admin.pexpire(name, 800);
    await waiter.getLock(name).withLock(() => undefined, { waitTime: 5000 });
    const elapsed = performance.now() - start;
    expect(elapsed).toBeGreaterThanOrEqual(700);
    // About the 800 ms TTL, from a new client on a loaded machine; unbounded by the TTL, it would wait for a
    // message that never comes until its 5 s waitTime.
    expect(elapsed).toBeLessThan(1500);
  });
});

describe('the local FIFO of a lock', () => {
  it('gives a release to the first waiter even mid-attempt, and the next release to the next waiter', async () => {
    const client = redis.adapter();
    const scripts = new LockScripts(client);
    const waits = new WaitQueues(client, () => scripts.pubsubMode(), 'test-client');
    const channel = `redisson_lock__channel:{${uniqueName('fifo')}}`;
    const first = waits.enter(channel);
    const second = waits.enter(channel);
    try {
      await vi.waitUntil(() => waits.isSubscribed(channel), { timeout: 5000, interval: 5 });
      // The subscription's settling woke both (a release may have gone unseen before it): both try again.
      first.attempting();
      second.attempting();
      let secondWoke: string | undefined;
      const parked = second.park(10_000, undefined).then((reason) => (secondWoke = reason));
      // `first` is mid-attempt (not parked) when a release arrives: the release is its, not `second`'s.
      await publishRelease(redis.admin, channel);
      await vi.waitUntil(() => first.hasWake, { timeout: 2000, interval: 5 });
      await sleep(100);
      expect(secondWoke).toBeUndefined();
      const start = performance.now();
      expect(await first.park(10_000, undefined)).toBe('woken');
      expect(elapsedSince(start)).toBeLessThan(50);
      // A second release while `first` still holds its wake goes to the next waiter.
      await publishRelease(redis.admin, channel);
      await parked;
      expect(secondWoke).toBe('woken');
    } finally {
      first.leave();
      second.leave();
      await waits.close();
    }
  });
});

describe('watchdog batching', () => {
  it('renews many holds with one script call per renewal period', async () => {
    // Renewed every 500 ms; a stall has to last about 1 s to lose one of the holds.
    const locks = redis.locks({ watchdogTimeout: 1500 });
    // One hash tag: on a cluster the watchdog batches per slot (a script may only touch one slot there).
    const tag = uniqueName('batch');
    const names = Array.from({ length: 200 }, (_, i) => `{${tag}}:${i}`);
    const leases = await Promise.all(names.map((name) => locks.getLock(name).acquire()));
    const before = await evalshaCalls();
    await sleep(2500); // about five renewal periods of 500 ms
    const after = await evalshaCalls();
    // One script call per period for all 200 holds (one per hold would be about a thousand).
    expect(after - before).toBeGreaterThanOrEqual(3);
    expect(after - before).toBeLessThanOrEqual(7);
    for (const name of names) expect(await redis.admin.pttl(name)).toBeGreaterThan(0);
    expect(leases.every((lease) => !lease.signal.aborted)).toBe(true);
    await Promise.all(leases.map((lease) => lease.release()));
  });

  it('subscribes through a lazyConnect client as well (its duplicate connects when a waiter needs it)', async () => {
    const holder = redis.locks();
    // lazyConnect is ioredis' (and iovalkey's); a node-redis client is connected by its user (here the fixture).
    const waiter = redis.locks({}, { lazyConnect: true });
    const name = uniqueName();
    const lease = await holder.getLock(name).acquire({ leaseTime: 30_000 });
    const waiting = waiter.getLock(name).withLock(() => performance.now(), { waitTime: 10_000 });
    waiting.catch(() => undefined); // awaited below; a failed wait before that must not leave it unhandled
    const channel = lockKeys('', name, onCluster).channel;
    await until(async () => (await channelSubscribers(redis.admin, channel)) === 1, 'the waiter subscribed');
    // The subscription's confirmation reached the waiter: it parked on an active subscription.
    await until(
      () => waiter.waits().some((w) => w.waiters > 0 && w.subscription === 'active'),
      'the waiter parked on an active subscription',
    );
    const releasedAt = performance.now();
    await lease.release();
    // Unwoken, it would sleep until the holder's 30 s lease ran out (on a cluster: until its 2 s re-check, due
    // about 2 s after it parked just now); the message wakes it in milliseconds.
    expect((await waiting) - releasedAt).toBeLessThan(1000);
  });
});

describe('waitFor (the counted primitives’ wait)', () => {
  it('asks again at once when it joined, after its attempt, a queue whose message it may have missed', async () => {
    const client = redis.adapter();
    const scripts = new LockScripts(client);
    const waits = new WaitQueues(client, () => scripts.pubsubMode(), 'test-client');
    const channel = `redisson_countdownlatch__channel__{${uniqueName('late')}}`;
    let open = false;
    const look = (value: string) => (): Promise<{ done: true; value: string } | { done: false }> =>
      Promise.resolve(open ? { done: true, value } : { done: false });
    const start = performance.now();
    // A waiter that stays in the queue throughout (it waits for something else), keeping it subscribed.
    const stayer = waitFor(waits, channel, { wake: 'zero' }, start + 3000, undefined, () =>
      Promise.resolve({ done: false } as const),
    );
    try {
      // While B's first look at the count is in flight, the queue subscribes, the count reaches zero and its
      // waiters are woken: B's look read the count before that, and B joins the queue only afterwards.
      const late = waitFor(waits, channel, { wake: 'zero' }, start + 3000, undefined, async () => {
        if (open) return { done: true, value: 'B' };
        await vi.waitUntil(() => waits.isSubscribed(channel), { timeout: 2000, interval: 5 });
        const first = waitFor(waits, channel, { wake: 'zero' }, start + 3000, undefined, look('A'));
        open = true;
        await publishRelease(redis.admin, channel, '0');
        expect(await first).toBe('A');
        return { done: false };
      });
      // Without asking again B would park for a message that already came (here: until its 3 s deadline).
      expect(await late).toBe('B');
      expect(elapsedSince(start)).toBeLessThan(2500);
    } finally {
      await waits.close();
      await stayer.catch(() => undefined);
    }
  });
});
