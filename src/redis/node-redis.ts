/**
 * The adapter for node-redis 5 and 6 (the `redis` package): a client (`createClient`), a cluster
 * (`createCluster`) or a sentinel (`createSentinel`), connected by the user. Every call goes through
 * `withTypeMapping({})`, so that a user's type mapping (Buffers, strings for numbers) or RESP3 does not change
 * what the library reads, and through the typed commands, which route a cluster's calls by their first key
 * and put a 6.1+ `keyPrefix` before every key.
 */
import { bySha, isRedirectionMessage, unprefixed, unprefixedKeys } from './shared.js';
import type {
  MasterConnection,
  PubSubMode,
  RedisAdapter,
  Script,
  ScriptArg,
  Subscriber,
  SubscriberEvents,
} from './adapter.js';
import { RedisNotOpenError } from '../errors.js';
import { keySlot } from './keys.js';

type Listener = (message: string, channel: string) => void;
type Handler = (...args: never[]) => void;

/** The commands the library sends (a client, cluster or sentinel, or one of their type-mapping views). */
interface Commands {
  evalSha(sha1: string, options: { keys: string[]; arguments: (string | Buffer)[] }): Promise<unknown>;
  eval(source: string, options: { keys: string[]; arguments: (string | Buffer)[] }): Promise<unknown>;
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

/** A slot's master as a node-redis cluster knows it (its connection, once opened). */
interface ClusterNode {
  readonly address: string;
  readonly client?: { readonly socketEpoch?: number };
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
  readonly masters?: readonly unknown[];
  nodeClient?(node: ClusterNode): Promise<{ sendCommand(args: string[]): Promise<unknown> }>;
  getNodeClientForKey?: unknown;
  // A sentinel:
  getMasterNode?: unknown;
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

  constructor(client: unknown, argument: string) {
    const nodeRedis = client as NodeRedisLike;
    if (typeof nodeRedis.subscribe !== 'function') {
      // A client pool lends a different connection to each command: no pub/sub, no connection for WAIT.
      throw new TypeError(`${argument} is a node-redis client pool: pass a client, cluster or sentinel`);
    }
    this.#client = nodeRedis;
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

  async evalScript(
    script: Script,
    keys: readonly string[],
    args: readonly ScriptArg[],
    direct: boolean,
  ): Promise<unknown> {
    const commands = await this.#ready();
    const call = { keys: unprefixedKeys(keys, this.keyPrefix), arguments: toArgs(args) };
    return bySha(
      direct,
      () => commands.evalSha(script.sha1, call),
      () => commands.eval(script.source, call),
    );
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
    // node-redis would reject with a bare "The client is closed", which does not say what to do.
    if (!this.#client.isOpen) throw new RedisNotOpenError();
    if (this.#connecting) await this.#connecting;
    return this.#commands;
  }

  readiness(): 'ready' | 'connecting' | 'down' {
    if (!this.#client.isOpen) return 'down';
    // A 5.x cluster has no isReady.
    return (this.#client.isReady ?? true) ? 'ready' : 'connecting';
  }

  /**
   * Also, on a cluster, the calls node-redis had queued for a node it then dropped from its map (a failed
   * master, at its next slot refresh): they were never written, and go to the slot's new master when sent
   * again.
   */
  isRedirection(error: unknown): boolean {
    return (
      isRedirectionMessage(error) ||
      (this.topology === 'cluster' && error instanceof Error && error.message === 'Disconnects client')
    );
  }

  /**
   * node-redis rejects the calls it had written when their connection closes (SocketClosedUnexpectedlyError)
   * or times out (SocketTimeoutError): they may have run. Its Sentinel sends them again itself.
   */
  isLostReply(error: unknown): boolean {
    return (
      this.topology !== 'sentinel' &&
      error instanceof Error &&
      /^(Socket closed unexpectedly|Socket timeout)/.test(error.message)
    );
  }

  /**
   * A client is its own connection. A cluster's is the node client of the slot's master, the connection the
   * cluster used for the key's scripts (node-redis 6.2 would send a WAIT of the cluster itself to every
   * shard). A sentinel's commands go to its master lease (one unless the user raised `masterPoolSize`).
   */
  masterConnection(key: string): MasterConnection | undefined {
    const client = this.#client;
    if (this.topology === 'cluster') {
      const node = client.slots?.[keySlot(key)]?.master;
      if (!node || !client.nodeClient) return undefined;
      const nodeClient = client.nodeClient.bind(client);
      return this.#remember(node, () => ({
        get closes() {
          return reconnects(node.client);
        },
        wait: async (replicas, timeoutMs) =>
          Number(await (await nodeClient(node)).sendCommand(['WAIT', String(replicas), String(timeoutMs)])),
      }));
    }
    if (this.topology === 'sentinel') {
      return this.#remember(client, () => {
        let closes = 0;
        const onError = (): void => {
          closes++;
        };
        // Errors only: a sentinel reports topology changes on its first connect too, and MASTER_CHANGE
        // for a reconnect to the same master, which a dropped connection announces by 'error' anyway.
        this.#listen(client, 'error', onError);
        return {
          get closes() {
            return closes;
          },
          wait: async (replicas, timeoutMs) =>
            Number(await client.sendCommand(false, ['WAIT', String(replicas), String(timeoutMs)])),
        };
      });
    }
    return this.#remember(client, () => ({
      get closes() {
        return reconnects(client);
      },
      wait: async (replicas, timeoutMs) =>
        Number(await client.sendCommand(['WAIT', String(replicas), String(timeoutMs)])),
    }));
  }

  /** A client and a sentinel emit 'end' once closed (close(), destroy(), quit()), a cluster 'disconnect'. */
  onEnd(listener: () => void): void {
    this.#listen(this.#client, this.topology === 'cluster' ? 'disconnect' : 'end', listener);
  }

  hasEnded(): boolean {
    return !this.#client.isOpen;
  }

  openSubscriber(mode: PubSubMode, events: SubscriberEvents): Subscriber {
    return new NodeRedisSubscriber(this.#client, this.topology, mode, events);
  }

  dispose(): void {
    for (const dispose of this.#disposers.splice(0)) dispose();
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

/**
 * The library's subscriber: a duplicate of the user's client, cluster (with as few connections as it needs)
 * or sentinel, connected and closed here. A node-redis 5 sentinel cannot be duplicated: its subscriptions
 * then ride on the user's sentinel (which runs pub/sub on a connection of its own) and are removed by
 * listener. node-redis restores subscriptions itself after a reconnect; this reports the reconnect.
 */
class NodeRedisSubscriber implements Subscriber {
  readonly #connection: NodeRedisLike;
  /** Whether the connection is ours (closed by close()), not the user's sentinel. */
  readonly #owned: boolean;
  readonly #connected: Promise<unknown>;
  readonly #mode: PubSubMode;
  readonly #events: SubscriberEvents;
  /** Subscribed channels, with the master of each one's slot when subscribed (sharded on a 5.x cluster). */
  readonly #channels = new Map<string, string | undefined>();
  readonly #listener: Listener = (message, channel) => {
    if (!this.#closed) this.#events.message(channel, message);
  };
  readonly #cleanups: (() => void)[] = [];
  /** The master of a channel's slot, as the user's cluster knows it (node-redis 5 clusters only). */
  #ownerOf: ((channel: string) => string | undefined) | undefined;
  #restoreTimer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(client: NodeRedisLike, topology: RedisAdapter['topology'], mode: PubSubMode, events: SubscriberEvents) {
    this.#mode = mode;
    this.#events = events;
    if (typeof client.duplicate === 'function') {
      const connection = topology === 'cluster' ? client.duplicate({ minimizeConnections: true }) : client.duplicate();
      this.#connection = connection;
      this.#owned = true;
      // An unhandled 'error' event would crash the process; errors reach us as failed subscribes.
      this.#listen('error', noop);
      this.#connected = connection.connect();
      this.#connected.catch(noop);
    } else {
      this.#connection = client;
      this.#owned = false;
      this.#connected = Promise.resolve();
    }
    // 'ready' after the first one means reconnected and resubscribed; the cluster's node events and a
    // sentinel's topology changes may have lost messages, and are followed by node-redis' own restore.
    let readyBefore = false;
    this.#listen('ready', () => {
      if (readyBefore) this.#restored(0);
      readyBefore = true;
    });
    // A client or sentinel reconnecting has lost its subscriptions until its next 'ready'.
    if (topology !== 'cluster') {
      this.#listen('reconnecting', () => {
        if (!this.#closed) this.#events.lost();
      });
    }
    for (const event of ['node-reconnecting', 'sharded-channel-moved-error', 'sharded-shannel-moved-error']) {
      this.#listen(event, () => this.#restored(RESTORE_DELAY_MS));
    }
    if (topology === 'sentinel') this.#listen('topology-change', () => this.#restored(RESTORE_DELAY_MS));
    if (topology === 'cluster' && mode === 'sharded' && typeof client.getNodeClientForKey !== 'function') {
      this.#followSlots(client);
    }
  }

  async subscribe(channels: readonly string[]): Promise<void> {
    const fresh = channels.filter((channel) => !this.#channels.has(channel));
    if (fresh.length === 0) return;
    for (const channel of fresh) this.#channels.set(channel, this.#ownerOf?.(channel));
    await this.#connected;
    if (this.#closed) return;
    await (this.#mode === 'sharded'
      ? this.#connection.sSubscribe(fresh, this.#listener)
      : this.#connection.subscribe(fresh, this.#listener));
  }

  async unsubscribe(channels: readonly string[]): Promise<void> {
    const known = channels.filter((channel) => this.#channels.delete(channel));
    if (known.length === 0 || this.#closed) return;
    await this.#connected;
    await (this.#mode === 'sharded'
      ? this.#connection.sUnsubscribe(known, this.#listener)
      : this.#connection.unsubscribe(known, this.#listener));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#restoreTimer);
    for (const cleanup of this.#cleanups.splice(0)) cleanup();
    if (this.#owned) {
      const connection = this.#connection;
      const destroy = (): void => {
        if (connection.isOpen) connection.destroy();
      };
      // At once (a connection still being opened stops there), and again should it open after all.
      destroy();
      this.#connected.then(destroy, noop);
    } else {
      const channels = [...this.#channels.keys()];
      this.#channels.clear();
      if (channels.length > 0) {
        const unsubscribe =
          this.#mode === 'sharded'
            ? this.#connection.sUnsubscribe(channels, this.#listener)
            : this.#connection.unsubscribe(channels, this.#listener);
        unsubscribe.catch(noop);
      }
    }
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
      this.#connection
        .sUnsubscribe(moved, this.#listener)
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

  #listen(event: string, listener: Handler): void {
    const connection = this.#connection;
    connection.on(event, listener);
    this.#cleanups.push(() => connection.off(event, listener));
  }
}
