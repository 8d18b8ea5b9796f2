/**
 * What the Redis seam costs (src/redis/adapter.ts): the lock's acquire and release scripts sent through the
 * library's adapter against the same scripts sent by calling the client directly (EVALSHA), one call at a
 * time on one connection, for ioredis and node-redis. `npm run bench:adapter` (a vitest run of this file, which
 * vitest's TypeScript resolution lets import the library's internals); the goal is an adapter within 5 % of the
 * direct call. Serial round trips on loopback: the difference is the adapter's
 * own work per call (key mapping, argument conversion, NOSCRIPT handling), not the network's. GLIDE's direct
 * call is its `customCommand` EVALSHA, the call its adapter makes.
 */
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { GlideClient } from '@valkey/valkey-glide';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { adaptClient, type RedisAdapter } from '../src/redis/adapter.ts';
import { lockKeys } from '../src/redis/keys.ts';
import { luaSources } from '../src/redis/lua-scripts.generated.ts';
import { startTestRedis, type TestRedis } from '../test/support/redis-server.ts';

const acquire = luaSources['lock/acquire'];
const release = luaSources['lock/release'];
const keys = lockKeys('', 'bench:adapter');
const acquireKeys = [keys.lockKey, keys.holdKey, keys.fenceKey, keys.legacyFenceKey];
const owner = 'bench-client:1';
let server: TestRedis;
let ioredis: Redis;
let nodeRedis: ReturnType<typeof createClient>;
let viaIoredis: RedisAdapter;
let viaNodeRedis: RedisAdapter;
let glide: GlideClient;
let viaGlide: RedisAdapter;
let request = 0;

/** One lock + unlock cycle: the acquire script, then the release script, each awaited. */
type Send = (source: { sha1: string; source: string }, keys: string[], args: (string | number)[]) => Promise<unknown>;
async function cycle(send: Send): Promise<void> {
  const id = `r${request++}`;
  await send(acquire, acquireKeys, [30_000, id, '', owner]);
  await send(
    release,
    [keys.lockKey, keys.channel, keys.holdKey, keys.releaseMemoPrefix + id],
    [30_000, 'one', '', 'PUBLISH', owner],
  );
}

beforeAll(async () => {
  server = await startTestRedis();
  ioredis = new Redis({ host: server.host, port: server.port });
  nodeRedis = createClient({ socket: { host: server.host, port: server.port } });
  await nodeRedis.connect();
  viaIoredis = adaptClient(ioredis, 'redis');
  viaNodeRedis = adaptClient(nodeRedis, 'redis');
  glide = await GlideClient.createClient({ addresses: [{ host: server.host, port: server.port }] });
  viaGlide = adaptClient(glide, 'redis');
  // Load the scripts once, so that every measured call is an EVALSHA.
  await viaIoredis.evalScript(acquire, acquireKeys, [1, 'warm', '', owner], true);
  await viaIoredis.evalScript(
    release,
    [keys.lockKey, keys.channel, keys.holdKey, `${keys.releaseMemoPrefix}warm`],
    [1, 'all', '', 'PUBLISH', owner],
    true,
  );
});

afterAll(async () => {
  ioredis.disconnect();
  nodeRedis.destroy();
  glide.close();
  await server.stop();
});

/** Cycles per timed round; rounds alternate the six ways so that drift of the machine hits them alike. */
const CYCLES = Number(process.env['ADAPTER_BENCH_CYCLES'] ?? 1000);
const ROUNDS = 11;

it('the adapter costs at most a few per cent over the direct call (figures in ADAPTER-OVERHEAD.md)', async () => {
  const ways: Record<string, Send> = {
    'ioredis direct': (script, k, a) => ioredis.evalsha(script.sha1, k.length, ...k, ...a),
    'ioredis adapter': (script, k, a) => viaIoredis.evalScript(script, k, a, false),
    'node-redis 6 direct': (script, k, a) => nodeRedis.evalSha(script.sha1, { keys: k, arguments: a.map(String) }),
    'node-redis 6 adapter': (script, k, a) => viaNodeRedis.evalScript(script, k, a, false),
    'GLIDE direct': (script, k, a) =>
      glide.customCommand(['EVALSHA', script.sha1, String(k.length), ...k, ...a.map(String)]),
    'GLIDE adapter': (script, k, a) => viaGlide.evalScript(script, k, a, false),
  };
  const times: Record<string, number[]> = {};
  const entries = Object.entries(ways);
  // A warm-up round (not counted), then rounds that each start with another way.
  for (let round = -1; round < ROUNDS; round++) {
    for (let k = 0; k < entries.length; k++) {
      const [name, send] = entries[(k + Math.max(round, 0)) % entries.length] ?? ['', ways['ioredis direct']];
      const started = performance.now();
      for (let i = 0; i < CYCLES; i++) await cycle(send as Send);
      if (round >= 0) (times[name] ??= []).push(((performance.now() - started) * 1000) / CYCLES);
    }
  }
  const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
  const row = (library: string): string => {
    const direct = median(times[`${library} direct`] ?? []);
    const adapter = median(times[`${library} adapter`] ?? []);
    return `| ${library} | ${direct.toFixed(1)} | ${adapter.toFixed(1)} | ${(((adapter - direct) / direct) * 100).toFixed(1)} % |`;
  };
  const table = [
    '# Adapter overhead',
    '',
    `One lock + unlock cycle (the acquire and release scripts by EVALSHA, each awaited) on one connection to a local`,
    `redis-server, ${CYCLES} cycles per round, ${ROUNDS} rounds after a warm-up, each starting with another of the six ways; median µs per cycle.`,
    'Command: `npm run bench:adapter`. Goal: the adapter within 5 % of the direct call.',
    '',
    '| client | direct µs/cycle | through the adapter µs/cycle | adapter cost |',
    '| --- | ---: | ---: | ---: |',
    row('ioredis'),
    row('node-redis 6'),
    row('GLIDE'),
    '',
  ].join('\n');
  console.log(table);
  writeFileSync(join(process.env['BENCH_OUT'] ?? 'benchmarks', 'ADAPTER-OVERHEAD.md'), table);
  // A sanity bound only (the 5 % goal is read from the figures, not asserted): the adapter is no detour.
  for (const library of ['ioredis', 'node-redis 6', 'GLIDE']) {
    expect(median(times[`${library} adapter`] ?? [])).toBeLessThan(1.5 * median(times[`${library} direct`] ?? []));
  }
}, 600_000);
