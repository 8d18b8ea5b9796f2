/**
 * A throwaway Redis Cluster for tests: `masters` masters with `replicas` replicas each, on free loopback
 * ports, built with `redis-cli --cluster create` from the same Debian redis-server.
 */
import { execFile, spawnSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRedisServer, type LocalRedis } from './redis-server.js';

export interface TestCluster {
  readonly nodes: readonly LocalRedis[];
  stop(): Promise<void>;
}

function clusterState(port: number): string {
  const info = spawnSync('redis-cli', ['-p', String(port), 'cluster', 'info'], { encoding: 'utf8' }).stdout;
  return /cluster_state:(\w+)/.exec(info)?.[1] ?? 'unknown';
}

export async function startRedisCluster(masters = 3, replicas = 1): Promise<TestCluster> {
  const nodes = await Promise.all(
    Array.from({ length: masters * (1 + replicas) }, () =>
      startRedisServer(['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000'], { clusterBus: true }),
    ),
  );
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((node) => node.stop()));
  };
  const created = spawnSync(
    'redis-cli',
    [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ],
    { encoding: 'utf8' },
  );
  if (created.status !== 0) {
    await stop();
    throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
  }
  // cluster_state:ok can come before every node learnt from gossip which nodes are replicas: until then a
  // replica looks like a master without slots to a node that is asked, and a test could pick it.
  const settled = (port: number): boolean => {
    const roles = spawnSync('redis-cli', ['-p', String(port), 'cluster', 'nodes'], { encoding: 'utf8' })
      .stdout.split('\n')
      .filter(Boolean)
      .map((line) => line.split(' ')[2]?.split(',') ?? []);
    const replication = spawnSync('redis-cli', ['-p', String(port), 'info', 'replication'], {
      encoding: 'utf8',
    }).stdout;
    const online = replication.match(/^slave\d+:.*state=online/gm)?.length ?? 0;
    return (
      clusterState(port) === 'ok' &&
      roles.filter((flags) => flags.includes('master')).length === masters &&
      roles.filter((flags) => flags.includes('slave')).length === masters * replicas &&
      // A master's replicas have finished their first sync (WAIT and failovers depend on it).
      (!/^role:master/m.test(replication) || online === replicas)
    );
  };
  const deadline = Date.now() + 20_000;
  while (!nodes.every((node) => settled(node.port))) {
    if (Date.now() > deadline) {
      await stop();
      throw new Error('the test cluster did not settle (cluster_state:ok, roles known everywhere, replicas in sync)');
    }
    await sleep(100);
  }
  return { nodes, stop };
}

/**
 * One cluster-enabled redis-server that owns all 16 384 slots (as ElastiCache Serverless shows one node), once
 * it says `cluster_state:ok`: it refuses a call whose keys lie in several slots, and runs the rest.
 */
export async function startOneNodeCluster(): Promise<LocalRedis> {
  const node = await startRedisServer(['--cluster-enabled', 'yes'], { clusterBus: true });
  spawnSync(
    'redis-cli',
    ['-p', String(node.port), 'cluster', 'addslots', ...Array.from({ length: 16384 }, (_, slot) => String(slot))],
    { encoding: 'utf8' },
  );
  const deadline = Date.now() + 10_000;
  while (clusterState(node.port) !== 'ok') {
    if (Date.now() > deadline) {
      await node.stop();
      throw new Error('the one-node cluster did not reach cluster_state:ok');
    }
    await sleep(50);
  }
  return node;
}

/** A master of a cluster: its node id and port. */
export interface ClusterMaster {
  readonly id: string;
  readonly port: number;
}

/** `redis-cli -p <port> <args>`'s output, trimmed. It blocks the event loop: not for loops beside lock clients. */
export function redisCli(port: number, ...args: string[]): string {
  return spawnSync('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }).stdout.trim();
}

/**
 * `redis-cli -p <port> <args>`'s output, trimmed, without blocking the event loop: for polls and migrations
 * in a process whose lock clients must keep renewing and waking meanwhile (a loaded machine makes each
 * spawn take tens to hundreds of ms).
 */
export function redisCliAsync(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve) => {
    execFile('redis-cli', ['-p', String(port), ...args], { encoding: 'utf8' }, (_error, stdout) => {
      resolve(stdout.trim());
    });
  });
}

function inRange(range: string, slot: number): boolean {
  const match = /^(\d+)(?:-(\d+))?$/.exec(range);
  if (!match) return false;
  const low = Number(match[1]);
  const high = match[2] === undefined ? low : Number(match[2]);
  return slot >= low && slot <= high;
}

/** The masters serving slots, by `CLUSTER NODES` on `port`. */
export function clusterMasters(port: number): ClusterMaster[] {
  return mastersIn(redisCli(port, 'cluster', 'nodes'));
}

/** The master serving `slot`, as `CLUSTER NODES` on `port` reports it. */
export function slotOwner(port: number, slot: number): ClusterMaster {
  return ownerIn(redisCli(port, 'cluster', 'nodes'), slot);
}

/** `clusterMasters` without blocking the event loop. */
export async function clusterMastersAsync(port: number): Promise<ClusterMaster[]> {
  return mastersIn(await redisCliAsync(port, 'cluster', 'nodes'));
}

/** `slotOwner` without blocking the event loop. */
export async function slotOwnerAsync(port: number, slot: number): Promise<ClusterMaster> {
  return ownerIn(await redisCliAsync(port, 'cluster', 'nodes'), slot);
}

/** The masters serving slots in a `CLUSTER NODES` reply. */
function mastersIn(nodes: string): ClusterMaster[] {
  return nodes
    .split('\n')
    .filter((line) => {
      const fields = line.split(' ');
      const flags = fields[2]?.split(',') ?? [];
      return flags.includes('master') && !flags.includes('fail') && fields.length > 8;
    })
    .map((line) => {
      const [id = '', address = ''] = line.split(' ');
      return { id, port: Number(/:(\d+)@/.exec(address)?.[1]) };
    });
}

/** The master serving `slot` in a `CLUSTER NODES` reply. */
function ownerIn(nodes: string, slot: number): ClusterMaster {
  const line = nodes.split('\n').find(
    (l) =>
      l.includes('master') &&
      !l.includes('fail') &&
      l
        .split(' ')
        .slice(8)
        .some((range) => inRange(range, slot)),
  );
  const [id = '', address = ''] = line?.split(' ') ?? [];
  return { id, port: Number(/:(\d+)@/.exec(address)?.[1]) };
}

/**
 * Moves `slot` with its keys from `from` to `to` (SETSLOT IMPORTING/MIGRATING, MIGRATE, then SETSLOT NODE on
 * the target, the source and the other masters, in the order redis-cli uses), and waits until every master
 * names `to` as the owner. Without that wait, a slot moved back within milliseconds can meet a node that
 * still gossips the older claim: Redis then settles the conflict by config epoch and a master can drop
 * the keys of a slot it was told it lost, which is a fault of the migration, not of the lock.
 */
export async function migrateSlot(slot: number, from: ClusterMaster, to: ClusterMaster): Promise<void> {
  // Every step without blocking the event loop: the tests migrate under a workload of lock clients in the
  // same process, whose renewals and wake-ups a blocked loop would delay.
  await redisCliAsync(to.port, 'cluster', 'setslot', String(slot), 'importing', from.id);
  await redisCliAsync(from.port, 'cluster', 'setslot', String(slot), 'migrating', to.id);
  // Bounded: a MIGRATE that keeps failing must not spin forever.
  for (let round = 0; ; round++) {
    const keys = (await redisCliAsync(from.port, 'cluster', 'getkeysinslot', String(slot), '100'))
      .split('\n')
      .filter(Boolean);
    if (keys.length === 0) break;
    const migrated = await redisCliAsync(
      from.port,
      ...['migrate', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', ...keys],
    );
    if (round === 20) throw new Error(`slot ${slot} would not migrate from ${from.port} to ${to.port}: ${migrated}`);
  }
  const all = await clusterMastersAsync(to.port);
  const order = [to, from, ...all.filter((m) => m.id !== to.id && m.id !== from.id)];
  for (const node of order) await redisCliAsync(node.port, 'cluster', 'setslot', String(slot), 'node', to.id);
  const deadline = performance.now() + 10_000;
  const agreed = async (): Promise<boolean> => {
    const owners = await Promise.all(all.map((node) => slotOwnerAsync(node.port, slot)));
    return owners.every((owner) => owner.id === to.id);
  };
  while (!(await agreed())) {
    if (performance.now() > deadline) throw new Error(`the masters do not agree that ${to.port} has slot ${slot}`);
    await sleep(20);
  }
}
