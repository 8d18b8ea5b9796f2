/**
 * A lock client on a test host (run by Node 24 inside its network namespace; its one argument is a JSON
 * ClientConfig). It loops as a service would: acquire (a plain, fair or write lock, with the watchdog or a
 * fixed lease, in turn), work a little, write to the protected resource in PostgreSQL with its fencing token
 * (fenced-postgres.ts) if its lease's signal has not aborted, release. It writes to the database itself, over
 * its own leg on the database net, while it believes it holds the lock: the write carries the token this
 * process got, at the moment this process chose to write. Every step goes to the harness over IPC with
 * process.hrtime.bigint() (CLOCK_MONOTONIC: one clock for every process and namespace of the machine).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createLockClient, type LockLease, type RLock } from 'flowlock';
import { fencedWrite } from './fenced-postgres.ts';
import { PgConnection } from './pg-wire.ts';

export type LockKind = 'plain' | 'fair' | 'write';

export interface ClientConfig {
  readonly id: string;
  /** A standalone Redis, or the Sentinels of `mymaster`. */
  readonly redis:
    | { readonly host: string; readonly port: number }
    | { readonly sentinels: readonly { host: string; port: number }[] };
  /** The lock client's `syncReplicas` (Sentinel): WAIT for this many replicas after each grant. */
  readonly syncReplicas?: { readonly replicas: number; readonly timeout: number };
  readonly pgHost: string;
  readonly pgPort: number;
  readonly schema: string;
  readonly resources: readonly { readonly name: string; readonly kind: LockKind }[];
  readonly watchdogTimeout: number;
  readonly leaseTime: number;
  readonly workMs: number;
  /**
   * Synchronous work between the holder's check of its signal and its write (building the value): the
   * event loop is blocked, as in a GC pause or a long synchronous function, so a pause that lands there
   * resumes straight into the write, before any timer can tell the holder its lease ran out.
   */
  readonly computeMs: number;
  readonly waitTime: number;
}

/** One step of the history (`t`: ms on the machine's monotonic clock). */
export interface ClientEvent {
  readonly client: string;
  readonly t: number;
  readonly type:
    | 'ready'
    | 'invoke'
    | 'ok'
    | 'fail'
    | 'lost'
    | 'write-invoke'
    | 'write'
    | 'write-fail'
    | 'release-invoke'
    | 'release-ok'
    | 'release-fail'
    | 'done';
  readonly res?: string;
  readonly kind?: LockKind;
  readonly watchdog?: boolean;
  readonly token?: string;
  readonly accepted?: boolean;
  readonly error?: string;
}

const config = JSON.parse(process.argv[2] ?? '{}') as ClientConfig;
const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const send = (event: Omit<ClientEvent, 'client' | 't'>): void => {
  process.send?.({ client: config.id, t: now(), ...event });
};
const code = (error: unknown): string =>
  error instanceof Error
    ? ((error as Error & { code?: string }).code ?? error.name) + `: ${error.message}`
    : String(error);

const state = { stopping: false };
process.on('message', (message: { type: string }) => {
  if (message.type === 'stop') state.stopping = true;
});

// A command timeout, as a service on a network that can fail needs: without it a command sent into a pulled
// cable waits for TCP to give up (minutes).
// Through Sentinel: the client listens to the Sentinels for a failover (failoverDetector: a master cut off
// answers nothing, and the connection to it would otherwise wait for TCP to give up), and a master demoted to
// a replica answers READONLY, after which the client asks the Sentinels again.
const redis = new Redis({
  ...('sentinels' in config.redis
    ? {
        sentinels: [...config.redis.sentinels],
        name: 'mymaster',
        sentinelRetryStrategy: () => 100,
        sentinelCommandTimeout: 500,
        failoverDetector: true,
        reconnectOnError: (e: Error) => e.message.startsWith('READONLY'),
      }
    : { host: config.redis.host, port: config.redis.port }),
  commandTimeout: 1_000,
  connectTimeout: 1_000,
  retryStrategy: () => 100,
});
redis.on('error', () => {
  // Connection errors while partitioned or while Redis restarts: the commands' own rejections tell.
});
const locks = createLockClient(redis, {
  watchdogTimeout: config.watchdogTimeout,
  ...(config.syncReplicas ? { syncReplicas: config.syncReplicas } : {}),
});
const db = await PgConnection.connect({ host: config.pgHost, port: config.pgPort, user: 'postgres', database: 'test' });
await db.query(`SET search_path TO ${config.schema}`);

const lockOf = (name: string, kind: LockKind): RLock =>
  kind === 'plain'
    ? locks.getLock(name)
    : kind === 'fair'
      ? locks.getFairLock(name)
      : locks.getReadWriteLock(name).writeLock();

/** `value`, after `ms` of synchronous work. */
function compute(value: string, ms: number): string {
  const until = now() + ms;
  while (now() < until) {
    // Busy: nothing else of this process runs meanwhile.
  }
  return value;
}

send({ type: 'ready' });
for (let i = 0; !state.stopping; i++) {
  const resource = config.resources[i % config.resources.length]!;
  const watchdog = Math.floor(i / config.resources.length) % 2 === 0;
  const base = { res: resource.name, kind: resource.kind, watchdog };
  send({ type: 'invoke', ...base });
  let lease: LockLease;
  try {
    lease = await lockOf(resource.name, resource.kind).acquire({
      waitTime: config.waitTime,
      ...(watchdog ? {} : { leaseTime: config.leaseTime }),
    });
  } catch (error) {
    send({ type: 'fail', ...base, error: code(error) });
    await sleep(50);
    continue;
  }
  const token = lease.fencingToken.toString();
  send({ type: 'ok', ...base, token });
  const onLost = (): void => send({ type: 'lost', ...base, token, error: code(lease.signal.reason) });
  if (lease.signal.aborted) onLost();
  else lease.signal.addEventListener('abort', onLost, { once: true });

  // The work: a read of the resource that takes workMs at the database (a read-modify-write's read).
  await db.query('SELECT value, pg_sleep($2) FROM fenced_resource WHERE name = $1', [
    resource.name,
    config.workMs / 1000,
  ]);
  // The check a careful holder makes; a pause between it and the write is what fencing is for.
  if (!lease.signal.aborted) {
    const value = compute(`${config.id}:${i}`, config.computeMs);
    send({ type: 'write-invoke', ...base, token });
    try {
      const accepted = await fencedWrite(db, resource.name, lease.fencingToken, value);
      send({ type: 'write', ...base, token, accepted });
    } catch (error) {
      send({ type: 'write-fail', ...base, token, error: code(error) });
    }
  }
  send({ type: 'release-invoke', ...base, token });
  try {
    await lease.release();
    send({ type: 'release-ok', ...base, token });
  } catch (error) {
    send({ type: 'release-fail', ...base, token, error: code(error) });
  }
}

try {
  await locks.close({ timeout: 3_000 });
} catch {
  // Holds it could not release (Redis unreachable): they run out on the server.
}
redis.disconnect();
db.close();
send({ type: 'done' });
process.disconnect();
