/**
 * Requests within managed services' limits (DESIGN.md, "Servers"), observed on the server with MONITOR:
 * no request carries more than 3 999 arguments (ElastiCache Serverless refuses more), and every script call's
 * keys hash to one slot, on a standalone server too (proxy-sharded endpoints that look standalone, such as
 * Azure Managed Redis with its Enterprise policy or Redis Cloud multi-shard, answer CROSSSLOT otherwise).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { keySlot, MAX_REQUEST_ARGS } from '../../src/redis/keys.js';
import { luaSources } from '../../src/redis/lua-scripts.generated.js';
import { everyPrimitive } from '../support/every-primitive.js';
import { openMonitor } from '../support/monitor.js';
import { onCluster, uniqueName, useRedis, type Client, type Redis } from '../support/fixture.js';

const redis = useRedis();

/** One script call as MONITOR showed it: the script's name, its keys, and how many arguments the request had. */
interface ScriptCall {
  readonly script: string;
  readonly keys: string[];
  readonly argc: number;
}

const scriptBySha = new Map<string, string>(Object.entries(luaSources).map(([name, s]) => [s.sha1, name]));
const scriptBySource = new Map<string, string>(Object.entries(luaSources).map(([name, s]) => [s.source, name]));

let stopMonitor: (() => void) | undefined;
afterEach(() => stopMonitor?.());

/** Records every request the server receives (the longest argument count) and every script call. */
async function monitor(admin: Client): Promise<{ calls: ScriptCall[]; longest: () => number }> {
  // Standalone only: the admin connection is a Redis.
  const connection = await openMonitor(admin as Redis);
  const calls: ScriptCall[] = [];
  let longest = 0;
  connection.on('monitor', (_time: string, args: string[], source: string) => {
    // Commands a script runs show as sent by "lua": they are no requests.
    if (/\blua\b/.test(source)) return;
    longest = Math.max(longest, args.length);
    const [command = '', first = '', numkeys = '0'] = args;
    const lower = command.toLowerCase();
    if (lower !== 'evalsha' && lower !== 'eval') return;
    const script = (lower === 'evalsha' ? scriptBySha.get(first) : scriptBySource.get(first)) ?? lower;
    calls.push({ script, keys: args.slice(3, 3 + Number(numkeys)), argc: args.length });
  });
  stopMonitor = () => {
    connection.disconnect();
  };
  return { calls, longest: () => longest };
}

/** The script calls whose keys span several slots, as `script: slots`. */
function crossSlot(calls: readonly ScriptCall[]): string[] {
  return calls.flatMap((call) => {
    const slots = new Set(call.keys.map(keySlot));
    return slots.size > 1 ? [`${call.script}: ${call.keys.join(' ')}`] : [];
  });
}

describe.skipIf(onCluster)('requests within managed-service limits (standalone)', () => {
  it('renews 2 500 watchdog holds, 1 300 of them in one slot, with no request over 3 999 arguments', async () => {
    // A long lease (renewed every 5 s): what is measured is the requests, and a loaded machine must not end
    // a hold before its first renewal.
    const locks = redis.locks({ watchdogTimeout: 15_000 });
    const tag = uniqueName('limits');
    // Names of one slot (a shared hash tag) fill the largest renewal batches; the others spread over more slots
    // than GLIDE lets a client have requests in flight (1 000).
    const names = [
      ...Array.from({ length: 1000 }, (_, i) => `{${tag}}:${i}`),
      ...Array.from({ length: 1200 }, (_, i) => `${tag}:${i}`),
    ];
    // In rounds of 500: GLIDE refuses more than 1 000 requests in flight.
    const leases = [];
    for (let i = 0; i < names.length; i += 500) {
      leases.push(...(await Promise.all(names.slice(i, i + 500).map((name) => locks.getLock(name).acquire()))));
    }
    // And 300 read holds in the same slot, each taken three times: a read hold's renewal carries a timeout key
    // per hold count once every key is declared.
    const readers = Array.from({ length: 300 }, (_, i) => `{${tag}}:read:${i}`);
    for (let i = 0; i < readers.length; i += 100) {
      const held = await Promise.all(
        readers.slice(i, i + 100).map((name) =>
          locks.run(async () => {
            const read = locks.getReadWriteLock(name).readLock();
            return [await read.acquire(), await read.acquire(), await read.acquire()];
          }),
        ),
      );
      leases.push(...held.flat());
    }
    names.push(...readers);
    const seen = await monitor(redis.admin);
    // One renewal period (5 s) and some: every lock renewed at least once.
    await expect
      .poll(
        () => {
          const renewed = new Set(seen.calls.filter((c) => c.script === 'watchdog/renew').flatMap((c) => c.keys));
          return names.every((name) => renewed.has(name));
        },
        { timeout: 20_000, interval: 200 },
      )
      .toBe(true);
    const renewals = seen.calls.filter((c) => c.script === 'watchdog/renew');
    expect(Math.max(...renewals.map((c) => c.argc))).toBeLessThanOrEqual(MAX_REQUEST_ARGS);
    expect(seen.longest()).toBeLessThanOrEqual(MAX_REQUEST_ARGS);
    // The holds of the shared slot fill calls close to the limit (not one call per hold); each call stays in
    // one slot.
    expect(Math.max(...renewals.map((c) => c.argc))).toBeGreaterThan(3000);
    expect(crossSlot(renewals)).toEqual([]);
    // Newest first: a flow's read holds are released in the reverse order of their acquisition.
    leases.reverse();
    for (let i = 0; i < leases.length; i += 500) await Promise.all(leases.slice(i, i + 500).map((l) => l.release()));
  }, 60_000);

  // Without a keyPrefix, as here. A keyPrefix without a hash tag of its own ('app:') still puts Redisson's names
  // (`app:redisson_lock__channel:{name}`, the fair queue, the read-write timeout base, the semaphore's channel)
  // in another slot than the lock hash `app:name` off a Cluster: rolling upgrades share those names, so they
  // stay, and an endpoint that refuses them is found before the first write (one-slot-endpoint.test.ts).
  it('keeps every script call of every primitive within one hash slot', async () => {
    const locks = redis.locks({ watchdogTimeout: 3000 });
    const seen = await monitor(redis.admin);
    // Held past one renewal period (1 s): the watchdog's calls are checked too.
    await everyPrimitive(locks, 1300);

    const scripts = new Set(seen.calls.map((c) => c.script));
    for (const script of ['lock/acquire', 'lock/release', 'fair-lock/acquire', 'read-write-lock/read-acquire']) {
      expect(scripts, script).toContain(script);
    }
    expect(scripts).toContain('watchdog/renew');
    expect(crossSlot(seen.calls)).toEqual([]);
    expect(seen.longest()).toBeLessThanOrEqual(MAX_REQUEST_ARGS);
  });
});
