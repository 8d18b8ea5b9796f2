/**
 * `npm run test:partitions`: real partitions, pauses, kills and restarts between test hosts in network
 * namespaces (net.ts), with a workload of lock clients (lock-client.ts) that write to PostgreSQL through the
 * fencing recipe (fenced-postgres.ts), and a checker (checker.ts) over their histories and the database. Each
 * scenario states what it expects before it runs; the figures go to .vitest-results/partitions.md.
 *
 * The clients reach PostgreSQL (127.0.0.1:5432 in the host's namespace, trust authentication, database
 * `test`) through a TCP forwarder on the database net's gateway: each client writes with its own connection,
 * at the moment it chooses to. Everything the run creates (namespaces, links, the schema flp<id>) is removed
 * after it, and what a killed run left behind is removed before it.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { once } from 'node:events';
import type { ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { check, type AcceptedRow, type Fault, type ScenarioFigures } from './checker.ts';
import { CREATE_FENCED_TABLE } from './fenced-postgres.ts';
import type { ClientConfig, ClientEvent, LockKind } from './lock-client.ts';
import { cleanStale, TestNet, type Host } from './net.ts';
import { PgConnection } from './pg-wire.ts';

const root = join(import.meta.dirname, '..', '..');
const LEASE = 1_000; // watchdogTimeout and the fixed leaseTime (ms), but in the partition scenario
const CLIENTS = 3;
const now = (): number => Number(process.hrtime.bigint()) / 1e6;

let net: TestNet;
let redisHost: Host;
let clientHosts: Host[];
let redisProcess: ChildProcess | undefined;
let admin: Redis;
let db: PgConnection;
let forwarder: Server;
const forwarded = new Set<Socket>();
/** What beforeAll set up, undone in reverse by afterAll (also when beforeAll failed half-way). */
const cleanups: (() => unknown)[] = [];
const figures: ScenarioFigures[] = [];
let schema: string;

function startRedis(): ChildProcess {
  const child = net.spawn(
    redisHost,
    'redis-server',
    [
      '--port',
      '6379',
      '--bind',
      redisHost.redisAddress,
      '--save',
      '',
      '--appendonly',
      'no',
      '--protected-mode',
      'no',
      '--dir',
      '/tmp',
    ],
    { stdio: 'ignore' },
  );
  return child;
}

async function waitForRedis(): Promise<void> {
  const deadline = now() + 10_000;
  for (;;) {
    try {
      await admin.ping();
      return;
    } catch {
      if (now() > deadline) throw new Error('redis-server in its namespace did not answer within 10 s');
    }
    await sleep(50);
  }
}

beforeAll(async () => {
  cleanStale();
  net = new TestNet();
  cleanups.push(() => net.close());
  schema = net.tag;
  redisHost = net.addHost('redis', false);
  clientHosts = Array.from({ length: CLIENTS }, (_, i) => net.addHost(`c${i}`, true));
  redisProcess = startRedis();
  admin = new Redis({
    host: redisHost.redisAddress,
    port: 6379,
    commandTimeout: 1_000,
    retryStrategy: () => 100,
    lazyConnect: true,
  });
  admin.on('error', () => {});
  cleanups.push(() => admin.disconnect());
  await admin.connect().catch(() => {});
  await waitForRedis();

  // The database net's gateway forwards to PostgreSQL on the host's loopback.
  forwarder = createServer((socket) => {
    const upstream = createConnection({ host: '127.0.0.1', port: 5432 });
    forwarded.add(socket).add(upstream);
    socket.pipe(upstream).pipe(socket);
    const end = (): void => {
      socket.destroy();
      upstream.destroy();
      forwarded.delete(socket);
      forwarded.delete(upstream);
    };
    socket.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  cleanups.push(() => {
    for (const socket of forwarded) socket.destroy();
    forwarder.close();
  });
  forwarder.listen(5432, net.dbGateway);
  await once(forwarder, 'listening');

  db = await PgConnection.connect({ host: '127.0.0.1', port: 5432, user: 'postgres', database: 'test' });
  cleanups.push(() => db.close());
  await db.query(`CREATE SCHEMA ${schema}`);
  cleanups.push(() => db.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  await db.query(`SET search_path TO ${schema}`);
  await db.query(CREATE_FENCED_TABLE);
  // The audit (test-only): the order in which the database accepted writes.
  await db.query('CREATE TABLE accepted (seq bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL)');
  await db.query(
    `CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO ${schema}.accepted (name, token) VALUES (NEW.name, NEW.token); RETURN NEW; END $$`,
  );
  await db.query('CREATE TRIGGER audit AFTER UPDATE ON fenced_resource FOR EACH ROW EXECUTE FUNCTION audit()');
}, 60_000);

afterAll(async () => {
  writeFigures();
  const errors: unknown[] = [];
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      errors.push(error);
    }
  }
  if (errors.length > 0) throw new AggregateError(errors, 'partition suite: cleanup failed');
}, 60_000);

function writeFigures(): void {
  const dir = join(root, '.vitest-results');
  mkdirSync(dir, { recursive: true });
  const causes = (f: ScenarioFigures): string =>
    Object.entries(f.overlaps)
      .map(([cause, n]) => `${cause} ${n}`)
      .join(', ') || '0';
  const lines = [
    '| scenario | clients | acquires | granted | failed acquires | faults | overlaps by cause | lost signals | failed releases never told lost | min margin before expiry (ms) | writes | stale writes rejected | out-of-order accepted | lost updates |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...figures.map(
      (f) =>
        `| ${f.scenario} | ${f.clients} | ${f.acquires} | ${f.granted} | ${f.failedAcquires} | ${f.faults} | ${causes(f)} | ${f.lostSignals} | ${f.untoldEnds} | ${f.minMarginMs === undefined ? '-' : f.minMarginMs.toFixed(0)} | ${f.writes} | ${f.staleRejected} | ${f.outOfOrder} | ${f.lostUpdates} |`,
    ),
  ];
  writeFileSync(join(dir, 'partitions.md'), `${lines.join('\n')}\n`);
  console.log(lines.join('\n'));
}

interface Client {
  readonly id: string;
  readonly host: Host;
  readonly child: ChildProcess;
  readonly exited: Promise<unknown>;
}

/** One scenario's run: its clients, their history, the faults injected. */
class Run {
  readonly events: ClientEvent[] = [];
  readonly faults: Fault[] = [];
  readonly clients = new Map<string, Client>();
  readonly stderr: string[] = [];
  /** Clients that ended other than by `stop` or the harness's SIGKILL: a crash is a failure of the run. */
  readonly crashes: string[] = [];
  readonly #killed = new Set<string>();
  readonly #waiters: { match: (e: ClientEvent) => boolean; resolve: (e: ClientEvent) => void }[] = [];
  #serial = 0;

  constructor(
    readonly name: string,
    readonly resources: readonly { readonly name: string; readonly kind: LockKind }[],
    readonly timing: Timing,
    readonly redis: ClientConfig['redis'],
    readonly syncReplicas?: ClientConfig['syncReplicas'],
  ) {}

  start(host: Host): Client {
    const id = `${host.name}.${this.#serial++}`;
    const config: ClientConfig = {
      id,
      redis: this.redis,
      ...(this.syncReplicas ? { syncReplicas: this.syncReplicas } : {}),
      pgHost: net.dbGateway,
      pgPort: 5432,
      schema,
      resources: this.resources,
      watchdogTimeout: this.timing.watchdogTimeout ?? LEASE,
      ...this.timing,
      waitTime: 3_000,
    };
    const child = net.spawn(
      host,
      process.execPath,
      ['--no-warnings', join(import.meta.dirname, 'lock-client.ts'), JSON.stringify(config)],
      {
        stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
        cwd: root,
      },
    );
    // A client's stderr goes with the history (ioredis prints its Sentinel connections' errors there while
    // they are cut off): .vitest-results/partitions-<scenario>.stderr.
    child.stderr?.on('data', (chunk: Buffer) => this.stderr.push(`${id}: ${chunk.toString()}`));
    child.on('message', (e: ClientEvent) => {
      this.events.push(e);
      for (const w of [...this.#waiters]) {
        if (w.match(e)) {
          this.#waiters.splice(this.#waiters.indexOf(w), 1);
          w.resolve(e);
        }
      }
    });
    child.on('exit', (code, signal) => {
      if (code !== 0 && !this.#killed.has(id)) this.crashes.push(`${id} exited with ${code ?? signal ?? '?'}`);
    });
    const client = { id, host, child, exited: once(child, 'exit') };
    this.clients.set(id, client);
    return client;
  }

  /** SIGKILL, as a fault: not a crash. */
  kill(client: Client): void {
    this.#killed.add(client.id);
    client.child.kill('SIGKILL');
  }

  next(match: (e: ClientEvent) => boolean, timeoutMs: number): Promise<ClientEvent> {
    return new Promise((resolve, reject) => {
      const waiter = { match, resolve };
      this.#waiters.push(waiter);
      setTimeout(() => {
        const i = this.#waiters.indexOf(waiter);
        if (i === -1) return;
        this.#waiters.splice(i, 1);
        reject(new Error(`${this.name}: no matching event within ${timeoutMs} ms`));
      }, timeoutMs).unref();
    });
  }

  /** Stops every client (each finishes its iteration and closes) and waits for them to exit. */
  async stop(): Promise<void> {
    for (const c of this.clients.values())
      if (c.child.exitCode === null && c.child.connected) c.child.send({ type: 'stop' });
    await Promise.race([Promise.all([...this.clients.values()].map((c) => c.exited)), sleep(15_000)]);
    for (const c of this.clients.values()) {
      if (c.child.exitCode !== null || c.child.signalCode !== null) continue;
      this.crashes.push(`${c.id} did not stop within 15 s`);
      this.kill(c);
    }
  }

  async check(): Promise<ReturnType<typeof check>> {
    const rows = await db.query('SELECT seq, name, token FROM accepted WHERE name = ANY($1::text[]) ORDER BY seq', [
      `{${this.resources.map((r) => r.name).join(',')}}`,
    ]);
    const accepted: AcceptedRow[] = rows.rows.map((r) => ({
      seq: Number(r['seq']),
      name: r['name']!,
      token: BigInt(r['token']!),
    }));
    const counterRows = await db.query('SELECT name, writes FROM fenced_resource WHERE name = ANY($1::text[])', [
      `{${this.resources.map((r) => r.name).join(',')}}`,
    ]);
    const counters = new Map(counterRows.rows.map((r) => [r['name']!, Number(r['writes'])]));
    const result = check(this.name, this.clients.size, this.events, this.faults, accepted, counters);
    result.problems.push(...this.crashes);
    // The history itself, for whoever reads a failure: one JSON line per event or fault.
    mkdirSync(join(root, '.vitest-results'), { recursive: true });
    const history = [...this.faults.map((f) => ({ fault: f })), ...this.events]
      .map((x) => JSON.stringify(x))
      .join('\n');
    writeFileSync(join(root, '.vitest-results', `partitions-${this.name}.jsonl`), `${history}\n`);
    writeFileSync(join(root, '.vitest-results', `partitions-${this.name}.stderr`), this.stderr.join(''));
    figures.push(result.figures);
    writeFigures();
    return result;
  }
}

/** A scenario's fixed lease and the time a hold works (its database read) before it writes. */
interface Timing {
  /** Default LEASE. */
  readonly watchdogTimeout?: number;
  readonly leaseTime: number;
  readonly workMs: number;
  readonly computeMs: number;
}

async function scenario(
  name: string,
  timing: Timing,
  body: (run: Run) => Promise<void>,
  sentinel?: { sentinels: { host: string; port: number }[]; syncReplicas?: ClientConfig['syncReplicas'] },
): Promise<ReturnType<typeof check>> {
  const resources = (['plain', 'fair', 'write'] as const).map((kind) => ({ name: `${name}:${kind}`, kind }));
  for (const r of resources) await db.query('INSERT INTO fenced_resource (name) VALUES ($1)', [r.name]);
  if (!sentinel) await admin.flushall();
  const run = sentinel
    ? new Run(name, resources, timing, { sentinels: sentinel.sentinels }, sentinel.syncReplicas)
    : new Run(name, resources, timing, { host: redisHost.redisAddress, port: 6379 });
  for (const host of clientHosts) run.start(host);
  try {
    await Promise.all(
      [...run.clients.values()].map((c) => run.next((e) => e.client === c.id && e.type === 'ready', 20_000)),
    );
    await body(run);
  } finally {
    await run.stop();
  }
  return run.check();
}

/** The next grant to a client that is still running (in watchdog mode when `watchdog`), `timeoutMs` at most. */
function nextGrant(run: Run, watchdog?: boolean, timeoutMs = 10_000): Promise<ClientEvent> {
  return run.next(
    (e) =>
      e.type === 'ok' &&
      (watchdog === undefined || e.watchdog === watchdog) &&
      run.clients.get(e.client)?.child.exitCode === null,
    timeoutMs,
  );
}

const SHORT: Timing = { leaseTime: LEASE, workMs: 50, computeMs: 0 };

/**
 * Three boxes, each with a redis-server and a Sentinel (quorum 2, down after 1 s): box 0's server is the
 * master at start, the others replicate it.
 */
class SentinelBoxes {
  readonly boxes: Host[];
  readonly #dir = mkdtempSync(join(tmpdir(), 'flowlock-partitions-'));
  readonly #admins: Redis[] = [];

  constructor(tag: string) {
    this.boxes = [0, 1, 2].map((i) => net.addHost(`${tag}${i}`, false));
    const master = this.boxes[0]!.redisAddress;
    this.boxes.forEach((box, i) => {
      net.spawn(
        box,
        'redis-server',
        [
          '--port',
          '6379',
          '--bind',
          box.redisAddress,
          '--save',
          '',
          '--appendonly',
          'no',
          '--protected-mode',
          'no',
          '--repl-timeout',
          '5',
          '--dir',
          this.#dir,
          ...(i === 0 ? [] : ['--replicaof', master, '6379']),
        ],
        { stdio: 'ignore' },
      );
      const conf = join(this.#dir, `sentinel-${box.name}.conf`);
      writeFileSync(
        conf,
        [
          `port 26379`,
          `bind ${box.redisAddress}`,
          'protected-mode no',
          `dir ${this.#dir}`,
          `sentinel monitor mymaster ${master} 6379 2`,
          'sentinel down-after-milliseconds mymaster 1000',
          'sentinel failover-timeout mymaster 3000',
          'sentinel parallel-syncs mymaster 1',
          '',
        ].join('\n'),
      );
      net.spawn(box, 'redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
    });
  }

  get sentinels(): { host: string; port: number }[] {
    return this.boxes.map((b) => ({ host: b.redisAddress, port: 26379 }));
  }

  #admin(host: string, port: number): Redis {
    const r = new Redis({
      host,
      port,
      commandTimeout: 1_000,
      retryStrategy: () => 200,
      lazyConnect: true,
      enableOfflineQueue: true,
    });
    r.on('error', () => {});
    this.#admins.push(r);
    return r;
  }

  /** The master `box`'s Sentinel names, or undefined while it does not answer. */
  async masterBy(box: number): Promise<string | undefined> {
    const r = this.#admins[box] ?? this.#admin(this.boxes[box]!.redisAddress, 26379);
    try {
      const reply = (await r.call('SENTINEL', 'get-master-addr-by-name', 'mymaster')) as string[] | null;
      return reply?.[0];
    } catch {
      return undefined;
    }
  }

  /** Waits until `check` holds (polling every 100 ms), `timeoutMs` at most. */
  async until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
    const deadline = now() + timeoutMs;
    while (!(await check())) {
      if (now() > deadline) throw new Error(`Sentinel: ${what} did not happen within ${timeoutMs} ms`);
      await sleep(100);
    }
  }

  /** Every Sentinel knows both replicas (so a failover can happen). */
  async ready(): Promise<void> {
    for (let i = 0; i < 3; i++) this.#admin(this.boxes[i]!.redisAddress, 26379);
    await this.until(
      'every Sentinel seeing two replicas and two other Sentinels',
      async () => {
        for (const r of this.#admins.slice(0, 3)) {
          try {
            const master = (await r.call('SENTINEL', 'master', 'mymaster')) as string[];
            const field = (k: string): string | undefined => master[master.indexOf(k) + 1];
            if (field('num-slaves') !== '2' || field('num-other-sentinels') !== '2') return false;
          } catch {
            return false;
          }
        }
        return true;
      },
      20_000,
    );
    // And both replicas in sync (a replica still loading the master's snapshot acknowledges no WAIT).
    const master = this.#admin(this.boxes[0]!.redisAddress, 6379);
    await this.until(
      'both replicas online',
      async () => ((await master.info('replication').catch(() => '')).match(/state=online/g) ?? []).length === 2,
      20_000,
    );
  }

  stop(): void {
    for (const r of this.#admins) r.disconnect();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/**
 * The split brain: box 0 (the master and one Sentinel) and client 0 on one side, boxes 1 and 2 (two
 * Sentinels, a majority) and clients 1 and 2 on the other; the Sentinels of the majority promote a replica,
 * while client 0 goes on locking on the old master. Healed after `splitMs`.
 */
async function splitBrain(run: Run, cluster: SentinelBoxes, splitMs: number): Promise<void> {
  const [b0, b1, b2] = cluster.boxes as [Host, Host, Host];
  const [c0, c1, c2] = clientHosts as [Host, Host, Host];
  const cuts: [Host, Host][] = [
    [b0, b1],
    [b0, b2],
    [b0, c1],
    [b0, c2],
    [c0, b1],
    [c0, b2],
  ];
  await sleep(1_500);
  const fault: Fault = { kind: 'failover', start: now(), end: Infinity };
  run.faults.push(fault);
  for (const [a, b] of cuts) net.cut(a, b);
  await cluster.until(
    'a failover on the majority side',
    async () => (await cluster.masterBy(1)) !== b0.redisAddress,
    15_000,
  );
  await sleep(splitMs);
  for (const [a, b] of cuts) net.uncut(a, b);
  // Healed: the old master learns the new configuration from its Sentinel and becomes a replica.
  await cluster.until(
    'the old master following the new one',
    async () => (await cluster.masterBy(0)) !== b0.redisAddress,
    15_000,
  );
  fault.end = now() + LEASE;
  await sleep(2_000);
}

describe('partitions, pauses, kills and restarts, checked from the history and the database', () => {
  it('no faults: no overlap, every write accepted in token order, no lost update', async () => {
    const result = await scenario('baseline', SHORT, async () => {
      await sleep(5_000);
    });
    expect(result.problems).toEqual([]);
    expect(result.overlaps).toEqual([]);
    expect(result.figures.staleRejected).toBe(0);
    expect(result.figures.granted).toBeGreaterThan(20);
  });

  it('a holder cut off from Redis is told lost before its server-side expiry, and nobody else holds before that', async () => {
    // Expected: zero overlaps (the local deadline comes before the server drops the hold), every cut-off
    // holder told lost with a positive margin, no lost update, no out-of-order write.
    // A watchdog-mode holder is cut off at its grant, and works longer than its lease (fixed leases are
    // longer still): the loss comes while it holds, not at its release. The lease is 3 s here: the local
    // deadline comes 1% + 2 ms (32 ms) before the server's expiry, and the waiters retry right at that
    // expiry, so a holder's timer late by more than that on a loaded machine would be an overlap (a stalled
    // event loop is a pause); 1 s (12 ms) leaves too little for a busy 2-core machine.
    const lease = 3 * LEASE;
    const result = await scenario(
      'partition',
      { watchdogTimeout: lease, leaseTime: 3 * lease, workMs: 1.2 * lease, computeMs: 0 },
      async (run) => {
        for (let i = 0; i < 3; i++) {
          const grant = await nextGrant(run, true, 30_000);
          const host = run.clients.get(grant.client)!.host;
          const fault: Fault = {
            kind: 'partition',
            client: grant.client,
            res: grant.res!,
            start: now(),
            end: Infinity,
          };
          net.setRedisLink(host, false);
          run.faults.push(fault);
          // Measured from before the PTTL was sent: an expiry no later than the server's.
          const asked = now();
          const pttl = await admin.pttl(grant.res!);
          if (pttl > 0) fault.serverExpiry = asked + pttl;
          await sleep(1.2 * lease);
          net.setRedisLink(host, true);
          fault.end = now();
          await sleep(1_500);
        }
      },
    );
    expect(result.problems).toEqual([]);
    // No overlap, but where the holder's own timer fired after the server's expiry (its event loop stalled
    // past the allowance, as on a machine loaded several times over: a pause, which fencing is for).
    expect(result.overlaps.filter((o) => o.cause !== 'stall')).toEqual([]);
    // Every cut-off holder was told lost (its margin is measured; its sign is a figure, not an assertion:
    // the drift allowance is 1% + 2 ms, 32 ms here, and a loaded event loop may notice later than that).
    expect(result.margins.length).toBe(3);
    for (const m of result.margins) expect(m.marginMs).toBeDefined();
  });

  it('a holder paused past its lease overlaps the next holder, and the database refuses its stale write', async () => {
    // Expected: overlaps, each caused by a pause; the paused holder's write after it resumes is refused by
    // the token check whenever another holder wrote during the pause; no lost update, no out-of-order write.
    // The pause lands in the synchronous work between the holder's check of its signal and its write (after
    // its 50 ms read, within 300 ms of computing), as a GC pause would: when the process resumes it goes
    // straight on to the write, with its old token.
    const result = await scenario('pause', { leaseTime: LEASE, workMs: 50, computeMs: 300 }, async (run) => {
      for (let i = 0; i < 3; i++) {
        const grant = await nextGrant(run);
        const client = run.clients.get(grant.client)!;
        await sleep(150);
        const fault: Fault = { kind: 'pause', client: client.id, start: now(), end: Infinity };
        client.child.kill('SIGSTOP');
        run.faults.push(fault);
        await sleep(3 * LEASE);
        client.child.kill('SIGCONT');
        fault.end = now() + 100;
        await sleep(1_500);
      }
    });
    expect(result.problems).toEqual([]);
    expect(result.overlaps.length).toBeGreaterThan(0);
    expect(result.overlaps.every((o) => o.cause === 'pause')).toBe(true);
    expect(result.figures.staleRejected).toBeGreaterThan(0);
  });

  it('a holder killed with SIGKILL: the lock comes back at its expiry, no overlap', async () => {
    // Expected: zero overlaps, no lost update; the killed hold is the only hold without release or loss.
    const result = await scenario('kill', SHORT, async (run) => {
      for (let i = 0; i < 2; i++) {
        const grant = await nextGrant(run);
        const client = run.clients.get(grant.client)!;
        run.faults.push({ kind: 'kill', client: client.id, start: now(), end: now() });
        run.kill(client);
        await client.exited;
        run.start(client.host);
        await sleep(2_500);
      }
    });
    expect(result.problems).toEqual([]);
    expect(result.overlaps).toEqual([]);
  });

  it('Redis restarted without persistence: holds are lost, overlaps only around the restart, fencing holds', async () => {
    // Expected: overlaps possible, each caused by the restart (Redis forgot the holds before their holders
    // learned it); tokens keep rising (the server clock floor), so no out-of-order write and no lost update.
    const result = await scenario('restart', SHORT, async (run) => {
      for (let i = 0; i < 2; i++) {
        await nextGrant(run);
        const fault: Fault = { kind: 'redis-restart', start: now(), end: Infinity };
        run.faults.push(fault);
        redisProcess?.kill('SIGKILL');
        if (redisProcess) await once(redisProcess, 'exit');
        redisProcess = startRedis();
        await waitForRedis();
        fault.end = now() + LEASE;
        await sleep(2_500);
      }
    });
    expect(result.problems).toEqual([]);
    expect(result.overlaps.every((o) => o.cause === 'redis-restart')).toBe(true);
  });

  it('a Sentinel split brain: overlaps without syncReplicas, each around the failover; fencing keeps token order', async () => {
    // Expected: while the old master serves client 0 and the promoted replica serves clients 1 and 2, both
    // sides grant the same locks: overlaps, all during the failover's window; tokens (server clock floor)
    // interleave, so the database accepts writes of both sides in token order and refuses those that arrive
    // behind a newer token; no lost update, no out-of-order write.
    const cluster = new SentinelBoxes('s');
    try {
      await cluster.ready();
      const result = await scenario('split-brain', SHORT, (run) => splitBrain(run, cluster, 4_000), {
        sentinels: cluster.sentinels,
      });
      expect(result.problems).toEqual([]);
      expect(result.overlaps.every((o) => o.cause === 'failover')).toBe(true);
    } finally {
      cluster.stop();
    }
  });

  it('the same split brain with syncReplicas: 1: the cut-off master cannot confirm a grant', async () => {
    // Expected: client 0's grants on the old master fail (no replica acknowledges them), so overlaps drop to
    // those whose grant was replicated just before the cut; fencing as before.
    const cluster = new SentinelBoxes('w');
    try {
      await cluster.ready();
      const result = await scenario('split-brain-sync', SHORT, (run) => splitBrain(run, cluster, 4_000), {
        sentinels: cluster.sentinels,
        syncReplicas: { replicas: 1, timeout: 200 },
      });
      expect(result.problems).toEqual([]);
      expect(result.overlaps.every((o) => o.cause === 'failover')).toBe(true);
    } finally {
      cluster.stop();
    }
  });

  it('the Guarantees page shows the recipe this suite runs', () => {
    const recipe = readFileSync(join(import.meta.dirname, 'fenced-postgres.ts'), 'utf8');
    const page = readFileSync(join(root, 'docs', 'guide', 'guarantees.md'), 'utf8');
    expect(page).toContain('```ts\n' + recipe + '```');
  });
});
