/**
 * One contending process of scenario (c): runs the contention loop with one library until the deadline it
 * is sent, then reports its sections to the parent. Argument: JSON { library, lockUrl, resourceUrl, key, id }.
 */
import { Redis } from 'ioredis';
import { createAdapter, isNodeRedissonAfterQuit, type Library } from './adapters.ts';
import { contend } from './contend.ts';

interface WorkerArgs {
  readonly library: Library;
  readonly lockUrl: string;
  readonly resourceUrl: string;
  readonly key: string;
  readonly id: string;
  readonly watchdogMs: number;
}

const args = JSON.parse(process.argv[2] ?? '{}') as WorkerArgs;
// node-redisson throws from its timers after its connections close; that must not fail the run.
process.on('uncaughtException', (error) => {
  if (!isNodeRedissonAfterQuit(error)) throw error;
});
const adapter = createAdapter(args.library, args.lockUrl, args.watchdogMs);
const resource = new Redis(args.resourceUrl);
await resource.ping();
// Warm up (connections, JIT) on a key of its own, so that the contention starts hot.
for (let i = 0; i < 20; i++) {
  const release = await adapter.acquire(`${args.key}:warm-up:${args.id}`, 10_000);
  await release();
}
process.send?.({ type: 'ready' });
const { until } = await new Promise<{ until: bigint }>((resolve) => process.once('message', resolve));
const sections = await contend(adapter, resource, args.key, args.id, until);
await new Promise<void>((resolve) => {
  process.send?.({ type: 'done', sections }, () => {
    resolve();
  });
});
await adapter.close();
await resource.quit();
// Some peers leave timers running after they close (node-redisson's subscribe timeouts): do not wait.
process.exit(0);
