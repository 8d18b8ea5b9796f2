/**
 * A script call on a Cluster whose node connection the client dropped while the call was written and not
 * answered (issue 38.5): node-redis rejects it with "Disconnects client" when a slot refresh drops the node
 * from its map, and the call may have run there. The library sends a call again after a redirection (it did
 * not run), and after a lost reply only when the script is idempotent per request id: add-permits is not,
 * and must not run a second time on the slot's new owner.
 *
 * The cluster is built by hand, so that one master (M) owns the semaphore's slot only: while M is stopped
 * (SIGSTOP) with the call in its socket, the other masters take that slot and another one, and a call for the
 * other one meets MOVED, on which the client refreshes its slots and drops M, which no longer owns any.
 */
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLockClient, RedisUnavailableError, type LockClient, type RedisClient } from '../../src/index.js';
import { keySlot } from '../../src/redis/keys.js';
import { clientKind, isNodeRedisClient, newTestClient, sendCommand, type TestClient } from '../support/clients.js';
import { uniqueName, until } from '../support/fixture.js';
import { startRedisServer, type LocalRedis } from '../support/redis-server.js';

const cli = (node: LocalRedis, ...args: string[]): string =>
  spawnSync('redis-cli', ['-p', String(node.port), ...args], { encoding: 'utf8' }).stdout.trim();

/**
 * Bytes written to `node`'s client connections and not yet read by it (the Recv-Q of its sockets, from `ss`):
 * what a stopped server has been sent.
 */
function unread(node: LocalRedis): number {
  const out = spawnSync('ss', ['-Htn', 'state', 'established', `( sport = :${node.port} )`], { encoding: 'utf8' });
  return out.stdout
    .split('\n')
    .map((line) => Number(line.trim().split(/\s+/)[0] ?? 0) || 0)
    .reduce((sum, bytes) => sum + bytes, 0);
}

/** A key of `slot`: the first `probe:<n>` that hashes there. */
function keyOfSlot(slot: number): string {
  for (let n = 0; ; n++) if (keySlot(`probe:${n}`) === slot) return `probe:${n}`;
}

/** GET `key` on a client under test, routed by the key (node-redis' raw cluster call takes it apart). */
function get(client: RedisClient, key: string): Promise<unknown> {
  if (isNodeRedisClient(client)) {
    return (
      client as unknown as { sendCommand(key: string, readonly: boolean, args: string[]): Promise<unknown> }
    ).sendCommand(key, true, ['GET', key]);
  }
  return sendCommand(client, ['GET', key]);
}

const tag = uniqueName('resend').replaceAll(':', '-');
const name = `{${tag}}:sem`;
const semaphoreSlot = keySlot(name);
/** A slot of P's, empty, moved to N while M is stopped: a call for it meets MOVED at P. */
const movedSlot = (semaphoreSlot + 8192) % 16384;

/**
 * Not on ioredis and iovalkey, which send a call cut off by its connection again by themselves, wherever the
 * slot is now (docs/clients.md: add-permits is resent like everything else there): nothing the library
 * decides.
 */
const applies = !clientKind.startsWith('io');

let m: LocalRedis;
let n: LocalRedis;
let p: LocalRedis;
const opened: { connection: TestClient; locks: LockClient }[] = [];
/** Every server started, stopped after the tests (whatever beforeAll got to). */
const started: LocalRedis[] = [];

beforeAll(async () => {
  if (!applies) return;
  const start = async (): Promise<LocalRedis> => {
    const node = await startRedisServer(['--cluster-enabled', 'yes', '--cluster-node-timeout', '10000'], {
      clusterBus: true,
    });
    started.push(node);
    return node;
  };
  [m, n, p] = await Promise.all([start(), start(), start()]);
  // M: the semaphore's slot; P: movedSlot; N: every other slot.
  cli(m, 'cluster', 'addslots', String(semaphoreSlot));
  cli(p, 'cluster', 'addslots', String(movedSlot));
  const rest: string[] = [];
  for (let slot = 0; slot < 16384; slot++) if (slot !== semaphoreSlot && slot !== movedSlot) rest.push(String(slot));
  for (let i = 0; i < rest.length; i += 2000) cli(n, 'cluster', 'addslots', ...rest.slice(i, i + 2000));
  for (const node of [n, p]) {
    // Its bus port (Redis 7 servers here have one of their own: --cluster-port), if any.
    const bus = /^\d+$/m.exec(cli(node, 'config', 'get', 'cluster-port').split('\n')[1] ?? '')?.[0];
    cli(m, 'cluster', 'meet', '127.0.0.1', String(node.port), ...(bus && bus !== '0' ? [bus] : []));
  }
  await until(
    () =>
      [m, n, p].every(
        (node) =>
          /cluster_state:ok/.test(cli(node, 'cluster', 'info')) &&
          cli(node, 'cluster', 'nodes').split('\n').length === 3,
      ),
    'the cluster formed',
    20_000,
  );
}, 60_000);

afterAll(async () => {
  for (const { connection, locks } of opened) {
    await locks.close().catch(() => undefined);
    await connection.close().catch(() => undefined);
  }
  await Promise.all(started.map((node) => node.stop()));
});

describe.skipIf(!applies)('a script call cut off by a dropped Cluster node connection', () => {
  it('does not run add-permits again on the new owner of its slot', async () => {
    const connection = newTestClient({
      topology: 'cluster',
      nodes: [n, p, m].map(({ host, port }) => ({ host, port })),
    });
    const locks = createLockClient(connection.client);
    opened.push({ connection, locks });
    const semaphore = locks.getSemaphore(name);
    expect(await semaphore.trySetPermits(1)).toBe(true);
    // Detects the pub/sub mode (INFO, to any master) now, not while M sleeps.
    await semaphore.addPermits(1);
    // The client knows every slot's owner, P's slot included.
    await get(connection.client, keyOfSlot(movedSlot));

    const myId = (node: LocalRedis): string => cli(node, 'cluster', 'myid');
    const nId = myId(n);
    // M stops (SIGSTOP): its kernel still takes what is written to it, and nothing is answered.
    m.pause();
    const adding = semaphore.addPermits(2).then(
      () => 'added',
      (error: unknown) => error,
    );
    // Written to M's socket: the script call (EVALSHA, its SHA, keys and arguments: over 64 bytes; a client's
    // own upkeep, a PING or a topology check, is shorter) waits there unread. Not a fixed sleep, which a
    // stalled test process could outrun.
    const queued = unread(m);
    await until(() => unread(m) - queued >= 64, 'the call written to the stopped M', 10_000);
    // N takes both slots, P agrees; M, asleep, hears nothing.
    for (const node of [n, p]) {
      cli(node, 'cluster', 'setslot', String(semaphoreSlot), 'node', nId);
      cli(node, 'cluster', 'setslot', String(movedSlot), 'node', nId);
    }
    cli(n, 'cluster', 'bumpepoch');
    // MOVED from P: the client reads the slots again, and drops M, which owns none now.
    await get(connection.client, keyOfSlot(movedSlot)).catch(() => undefined);
    try {
      // The call was written to M before the client dropped M's connection: it may have run there, its
      // outcome is unknown, and it is not sent to N, where it would add the permits a second time.
      const outcome = await adding;
      // node-redis: 'closed' (the dropped connection); GLIDE, which keeps its connection to M: 'timeout'.
      expect(outcome).toBeInstanceOf(RedisUnavailableError);
      expect(cli(n, 'exists', name)).toBe('0');
    } finally {
      m.resume();
    }
  }, 60_000);
});
