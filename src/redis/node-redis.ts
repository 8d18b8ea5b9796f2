/**
 * The adapter for node-redis 5 and 6 (the `redis` package): a client (`createClient`), a cluster
 * (`createCluster`) or a sentinel (`createSentinel`), connected by the user. Every call goes through
 * `withTypeMapping({})`, so that a user's type mapping (Buffers, strings for numbers) or RESP3 does not change
 * what the library reads, and through the typed commands, which route a cluster's calls by their first key
 * and put a 6.1+ `keyPrefix` before every key. `flowlock/admin`'s commands go raw (`sendCommand`) to one node's
 * connection, which no keyPrefix touches: their keys are the server's names already.
 */
import {
  bySha,
  CheckedMaster,
  checkedMaster,
  identityOf,
  isRedirectionMessage,
  replicasIn,
  unprefixed,
  unprefixedKeys,
  waitWithIdentity,
  type WaitOutcome,
} from './shared.js';
import type {
  AdminCommand,
  AdminListener,
  AdminListenerEvents,
  AdminNode,
  AdminNodes,
  AdminReply,
  MasterConnection,
  PubSubMode,
  RedisAdapter,
  Script,
  ScriptArg,
  Subscriber,
  SubscriberEvents,
} from './seam.js';
import { RedisNotOpenError } from '../errors.js';
import { keySlot } from './keys.js';
import { promiseOf } from '../time.js';

type Listener = (message: string, channel: string) => void;
type Handler = (...args: never[]) => void;

/** The commands the library sends (a client, cluster or sentinel, or one of their type-mapping views). */
interface Commands {
  evalSha(sha1: string, options: { keys: readonly string[]; arguments: (string | Buffer)[] }): Promise<unknown>;
  eval(source: string, options: { keys: readonly string[]; arguments: (string | Buffer)[] }): Promise<unknown>;
  get(key: string): Promise<unknown>;
  hGet(key: string, field: string): Promise<unknown>;
  hGetAll(key: string): Promise<unknown>;
  exists(key: string): Promise<unknown>;
  pTTL(key: string): Promise<unknown>;
  info(section: string): Promise<unknown>;
}

interface PubSub {
  subscribe(channels: string[], listener: Listener): Promise<unknown>;
  unsubscribe(channels: string[], listener: Listener): Promise<unknown>;
  sSubscribe(channels: string[], listener: Listener): Promise<unknown>;
  sUnsubscribe(channels: string[], listener: Listener): Promise<unknown>;
}

interface Emitter {
  on(event: string, listener: Handler): unknown;
  off(event: string, listener: Handler): unknown;
}

/** A node as a node-redis cluster knows it (its connection, once opened). */
interface ClusterNode {
  readonly host: string;
  readonly port: number;
  readonly address: string;
  readonly client?: { readonly socketEpoch?: number };
}

/** How a cluster's `nodeAddressMap` option maps a node's address to where to connect. */
type NodeAddressMap =
  | Readonly<Record<string, { host: string; port: number } | undefined>>
  | ((address: string) => { host: string; port: number } | undefined);

/** A reply type mapping of node-redis: RESP type (the first byte of a reply) to the JavaScript type. */
type TypeMapping = Readonly<Record<number, unknown>>;

/** One connection of node-redis (a client: the user's, a cluster's node client, a sentinel's master client). */
interface NodeClient extends PubSub, Emitter {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  readonly socketEpoch?: number;
  readonly options?: {
    readonly socket?: { readonly host?: string; readonly port?: number; readonly path?: string };
    readonly database?: number;
  };
  sendCommand(args: string[], options?: { chainId?: symbol; typeMapping?: TypeMapping }): Promise<unknown>;
  pSubscribe(patterns: string[], listener: Listener): Promise<unknown>;
  duplicate(overrides: Record<string, unknown>): NodeClient;
  connect(): Promise<unknown>;
  destroy(): unknown;
}

/** The parts of a node-redis client, cluster or sentinel the adapter uses (all three have the first lines). */
interface NodeRedisLike extends Commands, PubSub, Emitter {
  readonly isOpen: boolean;
  readonly isReady?: boolean;
  withTypeMapping(mapping: Record<string, never>): Commands;
  sendCommand(...args: unknown[]): Promise<unknown>;
  connect(): Promise<unknown>;
  destroy(): unknown;
  duplicate?(overrides?: Record<string, unknown>): NodeRedisLike;
  readonly socketEpoch?: number;
  readonly _keyPrefix?: unknown;
  // A cluster:
  readonly slots?: readonly ({ readonly master: ClusterNode } | undefined)[];
  readonly masters?: readonly ClusterNode[];
  readonly nodeByAddress?: ReadonlyMap<string, ClusterNode>;
  readonly _options?: { readonly nodeAddressMap?: NodeAddressMap };
  nodeClient?(node: ClusterNode): Promise<NodeClient>;
  getNodeClientForKey?: unknown;
  // A sentinel:
  getMasterNode?: unknown;
  _execute?<T>(isReadonly: boolean, fn: (client: NodeClient) => Promise<T>): Promise<T>;
}

/** node-redis' shape: camel-cased typed commands, `sendCommand` and an `isOpen` flag. */
export function isNodeRedis(client: unknown): boolean {
  const candidate = client as Partial<Record<'evalSha' | 'sendCommand' | 'withTypeMapping' | 'isOpen', unknown>> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.evalSha === 'function' &&
    typeof candidate.sendCommand === 'function' &&
    typeof candidate.withTypeMapping === 'function' &&
    typeof candidate.isOpen === 'boolean'
  );
}

/**
 * How often the subscriber of a node-redis 5 cluster checks whether a shard channel's slot moved: 5.x loses
 * a sharded subscription on a slot migration without any event (fixed in 6.0.1), so the subscriber compares
 * each channel's owner with the one it subscribed at and subscribes again where they differ. The user's
 * cluster learns a move from the MOVED answer to a waiter's next attempt.
 */
const SLOT_MOVE_CHECK_MS = 1000;

/**
 * How long after a cluster node's or a sentinel's connection event the subscriber reports its subscriptions
 * restored: node-redis restores them itself, and these events come before it has.
 */
const RESTORE_DELAY_MS = 200;

const noop = (): void => undefined;

/**
 * How often a connection was opened again: its `socketEpoch` (node-redis 5.1+) counts every ready, the
 * first one included, which is no close (a client still connecting when a grant was sent readies after).
 */
function reconnects(client: { readonly socketEpoch?: number } | undefined): number {
  return Math.max((client?.socketEpoch ?? 0) - 1, 0);
}

/** Raw commands on one connection, read with the default types whatever the user's mapping. */
function sender(connection: NodeClient): (args: string[]) => Promise<unknown> {
  return (args) => connection.sendCommand(args, { typeMapping: TEXT });
}

/** Numbers node-redis' connection objects, for the identity of a connection (see CheckedMaster). */
const connectionNumbers = new WeakMap<object, number>();
let lastConnectionNumber = 0;

/**
 * Which connection object answered: a cluster's node client or a sentinel's master client made anew (a
 * failover) labels differently, whatever ids the new server hands out. Not its socket epoch: a reply to a
 * call queued while it reconnected can come back before the epoch counts the new socket (the closes count
 * the epochs instead).
 */
function labelOf(connection: NodeClient): string {
  let number = connectionNumbers.get(connection);
  if (number === undefined) connectionNumbers.set(connection, (number = ++lastConnectionNumber));
  return String(number);
}

/**
 * WAIT on a sentinel's master lease. The sentinel sends a call its connection cut off again on the next
 * connection (or on a new master's), by running `use` again once the connection is ready: the outcome is the
 * last run's, with the identity of the connection it ran on. `ready`: called with each connection a run
 * goes out on.
 */
async function waitOnSentinel(
  execute: <T>(isReadonly: boolean, use: (connection: NodeClient) => Promise<T>) => Promise<T>,
  replicas: number,
  timeoutMs: number,
  ready: (connection: NodeClient) => void,
): Promise<WaitOutcome> {
  let last: WaitOutcome | undefined;
  try {
    return await execute(false, async (connection) => {
      ready(connection);
      last = await waitWithIdentity(sender(connection), replicas, timeoutMs, () => labelOf(connection));
      // Thrown for the sentinel to send it again where it sees a closed connection.
      if (last.failed) throw last.error;
      return last;
    });
  } catch (error) {
    return last ?? { identity: undefined, failed: true, error };
  }
}

function toArgs(args: readonly ScriptArg[]): (string | Buffer)[] {
  return args.map((arg) => (typeof arg === 'number' ? String(arg) : arg));
}

export class NodeRedisAdapter implements RedisAdapter {
  readonly library = 'node-redis';
  readonly topology: RedisAdapter['topology'];
  readonly keyPrefix: string;
  readonly shardedPubSub: boolean;
  readonly #client: NodeRedisLike;
  /** The client's commands with the default type mapping. */
  readonly #commands: Commands;
  readonly #connections = new WeakMap<object, MasterConnection>();
  readonly #disposers: (() => void)[] = [];
  /**
   * Set while the user's cluster is still connecting: node-redis refuses a cluster's commands until its first
   * discovery is done (a client queues them), so ours wait for its 'connect'.
   */
  #connecting: Promise<void> | undefined;
  /** Whether the user's client has been open: one that is not open now has ended (see onEnd). */
  #wasOpen = false;
  #onEnd: (() => void) | undefined;

  constructor(client: unknown, argument: string) {
    const nodeRedis = client as NodeRedisLike;
    if (typeof nodeRedis.subscribe !== 'function') {
      // A client pool lends a different connection to each command: no pub/sub, no connection for WAIT.
      throw new TypeError(`${argument} is a node-redis client pool: pass a client, cluster or sentinel`);
    }
    this.#client = nodeRedis;
    this.#wasOpen = nodeRedis.isOpen;
    this.#commands = nodeRedis.withTypeMapping({});
    const prefix = nodeRedis._keyPrefix ?? '';
    if (typeof prefix !== 'string') throw new TypeError(`${argument}'s keyPrefix must be a string`);
    this.keyPrefix = prefix;
    if (Array.isArray(nodeRedis.slots) && typeof nodeRedis.nodeClient === 'function') this.topology = 'cluster';
    else if (typeof nodeRedis.getMasterNode === 'function') this.topology = 'sentinel';
    else this.topology = 'standalone';
    this.shardedPubSub = this.topology === 'cluster';
    // A 5.x cluster has no isReady: it knows its masters once connected.
    const connected = nodeRedis.isReady ?? (nodeRedis.masters?.length ?? 0) > 0;
    if (this.topology === 'cluster' && nodeRedis.isOpen && !connected) {
      this.#connecting = new Promise<void>((resolve) => {
        const done = (): void => {
          this.#connecting = undefined;
          resolve();
        };
        this.#listen(nodeRedis, 'connect', done);
        this.#disposers.push(done);
      });
    }
  }

  evalScript(script: Script, keys: readonly string[], args: readonly ScriptArg[], direct: boolean): Promise<unknown> {
    // Not async: on a connected client the call goes out in this tick, with no promise of ours around it.
    return promiseOf(() => {
      const ready = this.#readyNow();
      const call = { keys: unprefixedKeys(keys, this.keyPrefix), arguments: toArgs(args) };
      const send = (commands: Commands): Promise<unknown> =>
        bySha(
          direct,
          () => commands.evalSha(script.sha1, call),
          () => commands.eval(script.source, call),
        );
      return ready instanceof Promise ? ready.then(send) : send(ready);
    });
  }

  async get(key: string): Promise<string | null> {
    return (await (await this.#ready()).get(unprefixed(key, this.keyPrefix))) as string | null;
  }

  async hget(key: string, field: string): Promise<string | null> {
    return (await (await this.#ready()).hGet(unprefixed(key, this.keyPrefix), field)) as string | null;
  }

  async hgetall(key: string): Promise<Record<string, string>> {
    // A plain object with the default mapping, on RESP2 and RESP3 alike; copied off a null prototype.
    const hash = (await (await this.#ready()).hGetAll(unprefixed(key, this.keyPrefix))) as Record<string, string>;
    return { ...hash };
  }

  async exists(key: string): Promise<boolean> {
    return Number(await (await this.#ready()).exists(unprefixed(key, this.keyPrefix))) === 1;
  }

  async pttl(key: string): Promise<number> {
    return Number(await (await this.#ready()).pTTL(unprefixed(key, this.keyPrefix)));
  }

  async info(section: string): Promise<string> {
    return String(await (await this.#ready()).info(section));
  }

  /** The client's commands, once a cluster the user is still connecting has connected. */
  async #ready(): Promise<Commands> {
    return this.#readyNow();
  }

  /** #ready's answer, at once when the client is connected; throws when it is not open. */
  #readyNow(): Commands | Promise<Commands> {
    // node-redis would reject with a bare "The client is closed", which does not say what to do.
    if (!this.#client.isOpen) {
      // After this call has failed: the lock client's close must not overtake its caller's handling of it.
      if (this.#wasOpen) queueMicrotask(() => this.#ended());
      throw new RedisNotOpenError();
    }
    this.#wasOpen = true;
    const connecting = this.#connecting;
    return connecting ? connecting.then(() => this.#commands) : this.#commands;
  }

  readiness(): 'ready' | 'connecting' | 'down' {
    if (!this.#client.isOpen) return 'down';
    // A 5.x cluster has no isReady.
    return (this.#client.isReady ?? true) ? 'ready' : 'connecting';
  }

  isRedirection(error: unknown): boolean {
    return isRedirectionMessage(error);
  }

  /**
   * node-redis rejects the calls it had written when their connection closes (SocketClosedUnexpectedlyError)
   * or times out (SocketTimeoutError): they may have run. Its Sentinel sends them again itself. A cluster that
   * drops a node from its map at a slot refresh (a failed master, a master left without slots) destroys its
   * connection and rejects every call on it with "Disconnects client", those it had written included: they
   * may have run too, and are no redirection (a script that is not idempotent must not be sent again).
   */
  isLostReply(error: unknown): boolean {
    if (!(error instanceof Error)) return false;
    if (this.topology === 'cluster' && error.message === 'Disconnects client') return true;
    return this.topology !== 'sentinel' && /^(Socket closed unexpectedly|Socket timeout)/.test(error.message);
  }

  /**
   * A client is its own connection. A cluster's is the node client of the slot's master, the connection the
   * cluster used for the key's scripts (node-redis 6.2 would send a WAIT of the cluster itself to every
   * shard). A sentinel's commands go to its master lease (one unless the user raised `masterPoolSize`).
   * Every WAIT is checked by the identity of its connection (CheckedMaster): a client or a cluster's node
   * client rejects a written call its connection cut off but sends one still queued on the next connection,
   * and a sentinel sends a call cut off by its connection again on the next one, all without an event a
   * listener of ours would hear (a sentinel forwards its master connections' errors only with
   * `passthroughClientErrorEvents`). The identity's label is the connection object (see labelOf); the closes
   * include the client's own count of reconnects (its socket epoch).
   */
  masterConnection(key: string): MasterConnection | undefined {
    const client = this.#client;
    if (this.topology === 'cluster') {
      const node = client.slots?.[keySlot(key)]?.master;
      if (!node || !client.nodeClient) return undefined;
      const nodeClient = client.nodeClient.bind(client);
      return this.#remember(node, () => {
        const on = async <T>(use: (connection: NodeClient) => Promise<T>): Promise<T> => use(await nodeClient(node));
        return new CheckedMaster(
          (replicas, timeoutMs) =>
            on((connection) => waitWithIdentity(sender(connection), replicas, timeoutMs, () => labelOf(connection))),
          () => on((connection) => identityOf(sender(connection), () => labelOf(connection))),
          () => reconnects(node.client),
        );
      });
    }
    if (this.topology === 'sentinel') {
      // node-redis 5 and 6 sentinels lend their master connection by _execute (as for flowlock/admin).
      if (!client._execute) return undefined;
      const execute = client._execute.bind(client);
      return this.#remember(client, () => {
        // Closes the sentinel shows: its master connections' errors (with passthroughClientErrorEvents), and
        // the reconnects of each master connection a WAIT went out on since it was last seen (a new one, after
        // a failover, counts none: its identity differs).
        let closes = 0;
        this.#listen(client, 'error', () => {
          closes++;
        });
        const epochs = new WeakMap<NodeClient, number>();
        const ready = (connection: NodeClient): void => {
          const now = reconnects(connection);
          closes += Math.max(now - (epochs.get(connection) ?? now), 0);
          epochs.set(connection, now);
        };
        return new CheckedMaster(
          (replicas, timeoutMs) => waitOnSentinel(execute, replicas, timeoutMs, ready),
          () =>
            execute(false, (connection) => {
              ready(connection);
              return identityOf(sender(connection), () => labelOf(connection));
            }).catch(() => undefined),
          () => closes,
        );
      });
    }
    const self = client as unknown as NodeClient;
    return this.#remember(client, () => {
      return checkedMaster(
        sender(self),
        () => labelOf(self),
        () => reconnects(client),
      );
    });
  }

  /**
   * A client and a sentinel emit 'end' once closed (close(), destroy(), quit()), a cluster 'disconnect'. A
   * client whose reconnectStrategy gave up emits only 'error' (a listener of ours there would silence the
   * user's unhandled errors): it is seen ended by the next call (#ready), once it had been open.
   */
  onEnd(listener: () => void): void {
    this.#onEnd = listener;
    this.#listen(this.#client, this.topology === 'cluster' ? 'disconnect' : 'end', () => this.#ended());
  }

  #ended(): void {
    const listener = this.#onEnd;
    this.#onEnd = undefined;
    listener?.();
  }

  hasEnded(): boolean {
    return !this.#client.isOpen;
  }

  openSubscriber(mode: PubSubMode, events: SubscriberEvents): Subscriber {
    return new NodeRedisSubscriber(this.#client, this.topology, mode, events);
  }

  dispose(): void {
    this.#onEnd = undefined;
    for (const dispose of this.#disposers.splice(0)) dispose();
  }

  adminNodes(): AdminNodes {
    return new NodeRedisNodes(this.#client, this.topology, () => this.#ready());
  }

  #remember(key: object, create: () => MasterConnection): MasterConnection {
    let known = this.#connections.get(key);
    if (!known) this.#connections.set(key, (known = create()));
    return known;
  }

  #listen(emitter: Emitter, event: string, listener: Handler): void {
    emitter.on(event, listener);
    this.#disposers.push(() => emitter.off(event, listener));
  }
}

/** RESP's blob string (`$`, node-redis' `RESP_TYPES.BLOB_STRING`), which a type mapping can read as a Buffer. */
const BLOB_STRING = 36;
/** node-redis' default replies (text, numbers, arrays; RESP3 maps as objects), whatever the user configured. */
const TEXT: TypeMapping = {};
const BINARY: TypeMapping = { [BLOB_STRING]: Buffer };

/** `host:port` a connection is opened to (its path, for a Unix socket). */
function addressOf(client: NodeClient): string {
  const socket = client.options?.socket;
  return socket?.path ?? `${socket?.host ?? 'localhost'}:${socket?.port ?? 6379}`;
}

/** A reply read with BINARY, as TEXT would have read it. */
function textOf(reply: unknown): unknown {
  if (Buffer.isBuffer(reply)) return reply.toString();
  if (Array.isArray(reply)) return reply.map(textOf);
  // A RESP3 map; an error within a reply stays one.
  if (typeof reply === 'object' && reply !== null && !(reply instanceof Error)) {
    return Object.fromEntries(Object.entries(reply).map(([key, value]) => [key, textOf(value)]));
  }
  return reply;
}

/**
 * Closes a connection of ours: at once if it is ready, else when its attempt to connect ends (in 'ready' or
 * 'error'). node-redis loses a socket that is still being opened when closed: it opens after all, for good.
 */
function closeConnection(connection: Pick<NodeClient, 'isOpen' | 'isReady' | 'destroy' | 'on'>): void {
  const destroy = (): void => {
    if (connection.isOpen) connection.destroy();
  };
  // A node-redis 5 cluster shows no isReady: it is closed at once.
  if (connection.isReady ?? true) {
    destroy();
  } else if (connection.isOpen) {
    connection.on('ready', destroy);
    connection.on('error', destroy);
  }
}

/** Runs `use` on `connection`, a connection of the call's own, connected here and closed after. */
async function onOwnConnection<T>(connection: NodeClient, use: (client: NodeClient) => Promise<T>): Promise<T> {
  // Failures reach the caller as the failed connect or command.
  connection.on('error', noop);
  const connected = connection.connect();
  try {
    await connected;
    return await use(connection);
  } finally {
    closeConnection(connection);
  }
}

type Run = <T>(use: (client: NodeClient) => Promise<T>) => Promise<T>;

/**
 * The nodes of a node-redis client: the client itself, a sentinel's master, or a cluster's nodes. A cluster
 * knows its replicas only with `useReplicas`: they come from CLUSTER NODES, and a replica it does not know is
 * reached by a connection of each call's own. New connections are duplicates of a connection the client
 * opened (its options: TLS, credentials), to the node's address.
 */
class NodeRedisNodes implements AdminNodes {
  readonly #client: NodeRedisLike;
  readonly #topology: RedisAdapter['topology'];
  readonly #ready: () => Promise<unknown>;
  /**
   * The database of the sentinel's master client reached last: a sentinel keeps its node options to itself,
   * and `flowlock/admin` reaches a node before it reads the database.
   */
  #sentinelDatabase = 0;

  constructor(client: NodeRedisLike, topology: RedisAdapter['topology'], ready: () => Promise<unknown>) {
    this.#client = client;
    this.#topology = topology;
    this.#ready = ready;
  }

  get database(): number {
    if (this.#topology === 'cluster') return 0;
    if (this.#topology === 'sentinel') return this.#sentinelDatabase;
    return (this.#client as unknown as NodeClient).options?.database ?? 0;
  }

  async masters(): Promise<AdminNode[]> {
    if (this.#topology !== 'cluster') return [await this.#only()];
    const { masters, nodeAt } = await this.#cluster();
    return masters.map((master) => nodeAt(master.host, master.port));
  }

  async all(): Promise<AdminNode[]> {
    if (this.#topology !== 'cluster') return [await this.#only()];
    const { masters, model, nodeAt } = await this.#cluster();
    const nodes = masters.map((master) => nodeAt(master.host, master.port));
    // A master the cluster has not yet seen fail over may be listed as a replica already.
    const known = new Set(nodes.map((node) => node.address));
    // Not from the CLUSTER SLOTS the cluster reads (see replicasIn).
    const reply = await model.sendCommand(['CLUSTER', 'NODES'], { typeMapping: TEXT });
    for (const { host, port } of replicasIn(String(reply))) {
      const node = nodeAt(host, port);
      if (known.has(node.address)) continue;
      known.add(node.address);
      nodes.push(node);
    }
    return nodes;
  }

  async masterOf(key: string): Promise<AdminNode> {
    if (this.#topology !== 'cluster') return this.#only();
    const { nodeAt } = await this.#cluster();
    const master = this.#client.slots?.[keySlot(key)]?.master;
    if (!master) throw new Error(`the cluster client knows no master for the slot of ${key}`);
    return nodeAt(master.host, master.port);
  }

  /**
   * The client's one node: itself, or a sentinel's master: the one it uses now for the address and new
   * connections, the one it uses when they are made for calls.
   */
  async #only(): Promise<NodeRedisNode> {
    await this.#ready();
    const client = this.#client;
    if (this.#topology === 'sentinel' && client._execute) {
      const execute = client._execute.bind(client);
      const master = await execute(false, (leased) => Promise.resolve(leased));
      this.#sentinelDatabase = master.options?.database ?? 0;
      return new NodeRedisNode(
        addressOf(master),
        (use) => execute(false, use),
        () => master.duplicate({ keyPrefix: undefined }),
      );
    }
    const self = client as unknown as NodeClient;
    return new NodeRedisNode(
      addressOf(self),
      (use) => use(self),
      () => self.duplicate({ keyPrefix: undefined }),
    );
  }

  /**
   * A connected cluster's masters, a node client of it (the model of new connections), and its nodes by
   * address (as the server names it, which the cluster's `nodeAddressMap` maps to where to connect).
   */
  async #cluster(): Promise<{
    masters: readonly ClusterNode[];
    model: NodeClient;
    nodeAt: (host: string, port: number) => NodeRedisNode;
  }> {
    await this.#ready();
    const cluster = this.#client;
    const masters = cluster.masters ?? [];
    const [first] = masters;
    if (!first || !cluster.nodeClient) throw new Error('the cluster client knows no masters');
    const nodeClient = cluster.nodeClient.bind(cluster);
    const model = await nodeClient(first);
    const addressMap = cluster._options?.nodeAddressMap;
    const nodeAt = (host: string, port: number): NodeRedisNode => {
      const address = `${host}:${port}`;
      const target = (typeof addressMap === 'function' ? addressMap(address) : addressMap?.[address]) ?? { host, port };
      const open = (socket?: Record<string, unknown>): NodeClient =>
        model.duplicate({ socket: { ...model.options?.socket, ...target, ...socket }, keyPrefix: undefined });
      const known = cluster.nodeByAddress?.get(address);
      // A call's own connection gives up at its first failure rather than wait for a node that is down.
      const run: Run = known
        ? async (use) => use(await nodeClient(known))
        : (use) => onOwnConnection(open({ reconnectStrategy: false }), use);
      return new NodeRedisNode(address, run, () => open());
    };
    return { masters, model, nodeAt };
  }
}

/**
 * One node: `run` hands a call its connection, `open` makes a new connection to it (not connected, without
 * keyPrefix). Commands go raw, so the keys of a batch go to the server as they are (a 6.1+ keyPrefix only
 * prefixes typed commands), with the mapping of each call's own.
 */
class NodeRedisNode implements AdminNode {
  readonly address: string;
  readonly #run: Run;
  readonly #open: () => NodeClient;

  constructor(address: string, run: Run, open: () => NodeClient) {
    this.address = address;
    this.#run = run;
    this.#open = open;
  }

  async call([name, ...args]: AdminCommand): Promise<unknown> {
    return this.#run((client) => client.sendCommand([name, ...args.map(String)], { typeMapping: TEXT }));
  }

  /**
   * By hand rather than by node-redis' multi(): its MULTI reads EXEC's reply with the default mapping whatever
   * the batch's (binary members would come back as mangled text), and its pipeline fails whole at one
   * command's error. One chain id keeps the batch together on the connection, as node-redis does for its own.
   * Every reply comes as Buffers, and is text again unless asked binary.
   */
  async batch(commands: readonly AdminCommand[], atomic: boolean, binary?: ReadonlySet<number>): Promise<AdminReply[]> {
    const replies = await this.#run(async (client) => {
      const options = { chainId: Symbol('flowlock/admin batch'), typeMapping: BINARY };
      const send = ([name, ...args]: AdminCommand): Promise<unknown> =>
        client.sendCommand([name, ...args.map(String)], options);
      if (!atomic) {
        const settled = await Promise.allSettled(commands.map(send));
        return settled.map((result) => (result.status === 'fulfilled' ? result.value : (result.reason as unknown)));
      }
      // A command the server refuses to queue fails the whole transaction (EXECABORT): its error is the batch's.
      const exec = (await Promise.all([send(['MULTI']), ...commands.map(send), send(['EXEC'])])).at(-1);
      // Null: a WATCH the user's client had set on this connection saw a change.
      if (!Array.isArray(exec)) throw new Error('the transaction was aborted by a WATCH on the connection');
      return exec as unknown[];
    });
    return replies.map((reply, index) =>
      reply instanceof Error ? { error: reply } : { value: binary?.has(index) ? reply : textOf(reply) },
    );
  }

  listen(events: AdminListenerEvents): AdminListener {
    const connection = this.#open();
    let closed = false;
    const end = (): void => {
      if (closed) return;
      closed = true;
      events.closed();
    };
    // Also keeps an 'error' event from crashing the process: failures reach the caller as failed subscribes.
    // One that leaves the connection closed means node-redis gave up reconnecting.
    connection.on('error', () => {
      if (!connection.isOpen) end();
    });
    connection.on('end', end);
    const listener: Listener = (message, channel) => {
      if (!closed) events.message(channel, message);
    };
    const connected = connection.connect();
    connected.catch(noop);
    const subscribe = async (call: () => Promise<unknown>): Promise<void> => {
      await connected;
      // node-redis would never answer a subscription on a closed connection.
      if (!closed) await call();
    };
    return {
      psubscribe: (patterns) => subscribe(() => connection.pSubscribe([...patterns], listener)),
      ssubscribe: (channels) => subscribe(() => connection.sSubscribe([...channels], listener)),
      subscribe: (channels) => subscribe(() => connection.subscribe([...channels], listener)),
      close: () => {
        if (closed) return;
        closed = true;
        closeConnection(connection);
      },
    };
  }
}

/** The library's subscriber connection: a client, a cluster or a client of a sentinel's master. */
type PubSubConnection = PubSub & Emitter & Pick<NodeClient, 'isOpen' | 'isReady' | 'connect' | 'destroy'>;

/** A sentinel's master client as the sentinel uses it now (leased for a moment, to copy its address and options). */
function sentinelMaster(sentinel: NodeRedisLike): Promise<NodeClient> {
  if (!sentinel._execute) return Promise.reject(new Error('the node-redis sentinel shows no master client'));
  return sentinel._execute(false, (master) => Promise.resolve(master));
}

/**
 * The library's subscriber: a connection of its own, connected and closed here, whose reconnects it reports
 * (node-redis restores the subscriptions itself). For a client, a duplicate; for a cluster, a duplicate with as
 * few connections as it needs; for a sentinel, a client of the master the sentinel uses, followed to the new
 * master on the sentinel's MASTER_CHANGE. Not a duplicate of the sentinel: a sentinel runs pub/sub on an
 * inner connection whose reconnects it tells nobody of (a waiter slept through a release sent during a
 * blip, issue 38), and node-redis 5's cannot be duplicated.
 */
class NodeRedisSubscriber implements Subscriber {
  /** The connection now, once opened (a sentinel's master is looked up first). */
  #connected: Promise<PubSubConnection>;
  /** The address of the sentinel's master the connection is to. */
  #masterAddress: string | undefined;
  readonly #mode: PubSubMode;
  readonly #topology: RedisAdapter['topology'];
  readonly #events: SubscriberEvents;
  /** Subscribed channels, with the master of each one's slot when subscribed (sharded on a 5.x cluster). */
  readonly #channels = new Map<string, string | undefined>();
  readonly #listener: Listener = (message, channel) => {
    if (!this.#closed) this.#events.message(channel, message);
  };
  /** Removes the listeners on the user's client. */
  readonly #cleanups: (() => void)[] = [];
  /**
   * Set when a sentinel's connection could not be opened (its master not found, or not reached): the next
   * subscribe call opens one again, rather than fail until the sentinel's next MASTER_CHANGE.
   */
  #reopen: (() => Promise<PubSubConnection>) | undefined;
  /** Removes the listeners on the connection now. */
  #detach: () => void = noop;
  /** The master of a channel's slot, as the user's cluster knows it (node-redis 5 clusters only). */
  #ownerOf: ((channel: string) => string | undefined) | undefined;
  #restoreTimer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(client: NodeRedisLike, topology: RedisAdapter['topology'], mode: PubSubMode, events: SubscriberEvents) {
    this.#mode = mode;
    this.#topology = topology;
    this.#events = events;
    if (topology === 'sentinel') {
      this.#connected = this.#openSentinel(client);
      const onChange = (event: { type?: unknown } | undefined): void => {
        if (event?.type === 'MASTER_CHANGE') this.#follow(client);
      };
      client.on('topology-change', onChange);
      this.#cleanups.push(() => client.off('topology-change', onChange));
    } else if (typeof client.duplicate === 'function') {
      const connection = topology === 'cluster' ? client.duplicate({ minimizeConnections: true }) : client.duplicate();
      this.#connected = this.#open(connection);
    } else {
      this.#connected = Promise.reject(new TypeError('the node-redis client cannot be duplicated'));
    }
    // Failures reach the subscribe calls.
    this.#connected.catch(noop);
    if (topology === 'cluster' && mode === 'sharded' && typeof client.getNodeClientForKey !== 'function') {
      this.#followSlots(client);
    }
  }

  async subscribe(channels: readonly string[]): Promise<void> {
    const fresh = channels.filter((channel) => !this.#channels.has(channel));
    if (fresh.length === 0) return;
    for (const channel of fresh) this.#channels.set(channel, this.#ownerOf?.(channel));
    try {
      if (this.#reopen) {
        const reopen = this.#reopen;
        this.#reopen = undefined;
        this.#connected = reopen();
      }
      const connection = await this.#connected;
      if (this.#closed) return;
      await this.#subscribeOn(connection, fresh);
    } catch (error) {
      // node-redis keeps a channel for its resubscription only once its SUBSCRIBE is answered: one whose
      // reply was lost with the connection is not restored. Asked for again by the next subscribe call.
      for (const channel of fresh) this.#channels.delete(channel);
      throw error;
    }
  }

  async unsubscribe(channels: readonly string[]): Promise<void> {
    const known = channels.filter((channel) => this.#channels.delete(channel));
    if (known.length === 0 || this.#closed) return;
    const connection = await this.#connected;
    await (this.#mode === 'sharded'
      ? connection.sUnsubscribe(known, this.#listener)
      : connection.unsubscribe(known, this.#listener));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#restoreTimer);
    for (const cleanup of this.#cleanups.splice(0)) cleanup();
    this.#detach();
    this.#connected.then(closeConnection, noop);
  }

  #subscribeOn(connection: PubSubConnection, channels: string[]): Promise<unknown> {
    return this.#mode === 'sharded'
      ? connection.sSubscribe(channels, this.#listener)
      : connection.subscribe(channels, this.#listener);
  }

  /**
   * Listens to `connection`'s events, and connects it. 'ready' after its first one means reconnected and
   * resubscribed; a client reconnecting has lost its subscriptions until then. A cluster's node events come
   * while node-redis is still restoring the subscriptions.
   */
  #open(connection: PubSubConnection): Promise<PubSubConnection> {
    // Closed while the sentinel's master was looked up: never connected.
    if (this.#closed) return Promise.reject(new Error('the subscriber is closed'));
    const listeners: [string, Handler][] = [
      // An unhandled 'error' event would crash the process; errors reach us as failed subscribes and reconnects.
      ['error', noop],
    ];
    let readyBefore = false;
    listeners.push([
      'ready',
      () => {
        if (readyBefore) this.#restored(0);
        readyBefore = true;
      },
    ]);
    if (this.#topology === 'cluster') {
      for (const event of ['node-reconnecting', 'sharded-channel-moved-error', 'sharded-shannel-moved-error']) {
        listeners.push([event, () => this.#restored(RESTORE_DELAY_MS)]);
      }
    } else {
      listeners.push([
        'reconnecting',
        () => {
          if (!this.#closed) this.#events.lost();
        },
      ]);
    }
    for (const [event, listener] of listeners) connection.on(event, listener);
    this.#detach = () => {
      for (const [event, listener] of listeners) connection.off(event, listener);
    };
    return connection.connect().then(() => connection);
  }

  /** Opens a connection to the sentinel's master now. */
  #openSentinel(sentinel: NodeRedisLike): Promise<PubSubConnection> {
    return this.#watchOpening(
      sentinel,
      sentinelMaster(sentinel).then((master) => this.#openTo(master)),
    );
  }

  /** `opening`, a sentinel's connection being opened; if it fails, the next subscribe call opens one again. */
  #watchOpening(sentinel: NodeRedisLike, opening: Promise<PubSubConnection>): Promise<PubSubConnection> {
    opening.catch(() => {
      if (this.#connected === opening && !this.#closed) this.#reopen = () => this.#openSentinel(sentinel);
    });
    return opening;
  }

  /** Opens a connection to a sentinel's master, a duplicate of the sentinel's client of it (TLS, credentials). */
  #openTo(master: NodeClient): Promise<PubSubConnection> {
    this.#masterAddress = addressOf(master);
    return this.#open(master.duplicate({ keyPrefix: undefined }));
  }

  /**
   * The sentinel announced a master: unless it is the one the connection is to (a sentinel announces its
   * reconnects to the same master too, which the connection handles itself), a new connection to it takes every
   * channel over, and the old one is closed. Messages may have been lost meanwhile: reported lost, then
   * restored. A master not found keeps the connection there is.
   */
  #follow(sentinel: NodeRedisLike): void {
    const previous = this.#connected;
    const switched = Promise.all([
      sentinelMaster(sentinel).catch(() => undefined),
      previous.catch(() => undefined),
    ]).then(async ([master, current]) => {
      if (this.#closed) {
        // close() closes what this resolves to: nothing, so the connection now is closed here.
        if (current) closeConnection(current);
        throw new Error('the subscriber is closed');
      }
      if (!master) {
        if (current) return current;
        throw new Error("the node-redis sentinel's master is not known");
      }
      if (current && this.#masterAddress === addressOf(master)) return current;
      this.#events.lost();
      this.#detach();
      if (current) closeConnection(current);
      // Subscribed nowhere until the new connection has them: a channel it could not take over is asked for
      // again by the next subscribe call (its waiters' retry of a failed subscription).
      const channels = [...this.#channels.keys()];
      const forget = (): void => {
        for (const channel of channels) this.#channels.delete(channel);
      };
      const connection = await this.#openTo(master).catch((error: unknown) => {
        forget();
        throw error;
      });
      const subscribed =
        channels.length === 0 ||
        (await this.#subscribeOn(connection, channels).then(
          () => true,
          () => {
            forget();
            return false;
          },
        ));
      if (!this.#isClosed()) this.#events.restored(subscribed);
      return connection;
    });
    this.#connected = this.#watchOpening(sentinel, switched);
    switched.catch(() => {
      if (!this.#closed) this.#events.restored(false);
    });
  }

  /** Read through a call: TypeScript would keep a check made before an await narrowed after it. */
  #isClosed(): boolean {
    return this.#closed;
  }

  /**
   * Reports that subscriptions are back in place: at once after a 'ready' (node-redis resubscribed before
   * it), `delayMs` after an event that comes while node-redis is still restoring them (once per burst).
   */
  #restored(delayMs: number): void {
    if (this.#closed) return;
    if (delayMs === 0) {
      clearTimeout(this.#restoreTimer);
      this.#restoreTimer = undefined;
      this.#events.restored(true);
      return;
    }
    if (this.#restoreTimer) return;
    this.#restoreTimer = setTimeout(() => {
      this.#restoreTimer = undefined;
      if (!this.#closed) this.#events.restored(true);
    }, delayMs);
    this.#restoreTimer.unref();
  }

  /** node-redis 5 clusters: subscribe again to shard channels whose slot moved (see SLOT_MOVE_CHECK_MS). */
  #followSlots(client: NodeRedisLike): void {
    const ownerOf = (channel: string): string | undefined => client.slots?.[keySlot(channel)]?.master.address;
    this.#ownerOf = ownerOf;
    const timer = setInterval(() => {
      const moved: string[] = [];
      for (const [channel, owner] of this.#channels) {
        const now = ownerOf(channel);
        if (owner === undefined) this.#channels.set(channel, now);
        else if (now !== undefined && now !== owner) moved.push(channel);
      }
      if (moved.length === 0) return;
      for (const channel of moved) this.#channels.delete(channel);
      this.#connected
        .then((connection) => connection.sUnsubscribe(moved, this.#listener))
        .catch(noop)
        .then(() => this.subscribe(moved))
        .then(
          () => this.#closed || this.#events.restored(true),
          () => this.#closed || this.#events.restored(false),
        );
    }, SLOT_MOVE_CHECK_MS);
    timer.unref();
    this.#cleanups.push(() => clearInterval(timer));
  }
}
