// The lock on a 3-master Redis Cluster (one replica each) through the cluster client of REDIS_CLIENT (an ioredis
// or iovalkey Cluster, a node-redis createCluster; T17's worker processes inherit REDIS_CLIENT): keys of one
// lock share a slot (no CROSSSLOT, also with a key prefix and braces in names), waiters are woken by
// sharded pub/sub (Redis 7), and the watchdog renews per slot.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLockClient, LockNotReplicatedError, type LockClient, type LockClientOptions } from '../../src/index.js';
import { keySlot, lockKeys } from '../../src/redis/keys.js';
import { clientKind, newTestClient, onNodeRedis } from '../support/clients.js';
import { newCluster, uniqueName, until, type Cluster } from '../support/fixture.js';
import {
  handoffGaps,
  overlaps,
  percentile,
  rwOverlaps,
  tokensRise,
  type KindedSection,
  type Section,
} from '../support/checkers.js';
import { recordFigures } from '../support/figures.js';
import {
  clusterMasters,
  clusterMastersAsync,
  migrateSlot,
  redisCli,
  redisCliAsync,
  slotOwner,
  slotOwnerAsync,
  startRedisCluster,
  type TestCluster,
} from '../support/redis-cluster.js';
import { serverMajor, startRedisServer } from '../support/redis-server.js';
import { startWorkers } from '../support/workers.js';

let cluster: TestCluster;
const cleanup: (() => unknown)[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster(3, 1);
}, 60_000);
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await Promise.resolve(step()).catch(() => undefined);
});
afterAll(async () => {
  await cluster.stop();
});

/** An ioredis Cluster client, for the test's own commands. */
function clusterClient(): Cluster {
  const client = newCluster(cluster);
  client.on('error', () => undefined);
  cleanup.push(() => {
    client.disconnect();
  });
  return client;
}

/**
 * Whether the lock's subscriber uses sharded pub/sub (SSUBSCRIBE) on this cluster: iovalkey's Cluster has no
 * sharded subscriptions, and the library subscribes by SUBSCRIBE there (its adapter's shardedPubSub).
 */
// Shard channels on a Redis 7+ cluster, classic ones below 7.0 and with iovalkey (as the library chooses).
const shardedPubSub = clientKind !== 'iovalkey' && serverMajor() >= 7;

/** The channels with a subscriber on the node at `port`: shard channels, or classic ones through iovalkey. */
async function lockChannelsOn(port: number): Promise<string[]> {
  const out = await redisCliAsync(port, 'pubsub', shardedPubSub ? 'shardchannels' : 'channels');
  return out.split('\n').filter(Boolean);
}

/** A lock client on a new cluster client under test, seeded with the masters. */
function locksOn(options: LockClientOptions = {}): LockClient {
  const client = newTestClient({ topology: 'cluster', nodes: cluster.nodes.slice(0, 3) });
  cleanup.push(() => client.close());
  const locks = createLockClient(client.client, options);
  cleanup.push(() => locks.close());
  return locks;
}

describe('Redis Cluster', () => {
  it('takes, re-enters and releases locks in many slots, with rising tokens', async () => {
    const locks = locksOn();
    const names = Array.from({ length: 30 }, (_, i) => `${uniqueName('cl')}:${i}`);
    expect(new Set(names.map((n) => keySlot(n))).size).toBeGreaterThan(10);
    for (const name of names) {
      await locks.getLock(name).withLock(async (_signal, outer) => {
        await locks.getLock(name).withLock(async (_s, inner) => {
          expect(inner.fencingToken).toBe(outer.fencingToken);
          expect(await locks.getLock(name).getHoldCount()).toBe(2);
        });
      });
      expect(await locks.getLock(name).isLocked()).toBe(false);
    }
  });

  it('works with a key prefix and names with braces (no CROSSSLOT reaches the caller)', async () => {
    const prefixed = locksOn({ keyPrefix: 'app:' });
    const plain = locksOn();
    for (const name of ['order:1', 'a{b}c', 'x}y', '{}', 'glob*?']) {
      for (const locks of [prefixed, plain]) {
        const lease = await locks.getLock(name).acquire({ leaseTime: 5000 });
        const waiting = locks.getLock(name).acquire({ leaseTime: 5000 });
        await sleep(50);
        await lease.release();
        await (await waiting).release();
        expect(await locks.getLock(name).forceUnlock()).toBe(false);
      }
    }
  });

  it('wakes a waiter of another client by the release message, not by its 2 s re-check', async () => {
    const holder = locksOn();
    const waiter = locksOn();
    const name = uniqueName('cl-wake');
    const lease = await holder.getLock(name).acquire({ leaseTime: 30_000 });
    let acquiredAt = 0;
    const waiting = waiter.getLock(name).withLock(() => {
      acquiredAt = performance.now();
    });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    // Redis 7 cluster: the waiter subscribed by sharded pub/sub, on the node that owns the lock's slot (by
    // SUBSCRIBE on some node through iovalkey, whose Cluster cannot subscribe to shard channels).
    const channel = `redisson_lock__channel:{${name}}`;
    const subscribed = async (): Promise<boolean> =>
      (await Promise.all(cluster.nodes.map((node) => lockChannelsOn(node.port)))).flat().includes(channel);
    await until(subscribed, 'the waiter subscribed to the lock channel');
    await until(() => waiter.waits()[0]?.subscription === 'active', 'the waiter parked on an active subscription');
    const releasedAt = performance.now();
    await lease.release();
    await waiting;
    // The waiter parked for at most CLUSTER_WAIT_MS (2 s) just now: a wake by its re-check comes that long after
    // it parked, so well over a second after the release; the message's wake comes in milliseconds (the
    // figure records it). 1 s tells the two apart on a loaded machine.
    recordFigures('cluster wake by release message', { wakeMs: Math.round(acquiredAt - releasedAt) });
    expect(acquiredAt - releasedAt).toBeLessThan(1000);
  });

  it('resends a script that the client gave up redirecting while two masters point at each other', async () => {
    const seed = cluster.nodes[0]?.port ?? 0;
    let name = uniqueName('pingpong');
    // An empty slot: a master refuses to hand over a slot that holds keys without migrating them.
    while (redisCli(seed, 'cluster', 'countkeysinslot', String(keySlot(name))) !== '0') name = uniqueName('pingpong');
    const slot = String(keySlot(name));
    const owner = slotOwner(seed, keySlot(name));
    const other = clusterMasters(seed).find((m) => m.id !== owner.id);
    if (!other) throw new Error('no second master');
    const locks = locksOn();
    await locks.getLock(uniqueName()).withLock(() => undefined); // connected, slots known
    // Redirected calls, on both masters: each sends the script on to the other, so one give-up of the client
    // (16 redirections) shows as more than 16 between them. Read without blocking the client's event loop.
    const rejected = async (): Promise<number> => {
      const stats = await Promise.all([owner, other].map((m) => redisCliAsync(m.port, 'info', 'commandstats')));
      return stats.reduce(
        (sum, info) => sum + Number(/cmdstat_evalsha:.*rejected_calls=(\d+)/.exec(info)?.[1] ?? 0),
        0,
      );
    };
    const rejectedBefore = await rejected();
    // The owner believes `other` has the slot, `other` still believes the owner has it: each answers MOVED
    // to the other (as at the end of a migration whose SETSLOT NODE reached the source first).
    redisCli(owner.port, 'cluster', 'setslot', slot, 'node', other.id);
    // How the call ended, if it did before the slot is put back: the caller must not see the give-up.
    let settled: string | undefined;
    const acquiring = locks.getLock(name).acquire();
    acquiring.then(
      () => (settled = 'acquired'),
      (error: unknown) => (settled = `rejected: ${String(error)}`),
    );
    let seen = 0;
    try {
      // The cluster client gives up after 16 redirections (ioredis' and node-redis' default): wait until it
      // has at least once, unseen by the caller (a call that ends meanwhile stops the wait and fails below,
      // with its error). Within 8 s: the library resends for 10 s (CLUSTER_RESEND_MS) with pauses of at most
      // 400 ms, so a give-up seen by then still gets the resend that succeeds once the slot is back (once, on
      // a loaded CI machine, the iovalkey leg saw fewer than 17 redirections in 5 s).
      await until(
        async () => settled !== undefined || (seen = (await rejected()) - rejectedBefore) > 16,
        'the cluster client gave up redirecting at least once',
        8000,
      ).catch((error: unknown) => {
        throw new Error(`${String(error)} (${seen} redirections so far)`);
      });
      expect(settled).toBeUndefined();
    } finally {
      redisCli(owner.port, 'cluster', 'setslot', slot, 'node', owner.id);
    }
    const lease = await acquiring;
    expect(lease.fencingToken).toBeGreaterThan(0n);
    await lease.release();
  });

  it('with syncReplicas, waits on the master that ran the grant when the slot moved unseen', async () => {
    const seed = cluster.nodes[0]?.port ?? 0;
    const name = uniqueName('moved-sync');
    const slot = keySlot(name);
    const from = slotOwner(seed, slot);
    const to = clusterMasters(seed).find((m) => m.id !== from.id);
    if (!to) throw new Error('no second master');
    // WAIT's timeout: the warm-up below needs the replica's acknowledgement within it on a loaded machine.
    const locks = locksOn({ syncReplicas: { replicas: 1, timeout: 2000 } });
    await locks.getLock(name).withLock(() => undefined); // slots known, this slot on `from`
    // The slot moves behind the client's back, and the new owner's replica stops acknowledging. The client
    // sends the acquire to `from`, follows its MOVED, and the grant runs on `to`: a WAIT on `from` would
    // answer 1 at once (that connection wrote nothing unacknowledged), so only a WAIT on `to` is truthful.
    await migrateSlot(slot, from, to);
    const replicaPort = Number(
      /:(\d+)@\S* slave /.exec(
        redisCli(seed, 'cluster', 'nodes')
          .split('\n')
          .find((line) => line.includes(`slave ${to.id}`)) ?? '',
      )?.[1],
    );
    const replica = cluster.nodes.find((node) => node.port === replicaPort);
    if (!replica) throw new Error(`no replica of ${to.port}`);
    replica.pause();
    try {
      await expect(locks.getLock(name).acquire()).rejects.toBeInstanceOf(LockNotReplicatedError);
      expect(redisCli(to.port, 'exists', name)).toBe('0');
    } finally {
      replica.resume();
    }
  });

  it('with syncReplicas, refuses a grant whose WAIT the dropped connection cut off, and leaves no key', async () => {
    const seed = cluster.nodes[0]?.port ?? 0;
    const name = uniqueName('cut-sync');
    const owner = slotOwner(seed, keySlot(name));
    const replicaPort = Number(
      /:(\d+)@\S* slave /.exec(
        redisCli(seed, 'cluster', 'nodes')
          .split('\n')
          .find((line) => line.includes(`slave ${owner.id}`)) ?? '',
      )?.[1],
    );
    const replica = cluster.nodes.find((node) => node.port === replicaPort);
    if (!replica) throw new Error(`no replica of ${owner.port}`);
    const locks = locksOn({ syncReplicas: { replicas: 1, timeout: 3000 } });
    await locks.getLock(name).withLock(() => undefined); // slots known, grants confirmed
    // Paused (its link up): a WAIT on a connection that wrote nothing would answer 1 at once.
    replica.pause();
    try {
      const acquiring = locks
        .getLock(name)
        .acquire()
        .then(
          (lease) => ({ lease }),
          (error: unknown) => ({ error }),
        );
      // Granted, and WAIT blocked on the paused replica: the connection waiting in WAIT is cut.
      let waiting: string | undefined;
      await until(() => {
        const line = redisCli(owner.port, 'client', 'list')
          .split('\n')
          .find((client) => /\bcmd=wait\b/.test(client));
        waiting = /\bid=(\d+)\b/.exec(line ?? '')?.[1];
        return waiting !== undefined;
      }, 'WAIT sent');
      redisCli(owner.port, 'client', 'kill', 'id', String(waiting));
      const outcome = await acquiring;
      if ('lease' in outcome) cleanup.push(() => outcome.lease.release());
      expect(outcome).toMatchObject({ error: expect.any(LockNotReplicatedError) as unknown });
      expect(redisCli(owner.port, 'exists', name)).toBe('0');
    } finally {
      replica.resume();
    }
  });

  it('a waiting client opens no connection per slot refresh of its subscriber', async () => {
    const holder = locksOn();
    const waiter = locksOn();
    const name = uniqueName('refresh');
    const lease = await holder.getLock(name).acquire({ leaseTime: 30_000 });
    const connectionsReceived = (): number =>
      cluster.nodes.reduce(
        (sum, node) => sum + Number(/total_connections_received:(\d+)/.exec(redisCli(node.port, 'info', 'stats'))?.[1]),
        0,
      );
    const waiting = waiter.run(() => waiter.getLock(name).tryLock(30_000));
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    const channel = lockKeys('', name, true).channel;
    // Its subscriber: on the slot owner's shard channel, or (iovalkey) on a classic channel of some node.
    const subscribers = (): number =>
      shardedPubSub
        ? Number(
            redisCli(
              slotOwner(cluster.nodes[0]?.port ?? 0, keySlot(name)).port,
              'pubsub',
              'shardnumsub',
              channel,
            ).split('\n')[1],
          )
        : cluster.nodes.reduce(
            (sum, node) => sum + Number(redisCli(node.port, 'pubsub', 'numsub', channel).split('\n')[1]),
            0,
          );
    await until(() => subscribers() === 1, 'the waiter subscribed to the lock channel');
    const before = connectionsReceived();
    await sleep(6000);
    // ioredis opens a connection for each CLUSTER SLOTS refresh. The clients' own periodic refreshes (every
    // 5 s: the holder's, the waiter's and its subscriber's, a refresh that timed out under load tried again on
    // another node) may fall in the window, up to 8; a subscriber refreshing every 500 ms would add 12 more.
    // Each reading counts its own redis-cli connection to every node.
    expect(connectionsReceived() - before - cluster.nodes.length).toBeLessThanOrEqual(8);
    await lease.release();
    expect(await waiting).toBe(true);
  });

  it('keeps locks in many slots alive for 3+ watchdog timeouts, renewing per slot', async () => {
    // 1.5 s: a stall of the loaded machine under a second must not lose a hold; 5 s still outlasts 3 leases.
    const locks = locksOn({ watchdogTimeout: 1500 });
    const names = Array.from({ length: 40 }, (_, i) => `${uniqueName('cl-wd')}:${i}`);
    const leases = await Promise.all(names.map((name) => locks.getLock(name).acquire()));
    await sleep(5000);
    expect(leases.every((lease) => !lease.signal.aborted)).toBe(true);
    const probe = clusterClient();
    for (const name of names) {
      const ttl = await probe.pttl(name);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(1500);
    }
    await Promise.all(leases.map((lease) => lease.release()));
  });
});

describe('T17: a slot migrated back and forth under the T1 workload', () => {
  // The plain lock, the fair lock, and the read-write lock (readers and writers mixed; writers count).
  it.each([
    { kind: 'lock' as const, perProcess: 150 },
    { kind: 'fair' as const, perProcess: 60 },
    { kind: 'rw' as const, perProcess: 60 },
  ])(
    '$kind: keeps the exact count, no overlap, and no error reaches a caller',
    async ({ kind, perProcess }) => {
      const resource = await startRedisServer();
      cleanup.push(() => resource.stop());
      const name = uniqueName(`t17-${kind}`);
      const slot = keySlot(name);
      const seed = cluster.nodes[0]?.port ?? 0;
      const owner = (): { id: string; port: number } => slotOwner(seed, slot);
      const processes = 4;
      const workers = startWorkers(
        Array.from({ length: processes }, (_, i) => ({
          mode: 'counter' as const,
          kind,
          readRatio: 0.7,
          id: `w${i}`,
          lockUrl: '',
          clusterNodes: cluster.nodes.slice(0, 3).map((n) => ({ host: n.host, port: n.port })),
          resourceUrl: resource.url,
          name,
          count: perProcess,
          sleepMs: 2,
        })),
      );
      cleanup.push(() => Promise.all(workers.map((w) => w.kill())));
      let migrations = 0;
      const done = Promise.all(
        workers.map((w) => w.next<{ id: string; type: string; sections: KindedSection[] }>('done', 120_000)),
      );
      const workload = { finished: false };
      void done.then(
        () => (workload.finished = true),
        () => (workload.finished = true),
      );
      while (!workload.finished && migrations < 10) {
        await sleep(150);
        const from = await slotOwnerAsync(seed, slot);
        const to = (await clusterMastersAsync(seed)).find((m) => m.id !== from.id);
        if (!to) break;
        await migrateSlot(slot, from, to);
        migrations++;
      }
      // A stalled workload fails within seconds, with what the cluster shows, instead of at the test timeout.
      let lastCount = -1;
      let lastMove = performance.now();
      while (!workload.finished) {
        await sleep(500);
        const count = Number(redisCli(resource.port, 'get', `counter:${name}`) || 0);
        if (count !== lastCount) {
          lastCount = count;
          lastMove = performance.now();
        } else if (performance.now() - lastMove > 15_000) {
          const at = owner();
          const channel = lockKeys('', name, true).channel;
          // Each worker's phase and the commands its connections still await.
          for (const worker of workers) worker.send({ cmd: 'status' });
          const statuses = await Promise.all(workers.map((worker) => worker.next('status', 2000).catch(String)));
          throw new Error(
            `T17 stalled at ${count} sections after ${migrations} migrations; the slot is on ${at.port}: ` +
              `lock ${JSON.stringify(redisCli(at.port, 'hgetall', name))} pttl ${redisCli(at.port, 'pttl', name)}; ` +
              `shard subscribers ${cluster.nodes.map((n) => `${n.port}:${redisCli(n.port, 'pubsub', 'shardnumsub', channel).replace(/\n/g, ' ')}`).join(', ')}; ` +
              `workers ${JSON.stringify(statuses)}`,
          );
        }
      }
      const reports = await done;
      const sections = reports.flatMap((r) => r.sections.map((s) => ({ ...s, owner: r.id })));
      const writes = sections.filter((section) => section.kind !== 'read');
      const counter = Number(redisCli(resource.port, 'get', `counter:${name}`));
      const gaps = handoffGaps(sections);
      recordFigures(kind === 'lock' ? 'T17 slot migration' : `T17 slot migration (${kind})`, {
        migrations,
        sections: sections.length,
        counter,
        overlaps: rwOverlaps(sections).length,
        maxHandoffMs: Math.max(...gaps),
      });
      expect(migrations).toBeGreaterThanOrEqual(3);
      expect(sections).toHaveLength(processes * perProcess);
      expect(counter).toBe(writes.length);
      // No two writers (plain and fair holders count as writers) together, no reader beside a writer.
      expect(rwOverlaps(sections)).toEqual([]);
      expect(tokensRise(writes)).toBe(true);
      // Sharded subscriptions silently drop when their slot moves: waiters re-check at least every 2 s and
      // retry when the subscriber sees the move. Without that a waiter would sleep out the 30 s lease; 10 s
      // leaves room for a migration's own stalls on a loaded machine.
      expect(Math.max(...gaps)).toBeLessThan(10_000);
      // And once the subscriber follows the move, releases wake waiters again: most handoffs are prompt (a
      // subscription kept across waits on the old owner left every handoff to the 2 s re-check).
      expect(percentile(gaps, 50)).toBeLessThan(500);
    },
    120_000,
  );
});

describe('T17 for the semaphores and the latch: their slot migrated back and forth', () => {
  it('keeps at most the permits out, loses no wake-up, and ends with every permit back', async () => {
    const name = uniqueName('t17-sem');
    const slot = keySlot(name);
    const seed = cluster.nodes[0]?.port ?? 0;
    const permits = 3;
    // A long watchdog: a migration on a loaded machine must not cost an expirable permit its lease.
    const clients = Array.from({ length: 4 }, () => locksOn({ watchdogTimeout: 10_000 }));
    const first = clients[0];
    if (!first) throw new Error('no client');
    await first.getSemaphore(name).trySetPermits(permits);
    let inside = 0;
    let maxInside = 0;
    let sections = 0;
    // At least this many sections per client, and the workload goes on until three migrations happened under
    // it: how many sections a migration takes depends on the machine's load, not on the code.
    const perClient = 100;
    const minMigrations = 3;
    let migrations = 0;
    const work = clients.flatMap((locks, i) =>
      [0, 1].map(async (flow) => {
        // Half the flows use the plain semaphore, half the expirable one: they share the permits.
        const plain = (i + flow) % 2 === 0;
        for (let n = 0; n < perClient / 2 || migrations < minMigrations; n++) {
          const permit = plain
            ? await locks.getSemaphore(name).acquire()
            : await locks.getPermitExpirableSemaphore(name).acquire();
          inside++;
          maxInside = Math.max(maxInside, inside);
          await sleep(2);
          inside--;
          sections++;
          await (permit === undefined ? locks.getSemaphore(name).release() : permit.release());
        }
      }),
    );
    const latchName = `{${name}}:latch`;
    await first.getCountDownLatch(latchName).trySetCount(1);
    // No wait time: how long the workload runs depends on the machine (the test's timeout bounds it).
    const latchWaiters = clients.map((locks) => locks.getCountDownLatch(latchName).await());
    for (const waiter of latchWaiters) waiter.catch(() => undefined); // awaited below
    const workload = { finished: false };
    const all = Promise.all(work).finally(() => (workload.finished = true));
    while (!workload.finished && migrations < 6) {
      await sleep(150);
      const from = await slotOwnerAsync(seed, slot);
      const to = (await clusterMastersAsync(seed)).find((m) => m.id !== from.id);
      if (!to) break;
      await migrateSlot(slot, from, to);
      migrations++;
    }
    await all;
    await first.getCountDownLatch(latchName).countDown();
    expect(await Promise.all(latchWaiters)).toEqual(clients.map(() => true));
    recordFigures('T17 slot migration (semaphores)', { migrations, sections, maxInside });
    expect(migrations).toBeGreaterThanOrEqual(minMigrations);
    expect(sections).toBeGreaterThanOrEqual(clients.length * perClient);
    expect(maxInside).toBeLessThanOrEqual(permits);
    expect(maxInside).toBe(permits);
    expect(await first.getPermitExpirableSemaphore(name).availablePermits()).toBe(permits);
  }, 120_000);
});

// Last in the file: it leaves the cluster with one master fewer than it started with.
describe('a master failing over under load', () => {
  // node-redis 5's cluster never refreshes its slot map when a master dies (6.x does, 5 s after a node's
  // first reconnect attempt): its calls for the slot go to the dead master until the user reconnects it.
  it.skipIf(clientKind === 'node-redis5')(
    'keeps holders and waiters going once its replica is promoted',
    async () => {
      const seed = cluster.nodes[0]?.port ?? 0;
      let name = uniqueName('failover');
      while (slotOwner(seed, keySlot(name)).port === seed) name = uniqueName('failover');
      const slot = keySlot(name);
      const victim = slotOwner(seed, slot);
      const clients = [locksOn(), locksOn()];
      const options = { waitTime: 3000, leaseTime: 3000 };
      const acquisitions: number[] = [];
      const sections: (Section & { at: number })[] = [];
      const failures: { at: number; error: string }[] = [];
      let stopping = false;
      const workers = clients.map(async (locks, i) => {
        while (!stopping) {
          try {
            await locks.getLock(name).withLock(async (_signal, lease) => {
              acquisitions.push(performance.now());
              const enter = process.hrtime.bigint();
              await sleep(1);
              const at = performance.now();
              sections.push({ owner: `w${i}`, enter, exit: process.hrtime.bigint(), token: lease.fencingToken, at });
            }, options);
          } catch (error) {
            failures.push({ at: performance.now(), error: String(error) });
            await sleep(50);
          }
        }
      });
      try {
        await expect.poll(() => acquisitions.length, { timeout: 10_000, interval: 50 }).toBeGreaterThan(50);
        const killedAt = performance.now();
        await cluster.nodes.find((node) => node.port === victim.port)?.kill();
        await until(
          async () => (await slotOwnerAsync(seed, slot)).port !== victim.port,
          'a replica promoted for the slot',
          30_000,
        );
        const promotedAt = performance.now();
        // node-redis learns the new owner only at its slot refresh, 5 s after a node's first reconnect attempt
        // (its topologyRefreshOnReconnectionAttemptStrategy default), later under load; until then calls for
        // the slot fail and waits (3 s) time out. ioredis follows the MOVED at once. On either, a grant made
        // just before the kill can still be reported lost once its 3 s lease ran out (its release was stuck on
        // the dead master): errors count as late only after that too.
        const quietFrom = Math.max(promotedAt + (onNodeRedis ? 12_000 : 2000), killedAt + options.leaseTime + 1000);
        await expect
          .poll(() => acquisitions.filter((at) => at > quietFrom).length, { timeout: 20_000, interval: 50 })
          .toBeGreaterThan(50);
        stopping = true;
        await Promise.all(workers);
        const resumedAt = acquisitions.find((at) => at > killedAt + 100) ?? Infinity;
        const late = failures.filter((f) => f.at > quietFrom);
        recordFigures('cluster master failover', {
          killToPromotionMs: Math.round(promotedAt - killedAt),
          killToFirstAcquisitionMs: Math.round(resumedAt - killedAt),
          errorsDuringFailover: failures.filter((f) => f.at > killedAt && f.at <= quietFrom).length,
          errorsLate: late.length,
          acquisitions: acquisitions.length,
          overlaps: overlaps(sections).length,
          maxHandoffAfterPromotionMs: Math.round(Math.max(...handoffGaps(sections.filter((x) => x.at > quietFrom)))),
        });
        expect(failures.filter((f) => f.at < killedAt)).toEqual([]);
        expect(resumedAt - killedAt).toBeLessThan(20_000);
        // node-redis' recovery time is its refresh policy's (above), and on any client a loaded machine
        // stretches a pre-kill grant's stuck release past a fixed bound: the figures record late errors, and
        // the safety checks below hold.
        expect(overlaps(sections)).toEqual([]);
        // After the promotion a release still wakes the other client's waiter at once, through the shard's new
        // master: the subscriptions followed (otherwise every handoff would wait for the 2 s re-check). The
        // median, since one handoff can meet a stall of the loaded machine.
        const gapsAfter = handoffGaps(sections.filter((section) => section.at > quietFrom)).sort((a, b) => a - b);
        expect(gapsAfter[Math.floor(gapsAfter.length / 2)] ?? Infinity).toBeLessThan(500);
      } finally {
        stopping = true;
        await Promise.all(workers);
      }
    },
    90_000,
  );
});
