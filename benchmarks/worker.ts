/**
 * One contending process of scenarios (c), (f), (g) and (h): runs the contention loop with one library until
 * the deadline it is sent, then reports its sections to the parent; once per pass, on the key the pass names.
 * Argument: JSON { library, lockUrl, resourceUrl, id, seed, watchdogMs, loop, permits? } (`loop`: 'lock' for
 * (c) and (f), 'read-write' for (g)'s reads and writes, 'semaphore' for (h)'s permits, of which there are
 * `permits`).
 */
import { Redis } from 'ioredis';
import { createAdapter, FLOWLOCK_BUILD, isNodeRedissonAfterQuit, type Library } from './adapters.ts';
import { contend, contendReadWrite, contendSemaphore } from './contend.ts';

interface WorkerArgs {
  readonly library: Library;
  readonly lockUrl: string;
  readonly resourceUrl: string;
  readonly id: string;
  readonly seed: number;
  readonly watchdogMs: number;
  readonly loop: 'lock' | 'read-write' | 'semaphore';
  readonly permits?: number;
}

const args = JSON.parse(process.argv[2] ?? '{}') as WorkerArgs;
// node-redisson throws from its timers after its connections close, and its commands still pending then
// reject with "Connection is closed." (no node-redisson frame on that stack); that must not fail the run.
let closing = false;
process.on('uncaughtException', (error) => {
  if (isNodeRedissonAfterQuit(error)) return;
  if (closing && args.library === 'node-redisson' && error.message === 'Connection is closed.') return;
  throw error;
});
const adapter = createAdapter(args.library, args.lockUrl, args.watchdogMs, args.permits);
const resource = new Redis(args.resourceUrl);
await resource.ping();
// Warm up (connections, JIT) on a key of its own, so that the contention starts hot.
const warmUp = `bench:warm-up:${args.id}:${process.pid}`;
await adapter.prepare?.(warmUp);
for (let i = 0; i < 20; i++) {
  const release = await (i % 2 === 1 && adapter.acquireShared
    ? adapter.acquireShared(warmUp, 10_000)
    : adapter.acquire(warmUp, 10_000));
  await release();
}
process.send?.({ type: 'ready', build: FLOWLOCK_BUILD });
// One contention pass per start message ({ key, until }), until told to close: every worker has finished
// its pass by then, so that the parent's counts (start signal to last section) see no worker's shutdown.
for (;;) {
  const message = await new Promise<{ key: string; until: bigint } | { close: true }>((resolve) =>
    process.once('message', resolve),
  );
  if ('close' in message) break;
  const { key, until } = message;
  const sections =
    args.loop === 'read-write'
      ? await contendReadWrite(adapter, resource, key, args.id, until, args.seed)
      : args.loop === 'semaphore'
        ? await contendSemaphore(adapter, resource, key, args.id, until)
        : await contend(adapter, resource, key, args.id, until);
  process.send?.({ type: 'done', sections });
}
closing = true;
await adapter.close();
await resource.quit();
// Some peers leave timers running after they close (node-redisson's subscribe timeouts): do not wait.
process.exit(0);
