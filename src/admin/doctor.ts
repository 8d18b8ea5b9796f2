/**
 * `checkServer`: the server settings that decide whether locks are safe, read on every master. It reads
 * INFO wherever it can, which managed services and least-privilege users allow (as the lock client's own
 * eviction warning does); only `notify-keyspace-events` (and the details appendfsync and save) need CONFIG
 * GET. A command the server refuses (CONFIG, INFO, TIME, SCAN: an ACL, a managed service) makes the checks
 * that need it `unknown`, saying what was refused, not a failure.
 */
import type { RedisClient } from '../options.js';
import type { AdminNode } from '../redis/adapter.js';
import { FLOOR_TEXT, serverIdentity, type ServerIdentity } from '../redis/server-version.js';
import { findLegacyLayout, type LegacyLayout } from './legacy.js';
import { adminTarget, configGet, notifiesExpiry, refusalOf, timeReply } from './target.js';

/** A check's verdict: `ok` (✔), `warn` (!), `fail` (✖, `doctor` exits 3), `unknown` (the server did not say). */
export type CheckStatus = 'ok' | 'warn' | 'fail' | 'unknown';

/** One check: its verdict in a line, and what it means for locks when it is not `ok`. */
export interface ServerCheck {
  readonly id: 'server' | 'eviction' | 'persistence' | 'replicas' | 'keyspace-events' | 'clock' | 'legacy-layout';
  readonly status: CheckStatus;
  readonly summary: string;
  readonly detail: string | null;
}

/** What `checkServer` finds: the server, and one entry per check; `ok` is false when a check failed. */
export interface ServerReport {
  /** No check failed. */
  readonly ok: boolean;
  readonly server: {
    readonly product: string;
    readonly version: string;
    readonly topology: 'standalone' | 'cluster';
    readonly masters: number;
    readonly pubsub: 'classic' | 'sharded';
  };
  readonly checks: readonly ServerCheck[];
}

/** Clock offsets above this many milliseconds are worth a warning. */
const CLOCK_WARN_MS = 500;

/** What one master says. */
interface NodeFacts {
  readonly address: string;
  readonly info: ReadonlyMap<string, string>;
  /** The server INFO names (undefined: INFO refused, or it names no version). */
  readonly identity: ServerIdentity | undefined;
  /** The server's refusal of INFO (then `info` is empty). */
  readonly infoRefused: string | undefined;
  /** CONFIG GET values; undefined when CONFIG is denied (or renamed away). */
  readonly keyspaceEvents: string | undefined;
  readonly appendfsync: string | undefined;
  readonly save: string | undefined;
  /** Server clock minus local clock, at the middle of the TIME round trip (ms); undefined: TIME refused. */
  readonly offsetMs: number | undefined;
  /** Half that round trip: how far off the offset may be. */
  readonly uncertaintyMs: number;
  /** The server's refusal of TIME. */
  readonly timeRefused: string | undefined;
}

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** `call`'s reply, or the server's refusal of the command (any other error rejects). */
async function unlessRefused<T>(call: () => Promise<T>): Promise<{ value?: T; refused?: string }> {
  try {
    return { value: await call() };
  } catch (error) {
    const refused = refusalOf(error);
    if (refused === undefined) throw error;
    return { refused };
  }
}

async function factsOf(node: AdminNode): Promise<NodeFacts> {
  const info = await unlessRefused(async () => String(await node.call(['INFO'])));
  const [keyspaceEvents, appendfsync, save] = await Promise.all([
    configGet(node, 'notify-keyspace-events'),
    configGet(node, 'appendfsync'),
    configGet(node, 'save'),
  ]);
  const before = Date.now();
  const time = await unlessRefused(async () => timeReply(await node.call(['TIME'])));
  const after = Date.now();
  return {
    address: node.address,
    info: parseInfo(info.value ?? ''),
    identity: info.value === undefined ? undefined : serverIdentity(info.value),
    infoRefused: info.refused,
    keyspaceEvents,
    appendfsync,
    save,
    offsetMs: time.value === undefined ? undefined : time.value - (before + after) / 2,
    uncertaintyMs: (after - before) / 2,
    timeRefused: time.refused,
  };
}

/** A check that needs INFO, `unknown` on a master that refused it; undefined when every master answered. */
function withoutInfo(nodes: readonly NodeFacts[], id: ServerCheck['id'], what: string): ServerCheck | undefined {
  const refusing = nodes.find((node) => node.infoRefused !== undefined);
  if (!refusing) return undefined;
  return {
    id,
    status: 'unknown',
    summary: `${what} unknown (INFO refused on ${refusing.address}: ${refusing.infoRefused ?? ''})`,
    detail: 'the server does not let this user read INFO',
  };
}

/** `values` as one phrase: the value, or each value with the masters that have it. */
function perNode(nodes: readonly NodeFacts[], value: (node: NodeFacts) => string): string {
  const groups = new Map<string, string[]>();
  for (const node of nodes) groups.set(value(node), [...(groups.get(value(node)) ?? []), node.address]);
  if (groups.size === 1) return [...groups.keys()][0] ?? '';
  return [...groups].map(([v, at]) => `${v} on ${at.join(', ')}`).join('; ');
}

function formatMs(ms: number): string {
  return Math.abs(ms) < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function serverCheck(nodes: readonly NodeFacts[], server: ServerReport['server'], clusterClient: boolean): ServerCheck {
  const clusterServer = server.topology === 'cluster';
  const { pubsub } = server;
  const parts = [`${server.product} ${server.version}`];
  if (clusterServer)
    parts.push(pubsub === 'sharded' ? 'SPUBLISH available' : 'no SPUBLISH', `cluster ${nodes.length} masters`);
  else parts.push('standalone', `${pubsub} pub/sub`);
  const summary = parts.join(' · ');
  const refused = withoutInfo(nodes, 'server', 'server version');
  if (refused) return { ...refused, detail: `flowlock needs ${FLOOR_TEXT} or later; check the version another way` };
  const below = nodes.filter((node) => node.identity?.supported === false);
  if (below.length > 0) {
    const found = perNode(below, (node) => `${node.identity?.product ?? ''} ${node.identity?.version ?? ''}`);
    return {
      id: 'server',
      status: 'fail',
      summary,
      detail:
        `${found} is below flowlock's floor, ${FLOOR_TEXT}: the lock scripts use commands it does not have ` +
        '(locks would fail with UnsupportedServerError)',
    };
  }
  if (nodes.some((node) => node.identity === undefined)) {
    return {
      id: 'server',
      status: 'unknown',
      summary,
      detail: `INFO names no version; flowlock needs ${FLOOR_TEXT} or later`,
    };
  }
  if (clusterServer && !clusterClient) {
    return {
      id: 'server',
      status: 'warn',
      summary,
      detail: 'the server runs in cluster mode but the client is not a Cluster client',
    };
  }
  if (clusterServer && pubsub !== 'sharded') {
    return {
      id: 'server',
      status: 'warn',
      summary,
      detail:
        'releases are announced by classic PUBLISH, which a Cluster broadcasts to every node (Redis 7 shards them)',
    };
  }
  return { id: 'server', status: 'ok', summary, detail: null };
}

function evictionCheck(nodes: readonly NodeFacts[]): ServerCheck {
  const refused = withoutInfo(nodes, 'eviction', 'maxmemory-policy');
  if (refused) return { ...refused, detail: 'lock keys are safe only under noeviction: check the policy another way' };
  const policy = (node: NodeFacts): string => node.info.get('maxmemory_policy') ?? '?';
  const summary = `maxmemory-policy ${perNode(nodes, policy)}`;
  if (nodes.every((node) => policy(node) === 'noeviction'))
    return { id: 'eviction', status: 'ok', summary, detail: null };
  if (nodes.some((node) => policy(node) === '?')) {
    return { id: 'eviction', status: 'unknown', summary, detail: 'INFO memory does not show the policy' };
  }
  return {
    id: 'eviction',
    status: 'fail',
    summary,
    detail: 'lock keys can be evicted, freeing locks under their holders; use noeviction',
  };
}

function persistenceCheck(nodes: readonly NodeFacts[]): ServerCheck {
  const refused = withoutInfo(nodes, 'persistence', 'persistence');
  if (refused) return refused;
  const aof = (node: NodeFacts): boolean => node.info.get('aof_enabled') === '1';
  if (nodes.every(aof)) {
    const fsync = perNode(nodes, (node) => node.appendfsync ?? '?');
    return {
      id: 'persistence',
      status: 'ok',
      summary: `appendonly yes${fsync === '?' ? '' : ` (${fsync})`}`,
      detail: null,
    };
  }
  const snapshots = nodes.every((node) => node.save !== undefined && node.save !== '');
  return {
    id: 'persistence',
    status: 'warn',
    summary: `appendonly ${perNode(nodes, (node) => (aof(node) ? 'yes' : 'no'))}${snapshots ? ' (RDB snapshots only)' : ''}`,
    detail:
      'a restart loses the locks held; their holders learn it at their next renewal, and fencing tokens keep ' +
      'rising by the server clock',
  };
}

function replicasCheck(nodes: readonly NodeFacts[]): ServerCheck {
  const refused = withoutInfo(nodes, 'replicas', 'replicas');
  if (refused) return refused;
  const replicas = nodes.reduce((sum, node) => sum + Number(node.info.get('connected_slaves') ?? 0), 0);
  if (replicas === 0) return { id: 'replicas', status: 'ok', summary: 'no replicas', detail: null };
  return {
    id: 'replicas',
    status: 'warn',
    summary: `${replicas} replica${replicas === 1 ? '' : 's'}, replication is asynchronous`,
    detail:
      'a failover can lose a just-granted lock unless the lock clients set syncReplicas (WAIT after each grant); ' +
      'the server cannot tell whether they do',
  };
}

function keyspaceEventsCheck(nodes: readonly NodeFacts[]): ServerCheck {
  if (nodes.some((node) => node.keyspaceEvents === undefined)) {
    return {
      id: 'keyspace-events',
      status: 'unknown',
      summary: 'notify-keyspace-events unknown (CONFIG GET denied)',
      detail: '`watch --events` may not be able to report expirations',
    };
  }
  const flags = perNode(nodes, (node) => `"${node.keyspaceEvents ?? ''}"`);
  const enabled = nodes.every((node) => notifiesExpiry(node.keyspaceEvents ?? ''));
  return enabled
    ? { id: 'keyspace-events', status: 'ok', summary: `notify-keyspace-events ${flags}`, detail: null }
    : {
        id: 'keyspace-events',
        status: 'warn',
        summary: `notify-keyspace-events ${flags}`,
        detail:
          '`watch --events` cannot report expirations (it needs E and x, e.g. CONFIG SET notify-keyspace-events Ex)',
      };
}

function clockCheck(facts: readonly NodeFacts[]): ServerCheck {
  const refusing = facts.find((node) => node.timeRefused !== undefined);
  if (refusing) {
    return {
      id: 'clock',
      status: 'unknown',
      summary: `clock offset unknown (TIME refused on ${refusing.address}: ${refusing.timeRefused ?? ''})`,
      detail: null,
    };
  }
  const nodes = facts.map((node) => ({ ...node, offsetMs: node.offsetMs ?? 0 }));
  const worst = nodes.reduce((a, b) => (Math.abs(b.offsetMs) > Math.abs(a.offsetMs) ? b : a));
  const offsets = nodes.map((node) => node.offsetMs);
  const spread = Math.max(...offsets) - Math.min(...offsets);
  const summary =
    `clock offset to server ${formatMs(worst.offsetMs)} (±${formatMs(worst.uncertaintyMs)})` +
    (nodes.length > 1 ? `, ${formatMs(spread)} between masters` : '');
  if (Math.abs(worst.offsetMs) - worst.uncertaintyMs <= CLOCK_WARN_MS && spread <= CLOCK_WARN_MS) {
    return { id: 'clock', status: 'ok', summary, detail: null };
  }
  return {
    id: 'clock',
    status: 'warn',
    summary,
    detail:
      'leases and fencing tokens use the server clock, but Redisson clients date fair-lock waiters and permit ' +
      'leases by their own; masters whose clocks disagree weaken the fencing tokens after a failover',
  };
}

function legacyLayoutCheck(legacy: LegacyLayout | { readonly refused: string }): ServerCheck {
  if ('refused' in legacy) {
    return {
      id: 'legacy-layout',
      status: 'unknown',
      summary: `keys of the per-name layout unknown (${legacy.refused})`,
      detail: null,
    };
  }
  if (legacy.fenceKeys === 0 && legacy.lockHashes === 0) {
    return { id: 'legacy-layout', status: 'ok', summary: 'no keys of the per-name layout', detail: null };
  }
  return {
    id: 'legacy-layout',
    status: 'warn',
    summary:
      `${legacy.fenceKeys} per-name fencing counter${legacy.fenceKeys === 1 ? '' : 's'} (flowlock:fence:…, no ` +
      `expiry) and ${legacy.fields} side field${legacy.fields === 1 ? '' : 's'} in ${legacy.lockHashes} lock ` +
      `hash${legacy.lockHashes === 1 ? '' : 'es'} left by the previous layout`,
    detail:
      'the per-name counters grow with every name ever locked; once no client of the previous version runs, ' +
      '`flowlock cleanup --yes` removes them (their values move into the shared counter)',
  };
}

/**
 * Checks the server settings that decide lock safety, on every master: version and pub/sub mode, eviction
 * policy (any but noeviction fails: lock keys could be evicted), persistence, replicas (asynchronous:
 * a failover may lose a grant), keyspace notifications (for `watch --events`), the clock offset between
 * this process and the server, and the keys the previous layout left (a SCAN: O(keys)). Read only.
 */
export async function checkServer(client: RedisClient): Promise<ServerReport> {
  const target = adminTarget(client, undefined);
  const nodes = await Promise.all((await target.nodes.masters()).map(factsOf));
  const info = nodes[0]?.info;
  const identity = nodes[0]?.identity;
  const server: ServerReport['server'] = {
    product: identity?.product === 'Valkey' ? 'valkey' : 'redis',
    version: identity?.version ?? '?',
    // Without INFO, the client's word for it.
    topology:
      info?.get('cluster_enabled') === '1' || (nodes[0]?.infoRefused !== undefined && target.cluster)
        ? 'cluster'
        : 'standalone',
    masters: nodes.length,
    pubsub: await target.scripts.pubsubMode(),
  };
  const legacy = await unlessRefused(() => findLegacyLayout(client));
  const checks = [
    serverCheck(nodes, server, target.cluster),
    evictionCheck(nodes),
    persistenceCheck(nodes),
    replicasCheck(nodes),
    keyspaceEventsCheck(nodes),
    clockCheck(nodes),
    legacyLayoutCheck(legacy.value ?? { refused: legacy.refused ?? '' }),
  ];
  return { ok: checks.every((check) => check.status !== 'fail'), server, checks };
}
