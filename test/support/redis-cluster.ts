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
      startRedisServer(['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000']),
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
  const deadline = Date.now() + 20_000;
  while (!nodes.every((node) => clusterState(node.port) === 'ok')) {
    if (Date.now() > deadline) {
      await stop();
      throw new Error('the test cluster did not reach cluster_state:ok');
    }
    await sleep(100);
  }
  return { nodes, stop };
}
