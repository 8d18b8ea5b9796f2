/**
 * Test hosts on a real network: network namespaces joined by veth pairs to two bridges in the host's
 * namespace. Every host has a leg on the Redis net and (clients) a leg on the database net, so a fault can
 * cut a client from Redis and leave its database connection alone, as a partition between two services
 * does. A "partition" is the host side of a veth pair taken down: the cable pulled, no packet passes, no
 * reset is sent; healing puts it back up and TCP connections carry on.
 *
 * Names: every namespace and interface of one run starts with `flp<4 hex>` (interface names have 15 bytes),
 * and addresses are 10.231.<2k>.0/24 (Redis net) and 10.231.<2k+1>.0/24 (database net), k from the run id:
 * test-host addresses only. A run writes its pid to RUN_DIR/<id>; `cleanStale()` removes the namespaces,
 * links and processes of any run whose process is gone (a run killed before its own cleanup), and `close()`
 * removes this run's, also after a failure. Needs root (`ip netns`), as CI runs.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const RUN_DIR = '/tmp/flowlock-partitions';
const PREFIX = 'flp';

function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function ipQuiet(...args: string[]): void {
  try {
    ip(...args);
  } catch {
    // Cleanup of something already gone.
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Removes every namespace, link and process of the run `id`. */
function removeRun(id: string): void {
  const tag = `${PREFIX}${id}`;
  for (const ns of ip('netns', 'list')
    .split('\n')
    .map((line) => line.split(' ')[0] ?? '')
    .filter((name) => name.startsWith(`${tag}-`))) {
    for (const pid of ipOr('', 'netns', 'pids', ns).split('\n').filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
    ipQuiet('netns', 'del', ns);
  }
  for (const link of ip('-o', 'link', 'show')
    .split('\n')
    .map((line) => /^\d+: ([^:@]+)/.exec(line)?.[1] ?? '')
    .filter((name) => name.startsWith(tag))) {
    ipQuiet('link', 'del', link);
  }
  rmSync(join(RUN_DIR, id), { force: true });
}

function ipOr(fallback: string, ...args: string[]): string {
  try {
    return ip(...args);
  } catch {
    return fallback;
  }
}

/** Removes what runs whose process died left behind (their pid file names a dead process). */
export function cleanStale(): string[] {
  mkdirSync(RUN_DIR, { recursive: true });
  const removed: string[] = [];
  for (const id of readdirSync(RUN_DIR)) {
    const pid = Number(readFileSync(join(RUN_DIR, id), 'utf8'));
    if (!alive(pid)) {
      removeRun(id);
      removed.push(id);
    }
  }
  return removed;
}

export interface Host {
  readonly name: string;
  readonly ns: string;
  /** Address on the Redis net. */
  readonly redisAddress: string;
  /** Address on the database net (clients only). */
  readonly dbAddress: string | undefined;
  /** The host-side end of its Redis-net leg: down = partitioned from Redis. */
  readonly redisLink: string;
}

export class TestNet {
  readonly id = randomBytes(2).toString('hex');
  readonly tag = `${PREFIX}${this.id}`;
  readonly #k = parseInt(this.id, 16) % 127;
  /** The host namespace's address on each net (the bridges'). */
  readonly redisGateway = `10.231.${2 * this.#k}.1`;
  readonly dbGateway = `10.231.${2 * this.#k + 1}.1`;
  readonly #hosts: Host[] = [];
  readonly #children = new Set<ChildProcess>();

  constructor() {
    mkdirSync(RUN_DIR, { recursive: true });
    writeFileSync(join(RUN_DIR, this.id), String(process.pid));
    ip('link', 'add', `${this.tag}br`, 'type', 'bridge');
    ip('link', 'add', `${this.tag}bd`, 'type', 'bridge');
    ip('addr', 'add', `${this.redisGateway}/24`, 'dev', `${this.tag}br`);
    ip('addr', 'add', `${this.dbGateway}/24`, 'dev', `${this.tag}bd`);
    ip('link', 'set', `${this.tag}br`, 'up');
    ip('link', 'set', `${this.tag}bd`, 'up');
  }

  /** A new host (its own namespace) with a leg on the Redis net and, when `db`, one on the database net. */
  addHost(name: string, db: boolean): Host {
    const n = this.#hosts.length;
    const ns = `${this.tag}-${name}`;
    ip('netns', 'add', ns);
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    const leg = (net: 'r' | 'd', bridge: string, address: string): string => {
      const outer = `${this.tag}h${n}${net}`;
      const inner = `${this.tag}n${n}${net}`;
      ip('link', 'add', outer, 'type', 'veth', 'peer', 'name', inner);
      ip('link', 'set', inner, 'netns', ns);
      ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', inner);
      ip('-n', ns, 'link', 'set', inner, 'up');
      ip('link', 'set', outer, 'master', bridge);
      ip('link', 'set', outer, 'up');
      return outer;
    };
    const redisAddress = `10.231.${2 * this.#k}.${10 + n}`;
    const dbAddress = db ? `10.231.${2 * this.#k + 1}.${10 + n}` : undefined;
    const redisLink = leg('r', `${this.tag}br`, redisAddress);
    if (dbAddress !== undefined) leg('d', `${this.tag}bd`, dbAddress);
    const host = { name, ns, redisAddress, dbAddress, redisLink };
    this.#hosts.push(host);
    return host;
  }

  /** Pulls (false) or puts back (true) the cable between `host` and the Redis net. */
  setRedisLink(host: Host, up: boolean): void {
    ip('link', 'set', host.redisLink, up ? 'up' : 'down');
  }

  /**
   * Cuts `a` off from `b` and back (a blackhole route for the other's address in each namespace: packets
   * between them are dropped, both ways, while each still reaches everyone else).
   */
  cut(a: Host, b: Host): void {
    ip('-n', a.ns, 'route', 'add', 'blackhole', `${b.redisAddress}/32`);
    ip('-n', b.ns, 'route', 'add', 'blackhole', `${a.redisAddress}/32`);
  }

  uncut(a: Host, b: Host): void {
    ip('-n', a.ns, 'route', 'del', 'blackhole', `${b.redisAddress}/32`);
    ip('-n', b.ns, 'route', 'del', 'blackhole', `${a.redisAddress}/32`);
  }

  /**
   * Runs `command` inside `host`'s namespace. `ip netns exec` execs the command in its own process, so the
   * child's pid is the command's: SIGSTOP and SIGKILL reach it.
   */
  spawn(host: Host, command: string, args: readonly string[], options: SpawnOptions): ChildProcess {
    const child = spawn('ip', ['netns', 'exec', host.ns, command, ...args], options);
    this.#children.add(child);
    child.once('exit', () => this.#children.delete(child));
    return child;
  }

  /** Kills every process this run started and removes its namespaces and links. */
  close(): void {
    for (const child of this.#children) {
      try {
        child.kill('SIGKILL');
      } catch {
        // Gone already.
      }
    }
    removeRun(this.id);
  }
}
