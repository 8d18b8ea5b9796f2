/**
 * One adapter per lock library, so that every scenario drives them the same way: `acquire(key, leaseMs)`
 * resolves once the lock is held and returns the matching release. Each library keeps its own defaults,
 * except that retries are unlimited (a benchmark must not measure give-ups).
 */
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { Redis as ValkeyRedis } from 'iovalkey';
import { createClient } from 'redis';
import { GlideClient } from '@valkey/valkey-glide';
import { createLockClient, type LockClientOptions, type RLock } from 'flowlock';
import Redlock4 from 'redlock';
import { Redlock as SesameRedlock } from '@sesamecare-oss/redlock';
import { Mutex, Semaphore } from 'redis-semaphore';
import { COMPARE_AND_DELETE, LAYOUT_ACQUIRE, LAYOUT_RELEASE } from './floors.ts';
import { Redisson } from 'node-redisson';

export type Release = () => Promise<unknown>;

/**
 * A digest of the flowlock build (dist/) this process loaded, read right after loading it: worker processes
 * start later than the run, and a build meanwhile (another checkout's `npm test` in the same tree) would
 * mix two versions of the library in one measurement.
 */
export const FLOWLOCK_BUILD = createHash('sha1')
  .update(readFileSync(fileURLToPath(import.meta.resolve('flowlock'))))
  .digest('hex');

export interface Adapter {
  readonly name: string;
  /** The Redis key the library stores the lock of `key` at. */
  redisKey(key: string): string;
  /** Takes the lock on `key` for `leaseMs`, or in the library's auto-renewing mode when `leaseMs` is undefined. */
  acquire(key: string, leaseMs?: number): Promise<Release>;
  /** Takes a shared (read) hold on `key` where the library has one; `acquire` is then the exclusive side. */
  acquireShared?(key: string, leaseMs?: number): Promise<Release>;
  /**
   * One lock + unlock of `key` with nothing in between, in the library's scoped form where it has one
   * (`flowlock-withlock`: `withLock`); the serial scenarios use it instead of `acquire` and its release.
   */
  cycle?(key: string, leaseMs: number): Promise<void>;
  /**
   * Sets `key` up before anyone contends for it, where the library needs that (a flowlock semaphore's
   * permits: `trySetPermits`). Run outside the counted part of a scenario.
   */
  prepare?(key: string): Promise<void>;
  close(): Promise<void>;
}

export const LIBRARIES = [
  'flowlock',
  'set-nx-baseline',
  'redlock@4',
  '@sesamecare-oss/redlock',
  'redis-semaphore',
  'node-redisson',
] as const;
/**
 * flowlock's RLock cycled by `withLock` (`flowlock-withlock`, in (a)), flowlock on another client
 * (`flowlock-node-redis`: RLock on a node-redis 6 client, `flowlock-glide`: on a Valkey GLIDE client, in (a)
 * and (c) next to flowlock on ioredis), and flowlock's other kinds of lock, as libraries of their own in the scenarios that compare them: the fair
 * lock (f), the read-write lock (g, whose `acquire` is the write lock and `acquireShared` the read lock), and
 * the semaphores of (h): RSemaphore (`flowlock-semaphore`) and RPermitExpirableSemaphore
 * (`flowlock-permit-semaphore`), which need the `permits` of `createAdapter`.
 */
export const VARIANTS = [
  'flowlock-withlock',
  'flowlock-node-redis',
  'flowlock-iovalkey',
  'flowlock-glide',
  'flowlock-fair',
  'flowlock-rwlock',
  'flowlock-semaphore',
  'flowlock-permit-semaphore',
] as const;
/**
 * Floors: what the hardware allows a kind of lock, written here with nothing a real lock needs beyond its
 * core (no lease, no crash safety, no re-entry). `fifo-ticket-floor`: the floor of a fair handoff, (f).
 * `fifo-ticket-floor-confirmed`: the same, but a waiter woken by its number's announcement goes in only after
 * one more round trip (it reads the number served): the floor of a fair handoff in which the woken waiter
 * takes the lock itself, as every waiter of Redisson's fair lock does (its own acquire script), rather than
 * being handed it by the release. `rlock-layout-floor`: the uncontended floor of a lock in Redisson's RLock
 * layout, (a): a hash with the owner's hold count and a lease, the release message and an unlock memo, as
 * REDISSON-PROTOCOLS.md gives that lock's scripts, and nothing of ours (no fencing token, holder info, flows,
 * watchdog or lease bookkeeping).
 */
export const FLOORS = [
  'fifo-ticket-floor',
  'fifo-ticket-floor-confirmed',
  'rlock-layout-floor',
  'rlock-layout-floor-node-redis',
  'rlock-layout-floor-iovalkey',
  'rlock-layout-floor-glide',
] as const;
export type Library = (typeof LIBRARIES)[number] | (typeof VARIANTS)[number] | (typeof FLOORS)[number];
/** (h): the semaphores; `redis-semaphore` is its `Semaphore` there (its `Mutex` elsewhere). */
export const SEMAPHORES: readonly Library[] = [
  'flowlock-semaphore',
  'flowlock-permit-semaphore',
  'redis-semaphore',
  'fifo-ticket-floor',
  'fifo-ticket-floor-confirmed',
];

/** Libraries that renew leases by themselves (scenario e); the others need the caller to extend. */
/**
 * node-redisson throws "Connection is closed." from its own subscribe-timeout timers after `quit()`, and
 * leaves a command of its own unhandled that its ioredis connection rejects with it when it closes (seen
 * after (d): a stack of ioredis's close handler alone, node-redisson's client sharing the one ioredis
 * package). The benchmark tolerates exactly those, and nothing else: the second only once a node-redisson
 * client has quit (flowlock's own calls are all awaited, as its hygiene tests check).
 */
export function isNodeRedissonAfterQuit(error: Error): boolean {
  if (error.message !== 'Connection is closed.') return false;
  const stack = error.stack ?? '';
  return (
    stack.includes('node-redisson') || (nodeRedissonQuit && /ioredis\/built\/redis\/event_handler\.js/.test(stack))
  );
}

/** Whether a node-redisson client of this process has quit (see isNodeRedissonAfterQuit). */
let nodeRedissonQuit = false;

const sameKey = (key: string): string => key;

export const AUTO_RENEWING: readonly Library[] = [
  'flowlock',
  '@sesamecare-oss/redlock',
  'redis-semaphore',
  'node-redisson',
];

/** The baseline's own client may define a command (EVALSHA, EVAL on NOSCRIPT): it is nobody else's. */
type BaselineRedis = Redis & { compareAndDelete(key: string, token: string): Promise<number> };
/** The baseline polls like the simplest spin lock (redis-semaphore's default retry interval). */
const BASELINE_RETRY_MS = 10;

/** The floor's draw: KEYS ticket, serving. A ticket, and the number served now ({ticket, serving}). */
const DRAW_TICKET = `
local ticket = redis.call('INCR', KEYS[1])
local serving = redis.call('GET', KEYS[2])
if not serving then
  redis.call('SET', KEYS[2], 1)
  serving = 1
end
return {ticket, tonumber(serving)}`;
/** The floor's release: KEYS serving; ARGV channel. Serves the next ticket and announces its number. */
const SERVE_NEXT = `
local serving = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], serving)
return serving`;
type FloorRedis = Redis & {
  drawTicket(ticketKey: string, servingKey: string): Promise<[number, number]>;
  serveNext(servingKey: string, channel: string): Promise<number>;
};

/**
 * A bare FIFO ticket lock, the floor of a fair handoff: acquire draws a ticket and reads the number served
 * (one script), and goes in when they match, else waits for that number's announcement on a subscriber
 * connection of its own (subscribed once per key); release serves the next number and announces it (one
 * script). Two round trips per acquisition, one wake-up per handoff (only the next ticket's holder acts).
 * With `permits` > 1, a FIFO semaphore of that many permits in the same way, the floor of a fair one (h):
 * a ticket goes in while fewer than `permits` tickets before it are still out.
 */
function fifoTicketFloor(url: string, confirm: boolean, permits = 1): Adapter {
  const redis = redisFor(url) as FloorRedis;
  redis.defineCommand('drawTicket', { numberOfKeys: 2, lua: DRAW_TICKET });
  redis.defineCommand('serveNext', { numberOfKeys: 1, lua: SERVE_NEXT });
  const subscriber = redisFor(url);
  const subscribed = new Map<string, Promise<unknown>>();
  /** The highest number announced on each channel (an announcement may come before the draw's reply). */
  const served = new Map<string, number>();
  const waiting = new Map<string, () => void>();
  subscriber.on('message', (channel: string, message: string) => {
    const number = Number(message);
    served.set(channel, Math.max(served.get(channel) ?? 0, number));
    const wake = waiting.get(`${channel}|${number}`);
    if (wake) {
      waiting.delete(`${channel}|${number}`);
      wake();
    }
  });
  return {
    name: confirm ? 'fifo-ticket-floor-confirmed' : 'fifo-ticket-floor',
    redisKey: (key) => `${key}:serving`,
    async acquire(key) {
      const channel = `${key}:served`;
      let subscribing = subscribed.get(channel);
      if (!subscribing) subscribed.set(channel, (subscribing = subscriber.subscribe(channel)));
      await subscribing;
      const [ticket, serving] = await redis.drawTicket(`${key}:ticket`, `${key}:serving`);
      // In when fewer than `permits` tickets since the one served now are out; else when the number
      // `permits - 1` below its own is served.
      const turn = ticket - permits + 1;
      if (ticket - serving >= permits && (served.get(channel) ?? 0) < turn) {
        await new Promise<void>((resolve) => {
          // A look at the number served every second, in case the announcement never comes: a full `npm run
          // bench` once stopped with every waiter parked and the turn past (cause not found; rare). Each
          // such wake-up is reported, so that a run it touched shows it; the floor's figures stand only
          // without any.
          const look = setInterval(() => {
            void redis.get(`${key}:serving`).then((now) => {
              const wake = waiting.get(`${channel}|${turn}`);
              if (Number(now) < turn || !wake) return;
              process.stderr.write(`${confirm ? 'confirmed ' : ''}FIFO floor: turn ${turn} came unannounced\n`);
              wake();
            });
          }, 1000);
          waiting.set(`${channel}|${turn}`, () => {
            clearInterval(look);
            waiting.delete(`${channel}|${turn}`);
            resolve();
          });
        });
        // (With several permits the number served may already be past the turn: others went out meanwhile.)
        if (confirm && Number(await redis.get(`${key}:serving`)) < turn) throw new Error('woken out of turn');
      }
      return () => redis.serveNext(`${key}:serving`, channel);
    },
    async close() {
      subscriber.disconnect();
      await redis.quit();
    },
  };
}

/** How a wire floor sends a script on its client: SCRIPT LOAD once, then EVALSHA (keys, arguments). */
interface ScriptSender {
  load(source: string): Promise<string>;
  evalsha(sha1: string, keys: string[], args: string[]): Promise<unknown>;
  close(): Promise<void>;
}

/**
 * The floor of Redisson's RLock wire (LAYOUT_ACQUIRE and LAYOUT_RELEASE, floors.ts) on the client `connect`
 * makes: take (retrying every BASELINE_RETRY_MS while held) and release with a fresh unlock memo.
 */
function wireFloor(library: Library, watchdogMs: number, connect: () => Promise<ScriptSender>): Adapter {
  const ready = connect().then(async (sender) => ({
    sender,
    take: await sender.load(LAYOUT_ACQUIRE),
    give: await sender.load(LAYOUT_RELEASE),
  }));
  const client = randomUUID();
  let thread = 0;
  return {
    name: library,
    redisKey: sameKey,
    async acquire(key, leaseMs = watchdogMs) {
      const { sender, take, give } = await ready;
      const owner = `${client}:${++thread}`;
      while ((await sender.evalsha(take, [key], [String(leaseMs), owner])) !== null) await sleep(BASELINE_RETRY_MS);
      return () =>
        sender.evalsha(
          give,
          [key, `redisson_lock__channel:{${key}}`, `redisson_unlock_latch:{${key}}:${randomUUID()}`],
          [owner, '30000'],
        );
    },
    async close() {
      await (await ready).sender.close();
    },
  };
}

function redisFor(url: string): Redis {
  const redis = new Redis(url, { enableAutoPipelining: false });
  redis.on('error', () => undefined);
  return redis;
}

/** iovalkey (ioredis' fork), as flowlock-iovalkey and its wire floor use it. */
function valkeyFor(url: string): ValkeyRedis {
  const redis = new ValkeyRedis(url, { enableAutoPipelining: false });
  redis.on('error', () => undefined);
  return redis;
}

/**
 * The adapter of `library`. With `permits`, the library's semaphore of that many permits instead of its
 * lock (`flowlock-semaphore`, `flowlock-permit-semaphore` and `redis-semaphore` only): `acquire` takes one
 * permit, and a leaseMs of undefined is the library's auto-renewing (or, for RSemaphore, lease-less) mode.
 */
/** `lockOptions`: more options of flowlock's lock client (plain locks), e.g. `{ holderInfo: false }`. */
export function createAdapter(
  library: Library,
  url: string,
  watchdogMs: number,
  permits?: number,
  lockOptions: LockClientOptions = {},
): Adapter {
  if (permits !== undefined || library === 'flowlock-semaphore' || library === 'flowlock-permit-semaphore') {
    return createSemaphoreAdapter(library, url, watchdogMs, permits);
  }
  switch (library) {
    case 'flowlock-node-redis': {
      const redis = createClient({ url });
      redis.on('error', () => undefined);
      // node-redis clients are connected by their user; commands sent meanwhile wait for the connection.
      const connected = redis.connect();
      const locks = createLockClient(redis, { watchdogTimeout: watchdogMs });
      return {
        name: library,
        redisKey: sameKey,
        async acquire(key, leaseMs) {
          await connected;
          const lease = await locks.getLock(key).acquire(leaseMs === undefined ? {} : { leaseTime: leaseMs });
          return () => lease.release();
        },
        async close() {
          await locks.close();
          await connected;
          redis.destroy();
        },
      };
    }
    case 'flowlock-glide': {
      const { hostname, port } = new URL(url);
      // GLIDE creates its client asynchronously; the lock client is made once it exists.
      const created = GlideClient.createClient({ addresses: [{ host: hostname, port: Number(port || 6379) }] }).then(
        (glide) => ({ glide, locks: createLockClient(glide, { watchdogTimeout: watchdogMs }) }),
      );
      return {
        name: library,
        redisKey: sameKey,
        async acquire(key, leaseMs) {
          const { locks } = await created;
          const lease = await locks.getLock(key).acquire(leaseMs === undefined ? {} : { leaseTime: leaseMs });
          return () => lease.release();
        },
        async close() {
          const { glide, locks } = await created;
          await locks.close();
          glide.close();
        },
      };
    }
    case 'flowlock':
    case 'flowlock-withlock':
    case 'flowlock-iovalkey':
    case 'flowlock-fair':
    case 'flowlock-rwlock': {
      const redis = library === 'flowlock-iovalkey' ? valkeyFor(url) : redisFor(url);
      const locks = createLockClient(redis, { watchdogTimeout: watchdogMs, ...lockOptions });
      const take = async (lock: RLock, leaseMs: number | undefined): Promise<Release> => {
        const lease = await lock.acquire(leaseMs === undefined ? {} : { leaseTime: leaseMs });
        return () => lease.release();
      };
      const exclusive =
        library === 'flowlock-fair'
          ? (key: string) => locks.getFairLock(key)
          : library === 'flowlock-rwlock'
            ? (key: string) => locks.getReadWriteLock(key).writeLock()
            : (key: string) => locks.getLock(key);
      return {
        name: library,
        redisKey: sameKey,
        acquire: (key, leaseMs) => take(exclusive(key), leaseMs),
        ...(library === 'flowlock-rwlock' && {
          acquireShared: (key: string, leaseMs?: number) => take(locks.getReadWriteLock(key).readLock(), leaseMs),
        }),
        ...(library === 'flowlock-withlock' && {
          cycle: (key: string, leaseMs: number) => locks.getLock(key).withLock(() => undefined, { leaseTime: leaseMs }),
        }),
        async close() {
          await locks.close();
          await redis.quit();
        },
      };
    }
    case 'rlock-layout-floor':
    case 'rlock-layout-floor-iovalkey':
      return wireFloor(library, watchdogMs, () => {
        const redis = library === 'rlock-layout-floor' ? redisFor(url) : valkeyFor(url);
        return Promise.resolve({
          load: async (source) => String(await redis.script('LOAD', source)),
          evalsha: (sha1, keys, args) => redis.evalsha(sha1, keys.length, ...keys, ...args),
          async close() {
            await redis.quit();
          },
        });
      });
    case 'rlock-layout-floor-node-redis':
      return wireFloor(library, watchdogMs, async () => {
        const redis = createClient({ url });
        redis.on('error', () => undefined);
        await redis.connect();
        return {
          load: (source) => redis.scriptLoad(source),
          evalsha: (sha1, keys, args) => redis.evalSha(sha1, { keys, arguments: args }),
          close() {
            redis.destroy();
            return Promise.resolve();
          },
        };
      });
    case 'rlock-layout-floor-glide':
      return wireFloor(library, watchdogMs, async () => {
        const { hostname, port } = new URL(url);
        const glide = await GlideClient.createClient({ addresses: [{ host: hostname, port: Number(port || 6379) }] });
        return {
          load: async (source) => (await glide.customCommand(['SCRIPT', 'LOAD', source])) as string,
          evalsha: (sha1, keys, args) => glide.customCommand(['EVALSHA', sha1, String(keys.length), ...keys, ...args]),
          close() {
            glide.close();
            return Promise.resolve();
          },
        };
      });
    case 'fifo-ticket-floor':
    case 'fifo-ticket-floor-confirmed':
      return fifoTicketFloor(url, library === 'fifo-ticket-floor-confirmed');
    case 'set-nx-baseline': {
      const redis = redisFor(url) as BaselineRedis;
      redis.defineCommand('compareAndDelete', { numberOfKeys: 1, lua: COMPARE_AND_DELETE });
      return {
        name: library,
        redisKey: sameKey,
        async acquire(key, leaseMs = watchdogMs) {
          const token = randomUUID();
          while ((await redis.set(key, token, 'PX', leaseMs, 'NX')) !== 'OK') await sleep(BASELINE_RETRY_MS);
          return () => redis.compareAndDelete(key, token);
        },
        async close() {
          await redis.quit();
        },
      };
    }
    case 'redlock@4': {
      const redis = redisFor(url);
      const redlock = new Redlock4([redis as unknown as Redlock4.CompatibleRedisClient], { retryCount: -1 });
      redlock.on('clientError', () => undefined);
      return {
        name: library,
        redisKey: sameKey,
        async acquire(key, leaseMs = watchdogMs) {
          const lock = await redlock.lock(key, leaseMs);
          return () => lock.unlock();
        },
        async close() {
          await redis.quit();
        },
      };
    }
    case '@sesamecare-oss/redlock': {
      const redis = redisFor(url);
      const redlock = new SesameRedlock([redis], { retryCount: -1 });
      redlock.on('error', () => undefined);
      return {
        name: library,
        redisKey: sameKey,
        async acquire(key, leaseMs) {
          if (leaseMs !== undefined) {
            const lock = await redlock.acquire([key], leaseMs);
            return () => lock.release();
          }
          // Auto-extension exists only inside using(): hold it open until released.
          let release!: () => void;
          const released = new Promise<void>((resolve) => (release = resolve));
          let held!: () => void;
          const acquired = new Promise<void>((resolve) => (held = resolve));
          const done = redlock.using([key], watchdogMs, async () => {
            held();
            await released;
          });
          await Promise.race([acquired, done]);
          return async () => {
            release();
            await done;
          };
        },
        async close() {
          await redis.quit();
        },
      };
    }
    case 'redis-semaphore': {
      const redis = redisFor(url);
      return {
        name: library,
        redisKey: (key) => `mutex:${key}`,
        async acquire(key, leaseMs = watchdogMs) {
          const mutex = new Mutex(redis, key, {
            lockTimeout: leaseMs,
            acquireTimeout: Number.POSITIVE_INFINITY,
            onLockLost: () => undefined,
          });
          await mutex.acquire();
          return () => mutex.release();
        },
        async close() {
          await redis.quit();
        },
      };
    }
    case 'node-redisson': {
      const { hostname, port } = new URL(url);
      const redisson = new Redisson({
        redis: { options: { host: hostname, port: Number(port) } },
        lockWatchdogTimeout: BigInt(watchdogMs),
      });
      return {
        name: library,
        redisKey: sameKey,
        async acquire(key, leaseMs) {
          const lock = redisson.getLock(key);
          await (leaseMs === undefined ? lock.lock() : lock.lock(leaseMs));
          return () => lock.unlock();
        },
        async close() {
          nodeRedissonQuit = true;
          await redisson.quit();
        },
      };
    }
  }
}

function createSemaphoreAdapter(library: Library, url: string, watchdogMs: number, permits?: number): Adapter {
  if (permits === undefined) throw new Error(`${library} needs a number of permits`);
  const redis = redisFor(url);
  switch (library) {
    case 'flowlock-semaphore':
    case 'flowlock-permit-semaphore': {
      // As once no earlier version runs (the docs' "The previous layout"): a waiter's deadline in its place in
      // the queue, one key. `BENCH_PREVIOUS_LAYOUT=shared` measures the rolling upgrade's form instead.
      const previousLayout = process.env['BENCH_PREVIOUS_LAYOUT'] === 'shared' ? 'shared' : 'retired';
      const locks = createLockClient(redis, { watchdogTimeout: watchdogMs, previousLayout });
      const prepare = async (key: string): Promise<void> => {
        await locks.getSemaphore(key).trySetPermits(permits);
      };
      const close = async (): Promise<void> => {
        await locks.close();
        await redis.quit();
      };
      if (library === 'flowlock-semaphore') {
        return {
          name: library,
          redisKey: sameKey,
          prepare,
          // RSemaphore's permits have no lease (Redisson's semantics): leaseMs does not apply.
          async acquire(key) {
            const semaphore = locks.getSemaphore(key);
            await semaphore.acquire(1);
            return () => semaphore.release(1);
          },
          close,
        };
      }
      return {
        name: library,
        redisKey: sameKey,
        prepare,
        async acquire(key, leaseMs) {
          const semaphore = locks.getPermitExpirableSemaphore(key);
          const lease = await semaphore.acquire(leaseMs === undefined ? {} : { leaseTime: leaseMs });
          return () => lease.release();
        },
        close,
      };
    }
    case 'redis-semaphore':
      return {
        name: library,
        redisKey: (key) => `semaphore:${key}`,
        async acquire(key, leaseMs) {
          // Its defaults (10 s lease refreshed every 8 s, a retry every 10 ms), except unlimited retries.
          const semaphore = new Semaphore(redis, key, permits, {
            ...(leaseMs !== undefined && { lockTimeout: leaseMs }),
            acquireTimeout: Number.POSITIVE_INFINITY,
            onLockLost: () => undefined,
          });
          await semaphore.acquire();
          return () => semaphore.release();
        },
        async close() {
          await redis.quit();
        },
      };
    case 'fifo-ticket-floor':
    case 'fifo-ticket-floor-confirmed':
      redis.disconnect();
      return fifoTicketFloor(url, library === 'fifo-ticket-floor-confirmed', permits);
    default:
      redis.disconnect();
      throw new Error(`${library} has no semaphore here`);
  }
}
