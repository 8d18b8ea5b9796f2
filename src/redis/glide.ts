/**
 * The adapter for Valkey GLIDE 2.x (`@valkey/valkey-glide`): `GlideClient` (standalone) and
 * `GlideClusterClient`. Every call is a `customCommand`, routed on a cluster to the primary of its key's slot;
 * scripts go by EVALSHA and, on GLIDE's `NoScriptError`, by EVAL on the same route (shared.ts).
 *
 * What GLIDE lacks, and how this file makes up for it:
 * - No connection events. The client's end is learnt from a ClosingError; its readiness from the last call's
 *   outcome; a reconnect under WAIT from the connection's CLIENT ID (see GlideMaster); lost subscriptions from
 *   `getSubscriptions()` and the core's resubscription time (see GlideSubscriber).
 * - No `duplicate()`, and the message callback is fixed when a client is created: the library's subscriber
 *   is a client of its own, made by the user's `glideSubscriber` factory, or else from the creation config
 *   the user's client keeps (GLIDE's `config` field, private in its types, as BullMQ's GLIDE adapter reads it).
 * - `requestTimeout` (250 ms by default) rejects a call the server may still run: a TimeoutError is an
 *   unknown outcome, as a reply lost to a closed connection is (the scripts are idempotent per request id).
 * - No keyPrefix (it is '') and no Sentinel.
 *
 * `@valkey/valkey-glide` is never imported at run time: its types only.
 */
import type {
  GlideClient,
  GlideClientConfiguration,
  GlideClusterClient,
  GlideClusterClientConfiguration,
  GlideReturnType,
  GlideString,
  PubSubMsg,
} from '@valkey/valkey-glide';
import type {
  MasterConnection,
  PubSubMode,
  RedisAdapter,
  Script,
  ScriptArg,
  Subscriber,
  SubscriberEvents,
} from './adapter.js';
import { keySlot } from './keys.js';
import { bySha } from './shared.js';

type Client = GlideClient | GlideClusterClient;

/**
 * The `pubsubSubscriptions` the library's subscriber client is created with (GLIDE takes its message callback
 * only so): no channel yet, and the callback. The public `options.glideSubscriber` factory receives it.
 */
interface PubSubConfig {
  readonly channelsAndPatterns: Record<string, never>;
  readonly callback: (message: PubSubMsg) => void;
}

/** GLIDE's shape: its `customCommand`, script objects and pub/sub state (no other client has these). */
export function isGlide(client: unknown): boolean {
  const candidate = client as Partial<
    Record<'customCommand' | 'invokeScript' | 'getSubscriptions' | 'getStatistics', unknown>
  > | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.customCommand === 'function' &&
    typeof candidate.invokeScript === 'function' &&
    typeof candidate.getSubscriptions === 'function' &&
    typeof candidate.getStatistics === 'function'
  );
}

/** A `GlideClusterClient`: only it routes scripts (`invokeScriptWithRoute`). */
function isClusterClient(client: Client): client is GlideClusterClient {
  return typeof (client as { invokeScriptWithRoute?: unknown }).invokeScriptWithRoute === 'function';
}

/** GLIDE's error classes, told by name: the package is not loaded here to compare classes. */
function errorName(error: unknown): string {
  return error instanceof Error ? error.name : '';
}

/** GLIDE names the server's error kind: "An error was signalled by the server: - TryAgain: ...". */
const REDIRECTION = /- (Moved|Ask|TryAgain|ClusterDown):/;

/** ProtocolVersion.RESP3 (an enum of the package, which is not loaded here): pub/sub needs it. */
const RESP3 = 0;

/** How long one SUBSCRIBE (or unsubscribe) may wait for the server's confirmation. */
const SUBSCRIBE_TIMEOUT_MS = 5000;

/**
 * How often the subscriber compares the channels it subscribed with those GLIDE has on the server: a
 * reconnect drops them until GLIDE's core subscribes again (within about 250 ms, its reconciliation).
 */
const SUBSCRIPTIONS_CHECK_MS = 100;

/**
 * How often at most the subscriber asks its connections' CLIENT IDs: when GLIDE's core synchronised the
 * subscriptions (which it does every 3 s, for every client's subscribe, and after a reconnect).
 */
const CONNECTION_CHECK_MS = 1000;

function toArg(arg: ScriptArg): GlideString {
  return typeof arg === 'number' ? String(arg) : arg;
}

export class GlideAdapter implements RedisAdapter {
  readonly library = 'glide';
  readonly topology: RedisAdapter['topology'];
  /** GLIDE has no keyPrefix. */
  readonly keyPrefix = '';
  readonly shardedPubSub: boolean;
  readonly #client: Client;
  readonly #createSubscriber: (pubsub: PubSubConfig) => Promise<Client>;
  /** MasterConnection per slot on a cluster (GLIDE shows no slot map), one on a standalone client. */
  readonly #masters = new Map<number, GlideMaster>();
  #onEnd: (() => void) | undefined;
  #ended = false;
  /** The last call failed for want of a connection (GLIDE reconnects by itself, and says nothing). */
  #down = false;

  constructor(client: unknown, argument: string, subscriberFactory: unknown) {
    if (subscriberFactory !== undefined && typeof subscriberFactory !== 'function') {
      throw new TypeError(`options.glideSubscriber must be a function, got ${typeof subscriberFactory}`);
    }
    this.#client = client as Client;
    this.topology = isClusterClient(this.#client) ? 'cluster' : 'standalone';
    this.shardedPubSub = this.topology === 'cluster';
    this.#createSubscriber = subscriberFactory
      ? (subscriberFactory as (pubsub: PubSubConfig) => Promise<Client>)
      : fromCreationConfig(this.#client, argument);
  }

  evalScript(script: Script, keys: readonly string[], args: readonly ScriptArg[], direct: boolean): Promise<unknown> {
    const tail = [String(keys.length), ...keys, ...args.map(toArg)];
    const route = keys[0];
    return bySha(
      direct,
      () => this.#send(['EVALSHA', script.sha1, ...tail], route),
      () => this.#send(['EVAL', script.source, ...tail], route),
    );
  }

  async get(key: string): Promise<string | null> {
    return (await this.#send(['GET', key], key)) as string | null;
  }

  async hget(key: string, field: string): Promise<string | null> {
    return (await this.#send(['HGET', key, field], key)) as string | null;
  }

  async hgetall(key: string): Promise<Record<string, string>> {
    // RESP3 maps come as a list of {key, value}; RESP2 (the user's choice) as a flat list.
    const reply = (await this.#send(['HGETALL', key], key)) as unknown[];
    const hash: Record<string, string> = {};
    if (reply.every((item) => typeof item === 'object' && item !== null && 'key' in item)) {
      for (const { key: field, value } of reply as { key: unknown; value: unknown }[]) {
        hash[String(field)] = String(value);
      }
    } else {
      for (let i = 0; i + 1 < reply.length; i += 2) hash[String(reply[i])] = String(reply[i + 1]);
    }
    return hash;
  }

  async exists(key: string): Promise<boolean> {
    return Number(await this.#send(['EXISTS', key], key)) === 1;
  }

  async pttl(key: string): Promise<number> {
    return Number(await this.#send(['PTTL', key], key));
  }

  /** On a cluster, the master of an arbitrary slot (GLIDE's random node may be a replica). */
  async info(section: string): Promise<string> {
    return (await this.#send(['INFO', section], this.topology === 'cluster' ? 'flowlock' : undefined)) as string;
  }

  readiness(): 'ready' | 'connecting' | 'down' {
    return this.#ended || this.#down ? 'down' : 'ready';
  }

  isRedirection(error: unknown): boolean {
    return error instanceof Error && REDIRECTION.test(error.message);
  }

  /**
   * A ConnectionError (the connection broke with the call written; GLIDE does not send it again) or a
   * TimeoutError (`requestTimeout` ran out, and the server may still run the call).
   */
  isLostReply(error: unknown): boolean {
    const name = errorName(error);
    return name === 'ConnectionError' || name === 'TimeoutError';
  }

  masterConnection(key: string): MasterConnection {
    const slot = this.topology === 'cluster' ? keySlot(key) : 0;
    let master = this.#masters.get(slot);
    if (!master) {
      master = new GlideMaster((args) => this.#send(args, this.topology === 'cluster' ? key : undefined));
      this.#masters.set(slot, master);
    }
    return master;
  }

  /** GLIDE emits nothing: its end is seen when a call fails with ClosingError. */
  onEnd(listener: () => void): void {
    this.#onEnd = listener;
  }

  hasEnded(): boolean {
    return this.#ended;
  }

  openSubscriber(mode: PubSubMode, events: SubscriberEvents): Subscriber {
    return new GlideSubscriber(this.#createSubscriber, mode, events);
  }

  dispose(): void {
    this.#onEnd = undefined;
  }

  /** One command; on a cluster to the primary of `routeKey`'s slot. */
  async #send(args: GlideString[], routeKey: string | undefined): Promise<GlideReturnType> {
    const client = this.#client;
    try {
      const reply =
        isClusterClient(client) && routeKey !== undefined
          ? await client.customCommand(args, { route: { type: 'primarySlotKey', key: routeKey } })
          : await client.customCommand(args);
      this.#down = false;
      return reply;
    } catch (error) {
      const name = errorName(error);
      if (name === 'ConnectionError') this.#down = true;
      if (name === 'ClosingError' && !this.#ended) {
        this.#ended = true;
        this.#onEnd?.();
      }
      throw error;
    }
  }
}

/**
 * A subscriber factory from the creation config the user's client keeps: a client of its class on the same
 * servers and credentials, on RESP3, connected at once. Without that config, a TypeError that names the
 * option which replaces it.
 */
function fromCreationConfig(client: Client, argument: string): (pubsub: PubSubConfig) => Promise<Client> {
  return (pubsub) => {
    const config = (client as unknown as { config?: GlideClientConfiguration | GlideClusterClientConfiguration })
      .config;
    const create = (client.constructor as { createClient?: (config: object) => Promise<Client> }).createClient;
    if (typeof config !== 'object' || typeof create !== 'function') {
      return Promise.reject(
        new TypeError(
          `${argument} does not show its creation config: pass options.glideSubscriber to create the subscriber`,
        ),
      );
    }
    return create.call(client.constructor, {
      ...config,
      protocol: RESP3,
      lazyConnect: false,
      pubsubSubscriptions: pubsub,
    });
  };
}

/**
 * WAIT for one slot's primary, sent on the connection that carries the slot's scripts (GLIDE multiplexes
 * every call to a node on one connection). GLIDE tells no reconnect, so this learns it from the connection's
 * CLIENT ID, asked when it is first used (before the grant, on the same connection) and after every WAIT
 * (behind it, on the same connection): a new id means a new connection, which the WAIT proved nothing on.
 */
class GlideMaster implements MasterConnection {
  #closes = 0;
  #id: Promise<string | undefined>;
  readonly #send: (args: GlideString[]) => Promise<GlideReturnType>;

  constructor(send: (args: GlideString[]) => Promise<GlideReturnType>) {
    this.#send = send;
    this.#id = this.#clientId();
  }

  get closes(): number {
    return this.#closes;
  }

  async wait(replicas: number, timeoutMs: number): Promise<number> {
    const before = this.#id;
    const waited = this.#send(['WAIT', String(replicas), String(timeoutMs)]);
    // Awaited below, after the ids: a rejection meanwhile is not unhandled.
    waited.catch(() => undefined);
    // Sent right behind the WAIT, on the same connection: answered after it.
    this.#id = this.#clientId();
    const [previous, current] = await Promise.all([before, this.#id]);
    // Counted whether or not the WAIT failed: the next WAIT compares with the id asked for after this one.
    if (previous === undefined || current === undefined || previous !== current) this.#closes++;
    return Number(await waited);
  }

  #clientId(): Promise<string | undefined> {
    return this.#send(['CLIENT', 'ID']).then(
      (id) => String(id as number),
      () => undefined,
    );
  }
}

/**
 * The library's own GLIDE client for pub/sub, created with the message callback. GLIDE subscribes again by
 * itself after a reconnect; this reports, from `getSubscriptions()` every SUBSCRIPTIONS_CHECK_MS, a confirmed
 * channel missing on the server (`lost`) and its return (`restored`). A reconnect so short that no check saw
 * a channel missing may still have lost messages: it moves the core's last subscription sync time, which
 * this then follows up with the connections' CLIENT IDs (the sync time is the process's, and moves for every
 * GLIDE client's subscribe too; a new connection has a new id).
 */
class GlideSubscriber implements Subscriber {
  readonly #connection: Promise<Client>;
  readonly #mode: PubSubMode;
  readonly #events: SubscriberEvents;
  /** Channels subscribed or being subscribed. */
  readonly #channels = new Set<string>();
  /** Channels whose subscribe call succeeded (only those can be missed on the server). */
  readonly #confirmed = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #lost = false;
  /** Subscribe and unsubscribe calls in flight: the core's sync time moves for them. */
  #busy = 0;
  #syncedAt: string | undefined;
  /** The CLIENT IDs of the subscriber's connections, as last seen, and when they were asked for. */
  #connectionIds: string | undefined;
  #connectionCheckedAt = -Infinity;
  #checking = false;
  #closed = false;

  constructor(create: (pubsub: PubSubConfig) => Promise<unknown>, mode: PubSubMode, events: SubscriberEvents) {
    this.#mode = mode;
    this.#events = events;
    // Called now: a factory that throws rejects the subscribe calls rather than this constructor.
    this.#connection = Promise.resolve()
      .then(() =>
        create({
          channelsAndPatterns: {},
          callback: (message) => {
            if (!this.#closed) this.#events.message(String(message.channel), String(message.message));
          },
        }),
      )
      .then((client) => {
        if (!isGlide(client)) throw new TypeError('options.glideSubscriber must resolve to a GLIDE client');
        return client as Client;
      });
    // A client created after close() is closed at once; a failed creation fails the subscribe calls.
    this.#connection.then(
      (client) => {
        if (this.#closed) client.close();
      },
      () => undefined,
    );
  }

  async subscribe(channels: readonly string[]): Promise<void> {
    const fresh = channels.filter((channel) => !this.#channels.has(channel));
    if (fresh.length === 0) return;
    for (const channel of fresh) this.#channels.add(channel);
    try {
      const client = await this.#connection;
      if (this.#closed) return;
      await this.#call(client, () =>
        this.#mode === 'sharded' && isClusterClient(client)
          ? client.ssubscribe(new Set(fresh), SUBSCRIBE_TIMEOUT_MS)
          : client.subscribe(new Set(fresh), SUBSCRIBE_TIMEOUT_MS),
      );
    } catch (error) {
      // Asked for again by the next subscribe call.
      for (const channel of fresh) this.#channels.delete(channel);
      throw error;
    }
    const client = await this.#connection;
    // A channel unsubscribed meanwhile was unsubscribed after this call (GLIDE keeps the order).
    for (const channel of fresh) if (this.#channels.has(channel)) this.#confirmed.add(channel);
    this.#watch(client);
  }

  async unsubscribe(channels: readonly string[]): Promise<void> {
    const known = channels.filter((channel) => this.#channels.delete(channel));
    if (known.length === 0) return;
    for (const channel of known) this.#confirmed.delete(channel);
    const client = await this.#connection;
    if (this.#closed) return;
    await this.#call(client, () =>
      this.#mode === 'sharded' && isClusterClient(client)
        ? client.sunsubscribe(new Set(known), SUBSCRIBE_TIMEOUT_MS)
        : client.unsubscribe(new Set(known), SUBSCRIBE_TIMEOUT_MS),
    );
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#connection.then(
      (client) => client.close(),
      () => undefined,
    );
  }

  /** Read through a call: TypeScript would keep a check made before an await narrowed after it. */
  #isClosed(): boolean {
    return this.#closed;
  }

  /** A (un)subscribe call: the core's sync time it moves is ours, no sign of a reconnect. */
  async #call(client: Client, command: () => Promise<void>): Promise<void> {
    this.#busy++;
    try {
      await command();
    } finally {
      this.#busy--;
      if (this.#busy === 0) this.#syncedAt = syncTime(client);
    }
  }

  /** Starts the subscription checks (once). */
  #watch(client: Client): void {
    if (this.#timer || this.#closed) return;
    connectionIds(client, this.#mode).then(
      (ids) => {
        this.#connectionIds ??= ids;
      },
      () => undefined,
    );
    this.#timer = setInterval(() => {
      if (this.#checking || this.#closed) return;
      this.#checking = true;
      this.#check(client)
        .catch(() => undefined)
        .finally(() => {
          this.#checking = false;
        });
    }, SUBSCRIPTIONS_CHECK_MS);
    this.#timer.unref();
  }

  async #check(client: Client): Promise<void> {
    const state = await client.getSubscriptions();
    if (this.#closed) return;
    // PubSubChannelModes: Exact 0, Sharded 2 (a cluster's); the keys are enum values of the package.
    const actual = (state.actualSubscriptions as Partial<Record<number, Set<GlideString>>>)[
      this.#mode === 'sharded' ? 2 : 0
    ];
    const missing = [...this.#confirmed].some((channel) => !actual?.has(channel));
    if (missing) {
      if (!this.#lost) {
        this.#lost = true;
        this.#events.lost();
      }
      return;
    }
    if (this.#lost) {
      this.#lost = false;
      this.#events.restored(true);
      return;
    }
    const syncedAt = syncTime(client);
    if (syncedAt === this.#syncedAt || this.#busy > 0) return;
    // Left unseen until the next check: at most one CLIENT ID round trip per CONNECTION_CHECK_MS.
    if (performance.now() - this.#connectionCheckedAt < CONNECTION_CHECK_MS) return;
    this.#syncedAt = syncedAt;
    this.#connectionCheckedAt = performance.now();
    const ids = await connectionIds(client, this.#mode);
    if (this.#isClosed() || ids === this.#connectionIds) return;
    const reconnected = this.#connectionIds !== undefined;
    this.#connectionIds = ids;
    if (reconnected) this.#events.restored(true);
  }
}

/**
 * The CLIENT IDs of a subscriber's connections, as one string: its one connection, or on a cluster its
 * connection to every primary (shard channels) or every node (classic channels).
 */
async function connectionIds(client: Client, mode: PubSubMode): Promise<string> {
  if (!isClusterClient(client)) return JSON.stringify(await client.customCommand(['CLIENT', 'ID']));
  const reply = await client.customCommand(['CLIENT', 'ID'], {
    route: mode === 'sharded' ? 'allPrimaries' : 'allNodes',
  });
  // One id per node address, in no fixed order (a record, or a list of {key, value}): sorted by address.
  const pairs = Array.isArray(reply)
    ? (reply as { key: unknown; value: unknown }[]).map(({ key, value }) => [String(key), String(value)])
    : Object.entries(reply as Record<string, unknown>).map(([key, value]) => [key, String(value)]);
  return JSON.stringify(pairs.sort(([a = ''], [b = '']) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** When GLIDE's core last synchronised subscriptions with the servers (any client of the process). */
function syncTime(client: Client): string | undefined {
  const statistics = client.getStatistics() as Record<string, unknown>;
  const value = statistics['subscription_last_sync_timestamp'];
  return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
}
