import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import { LockClientClosedError } from '../../src/index.js';
import { latchKeys } from '../../src/redis/keys.js';
import { LockScripts, MEMO_MS } from '../../src/redis/scripts.js';
import {
  channelSubscribers,
  commandCalls,
  elapsedSince,
  everyNode,
  onCluster,
  uniqueName,
  until,
  untilQuiet,
  useRedis,
} from '../support/fixture.js';
import { recordFigures } from '../support/figures.js';
import { TcpProxy } from '../support/proxy.js';
import { RedissonCountDownLatch } from '../support/redisson.js';

const redis = useRedis();

const keysOf = (name: string) => latchKeys('', name, onCluster);

function track<T>(promise: Promise<T>): { done: boolean; value?: T; error?: unknown; at?: number } {
  const state: { done: boolean; value?: T; error?: unknown; at?: number } = { done: false };
  promise.then(
    (value) => Object.assign(state, { done: true, value, at: performance.now() }),
    (error: unknown) => Object.assign(state, { done: true, error, at: performance.now() }),
  );
  return state;
}

describe('RCountDownLatch', () => {
  it("counts down Redisson's key: trySetCount, countDown, getCount, await", async () => {
    const name = uniqueName('latch');
    const latch = redis.locks().getCountDownLatch(name);
    expect(await latch.getCount()).toBe(0);
    expect(await latch.await()).toBe(true);
    expect(await latch.trySetCount(2)).toBe(true);
    expect(await latch.trySetCount(5)).toBe(false);
    expect(await redis.admin.get(name)).toBe('2');
    const start = performance.now();
    expect(await latch.await(100)).toBe(false);
    expect(elapsedSince(start)).toBeGreaterThanOrEqual(95);
    await latch.countDown();
    expect(await latch.getCount()).toBe(1);
    await latch.countDown();
    expect(await latch.getCount()).toBe(0);
    expect(await redis.admin.exists(name)).toBe(0);
    await latch.countDown(); // no effect once open
    expect(await redis.admin.exists(name)).toBe(0);
    expect(await latch.await({ waitTime: 0 })).toBe(true);
    expect(await latch.trySetCount(1)).toBe(true);
  });

  it('wakes every waiter of every client when the count reaches zero, without polling meanwhile', async () => {
    const name = uniqueName('latch');
    const counter = redis.locks().getCountDownLatch(name);
    await counter.trySetCount(2);
    const clients = Array.from({ length: 3 }, () => redis.locks());
    const waiters = clients.flatMap((locks) => {
      const latch = locks.getCountDownLatch(name);
      return Array.from({ length: 3 }, () => track(latch.await()));
    });
    const gets = async (): Promise<number> => (await commandCalls(redis.admin))['get'] ?? 0;
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 3,
      'a subscriber connection per client',
    );
    // Each client's subscription settles when it reads the SUBSCRIBE reply, and its waiters then ask once more
    // (a zero may have gone unseen before): wait for that, and for those asks to be over, before counting.
    await until(
      () => clients.every((locks) => locks.waits().some((w) => w.waiters > 0 && w.subscription === 'active')),
      'every client parked on an active subscription',
    );
    const before = await untilQuiet(gets, 'GET calls');
    const quietFrom = performance.now();
    await counter.countDown(); // "1" left: nobody wakes, nobody asks
    await sleep(300);
    // Under sharded pub/sub each parked waiter re-checks every 2 s (a slot migration drops subscriptions
    // silently): one ask per waiter per 2 s begun there, if the clients' subscriptions settled apart; none on
    // a standalone server.
    expect((await gets()) - before).toBeLessThanOrEqual(
      onCluster ? waiters.length * Math.ceil(elapsedSince(quietFrom) / 2000) : 0,
    );
    expect(waiters.some((w) => w.done)).toBe(false);
    await counter.countDown();
    const opened = performance.now();
    await until(() => waiters.every((w) => w.done), 'every waiter woke');
    expect(waiters.every((w) => w.value === true)).toBe(true);
    // Unwoken, a waiter would never return (on a cluster: not before its 2 s re-check); the message wakes
    // all nine within milliseconds (the figure records it). 800 ms tells the two apart on a loaded machine.
    const slowestWakeMs = Math.max(...waiters.map((w) => (w.at ?? Infinity) - opened));
    recordFigures('latch: 9 waiters on 3 clients woken by the zero', { slowestWakeMs: Math.round(slowestWakeMs) });
    expect(slowestWakeMs).toBeLessThan(800);
  });

  it('re-checks after the subscriber reconnects: a zero reached meanwhile is not missed', async () => {
    const name = uniqueName('latch');
    const counter = redis.locks().getCountDownLatch(name);
    await counter.trySetCount(1);
    const waiter = track(redis.locks().getCountDownLatch(name).await(10_000));
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
      'the waiter subscribed',
    );
    for (const node of everyNode(redis.admin)) await node.client('KILL', 'TYPE', 'pubsub').catch(() => 0);
    await counter.countDown();
    const start = performance.now();
    await until(() => waiter.done, 'the waiter saw the zero');
    expect(waiter.value).toBe(true);
    expect(elapsedSince(start)).toBeLessThan(2000);
  });

  it.runIf(!onCluster)(
    'keeps waiting when the reply to its look at the count is lost with its connection',
    async () => {
      // ioredis sends such a read again by itself; node-redis and GLIDE reject it (the GLIDE model found that
      // await() then rejected with GLIDE's ConnectionError).
      const name = uniqueName('latch');
      const proxy = await TcpProxy.start(redis.server.port);
      onTestFinished(() => proxy.close());
      const counter = redis.locks().getCountDownLatch(name);
      await counter.trySetCount(1);
      const latch = redis.locks({}, { port: proxy.port }).getCountDownLatch(name);
      expect(await latch.getCount()).toBe(1);
      proxy.dropNextReplies(1);
      const waiter = track(latch.await(10_000));
      await until(() => proxy.pendingDrops === 0, 'the reply to the look was dropped');
      await until(
        async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
        'the waiter subscribed',
      );
      expect(waiter.done).toBe(false);
      await counter.countDown();
      await until(() => waiter.done, 'the waiter saw the zero');
      expect(waiter.error).toBeUndefined();
      expect(waiter.value).toBe(true);
    },
  );

  it('answers a resent count-down from its memo: a reconnect never counts down twice', async () => {
    const name = uniqueName('latch');
    const { lockKey, channel, countDownMemoPrefix } = keysOf(name);
    const scripts = new LockScripts(redis.adapter());
    const publish = onCluster ? 'SPUBLISH' : 'PUBLISH';
    await redis.admin.set(lockKey, 3);
    const countDown = (id: string) =>
      scripts.run('count-down-latch/count-down', [lockKey, channel, countDownMemoPrefix + id], [MEMO_MS, publish]);
    expect(await countDown('a')).toBe(2);
    expect(await countDown('a')).toBe(2);
    expect(await countDown('b')).toBe(1);
    expect(await redis.admin.get(lockKey)).toBe('1');
  });

  it('ends waits on abort and close, leaving no subscription', async () => {
    const name = uniqueName('latch');
    const locks = redis.locks();
    const latch = locks.getCountDownLatch(name);
    await latch.trySetCount(1);
    const controller = new AbortController();
    const aborted = expect(latch.await({ signal: controller.signal })).rejects.toThrow('stop');
    setTimeout(() => controller.abort(new Error('stop')), 50);
    await aborted;
    const closed = expect(latch.await()).rejects.toThrow(LockClientClosedError);
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
      'the waiter subscribed',
    );
    await locks.close();
    await closed;
    // The subscriber connection is closed; the server notices a moment later (on a loaded machine, later still).
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 0,
      'the server dropped the closed subscriber connection',
      5000,
    );
    await expect(latch.countDown()).rejects.toThrow(LockClientClosedError);
  });

  it('works for a name with braces of its own (on a Cluster its channel then carries the count’s slot)', async () => {
    const name = `{${uniqueName('tag')}}latch`;
    const latch = redis.locks().getCountDownLatch(name);
    await latch.trySetCount(1);
    const waiter = track(redis.locks().getCountDownLatch(name).await(5000));
    await until(
      async () => (await channelSubscribers(redis.admin, keysOf(name).channel)) === 1,
      'the waiter subscribed',
    );
    expect(keysOf(name).channel).toBe(
      onCluster
        ? `redisson_countdownlatch__channel__{${name.slice(1, name.indexOf('}'))}}:${name}`
        : `redisson_countdownlatch__channel__{${name}}`,
    );
    await latch.countDown();
    await until(() => waiter.done, 'the waiter saw the zero');
    expect(waiter.value).toBe(true);
  });

  describe('with Redisson (played through its protocol)', () => {
    it('a Java count-down wakes our waiters and ours wakes Java’s', async () => {
      const name = uniqueName('latch');
      const java = new RedissonCountDownLatch(redis.admin, name);
      expect(java.channel).toBe(keysOf(name).channel);
      expect(await java.trySetCount(2)).toBe(true);
      const latch = redis.locks().getCountDownLatch(name);
      expect(await latch.getCount()).toBe(2);
      expect(await latch.trySetCount(3)).toBe(false);
      const ours = track(latch.await(5000));
      const javaWaiting = new RedissonCountDownLatch(redis.admin, name).await(5000);
      await until(async () => (await channelSubscribers(redis.admin, java.channel)) === 2, 'both waiters subscribed');
      await java.countDown();
      await latch.countDown();
      expect(await javaWaiting).toBe(true);
      await until(() => ours.done, 'our waiter saw the zero');
      expect(ours.value).toBe(true);
      // And the other way round: our count reaching zero opens a Java waiter.
      await latch.trySetCount(1);
      const again = new RedissonCountDownLatch(redis.admin, name).await(5000);
      await until(
        async () => (await channelSubscribers(redis.admin, java.channel)) === 1,
        'the Java waiter subscribed',
      );
      await latch.countDown();
      expect(await again).toBe(true);
    });
  });
});
