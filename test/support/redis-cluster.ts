/**
 * A throwaway Redis Cluster for tests: `masters` masters with `replicas` replicas each, on free loopback
 * ports, built with `redis-cli --cluster create` from the same Debian redis-server.
 */
import { spawnSync } from 'node:child_process';
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
