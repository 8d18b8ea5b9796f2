/**
 * The adapter for ioredis 5 and 6 and for iovalkey (a fork of ioredis 5.3): `Redis` (standalone or Sentinel)
 * and `Cluster`. Scripts go through the client's own EVALSHA/EVAL commands, which a Cluster routes by the
 * first key; the library's subscriber is a duplicate of the client.
 */
import type { Cluster, Redis } from 'ioredis';
import { bySha, checkedMaster, isRedirectionMessage, replicasIn, unprefixed, unprefixedKeys } from './shared.js';
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
import { keySlot } from './keys.js';

type Client = Redis | Cluster;

/** ioredis' shape (iovalkey's too): its own command methods, a connection status and `duplicate()`. */
export function isIoredis(client: unknown): client is Client {
  const candidate = client as Partial<Record<'evalsha' | 'eval' | 'call' | 'duplicate' | 'status', unknown>> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.evalsha === 'function' &&
    typeof candidate.eval === 'function' &&
    typeof candidate.call === 'function' &&
    typeof candidate.duplicate === 'function' &&
    typeof candidate.status === 'string' &&
    'options' in candidate
  );
}

function isCluster(client: Client): client is Cluster {
  return (client as { isCluster?: unknown }).isCluster === true;
}

/**
 * Slot refresh period of the sharded subscriber, as a backstop only: ioredis opens a new connection for every
 * refresh. The subscriber refreshes at once when the user's Cluster client learns that a slot moved (a MOVED
 * to one of our scripts, or its own refresh); a waiter's re-check causes that within 2 s.
 */
const SHARDED_SLOTS_REFRESH_MS = 5_000;

export class IoredisAdapter implements RedisAdapter {
  readonly library = 'ioredis';
  readonly topology: RedisAdapter['topology'];
  readonly keyPrefix: string;
  readonly shardedPubSub: boolean;
  readonly #client: Client;
  /** Connections WAIT went to, with how often each closed (listeners removed by `dispose()`). */
  readonly #connections = new Map<Redis, { readonly connection: MasterConnection; readonly listener: () => void }>();
  /** The user's client's 'end' listener (removed by `dispose()`). */
  #onEnd: (() => void) | undefined;

  constructor(client: Client, argument: string) {
    this.#client = client;
    const options = client.options as { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } } & Record<
      string,
      unknown
    >;
    const prefix = options.keyPrefix ?? options.redisOptions?.keyPrefix ?? '';
    if (typeof prefix !== 'string') throw new TypeError(`${argument}'s keyPrefix must be a string, not a Buffer`);
    this.keyPrefix = prefix;
    if (isCluster(client)) {
      this.topology = 'cluster';
      // Sharded subscribers arrived in ioredis 5.6 (its `shardedSubscribers` option); iovalkey's Cluster sends
      // SSUBSCRIBE to a random node and fails with MOVED, so there every waiter listens to classic channels.
      this.shardedPubSub = 'shardedSubscribers' in options;
    } else {
      this.topology = Array.isArray(options['sentinels']) ? 'sentinel' : 'standalone';
      this.shardedPubSub = false;
    }
  }

  evalScript(script: Script, keys: readonly string[], args: readonly ScriptArg[], direct: boolean): Promise<unknown> {
    const names = unprefixedKeys(keys, this.keyPrefix);
    return bySha(
      direct,
      () => this.#client.evalsha(script.sha1, names.length, ...names, ...args),
      () => this.#client.eval(script.source, names.length, ...names, ...args),
    );
  }

  async get(key: string): Promise<string | null> {
    return await this.#client.get(unprefixed(key, this.keyPrefix));
  }

  async hget(key: string, field: string): Promise<string | null> {
    return await this.#client.hget(unprefixed(key, this.keyPrefix), field);
  }

  async hgetall(key: string): Promise<Record<string, string>> {
    return await this.#client.hgetall(unprefixed(key, this.keyPrefix));
  }

  async exists(key: string): Promise<boolean> {
    return (await this.#client.exists(unprefixed(key, this.keyPrefix))) === 1;
  }

  async pttl(key: string): Promise<number> {
    return await this.#client.pttl(unprefixed(key, this.keyPrefix));
  }

  async info(section: string): Promise<string> {
    return await this.#client.info(section);
  }

  readiness(): 'ready' | 'connecting' | 'down' {
    const status = this.#client.status;
    if (status === 'ready') return 'ready';
    // 'wait' is lazyConnect's: the first command opens the connection.
    return status === 'wait' || status === 'connecting' || status === 'connect' ? 'connecting' : 'down';
  }

  isRedirection(error: unknown): boolean {
    return isRedirectionMessage(error);
  }

  /** ioredis sends a call whose reply was lost again after reconnecting (autoResendUnfulfilledCommands). */
  isLostReply(): boolean {
    return false;
  }

  /**
   * A standalone or Sentinel client has one connection; on a Cluster it is the connection to the master that
   * owns the key's slot, the one that runs the key's scripts (ioredis would send a keyless WAIT to any node).
   */
  masterConnection(key: string): MasterConnection | undefined {
    const client = this.#client;
    let connection: Redis | undefined;
    if (isCluster(client)) {
      connection = slotMaster(client, key);
    } else {
      connection = client;
    }
    if (!connection) return undefined;
    let known = this.#connections.get(connection);
    if (!known) {
      const node = connection;
      let closes = 0;
      const send = (args: string[]): Promise<unknown> => node.call(args[0] ?? '', ...args.slice(1));
      // ioredis says every close ('close'), and sends a WAIT cut off by one again on the next connection; the
      // connection's identity checks it all the same, as on every client library (CheckedMaster).
      const checked = checkedMaster(send, undefined, () => closes);
      const listener = (): void => {
        closes++;
      };
      node.on('close', listener);
      known = { connection: checked, listener };
      this.#connections.set(node, known);
    }
    return known.connection;
  }

  openSubscriber(mode: PubSubMode, events: SubscriberEvents): Subscriber {
    return new IoredisSubscriber(this.#client, mode, events);
  }

  /** ioredis emits 'end' after quit() and disconnect(), and when its retry strategy gives up. */
  onEnd(listener: () => void): void {
    if (this.#onEnd) this.#client.off('end', this.#onEnd);
    this.#onEnd = listener;
    this.#client.on('end', listener);
  }

  hasEnded(): boolean {
    return this.#client.status === 'end';
  }

  dispose(): void {
    if (this.#onEnd) this.#client.off('end', this.#onEnd);
    this.#onEnd = undefined;
    for (const [connection, { listener }] of this.#connections) connection.off('close', listener);
    this.#connections.clear();
  }

  adminNodes(): AdminNodes {
    return new IoredisNodes(this.#client);
  }
}

/** `host:port` of a node connection. */
function addressOf(node: Redis): string {
  return `${node.options.host ?? '127.0.0.1'}:${node.options.port ?? 6379}`;
}

/** The Cluster's connection to the master of `key`'s slot, as its slot map has it (none before it has one). */
function slotMaster(cluster: Cluster, key: string): Redis | undefined {
  const owner = cluster.slots[keySlot(key)]?.[0];
  return cluster.nodes('master').find((candidate) => addressOf(candidate) === owner);
}

/**
 * Resolves once the client is connected (a Cluster knows its nodes only then); connects a lazyConnect
 * client. Rejects if it ends first.
 */
async function ready(client: Client): Promise<void> {
  if (client.status === 'ready') return;
  if (client.status === 'wait') {
    await client.connect();
    return;
  }
  if (client.status === 'end') throw new Error('the Redis client is closed');
  await new Promise<void>((resolve, reject) => {
    const settle = (error?: Error): void => {
      client.off('ready', onReady);
      client.off('end', onEnd);
      if (error) reject(error);
      else resolve();
    };
    const onReady = (): void => settle();
    const onEnd = (): void => settle(new Error('the Redis client closed before it was ready'));
    client.on('ready', onReady);
    client.on('end', onEnd);
  });
}

/** The nodes of an ioredis client: its own connection, or the node connections a ready Cluster keeps. */
class IoredisNodes implements AdminNodes {
  readonly #client: Client;
  readonly database: number;

  constructor(client: Client) {
    this.#client = client;
    this.database = isCluster(client) ? 0 : (client.options.db ?? 0);
  }

  async masters(): Promise<AdminNode[]> {
    const client = this.#client;
    if (!isCluster(client)) return [new IoredisNode(client)];
    await ready(client);
    const nodes = client.nodes('master');
    if (nodes.length === 0) throw new Error('the Cluster client knows no masters');
    return nodes.map((node) => new IoredisNode(node));
  }

  async all(): Promise<AdminNode[]> {
    const client = this.#client;
    if (!isCluster(client)) return [new IoredisNode(client)];
    await ready(client);
    const nodes = client.nodes('all').map((node) => new IoredisNode(node));
    const [first] = client.nodes('master');
    if (!first) return nodes;
    // ioredis knows the nodes CLUSTER SLOTS names (see replicasIn).
    const known = new Set(nodes.map((node) => node.address));
    const natMap = (client.options as { natMap?: unknown }).natMap;
    for (const replica of replicasIn(String(await first.call('CLUSTER', 'NODES')))) {
      const address = `${replica.host}:${replica.port}`;
      const mapped =
        typeof natMap === 'function'
          ? (natMap as (key: string) => { host: string; port: number } | null)(address)
          : (natMap as Record<string, { host: string; port: number }> | undefined)?.[address];
      const target = mapped ?? replica;
      if (known.has(`${target.host}:${target.port}`)) continue;
      known.add(`${target.host}:${target.port}`);
      nodes.push(new IoredisNode(first, target));
    }
    return nodes;
  }

  async masterOf(key: string): Promise<AdminNode> {
    const client = this.#client;
    if (!isCluster(client)) return new IoredisNode(client);
    await ready(client);
    const node = slotMaster(client, key);
    if (!node) throw new Error(`no master known for the slot of ${key}`);
    return new IoredisNode(node);
  }
}

/**
 * One node: a standalone client, a Cluster's connection to one node, or a replica the Cluster keeps no
 * connection to (`own`: reached by a connection of each call's own, a duplicate of `connection` to it).
 */
class IoredisNode implements AdminNode {
  readonly #connection: Redis;
  readonly #own: { readonly host: string; readonly port: number } | undefined;
  readonly address: string;
  /** The prefix the connection puts before the keys of keyed commands. */
  readonly #prefix: string;

  constructor(connection: Redis, own?: { readonly host: string; readonly port: number }) {
    this.#connection = connection;
    this.#own = own;
    this.address = own ? `${own.host}:${own.port}` : addressOf(connection);
    const prefix = (connection.options as { keyPrefix?: unknown }).keyPrefix ?? '';
    this.#prefix = typeof prefix === 'string' ? prefix : '';
  }

  /** Runs `work` on a connection to the node; one of its own gives up at its first failure, and is closed. */
  async #use<T>(work: (connection: Redis) => Promise<T>): Promise<T> {
    if (!this.#own) return work(this.#connection);
    const connection = this.#connection.duplicate({
      ...this.#own,
      lazyConnect: true,
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
    });
    // Failures reach the caller as the failed connect or command.
    connection.on('error', () => undefined);
    try {
      await connection.connect();
      return await work(connection);
    } finally {
      connection.disconnect();
    }
  }

  call([name, ...args]: AdminCommand): Promise<unknown> {
    return this.#use((connection) => connection.call(name, ...args));
  }

  batch(commands: readonly AdminCommand[], atomic: boolean, binary?: ReadonlySet<number>): Promise<AdminReply[]> {
    return this.#use((connection) => this.#batch(connection, commands, atomic, binary));
  }

  async #batch(
    connection: Redis,
    commands: readonly AdminCommand[],
    atomic: boolean,
    binary?: ReadonlySet<number>,
  ): Promise<AdminReply[]> {
    const batch = (atomic ? connection.multi() : connection.pipeline()) as unknown as Record<
      string,
      ((...args: (string | number)[]) => unknown) | undefined
    >;
    commands.forEach(([name, first, ...rest], index) => {
      // By the typed command (`hgetall`, `zrangeBuffer`): iovalkey's generic `call` leaves keys unprefixed, and
      // the typed commands put the connection's keyPrefix back on both libraries.
      const method = `${name.toLowerCase()}${binary?.has(index) ? 'Buffer' : ''}`;
      const send = batch[method];
      if (typeof send !== 'function') throw new Error(`no ${method} command on this client`);
      const args =
        first === undefined ? [] : [typeof first === 'string' ? unprefixed(first, this.#prefix) : first, ...rest];
      send.apply(batch, args);
    });
    const results = (await (batch as unknown as { exec(): Promise<[Error | null, unknown][] | null> }).exec()) ?? [];
    return results.map(([error, value]) => (error ? { error } : { value }));
  }

  listen(events: AdminListenerEvents): AdminListener {
    const connection = this.#connection.duplicate({ ...this.#own, keyPrefix: '', lazyConnect: false });
    let closed = false;
    // Failures surface as rejected subscribe calls or the 'end' event; an unhandled 'error' would crash.
    connection.on('error', () => undefined);
    connection.on('end', () => {
      if (!closed) events.closed();
    });
    connection.on('pmessage', (_pattern: string, channel: string, message: string) => events.message(channel, message));
    connection.on('smessage', (channel: string, message: string) => events.message(channel, message));
    connection.on('message', (channel: string, message: string) => events.message(channel, message));
    return {
      psubscribe: async (patterns) => {
        await connection.psubscribe(...patterns);
      },
      ssubscribe: async (channels) => {
        await connection.ssubscribe(...channels);
      },
      subscribe: async (channels) => {
        await connection.subscribe(...channels);
      },
      close: () => {
        closed = true;
        connection.disconnect();
      },
    };
  }
}

/**
 * A duplicate of the user's client, without its keyPrefix (the library names channels as the server knows
 * them; ioredis would prefix shard channels and not classic ones). Sharded: a Cluster duplicate with one
 * sharded subscriber per master that resubscribes when it sees the slots move.
 */
class IoredisSubscriber implements Subscriber {
  readonly #connection: Client;
  readonly #mode: PubSubMode;
  readonly #events: SubscriberEvents;
  readonly #channels = new Set<string>();
  /** Stops the sharded subscriber from following the user's client's slot refreshes. */
  #unfollowSlots: (() => void) | undefined;
  #ready: Promise<void> | undefined;
  #confirmed = false;
  #closed = false;

  constructor(client: Client, mode: PubSubMode, events: SubscriberEvents) {
    this.#mode = mode;
    this.#events = events;
    let connection: Client;
    // This subscriber restores its own subscriptions after a reconnect (#restore), and handles the outcome;
    // ioredis' own resubscription (autoResubscribe) handles none, so a connection that closes again before
    // its reply leaves an unhandled rejection ("Connection is closed.") in the user's process.
    if (isCluster(client)) {
      const redisOptions = { ...client.options.redisOptions, keyPrefix: '', autoResubscribe: false };
      connection = client.duplicate(undefined, {
        keyPrefix: '',
        redisOptions,
        ...(mode === 'sharded' ? { shardedSubscribers: true, slotsRefreshInterval: SHARDED_SLOTS_REFRESH_MS } : {}),
      });
      if (mode === 'sharded') this.#followSlots(client, connection);
    } else {
      connection = client.duplicate({ keyPrefix: '', autoResubscribe: false });
    }
    this.#connection = connection;
    // Connection errors surface as failed subscribe calls and reconnects; the listener keeps an unhandled
    // 'error' event from crashing the process.
    connection.on('error', () => undefined);
    connection.on(mode === 'sharded' ? 'smessage' : 'message', (channel: string, message: string) => {
      if (!this.#closed) events.message(channel, message);
    });
    // After ioredis re-created sharded subscribers (slots moved, a node failed), messages may have been lost.
    // It also announces them (twice) while first connecting, before any subscription could have been lost:
    // those would only resend the first subscription and wake its waiters for nothing.
    connection.on('subscribersReady', () => {
      if (this.#confirmed) void this.#restore();
    });
    // Closed (the server died, the network failed): its subscriptions are gone until it is ready again.
    connection.on('close', () => {
      if (!this.#closed) events.lost();
    });
    let connectedBefore = false;
    connection.on('ready', () => {
      if (!connectedBefore) {
        connectedBefore = true;
        return;
      }
      void this.#restore();
    });
  }

  async subscribe(channels: readonly string[]): Promise<void> {
    for (const channel of channels) this.#channels.add(channel);
    await this.#whenReady(() =>
      this.#mode === 'sharded' ? this.#connection.ssubscribe(...channels) : this.#connection.subscribe(...channels),
    );
    this.#confirmed = true;
  }

  async unsubscribe(channels: readonly string[]): Promise<void> {
    for (const channel of channels) this.#channels.delete(channel);
    await this.#whenReady(() =>
      this.#mode === 'sharded' ? this.#connection.sunsubscribe(...channels) : this.#connection.unsubscribe(...channels),
    );
  }

  close(): void {
    this.#closed = true;
    this.#unfollowSlots?.();
    this.#connection.disconnect();
  }

  /**
   * ioredis writes a SUBSCRIBE at once even while a new connection is still in its handshake (status
   * 'connect'). Its reply puts the connection in subscriber mode, so the handshake's INFO ready check is
   * refused (RESP2), and ioredis reconnects without restoring that subscription (the connection was never
   * ready), although the SUBSCRIBE resolved: its waiters would sleep out the holder's lease. So classic
   * (un)subscribes wait for a ready connection, in order. The sharded subscriber has no ready check.
   */
  #whenReady<T>(command: () => Promise<T>): Promise<T> {
    const connection = this.#connection;
    if (this.#mode === 'sharded' || connection.status === 'ready' || connection.status === 'end') return command();
    // A duplicate of a lazyConnect client waits for a first command that the gate holds back: connect it.
    if (connection.status === 'wait') connection.connect().catch(() => undefined);
    this.#ready ??= new Promise<void>((resolve, reject) => {
      const settle = (error?: Error): void => {
        this.#ready = undefined;
        connection.off('ready', onReady);
        connection.off('end', onEnd);
        if (error) reject(error);
        else resolve();
      };
      const onReady = (): void => settle();
      const onEnd = (): void => settle(new Error('the subscriber connection was closed'));
      connection.on('ready', onReady);
      connection.on('end', onEnd);
    });
    return this.#ready.then(command);
  }

  /** After a reconnect: make sure every channel is subscribed, then say so. */
  async #restore(): Promise<void> {
    const channels = [...this.#channels];
    const subscribed =
      channels.length === 0
        ? true
        : await this.subscribe(channels).then(
            () => true,
            () => false,
          );
    if (!this.#closed) this.#events.restored(subscribed);
  }

  /**
   * A migration silently drops the subscriptions of the slot's shard channels, so the sharded subscriber
   * must see a move soon: it refreshes its slots whenever the client's own slot map, just refreshed, names
   * another master for any slot than the subscriber's does.
   */
  #followSlots(client: Cluster, subscriber: Cluster): void {
    const onRefresh = (): void => {
      const known = subscriber.slots;
      if (client.slots.some((nodes, slot) => nodes[0] !== known[slot]?.[0])) subscriber.refreshSlotsCache();
    };
    client.on('refresh', onRefresh);
    this.#unfollowSlots = () => client.off('refresh', onRefresh);
  }
}
