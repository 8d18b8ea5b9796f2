// Conformance of the Redis seam (src/redis/adapter.ts): every adapter, on every client library, against the
// same real Redis (the fixture's topology), whatever REDIS_CLIENT says. What the lock code above relies on:
// scripts by SHA with EVAL on NOSCRIPT, replies decoded alike whatever the user's client decodes, a client
// keyPrefix honoured for keys while channels go by their server-side names, a subscriber that reports
// reconnects, WAIT on the slot master's connection, and nothing left behind on the user's client.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis as IoredisRedis } from 'ioredis';
import { Redis as Ioredis6Redis } from 'ioredis6';
import { Redis as ValkeyRedis } from 'iovalkey';
import { createClient as createClient6, createCluster, createSentinel, RESP_TYPES } from 'redis';
import { createClient as createClient5 } from 'redis5';
import type { GlideClient, GlideClusterClient } from '@valkey/valkey-glide';
import { describe, expect, it } from 'vitest';
import { createLockClient, type RedisClient } from '../../src/index.js';
import { adaptClient, type PubSubMode, type RedisAdapter } from '../../src/redis/adapter.js';
import { luaSources } from '../../src/redis/lua-scripts.generated.js';
import { newTestClient, type ClientKind, type ClientOptions } from '../support/clients.js';
import { everyNode, isCluster, masterOf, onCluster, uniqueName, useRedis } from '../support/fixture.js';
import { TcpProxy } from '../support/proxy.js';

const redis = useRedis();
const KINDS: readonly ClientKind[] = ['ioredis5', 'ioredis6', 'iovalkey', 'node-redis5', 'node-redis6', 'glide'];

// Compile-time part: every library's client type is accepted as it is, without casts (tsc checks this file).
export function typesAccepted(glide: GlideClient, glideCluster: GlideClusterClient): void {
  const accept = (client: RedisClient): RedisClient => client;
  accept(new IoredisRedis({ lazyConnect: true }));
  accept(new Ioredis6Redis({ lazyConnect: true }));
  accept(new ValkeyRedis({ lazyConnect: true }));
  accept(createClient6());
  accept(createClient5());
  accept(createCluster({ rootNodes: [] }));
  accept(createSentinel({ name: 'm', sentinelRootNodes: [] }));
  accept(createClient6({ RESP: 3, commandOptions: { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } } }));
  accept(glide);
  accept(glideCluster);
}

/** An adapter on a new client of `kind`, closed after the test. */
function adapterOn(kind: ClientKind, options: ClientOptions = {}): { adapter: RedisAdapter; client: RedisClient } {
  const created = newTestClient(redis.target, options, kind);
  cleanups.push(() => created.close());
  return { adapter: adaptClient(created.client, 'redis'), client: created.client };
}

const cleanups: (() => Promise<unknown>)[] = [];
async function cleanUp(): Promise<void> {
  for (const step of cleanups.splice(0).reverse()) await step().catch(() => undefined);
}

/** A script that returns what it was given, and a nested array with an integer, a nil and a string. */
const echo = {
  source: "return {KEYS[1], ARGV[1], tonumber(ARGV[2]), {7, false, 'x'}, redis.call('TYPE', KEYS[1]).ok}",
  sha1: '',
};
echo.sha1 = (await import('node:crypto')).createHash('sha1').update(echo.source).digest('hex');

/** Subscriber connections of `channel`: of its shard on a cluster's sharded pub/sub, else of every node. */
async function subscribers(channel: string, mode: PubSubMode): Promise<number> {
  const admin = redis.admin;
  const nodes = mode === 'sharded' && isCluster(admin) ? [masterOf(admin, channel)] : everyNode(admin);
  const replies = await Promise.all(
    nodes.map((node) => (mode === 'sharded' ? node.pubsub('SHARDNUMSUB', channel) : node.pubsub('NUMSUB', channel))),
  );
  return replies.reduce<number>((sum, reply) => sum + Number((reply as [string, number | string])[1]), 0);
}

/** Clients (CLIENT LIST entries) connected to every node. */
async function connections(): Promise<number> {
  const lists = await Promise.all(everyNode(redis.admin).map((node) => node.client('LIST')));
  return lists.reduce<number>((sum, list) => sum + String(list).trim().split('\n').length, 0);
}

describe.each(KINDS)('adapter conformance: %s', (kind) => {
  const sharded: PubSubMode = onCluster && kind !== 'iovalkey' ? 'sharded' : 'classic';

  it('is detected by shape, with its topology, prefix and pub/sub ability', async () => {
    const { adapter } = adapterOn(kind);
    expect(adapter.library).toBe(kind === 'glide' ? 'glide' : kind.startsWith('node-redis') ? 'node-redis' : 'ioredis');
    expect(adapter.topology).toBe(onCluster ? 'cluster' : 'standalone');
    expect(adapter.keyPrefix).toBe('');
    expect(adapter.shardedPubSub).toBe(onCluster && kind !== 'iovalkey');
    // GLIDE has no keyPrefix.
    if (kind === 'glide') return cleanUp();
    const prefixed = adapterOn(kind, { keyPrefix: 'app:' }).adapter;
    // node-redis has keyPrefix from 6.1 on; 5.x ignores the option.
    expect(prefixed.keyPrefix).toBe(kind === 'node-redis5' ? '' : 'app:');
    await cleanUp();
  });

  it('runs a script by SHA, and by EVAL on NOSCRIPT; replies decode alike', async () => {
    const { adapter } = adapterOn(kind);
    const key = `{${uniqueName('conf')}}:k`;
    await redis.admin.set(key, 'v');
    for (const node of everyNode(redis.admin)) await node.script('FLUSH').catch(() => undefined);
    const expected = [key, 'arg', 42, [7, null, 'x'], 'string'];
    // NOSCRIPT, then EVAL of the same script on the same route; then the server knows it: EVALSHA.
    expect(await adapter.evalScript(echo, [key], ['arg', 42], false)).toEqual(expected);
    expect(await adapter.evalScript(echo, [key], [Buffer.from('arg'), 42], false)).toEqual(expected);
    expect(await adapter.evalScript(echo, [key], ['arg', '42'], true)).toEqual(expected);
    // The library's own scripts: the hold count of nobody is 0.
    expect(await adapter.evalScript(luaSources['lock/hold-count'], [`${key}:lock`], ['nobody'], false)).toEqual([0, 0]);
    await cleanUp();
  });

  it('reads plain commands alike, whatever the user decodes (node-redis type mapping, RESP3)', async () => {
    const key = uniqueName('plain');
    await redis.admin.hset(key, 'a', '1', 'b', '2');
    await redis.admin.pexpire(key, 60_000);
    await redis.admin.set(`${key}:s`, 'text');
    const adapters = [adapterOn(kind).adapter];
    if (kind.startsWith('node-redis') && !onCluster) {
      // A user's client that maps strings to Buffers and numbers to strings.
      const target = redis.target as { host: string; port: number };
      const create = (kind === 'node-redis5' ? createClient5 : createClient6) as (options: never) => unknown;
      const mapped = create({
        socket: { host: target.host, port: target.port },
        RESP: 3,
        commandOptions: { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer, [RESP_TYPES.NUMBER]: String } },
      } as never) as ReturnType<typeof createClient6>;
      mapped.on('error', () => undefined);
      await mapped.connect();
      cleanups.push(() => mapped.close());
      adapters.push(adaptClient(mapped, 'redis'));
    }
    for (const adapter of adapters) {
      expect(await adapter.get(`${key}:s`)).toBe('text');
      expect(await adapter.get(`${key}:missing`)).toBeNull();
      expect(await adapter.hget(key, 'a')).toBe('1');
      expect(await adapter.hget(key, 'z')).toBeNull();
      expect(await adapter.hgetall(key)).toEqual({ a: '1', b: '2' });
      expect(await adapter.hgetall(`${key}:missing`)).toEqual({});
      expect(await adapter.exists(key)).toBe(true);
      expect(await adapter.exists(`${key}:missing`)).toBe(false);
      const pttl = await adapter.pttl(key);
      expect(pttl).toBeGreaterThan(50_000);
      expect(pttl).toBeLessThanOrEqual(60_000);
      expect(await adapter.pttl(`${key}:missing`)).toBe(-2);
      expect(await adapter.info('server')).toMatch(/^redis_version:\d/m);
      expect(await adapter.evalScript(echo, [key], ['arg', 1], false)).toEqual([key, 'arg', 1, [7, null, 'x'], 'hash']);
    }
    await cleanUp();
  });

  it.skipIf(kind === 'node-redis5' || kind === 'glide')(
    'honours a client keyPrefix: keys as the server sees them',
    async () => {
      const { adapter } = adapterOn(kind, { keyPrefix: 'app:' });
      const key = `app:{${uniqueName('prefix')}}:k`;
      await redis.admin.set(key, 'v');
      expect(await adapter.get(key)).toBe('v');
      // KEYS[1] reaches the script with the prefix, as the server names the key.
      expect(await adapter.evalScript(echo, [key], ['a', 1], false)).toEqual([key, 'a', 1, [7, null, 'x'], 'string']);
      await expect(adapter.get('other:key')).rejects.toThrow(/does not start with the client's keyPrefix "app:"/);
      await cleanUp();
    },
  );

  it('subscribes by server-side channel name, reports messages, and closes what it opened', async () => {
    const before = await connections();
    const { adapter } = adapterOn(kind, {
      keyPrefix: kind === 'node-redis5' || kind === 'glide' ? undefined : 'app:',
    } as ClientOptions);
    const channel = `app:redisson_lock__channel:{${uniqueName('sub')}}`;
    const messages: [string, string][] = [];
    const subscriber = adapter.openSubscriber(sharded, {
      message: (ch, message) => messages.push([ch, message]),
      restored: () => undefined,
      lost: () => undefined,
    });
    await subscriber.subscribe([channel]);
    // Subscribing again is harmless: one message is reported once.
    await subscriber.subscribe([channel]);
    const publish = (message: string): Promise<unknown> =>
      sharded === 'sharded' && isCluster(redis.admin)
        ? masterOf(redis.admin, channel).spublish(channel, message)
        : redis.admin.publish(channel, message);
    await publish('0');
    await expect.poll(() => messages.length, { timeout: 10_000, interval: 10 }).toBe(1);
    expect(messages[0]).toEqual([channel, '0']);
    await subscriber.unsubscribe([channel]);
    await publish('1');
    await sleep(100);
    expect(messages).toHaveLength(1);
    subscriber.close();
    await cleanUp();
    await expect.poll(connections, { timeout: 5000, interval: 50 }).toBeLessThanOrEqual(before);
  });

  it('ends its subscriptions on the server at close()', async () => {
    // GLIDE's close() leaves the connections to its core, which drops them up to 3 s later: a subscription
    // would outlive close() that long (PUBSUB NUMSUB, the CLI), unless the subscriber unsubscribes first.
    // Three rounds: each closes at another moment of GLIDE's 3 s cycle, 700 ms apart, so that a drop left to
    // that cycle takes over 1 s in at least one of them (the bound below, with room for a loaded machine).
    for (let round = 0; round < 3; round++) {
      const { adapter } = adapterOn(kind);
      const channel = `redisson_lock__channel:{${uniqueName('closing')}}`;
      const subscriber = adapter.openSubscriber(sharded, {
        message: () => undefined,
        restored: () => undefined,
        lost: () => undefined,
      });
      await subscriber.subscribe([channel]);
      expect(await subscribers(channel, sharded)).toBe(1);
      await sleep(round * 700);
      subscriber.close();
      await expect.poll(() => subscribers(channel, sharded), { timeout: 1000, interval: 20 }).toBe(0);
    }
    await cleanUp();
  });

  /** A classic-channel subscriber of the client under test whose connections go through a proxy. */
  async function proxiedSubscriber() {
    const proxy = await TcpProxy.start(redis.server.port);
    cleanups.push(() => proxy.close());
    const { adapter } = adapterOn(kind, { port: proxy.port });
    const subscriber = adapter.openSubscriber('classic', {
      message: () => undefined,
      restored: () => undefined,
      lost: () => undefined,
    });
    cleanups.push(() => Promise.resolve(subscriber.close()));
    return { proxy, subscriber };
  }

  it.skipIf(onCluster)(
    'subscribes to a channel again only after its unsubscribe in flight settled, and not once unsubscribed meanwhile',
    async () => {
      // GLIDE's subscribe call returns as soon as its core counts the channel subscribed, and an UNSUBSCRIBE
      // still in flight leaves it counted: the subscribe returned at once, the UNSUBSCRIBE then took the
      // channel away, and its core put it back only at its next reconciliation, seconds later (the GLIDE
      // model test's waiters slept out the holder's lease meanwhile). Replies come 100 ms late here, so an
      // unsubscribe is in flight that long. Connections that keep their order (ioredis, node-redis) settle the
      // two in order anyway.
      const { proxy, subscriber } = await proxiedSubscriber();
      const channel = `redisson_lock__channel:{${uniqueName('again')}}`;
      await subscriber.subscribe([channel]);
      proxy.latency.toClient = 100;
      const settled: string[] = [];
      const leaving = subscriber.unsubscribe([channel]).finally(() => settled.push('unsubscribe'));
      leaving.catch(() => undefined); // awaited below
      await sleep(20);
      await subscriber.subscribe([channel]);
      settled.push('subscribe');
      await leaving;
      expect(settled).toEqual(['unsubscribe', 'subscribe']);
      proxy.latency.toClient = 0;
      await sleep(200);
      expect(await subscribers(channel, 'classic')).toBe(1);
      // And a subscribe that waits so, then unsubscribed before it went out, is not sent after that
      // unsubscribe: the channel would stay subscribed with nobody listening (a storm of aborted waits, T8).
      proxy.latency.toClient = 100;
      const leavingAgain = subscriber.unsubscribe([channel]);
      leavingAgain.catch(() => undefined); // awaited below
      await sleep(20);
      const subscribing = subscriber.subscribe([channel]);
      subscribing.catch(() => undefined); // awaited below
      await subscriber.unsubscribe([channel]);
      await Promise.allSettled([leavingAgain, subscribing]);
      proxy.latency.toClient = 0;
      await sleep(200);
      expect(await subscribers(channel, 'classic')).toBe(0);
      await cleanUp();
    },
  );

  // GLIDE's subscribe waits at most 5 s for the server's confirmation; the others wait as long as it takes.
  it.runIf(!onCluster && kind === 'glide')(
    'leaves no subscription behind for a subscribe that timed out',
    async () => {
      // Its SUBSCRIBE reached the server, only the confirmation came too late, and GLIDE's core keeps wanting
      // the channel: unless withdrawn, it stays subscribed with nobody listening (PUBSUB NUMSUB and the CLI's
      // counts then lie, and each such channel stays until the client closes).
      const { proxy, subscriber } = await proxiedSubscriber();
      // The subscriber's connection is up before replies are held back.
      const warm = `redisson_lock__channel:{${uniqueName('warm')}}`;
      await subscriber.subscribe([warm]);
      const channel = `redisson_lock__channel:{${uniqueName('late')}}`;
      proxy.latency.toClient = 6000;
      await expect(subscriber.subscribe([channel])).rejects.toThrow();
      proxy.latency.toClient = 0;
      await expect.poll(() => subscribers(channel, 'classic'), { timeout: 10_000, interval: 100 }).toBe(0);
      // And not again at the core's next reconciliation of what it wants with what it has.
      await sleep(6000);
      expect(await subscribers(channel, 'classic')).toBe(0);
      expect(await subscribers(warm, 'classic')).toBe(1);
      await cleanUp();
    },
    40_000,
  );

  it('closes a subscriber that is still connecting: nothing of it stays open', async () => {
    const before = await connections();
    const { adapter } = adapterOn(kind);
    const subscriber = adapter.openSubscriber(sharded, {
      message: () => undefined,
      restored: () => undefined,
      lost: () => undefined,
    });
    const subscribing = subscriber.subscribe([`redisson_lock__channel:{${uniqueName('early')}}`]);
    subscribing.catch(() => undefined);
    subscriber.close();
    await cleanUp();
    await expect.poll(connections, { timeout: 5000, interval: 50 }).toBeLessThanOrEqual(before);
    // And it stays closed: a socket still being opened at close() must not open for good afterwards.
    await sleep(500);
    expect(await connections()).toBeLessThanOrEqual(before);
  });

  // Not on GLIDE: it has no connection events, and its subscriber client's pub/sub connection is not the one
  // whose CLIENT ID the adapter can ask; a reconnect that GLIDE's core repairs between two subscription
  // checks goes unreported (one run in two here; docs/clients.md says so). Its subscriber is re-checked by the
  // GLIDE fault test (faults/glide.test.ts), and waiters re-check their locks on their own timers.
  it.skipIf(onCluster || kind === 'glide')(
    'reports a reconnect of its subscriber (messages may have been lost), subscribed again',
    async () => {
      const { adapter } = adapterOn(kind, { reconnectMs: 50 });
      const channel = `redisson_lock__channel:{${uniqueName('restore')}}`;
      const restored: boolean[] = [];
      const messages: string[] = [];
      const subscriber = adapter.openSubscriber('classic', {
        message: (_ch, message) => messages.push(message),
        restored: (subscribed) => restored.push(subscribed),
        lost: () => undefined,
      });
      cleanups.push(() => Promise.resolve(subscriber.close()));
      await subscriber.subscribe([channel]);
      await redis.admin.client('KILL', 'TYPE', 'pubsub');
      await expect.poll(() => restored.length, { timeout: 5000, interval: 20 }).toBeGreaterThan(0);
      expect(restored.every(Boolean)).toBe(true);
      await expect
        .poll(
          async () => {
            await redis.admin.publish(channel, 'again');
            return messages.length;
          },
          { timeout: 5000, interval: 100 },
        )
        .toBeGreaterThan(0);
      await cleanUp();
    },
  );

  it('sends WAIT on the connection to the slot master, and counts its closes', async () => {
    const { adapter } = adapterOn(kind, { reconnectMs: 50 });
    const key = uniqueName('wait');
    // The connection opens with the first command (and, on a cluster, the slots are known then).
    await adapter.evalScript(echo, [key], ['a', 1], false);
    const connection = adapter.masterConnection(key);
    if (!connection) throw new Error('no master connection');
    expect(adapter.masterConnection(key)).toBe(connection);
    const closes = connection.closes;
    // A replica on a cluster acknowledges; a standalone server has none (0 at once with timeout 1).
    const acknowledged = await connection.wait(onCluster ? 1 : 0, 1000);
    expect(acknowledged).toBe(onCluster ? 1 : 0);
    for (const node of everyNode(redis.admin)) await node.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    await expect
      .poll(
        async () => {
          // GLIDE reconnects without a word: the next WAIT finds the connection's CLIENT ID changed.
          await (kind === 'glide' ? connection.wait(0, 10) : adapter.get(key)).catch(() => undefined);
          return connection.closes;
        },
        { timeout: 5000, interval: 50 },
      )
      .toBeGreaterThan(closes);
    adapter.dispose();
    await cleanUp();
  });

  it.runIf(onCluster)('routes WAIT to the master of the key’s slot only', async () => {
    const { adapter } = adapterOn(kind);
    const key = uniqueName('route');
    await adapter.evalScript(echo, [key], ['a', 1], false);
    if (!isCluster(redis.admin)) throw new Error('not a cluster');
    const owner = masterOf(redis.admin, key);
    const masters = redis.admin.nodes('master');
    const waits = async (): Promise<number[]> =>
      Promise.all(
        masters.map(async (node) => Number(/cmdstat_wait:calls=(\d+)/.exec(await node.info('commandstats'))?.[1] ?? 0)),
      );
    const before = await waits();
    await adapter.masterConnection(key)?.wait(1, 1000);
    const after = await waits();
    const ownerIndex = masters.indexOf(owner);
    expect(after.map((n, i) => n - (before[i] ?? 0))).toEqual(masters.map((_, i) => (i === ownerIndex ? 1 : 0)));
    await cleanUp();
  });

  // GLIDE shows no connection state, and reconnects at once: only a failed call says 'down'.
  it.skipIf(onCluster || kind === 'glide')('tells ready from connecting and down', async () => {
    const { adapter } = adapterOn(kind, { reconnectMs: false });
    await adapter.get(uniqueName('ready'));
    // node-redis may answer a command queued while connecting a moment before it calls itself ready.
    await expect.poll(() => adapter.readiness(), { timeout: 5000, interval: 10 }).toBe('ready');
    for (const node of everyNode(redis.admin)) await node.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    await expect.poll(() => adapter.readiness(), { timeout: 5000, interval: 20 }).not.toBe('ready');
    await cleanUp();
  });

  it('leaves the user’s client as it was: same listeners, no commands defined, open after close()', async () => {
    const { adapter: before, client } = adapterOn(kind);
    // The client's own lazily created state exists after its first command.
    await before.get(uniqueName('first'));
    const emitter = client as unknown as {
      eventNames(): (string | symbol)[];
      listenerCount(e: string | symbol): number;
    };
    // A GLIDE client is no event emitter.
    const listeners = (): number =>
      kind === 'glide' ? 0 : emitter.eventNames().reduce((n, e) => n + emitter.listenerCount(e), 0);
    const ownKeys = Object.keys(client).sort();
    const listenersBefore = listeners();
    const locks = createLockClient(client, {
      syncReplicas: onCluster ? { replicas: 1, timeout: 1000 } : undefined,
    } as never);
    const name = uniqueName('untouched');
    const waiting = locks.run(async () => {
      const lease = await locks.getLock(name).acquire();
      await sleep(20);
      await lease.release();
    });
    await locks.run(() => locks.getLock(name).tryLock(2000, 1000));
    await waiting;
    await locks.close();
    expect(listeners()).toBe(listenersBefore);
    expect(Object.keys(client).sort()).toEqual(ownKeys);
    expect(await before.get(name)).toBeNull();
    await cleanUp();
  });

  it('reaches every node for flowlock/admin: keyless calls, batches by server-side key names, binary replies', async () => {
    const { adapter } = adapterOn(kind, {
      keyPrefix: kind === 'node-redis5' || kind === 'glide' ? undefined : 'app:',
    } as ClientOptions);
    const nodes = adapter.adminNodes();
    expect(nodes.database).toBe(0);
    const masters = await nodes.masters();
    expect(masters).toHaveLength(onCluster ? 3 : 1);
    for (const node of masters) expect(node.address).toMatch(/^[\w.:[\]-]+:\d+$/);
    const all = await nodes.all();
    expect(all.length).toBe(onCluster ? 6 : 1);
    expect(all.map((node) => node.address)).toEqual(expect.arrayContaining(masters.map((node) => node.address)));
    // Replicas too, whether the client keeps a connection to them or not.
    expect((await Promise.all(all.map((node) => node.call(['PING'])))).map(String)).toEqual(all.map(() => 'PONG'));
    // Keys as the server names them (with the client's prefix, where it has one), all in one slot.
    const tag = `{${uniqueName('admin')}}`;
    const [hash, zset, text] = [`app:${tag}:h`, `app:${tag}:z`, `app:${tag}:s`];
    await redis.admin.hset(hash, 'a', '1', 'b', '2');
    await redis.admin.zadd(zset, 1, Buffer.from([0xff, 0x00, 0x41]));
    await redis.admin.set(text, 'v');
    const owner = await nodes.masterOf(hash);
    if (isCluster(redis.admin)) {
      const { host, port } = masterOf(redis.admin, hash).options;
      expect(owner.address).toBe(`${host}:${port}`);
    }
    const [seconds] = (await owner.call(['TIME'])) as unknown[];
    expect(Number(seconds)).toBeGreaterThan(1_700_000_000);
    expect(Number(await owner.call(['DBSIZE']))).toBeGreaterThanOrEqual(3);
    const scanned: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = (await owner.call(['SCAN', cursor, 'MATCH', `app:${tag}:*`, 'COUNT', 1000])) as [
        unknown,
        unknown[],
      ];
      cursor = String(next);
      scanned.push(...keys.map(String));
    } while (cursor !== '0');
    expect(scanned.sort()).toEqual([hash, text, zset]);
    for (const atomic of [true, false]) {
      const replies = await owner.batch(
        [['HGETALL', hash], ['ZRANGE', zset, 0, -1], ['PTTL', hash], ['HGET', text, 'a'], ['TIME']],
        atomic,
        new Set([1]),
      );
      const pairs = replies[0]?.value;
      const entries = pairs instanceof Map ? [...pairs] : Array.isArray(pairs) ? pairs : Object.entries(pairs ?? {});
      expect(entries.flat().map(String)).toEqual(['a', '1', 'b', '2']);
      expect(replies[1]?.value).toEqual([Buffer.from([0xff, 0x00, 0x41])]);
      expect(Number(replies[2]?.value)).toBe(-1);
      // One command's error is that command's reply; the others still come.
      expect(replies[3]?.error?.message).toMatch(/WRONGTYPE/);
      expect((replies[4]?.value as unknown[]).length).toBe(2);
    }
    await cleanUp();
  });

  it('listens on a node for flowlock/admin: patterns, channels, shard channels; closes what it opened', async () => {
    const before = await connections();
    const { adapter } = adapterOn(kind, {
      keyPrefix: kind === 'node-redis5' || kind === 'glide' ? undefined : 'app:',
    } as ClientOptions);
    const nodes = adapter.adminNodes();
    const name = uniqueName('listen');
    const [pattern, plain, shard] = [`app:${name}:p:*`, `app:${name}:c`, `app:{${name}}:s`];
    const owner = await nodes.masterOf(shard);
    const [first] = await nodes.masters();
    if (!first) throw new Error('no master');
    const heard: [string, string][] = [];
    let closed = 0;
    const events = {
      message: (channel: string, message: string) => heard.push([channel, message]),
      closed: () => closed++,
    };
    const listener = first.listen(events);
    await listener.psubscribe([pattern]);
    await listener.subscribe([plain]);
    const sharded = owner.listen(events);
    if (onCluster && kind !== 'iovalkey') await sharded.ssubscribe([shard]);
    await redis.admin.publish(`app:${name}:p:1`, 'one');
    await redis.admin.publish(plain, 'two');
    if (isCluster(redis.admin) && kind !== 'iovalkey') await masterOf(redis.admin, shard).spublish(shard, 'three');
    const expected: [string, string][] = [
      [`app:${name}:p:1`, 'one'],
      [plain, 'two'],
    ];
    if (onCluster && kind !== 'iovalkey') expected.push([shard, 'three']);
    await expect.poll(() => heard.length, { timeout: 10_000, interval: 10 }).toBe(expected.length);
    expect(heard.sort()).toEqual(expected.sort());
    listener.close();
    sharded.close();
    await cleanUp();
    await expect.poll(connections, { timeout: 5000, interval: 50 }).toBeLessThanOrEqual(before);
    expect(closed).toBe(0);
  });
});
