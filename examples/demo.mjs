// flowlock demo: six short scenes against a real Redis.
//
//   1. contention   worker processes increment one counter under one lock; nothing is lost or overlaps
//   2. reentrancy   a nested withLock re-enters the lock its caller holds; a sibling flow waits its turn
//   3. watchdog     a 1000 ms lease is kept alive through a 3500 ms critical section
//   4. family       a fair lock serves clients in arrival order; readers share a read-write lock, a writer
//                   waits for them, and a read -> write upgrade is refused at once
//   5. permits      six jobs share a semaphore of 2 permits (never more than 2 at once, served in arrival
//                   order, a job wanting both permits not overtaken); a latch opens for every waiter
//   6. observe      what the diagnostics channels, holds() and the holder info in Redis tell an operator,
//                   and the reason a lost hold gives when its key is deleted under it
//
// Redis: REDIS_URL when set, otherwise a throwaway redis-server on a free loopback port.
// Run with `npm run demo` (builds dist/ first). Exits 0 when every check passes, 1 otherwise.
import { fork, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import diagnostics from 'node:diagnostics_channel';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { createLockClient } from '../dist/index.js';
import { inspectLock } from '../dist/admin.js';

const WORKERS = 4;
const ROUNDS = 3;
const COUNTER_KEY = 'demo:counter:value';
const WORKER_SCRIPT = fileURLToPath(new URL('./demo-worker.mjs', import.meta.url));

const startedAt = process.hrtime.bigint();
let failures = 0;

// ─── output ──────────────────────────────────────────────────────────────────────────────────────────

function scene(title, subtitle) {
  console.log(`\n━━ ${title}`);
  if (subtitle) console.log(`   ${subtitle}`);
  console.log();
}

/** A logger that prints `+  123 ms  who  event  detail`, times relative to `t0` (a hrtime.bigint()). */
function timeline(t0) {
  return (who, event, detail = '', at = process.hrtime.bigint()) => {
    const ms = Math.round(Number(at - t0) / 1e6);
    console.log(`+${String(ms).padStart(5)} ms  ${who.padEnd(12)} ${event.padEnd(16)} ${detail}`.trimEnd());
  };
}

function check(ok, what) {
  console.log(`  ${ok ? 'OK  ' : 'FAIL'}  ${what}`);
  if (!ok) failures++;
}

// ─── child processes ─────────────────────────────────────────────────────────────────────────────────

/** Every process this demo started and that is still running; none may outlive it. */
const children = new Set();

function track(child) {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const force = setTimeout(() => child.kill('SIGKILL'), 3000);
  child.kill('SIGTERM');
  await once(child, 'exit');
  clearTimeout(force);
}

let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, async () => {
    interrupted = true;
    console.log(`\n${signal}: stopping`);
    await Promise.all([...children].map(stop));
    process.exit(130);
  });
}
// Last resort for any other way out (an uncaught error, process.exit): no orphaned redis-server.
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

// ─── throwaway redis-server ──────────────────────────────────────────────────────────────────────────

async function freePort() {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** One PING over a raw socket: true when the server answers +PONG. */
function ping(port) {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk;
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

async function startRedisServer() {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const collect = (chunk) => (output = (output + chunk).slice(-4000));
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  await new Promise((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', reject); // ENOENT when redis-server is not on PATH
  });
  track(child);

  const deadline = Date.now() + 5000;
  while (!(await ping(port))) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with code ${child.exitCode}:\n${output}`);
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING:\n${output}`);
    await sleep(20);
  }
  return { url: `redis://127.0.0.1:${port}`, child };
}

// ─── scene 1: contention across processes ────────────────────────────────────────────────────────────

async function contentionScene(redisUrl, redis) {
  scene(
    `Scene 1 · contention: ${WORKERS} processes, lock "demo:counter", ${ROUNDS} critical sections each`,
    'each section reads a counter, sleeps 25 ms, writes it back + 1 (racy without the lock)',
  );
  await redis.del(COUNTER_KEY);

  const events = [];
  const workers = [];
  const exits = [];
  const ready = [];
  for (let i = 1; i <= WORKERS; i++) {
    const name = `worker-${i}`;
    // 'advanced' serialization carries the bigint timestamps and fencing tokens as they are.
    const worker = track(fork(WORKER_SCRIPT, [redisUrl, name, String(ROUNDS)], { serialization: 'advanced' }));
    workers.push(worker);
    exits.push(once(worker, 'exit').then(([code, signal]) => ({ name, code, signal })));
    ready.push(
      new Promise((resolve, reject) => {
        worker.on('message', (message) => (message.event === 'ready' ? resolve() : events.push(message)));
        worker.once('exit', (code) => reject(new Error(`${name} exited (code ${code}) before it was ready`)));
      }),
    );
  }
  await Promise.all(ready);

  // A stuck worker must not hang the demo: past this point it is killed and the scene fails.
  const watchdog = setTimeout(() => workers.forEach((worker) => worker.kill('SIGKILL')), 15_000);
  const t0 = process.hrtime.bigint();
  for (const worker of workers) worker.send('go');
  const results = await Promise.all(exits);
  clearTimeout(watchdog);

  // Reports from different processes can arrive out of order; the timestamps put them back in order.
  events.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
  const log = timeline(t0);
  for (const e of events) {
    const detail = e.event === 'acquired' ? `token=${e.token}` : `counter ${e.from} -> ${e.to}`;
    log(e.worker, e.event, detail, e.at);
  }

  const sections = [];
  const open = new Map();
  for (const e of events) {
    if (e.event === 'acquired') open.set(e.worker, e);
    else sections.push({ start: open.get(e.worker).at, end: e.at, token: open.get(e.worker).token });
  }
  sections.sort((a, b) => (a.start < b.start ? -1 : 1));
  const overlaps = sections.filter((s, i) => i > 0 && s.start < sections[i - 1].end).length;
  const tokensGrow = sections.every((s, i) => i === 0 || s.token > sections[i - 1].token);
  const counter = Number(await redis.get(COUNTER_KEY));
  const expected = WORKERS * ROUNDS;

  console.log();
  check(
    results.every((r) => r.code === 0),
    `all workers exited cleanly (${results.map((r) => `${r.name}: ${r.code ?? r.signal}`).join(', ')})`,
  );
  check(sections.length === expected, `${sections.length} critical sections reported, expected ${expected}`);
  check(counter === expected, `counter = ${counter}, expected ${expected} (no lost update)`);
  check(overlaps === 0, `no two critical sections overlapped (${overlaps} overlaps)`);
  check(tokensGrow, 'fencing tokens strictly increase from one holder to the next');
  await redis.del(COUNTER_KEY);
}

// ─── scene 2: reentrancy within a flow, exclusion between flows ──────────────────────────────────────

async function reentrancyScene(redis) {
  scene(
    'Scene 2 · reentrancy: lock "demo:order:42" in one process',
    'placeOrder() holds the lock and calls reserveStock(), which takes the same lock again;\n' +
      '   cancelOrder() runs concurrently, in a sibling flow, and must wait for placeOrder() to finish',
  );
  const locks = createLockClient(redis);
  const lock = locks.getLock('demo:order:42');
  const log = timeline(process.hrtime.bigint());
  const holdCounts = [];
  let placeOrderDoneAt = 0n;
  let cancelOrderStartedAt = 0n;

  // Usable on its own, so it takes the lock itself; called under the lock, it simply re-enters.
  async function reserveStock() {
    await lock.withLock(async () => {
      const count = await lock.getHoldCount();
      holdCounts.push(count);
      log('reserveStock', 'nested withLock', `holdCount=${count}  (re-entered, no waiting)`);
      await sleep(150);
    });
  }

  let placeOrderHolds;
  const holding = new Promise((resolve) => (placeOrderHolds = resolve));

  const placeOrder = lock.withLock(async () => {
    let count = await lock.getHoldCount();
    holdCounts.push(count);
    log('placeOrder', 'withLock', `holdCount=${count}`);
    placeOrderHolds();
    await sleep(150);
    await reserveStock();
    count = await lock.getHoldCount();
    holdCounts.push(count);
    log('placeOrder', 'back from nested', `holdCount=${count}`);
    await sleep(150);
    placeOrderDoneAt = process.hrtime.bigint();
    log('placeOrder', 'done', 'releasing', placeOrderDoneAt);
  });

  await holding;
  log('cancelOrder', 'withLock', 'lock is held by placeOrder: waiting');
  const cancelOrder = lock.withLock(async () => {
    cancelOrderStartedAt = process.hrtime.bigint();
    const count = await lock.getHoldCount();
    log('cancelOrder', 'acquired', `holdCount=${count}`, cancelOrderStartedAt);
    await sleep(50);
    log('cancelOrder', 'done', 'releasing');
  });

  await Promise.all([placeOrder, cancelOrder]);
  const stillLocked = await lock.isLocked();
  log('main', 'after both', `isLocked=${stillLocked}`);

  console.log();
  check(holdCounts.join(',') === '1,2,1', `hold counts outer -> nested -> outer: ${holdCounts.join(' -> ')}`);
  check(cancelOrderStartedAt > placeOrderDoneAt, 'the sibling flow got the lock only after placeOrder released it');
  check(!stillLocked, 'the lock is free afterwards');
  await locks.close();
}

// ─── scene 3: watchdog renewal ───────────────────────────────────────────────────────────────────────

async function watchdogScene(redis) {
  scene(
    'Scene 3 · watchdog: watchdogTimeout 1000 ms, critical section 3500 ms, lock "demo:report"',
    'no leaseTime: the lease is 1000 ms and the watchdog renews it every 333 ms while we hold it',
  );
  const locks = createLockClient(redis, { watchdogTimeout: 1000 });
  const lock = locks.getLock('demo:report');
  const t0 = process.hrtime.bigint();
  const log = timeline(t0);
  let lost = 0;
  locks.on('lockLost', (event) => {
    lost++;
    log('watchdog', 'lockLost', event.error.message);
  });

  const lease = await lock.acquire();
  log('main', 'acquired', `token=${lease.fencingToken}  ttl=${await lock.remainTimeToLive()} ms`);
  const ttls = [];
  let everAborted = false;
  for (let at = 500; at <= 3500; at += 500) {
    // Sleep to fixed marks so the samples do not drift with the round trips.
    await sleep(Math.max(0, at - Number(process.hrtime.bigint() - t0) / 1e6));
    const ttl = await lock.remainTimeToLive();
    ttls.push(ttl);
    everAborted ||= lease.signal.aborted;
    log('main', 'working', `ttl=${String(ttl).padStart(4)} ms  signal.aborted=${lease.signal.aborted}`);
  }
  await lease.release();
  const ttlAfter = await lock.remainTimeToLive();
  const keyExists = (await redis.exists('demo:report')) === 1;
  log('main', 'released', `ttl=${ttlAfter} (-2: no such key)  EXISTS demo:report -> ${Number(keyExists)}`);

  console.log();
  const min = Math.min(...ttls);
  const max = Math.max(...ttls);
  check(min > 0 && max <= 1000, `TTL stayed between ${min} and ${max} ms over 3500 ms, never reaching 0`);
  check(!everAborted && lost === 0, 'lease.signal never aborted, no lockLost event');
  check(ttlAfter === -2 && !keyExists, 'after release the lock key is gone');
  await locks.close();
}

async function familyScene(redis) {
  scene(
    'Scene 4 · the family: fair lock "demo:jobs", read-write lock "demo:catalog"',
    'four clients queue for the fair lock one after another; three readers share, one writer waits',
  );
  const clients = Array.from({ length: 4 }, () => createLockClient(redis));
  const t0 = process.hrtime.bigint();
  const log = timeline(t0);

  const holder = await clients[0].getFairLock('demo:jobs').acquire();
  log('client 0', 'fair: acquired', `token=${holder.fencingToken}`);
  const served = [];
  const waiting = [];
  for (let i = 1; i < clients.length; i++) {
    waiting.push(
      clients[i].getFairLock('demo:jobs').withLock(async () => {
        served.push(i);
        log(`client ${i}`, 'fair: served', `queue position ${i}`);
        await sleep(20);
      }),
    );
    log(`client ${i}`, 'fair: queued');
    await sleep(30);
  }
  await holder.release();
  await Promise.all(waiting);

  const rw = (i) => clients[i].getReadWriteLock('demo:catalog');
  // A flow holding only the read lock cannot also take the write lock: it would wait for itself.
  const upgrade = await rw(0)
    .readLock()
    .withLock(() =>
      rw(0)
        .writeLock()
        .withLock(() => 'granted')
        .catch((error) => error.code),
    );
  log('client 0', 'read -> write', upgrade);
  const readers = await Promise.all([0, 1, 2].map((i) => rw(i).readLock().acquire()));
  log('clients 0-2', 'read: 3 holding', `mode=${await redis.hget('demo:catalog', 'mode')}`);
  let wroteAt = 0n;
  const writer = rw(3)
    .writeLock()
    .withLock(() => {
      wroteAt = process.hrtime.bigint();
      log('client 3', 'write: acquired');
    });
  await sleep(100);
  const writerWaited = wroteAt === 0n;
  const releasedAt = process.hrtime.bigint();
  log('clients 0-2', 'read: released');
  await Promise.all(readers.map((lease) => lease.release()));
  await writer;

  console.log();
  check(served.join(',') === '1,2,3', `fair lock served clients in arrival order (${served.join(', ')})`);
  check(writerWaited, 'the writer waited while three readers held the read lock');
  check(
    wroteAt > releasedAt && Number(wroteAt - releasedAt) / 1e6 < 500,
    'the writer went in right after the last reader left',
  );
  check(upgrade === 'LOCK_UPGRADE', `a reader asking for the write lock was refused at once (${upgrade})`);
  await Promise.all(clients.map((client) => client.close()));
}

async function permitsScene(redis) {
  scene(
    'Scene 5 · permits: semaphore "demo:exports" of 2 permits, count-down latch "demo:boot"',
    'six jobs of three clients queue for the permits (job 3 wants both); three waiters await the latch',
  );
  const clients = Array.from({ length: 3 }, () => createLockClient(redis));
  const t0 = process.hrtime.bigint();
  const log = timeline(t0);
  const semaphore = (i) => clients[i % clients.length].getSemaphore('demo:exports');
  await semaphore(0).trySetPermits(2);
  let inside = 0;
  let most = 0;
  const started = [];
  const jobs = [];
  for (let job = 0; job < 6; job++) {
    const permits = job === 3 ? 2 : 1;
    jobs.push(
      (async () => {
        await semaphore(job).acquire(permits);
        started.push(job);
        inside += permits;
        most = Math.max(most, inside);
        log(`job ${job}`, 'permits: got', `${permits} (in use: ${inside})`);
        await sleep(40);
        inside -= permits;
        await semaphore(job).release(permits);
      })(),
    );
    await sleep(5); // queued in this order
  }
  await Promise.all(jobs);
  const left = await semaphore(0).availablePermits();

  const latch = (i) => clients[i].getCountDownLatch('demo:boot');
  await latch(0).trySetCount(2);
  const opened = [];
  const awaiting = [0, 1, 2].map((i) =>
    latch(i)
      .await(5000)
      .then((open) => {
        opened.push(process.hrtime.bigint());
        log(`client ${i}`, 'latch: open', String(open));
        return open;
      }),
  );
  await sleep(50);
  await latch(1).countDown();
  log('client 1', 'latch: count', String(await latch(0).getCount()));
  await sleep(50);
  const earlyWakes = opened.length;
  const lastCountDown = process.hrtime.bigint();
  await latch(2).countDown();
  const results = await Promise.all(awaiting);

  console.log();
  check(most <= 2, `never more than 2 permits in use (at most ${most})`);
  // Jobs 4 and 5 are served by one release (both fit), in either order.
  check(
    started.slice(0, 4).join(',') === '0,1,2,3',
    `jobs served in arrival order, the two-permit job not overtaken (${started.join(', ')})`,
  );
  check(left === 2, 'both permits available again afterwards');
  check(
    earlyWakes === 0 && results.every(Boolean) && opened.every((at) => Number(at - lastCountDown) / 1e6 < 500),
    'every latch waiter woke when the count reached zero, none before',
  );
  await Promise.all(clients.map((client) => client.close()));
}

// ─── main ────────────────────────────────────────────────────────────────────────────────────────────

let redisUrl = process.env.REDIS_URL;
let server;
if (redisUrl) {
  console.log(`Redis: ${redisUrl} (from REDIS_URL)`);
} else {
  try {
    server = await startRedisServer();
  } catch (error) {
    if (error.code === 'ENOENT') {
      console.error(
        'redis-server is not on PATH and REDIS_URL is not set.\n' +
          'Install Redis (e.g. apt-get install redis-server, brew install redis) or point the demo at one:\n' +
          '  REDIS_URL=redis://127.0.0.1:6379 npm run demo',
      );
    } else {
      console.error(`Could not start redis-server: ${error.message}`);
    }
    for (const child of children) await stop(child);
    process.exit(1);
  }
  redisUrl = server.url;
  console.log(`Redis: throwaway redis-server pid ${server.child.pid} at ${redisUrl}`);
}

// ─── scene 6: observability ──────────────────────────────────────────────────────────────────────────

async function observeScene(redis) {
  scene(
    'Scene 6 · observe: diagnostics channels, holds(), holder info, and a loss with its reason',
    'a subscriber of flowlock:hold:start|end; the lock "demo:orders:42" is then deleted under its holder',
  );
  const locks = createLockClient(redis, { watchdogTimeout: 1000, holderInfo: { app: 'demo' } });
  const log = timeline(process.hrtime.bigint());
  const events = [];
  const onStart = (m) => {
    events.push(m);
    log('channel', 'hold:start', `${m.name} owner=${m.owner} token=${m.fencingToken} ${m.mode}`);
  };
  const onEnd = (m) => {
    events.push(m);
    log(
      'channel',
      'hold:end',
      `${m.name} reason=${m.reason} lossReason=${m.lossReason} after ${Math.round(m.heldMs)} ms`,
    );
  };
  diagnostics.subscribe('flowlock:hold:start', onStart);
  diagnostics.subscribe('flowlock:hold:end', onEnd);
  try {
    const lease = await locks.getLock('demo:orders:42').acquire();
    const [hold] = locks.holds();
    log(
      'main',
      'holds()',
      `${hold.name} holdCount=${hold.holdCount} renewing=${hold.renewing} lease left ${Math.round(hold.leaseRemainingMs)} ms`,
    );
    // What `flowlock inspect` shows: the owner and who it is (its lock client's holder record) at once; when
    // the hold began once the watchdog's first renewal (a third of watchdogTimeout in) has written it beside
    // the lock (not in Redisson's hash).
    const first = (await inspectLock(redis, 'demo:orders:42')).owners[0];
    log('admin', 'inspectLock', `${first?.owner} since ${first?.since} by ${first?.who}`);
    let holder = first;
    for (let tries = 0; tries < 100 && !holder?.since; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      [holder] = (await inspectLock(redis, 'demo:orders:42')).owners;
    }
    log('admin', 'inspectLock', `${holder?.owner} since ${holder?.since} by ${holder?.who} (renewed once)`);
    await redis.del('demo:orders:42');
    log('admin', 'DEL', 'demo:orders:42 (as an eviction or an operator would)');
    await once(lease.signal, 'abort');
    const end = events.find((m) => m.reason !== undefined);
    console.log();
    check(
      holder?.owner === hold.owner &&
        /.+ pid \d+ \(demo\)$/.test(first?.who ?? '') &&
        /^\d{4}-\d\d-\d\dT/.test(holder.since ?? '') &&
        /.+ pid \d+ \(demo\)$/.test(holder.who ?? ''),
      'the hold recorded who holds it (host, pid, app) at once, and when (server clock) it began',
    );
    check(
      end?.reason === 'lost' && end.lossReason === 'renewal_rejected',
      'the loss was published with its reason: renewal_rejected',
    );
    check(locks.holds().length === 0, 'holds() is empty after the loss');
  } finally {
    diagnostics.unsubscribe('flowlock:hold:start', onStart);
    diagnostics.unsubscribe('flowlock:hold:end', onEnd);
    await locks.close();
  }
}

const redis = new Redis(redisUrl);
try {
  await contentionScene(redisUrl, redis);
  await reentrancyScene(redis);
  await watchdogScene(redis);
  await familyScene(redis);
  await permitsScene(redis);
  await observeScene(redis);
} catch (error) {
  failures++;
  // After Ctrl-C the scenes fail only because their processes were stopped: nothing to report.
  if (!interrupted) console.error('\nThe demo failed with an error:', error);
} finally {
  // quit() waits for a reply, which a server that is gone never sends.
  if (redis.status === 'ready') await redis.quit();
  else redis.disconnect();
  for (const child of children) await stop(child);
}

const seconds = (Number(process.hrtime.bigint() - startedAt) / 1e9).toFixed(1);
const verdict = failures === 0 ? 'All checks passed' : `${failures} check(s) FAILED`;
if (!interrupted) console.log(`\n${verdict} · ${seconds} s`);
process.exitCode = failures === 0 ? 0 : 1;
