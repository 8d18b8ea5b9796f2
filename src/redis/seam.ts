/**
 * What the library asks of a Redis client: the interfaces every adapter implements (ioredis.ts, node-redis.ts,
 * glide.ts) and the code above the seam uses. They live apart from adapter.ts, which picks the adapter and so
 * imports every adapter file; adapter.ts exports them again for the code above it.
 */
/** A script argument; numbers go as decimal strings, a Buffer as raw bytes (a permit id). */
export type ScriptArg = string | number | Buffer;

/** A Lua script as the runner sends it: by SHA1, and by its source when the server does not know it. */
export interface Script {
  readonly source: string;
  readonly sha1: string;
}

/** Classic pub/sub, or sharded pub/sub (SSUBSCRIBE/SPUBLISH) on a Redis 7+ Cluster. */
export type PubSubMode = 'classic' | 'sharded';

/** What the library's own subscriber reports. */
export interface SubscriberEvents {
  /** A message on `channel` (server-side name). */
  message(channel: string, message: string): void;
  /**
   * The subscriber reconnected, or its subscriptions moved (a failover, a slot migration): messages may
   * have been lost. `subscribed`: whether every subscription is in place again.
   */
  restored(subscribed: boolean): void;
  /** The subscriber's connection went down: no subscription is active until `restored`. */
  lost(): void;
}

/** The library's own pub/sub connection(s); its subscriptions are by server-side channel name. */
export interface Subscriber {
  /** Makes sure every channel of `channels` is subscribed (subscribing again is harmless). */
  subscribe(channels: readonly string[]): Promise<void>;
  unsubscribe(channels: readonly string[]): Promise<void>;
  /** Closes what the adapter opened for it; nothing it does afterwards reaches the events. */
  close(): void;
}

/** The connection to the master of one slot, for WAIT: it must be the one that carried the grant. */
export interface MasterConnection {
  /** How often it closed so far: a WAIT on a connection that closed since the grant proves nothing. */
  readonly closes: number;
  wait(replicas: number, timeoutMs: number): Promise<number>;
}

/**
 * A command of `flowlock/admin`: its name and arguments. In a batch, the first argument (if any) is the
 * command's key, named as the server knows it (the adapter removes the client's keyPrefix where the client
 * would put it back).
 */
export type AdminCommand = readonly [name: string, ...args: (string | number)[]];

/** One reply of a batch, or the error the server answered to that one command. */
export interface AdminReply {
  readonly value?: unknown;
  readonly error?: Error;
}

/** What an admin listening connection hears. */
export interface AdminListenerEvents {
  /** A message on `channel` (server-side name), whichever subscription (pattern, shard, channel) matched. */
  message(channel: string, message: string): void;
  /** The connection closed by itself (not through `close()`): nothing more will come. */
  closed(): void;
}

/** A connection of `flowlock/admin`'s own, to one node, for pub/sub; channels are server-side names. */
export interface AdminListener {
  psubscribe(patterns: readonly string[]): Promise<void>;
  /** Shard channels, all of one slot that this node serves. */
  ssubscribe(channels: readonly string[]): Promise<void>;
  subscribe(channels: readonly string[]): Promise<void>;
  /** Closes the connection; no event comes afterwards. */
  close(): void;
}

/** One server as `flowlock/admin` reads it: the standalone (or Sentinel-chosen) server, or a Cluster node. */
export interface AdminNode {
  /** `host:port`, for messages and to tell nodes apart. */
  readonly address: string;
  /** A keyless command on this node (INFO, TIME, SCAN, CONFIG GET, PUBSUB ...), replies as the server sends them. */
  call(command: AdminCommand): Promise<unknown>;
  /**
   * `commands` (each with its key first, if any) in one MULTI when `atomic` (they must share a slot), else one
   * pipeline; the replies of the indexes in `binary` as Buffers, the others as text.
   */
  batch(commands: readonly AdminCommand[], atomic: boolean, binary?: ReadonlySet<number>): Promise<AdminReply[]>;
  /** Opens a new connection to this node to listen on, without any keyPrefix. */
  listen(events: AdminListenerEvents): AdminListener;
}

/** The nodes of the user's client, as `flowlock/admin` reaches them (connected first where needed). */
export interface AdminNodes {
  /** The one server, or each master of a Cluster. */
  masters(): Promise<AdminNode[]>;
  /** Every node, replicas included (classic pub/sub subscribers may sit on any of them). */
  all(): Promise<AdminNode[]>;
  /** The master of `key`'s slot (the one server off a Cluster). */
  masterOf(key: string): Promise<AdminNode>;
  /** The database the client uses (keyspace notifications are per database; a Cluster has only 0). */
  readonly database: number;
}

export interface RedisAdapter {
  /** The client library, for messages. */
  readonly library: 'ioredis' | 'node-redis' | 'glide';
  readonly topology: 'standalone' | 'cluster' | 'sentinel';
  /** The prefix the user's client puts before every key ('' if none). */
  readonly keyPrefix: string;
  /** Whether this client can subscribe to shard channels (iovalkey's Cluster cannot). */
  readonly shardedPubSub: boolean;

  /**
   * EVALSHA routed by `keys[0]`, and EVAL of the same script on the same route when the server answers
   * NOSCRIPT (never SCRIPT LOAD: on a Cluster it may reach another node than the call). `direct`: EVAL at
   * once. The reply is decoded with the client's default types, whatever the user configured.
   */
  evalScript(script: Script, keys: readonly string[], args: readonly ScriptArg[], direct: boolean): Promise<unknown>;
  get(key: string): Promise<string | null>;
  hget(key: string, field: string): Promise<string | null>;
  hgetall(key: string): Promise<Record<string, string>>;
  exists(key: string): Promise<boolean>;
  pttl(key: string): Promise<number>;
  /** INFO `section` of any master. */
  info(section: string): Promise<string>;
  /**
   * 'ready': commands go out now; 'connecting': the client is opening its connection (node-redis cannot tell
   * a reconnect from it); 'down': closed, or reconnecting after its connection failed.
   */
  readiness(): 'ready' | 'connecting' | 'down';
  /** Whether `error` says the client gave up following a Cluster's redirections (the script did not run). */
  isRedirection(error: unknown): boolean;
  /**
   * Whether `error` says the client gave up on a call it had written when its connection closed, so that the
   * call may have run (node-redis; ioredis sends such calls again by itself, and so never says so).
   */
  isLostReply(error: unknown): boolean;
  /** The connection to the master of `key`'s slot; undefined while a Cluster client knows no slots yet. */
  masterConnection(key: string): MasterConnection | undefined;
  /**
   * Calls `listener` once the user's client has ended (quit, closed, disconnected, or given up reconnecting):
   * nothing sent through it will be answered any more. Removed by `dispose()`.
   */
  onEnd(listener: () => void): void;
  /** Whether the user's client has ended (see `onEnd`). */
  hasEnded(): boolean;
  /** Opens the library's own subscriber (a connection of the client's kind, which the adapter closes). */
  openSubscriber(mode: PubSubMode, events: SubscriberEvents): Subscriber;
  /** Removes every listener the adapter put on the user's client (the client itself stays open). */
  dispose(): void;
  /** The client's nodes for `flowlock/admin`, which scans and listens node by node. */
  adminNodes(): AdminNodes;
}
