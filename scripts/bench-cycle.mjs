/**
 * `node scripts/bench-cycle.mjs [--dist=DIR] [--cycles=N] [--rounds=R] [--no-holder-info] [--retired] [--instructions [--json]]`: the uncontended lock +
 * unlock cycle of flowlock's RLock against `SET NX PX` + a Lua compare-and-delete, interleaved rounds on
 * one throwaway redis-server and one ioredis connection each, with the floor of Redisson's RLock wire beside
 * (the bench's `rlock-layout-floor` scripts: a hash, a lease, the release message and an unlock memo). Per cycle: wall time, this process's CPU
 * (`process.cpuUsage`) and the server's CPU (`INFO cpu`, user + sys), medians over the rounds, and each as a
 * multiple of the baseline's. `--dist` loads another build of flowlock (e.g. a copy of main's `dist/`), so
 * that two layouts are compared by the same script; `--no-holder-info` turns holder info off, `--retired` sets
 * `previousLayout: 'retired'` (no per-name counter of the earlier layout).
 * `--instructions` runs the server under valgrind's callgrind instead and reports the instructions it
 * executes per cycle (user space; the kernel's share is the same two round trips for both): a count that a
 * loaded machine does not blur, for comparing scripts while other work runs (needs `valgrind`); it counts
 * `withLock` too, and `--json` prints the four counts as one JSON line (`npm run bench` reads it).
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { join, resolve } from 'node:path';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Redis } from 'ioredis';
import { COMPARE_AND_DELETE, LAYOUT_ACQUIRE, LAYOUT_RELEASE } from '../benchmarks/floors.ts';

const argv = process.argv.slice(2);
const option = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const dist = resolve(option('dist') ?? 'dist');
const cycles = Number(option('cycles') ?? 5000);
const rounds = Number(option('rounds') ?? 7);
const port = 20000 + Math.floor(Math.random() * 20000);

const instructions = argv.includes('--instructions');
const serverArgs = ['--port', String(port), '--save', '', '--appendonly', 'no'];
const outDir = instructions ? mkdtempSync(join(tmpdir(), 'bench-cycle-')) : undefined;
const server = instructions
  ? spawn(
      'valgrind',
      ['--tool=callgrind', `--callgrind-out-file=${outDir}/callgrind.out`, 'redis-server', ...serverArgs],
      {
        stdio: 'ignore',
      },
    )
  : spawn('redis-server', serverArgs, { stdio: 'ignore' });
// Wait for the port (valgrind takes seconds to start the server), then connect once.
for (let tries = 0; ; tries++) {
  const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  probe.on('error', () => undefined);
  const up = await probe.connect().then(
    () => true,
    () => false,
  );
  probe.disconnect();
  if (up) break;
  if (tries > 300) throw new Error(`redis-server did not start on port ${port}`);
  await sleep(100);
}
const redis = new Redis({ port });
const { createLockClient } = await import(pathToFileURL(`${dist}/index.js`).href);
const locks = createLockClient(redis, {
  ...(argv.includes('--no-holder-info') ? { holderInfo: false } : {}),
  ...(argv.includes('--retired') ? { previousLayout: 'retired' } : {}),
});
const lock = locks.getLock('bench:cycle');

redis.defineCommand('layoutAcquire', { numberOfKeys: 1, lua: LAYOUT_ACQUIRE });
redis.defineCommand('layoutRelease', { numberOfKeys: 3, lua: LAYOUT_RELEASE });

async function serverCpu() {
  const info = await redis.info('cpu');
  const read = (name) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 0);
  return read('used_cpu_user') + read('used_cpu_sys');
}

async function measure(cycle) {
  const serverBefore = await serverCpu();
  const cpuBefore = process.cpuUsage();
  const started = process.hrtime.bigint();
  for (let i = 0; i < cycles; i++) await cycle(i);
  const wallUs = Number(process.hrtime.bigint() - started) / 1000 / cycles;
  const cpu = process.cpuUsage(cpuBefore);
  const serverUs = ((await serverCpu()) - serverBefore) * 1e6;
  return { wallUs, cpuUs: (cpu.user + cpu.system) / cycles, serverUs: serverUs / cycles };
}

const flowlock = () =>
  locks.run(async () => {
    await lock.lock();
    await lock.unlock();
  });
const withLock = () => lock.withLock(() => undefined);
const layoutOwner = randomUUID();
const layout = async (i) => {
  await redis.layoutAcquire('bench:cycle:rlock', 30_000, `${layoutOwner}:${i}`);
  await redis.layoutRelease(
    'bench:cycle:rlock',
    'redisson_lock__channel:{bench:cycle:rlock}',
    `redisson_unlock_latch:{bench:cycle:rlock}:${randomUUID()}`,
    `${layoutOwner}:${i}`,
    30_000,
  );
};
const baseline = async (i) => {
  const token = `t${i}`;
  await redis.set('bench:cycle:base', token, 'PX', 30_000, 'NX');
  await redis.eval(COMPARE_AND_DELETE, 1, 'bench:cycle:base', token);
};

/** Server instructions per cycle of `cycle`, counted by callgrind between a zeroing and a dump. */
async function countInstructions(cycle) {
  execFileSync('callgrind_control', ['--zero', String(server.pid)], { stdio: 'ignore' });
  for (let i = 0; i < cycles; i++) await cycle(i);
  execFileSync('callgrind_control', ['--dump', String(server.pid)], { stdio: 'ignore' });
  // Each dump is a new file "callgrind.out.<n>": read the one there is, then remove it.
  for (let tries = 0; tries < 100; tries++) {
    for (const file of readdirSync(outDir).filter((name) => /^callgrind\.out\.\d+$/.test(name))) {
      const total = /^(?:summary|totals): (\d+)/m.exec(readFileSync(join(outDir, file), 'utf8'))?.[1];
      if (total === undefined) continue;
      rmSync(join(outDir, file));
      return Number(total) / cycles;
    }
    await sleep(100);
  }
  throw new Error('callgrind wrote no dump');
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;
if (instructions) {
  // Deterministic: one warm-up pass each, then one counted pass each.
  for (const cycle of [flowlock, withLock, layout, baseline]) for (let i = 0; i < 300; i++) await cycle(i);
  const ours = await countInstructions(flowlock);
  const scoped = await countInstructions(withLock);
  const wire = await countInstructions(layout);
  const theirs = await countInstructions(baseline);
  if (argv.includes('--json')) {
    console.log(JSON.stringify({ flowlock: ours, withLock: scoped, wire, setNx: theirs }));
  } else {
    console.log(`${dist}: server instructions per cycle (callgrind, ${cycles} cycles)`);
    console.log(
      `flowlock ${ours.toFixed(0).padStart(8)} (withLock ${scoped.toFixed(0)})   RLock wire ${wire.toFixed(0).padStart(8)}   SET NX + CAD ${theirs.toFixed(0).padStart(8)}   ${(ours / wire).toFixed(2)}x the wire (withLock ${(scoped / wire).toFixed(2)}x; the wire ${(wire / theirs).toFixed(2)}x SET NX)`,
    );
  }
} else {
  const kinds = [
    ['flowlock', flowlock],
    ['RLock wire', layout],
    ['SET NX + CAD', baseline],
  ];
  const samples = kinds.map(() => []);
  for (const [, cycle] of kinds) await measure(cycle);
  for (let round = 0; round < rounds; round++) {
    // Each round starts with another, so that drift on a shared machine hits all alike.
    for (let k = 0; k < kinds.length; k++) {
      const index = (k + round) % kinds.length;
      samples[index].push(await measure(kinds[index][1]));
    }
  }
  const row = (what) => {
    const [ours, wire, floor] = samples.map((s) => median(s.map((sample) => sample[what])));
    return `${what.padEnd(8)} flowlock ${ours.toFixed(1).padStart(7)} µs   RLock wire ${wire.toFixed(1).padStart(7)} µs   SET NX + CAD ${floor.toFixed(1).padStart(7)} µs   ${(ours / floor).toFixed(2)}x (the wire ${(wire / floor).toFixed(2)}x)`;
  };
  console.log(`${dist}: ${rounds} rounds of ${cycles} cycles, medians per cycle`);
  for (const what of ['wallUs', 'cpuUs', 'serverUs']) console.log(row(what));
}
await locks.close();
redis.disconnect();
server.kill();
await once(server, 'exit');
if (outDir) rmSync(outDir, { recursive: true, force: true });
