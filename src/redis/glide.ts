/**
 * The adapter for Valkey GLIDE 2.x (`@valkey/valkey-glide`): `GlideClient` (standalone) and
 * `GlideClusterClient`. Every call is a `customCommand`, routed on a cluster to the primary of its key's slot;
 * scripts go by EVALSHA and, on GLIDE's `NoScriptError`, by EVAL on the same route (shared.ts).
 *
 * What GLIDE lacks, and how this file makes up for it:
 * - No connection events. The client's end is learnt from a ClosingError; its readiness from the last call's
 *   outcome; a reconnect under WAIT from the connection's CLIENT ID (see CheckedMaster in shared.ts); lost subscriptions from
 *   `getSubscriptions()` and the core's resubscription time (see GlideSubscriber).
 * - No `duplicate()`, and the message callback is fixed when a client is created: the library's subscriber
 *   is a client of its own, made by the user's `glideSubscriber` factory, or else from the creation config
 *   the user's client keeps (GLIDE's `config` field, private in its types, as BullMQ's GLIDE adapter reads it).
 * - `requestTimeout` (250 ms by default) rejects a call the server may still run: a TimeoutError is an
 *   unknown outcome, as a reply lost to a closed connection is (the scripts are idempotent per request id).
 * - No keyPrefix (it is '') and no Sentinel.
 * - No connection to a replica unless the client reads from replicas, and no way to pin a client's pub/sub to
 *   one node: `flowlock/admin` reaches replicas, and listens on a node, through standalone clients of its own
 *   (see GlideNodes).
 *
 * `@valkey/valkey-glide` is loaded at run time only for what only it makes, batches and those clients of
 * `flowlock/admin`'s own (see loadGlide); its types otherwise.
 */
import type * as Glide from '@valkey/valkey-glide';
import type {
  Decoder,
  DecoderOption,
  GlideClient,
  GlideClientConfiguration,
  GlideClusterClient,
  GlideClusterClientConfiguration,
  GlideReturnType,
  GlideString,
  PubSubMsg,
  RouteByAddress,
} from '@valkey/valkey-glide';
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
import { bySha, checkedMaster, replicasIn, type CheckedMaster } from './shared.js';
import { monotonicNow, promiseOf } from '../time.js';

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

/**
 * NodeDiscoveryMode.Static (an enum of the package): a standalone client then takes its one address for its
 * primary, replica or not. Otherwise it refuses a replica, and once made read-only for one, it subscribes nowhere.
 */
const STATIC_DISCOVERY = 1;

/**
 * Decoder.Bytes (an enum of the package): admin replies come as bytes, made text here except those asked for
 * as binary (a text decoder fails on bytes that are not UTF-8).
 */
const BYTES = 0 as unknown as Decoder;

/**
 * Decoder.String: the library's own calls ask for text whatever `defaultDecoder` the user gave the client
 * (with Decoder.Bytes every reply came as a Buffer, and a held write lock's mode compared unequal to 'write').
 */
const STRING = 1 as unknown as Decoder;

/**
 * How long a client whose call failed for want of a connection counts as down before its next call probes it
 * (a quorum node that is down is sent nothing: without the probe it stayed down for good, issue 38).
 */
const DOWN_PROBE_MS = 1000;

/** How long one SUBSCRIBE (or unsubscribe) may wait for the server's confirmation. */
const SUBSCRIBE_TIMEOUT_MS = 5000;
/** The longest close() lets the unsubscribe before it take (a server that does not answer: it closes anyway). */
const UNSUBSCRIBE_AT_CLOSE_MS = 1000;

/**
 * How often the subscriber compares the channels it subscribed with those GLIDE has on the server: a
 * reconnect drops them until GLIDE's core subscribes again (within about 250 ms, its reconciliation).
 */
const SUBSCRIPTIONS_CHECK_MS = 100;

/**
 * How often at most the subscriber asks its connections' CLIENT IDs: when GLIDE's core synchronised the
 * subscriptions (which it does every 3 s, for every client's subscribe, and after a reconnect). The 3 s sync
 * bounds how late a reconnect that no check of the subscriptions saw is noticed.
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
  readonly #argument: string;
  readonly #createSubscriber: (pubsub: PubSubConfig) => Promise<Client>;
  /** MasterConnection per slot on a cluster (GLIDE shows no slot map), one on a standalone client. */
  readonly #masters = new Map<number, CheckedMaster>();
  #onEnd: (() => void) | undefined;
  #ended = false;
  /**
   * Monotonic ms when the last call failed for want of a connection (GLIDE reconnects by itself, and says
   * nothing); undefined once a call succeeded. Only calls tell, so the node is taken for down for
   * DOWN_PROBE_MS after such a failure and then asked again: the next call is the probe.
   */
  #downSince: number | undefined;
  /** The scripts this client has sent by EVAL once (see evalScript). */
  readonly #evaluated = new Set<string>();

  constructor(client: unknown, argument: string, subscriberFactory: unknown) {
    if (subscriberFactory !== undefined && typeof subscriberFactory !== 'function') {
      throw new TypeError(`options.glideSubscriber must be a function, got ${typeof subscriberFactory}`);
    }
    this.#client = client as Client;
    this.#argument = argument;
    this.topology = isClusterClient(this.#client) ? 'cluster' : 'standalone';
    this.shardedPubSub = this.topology === 'cluster';
    this.#createSubscriber = subscriberFactory
      ? (subscriberFactory as (pubsub: PubSubConfig) => Promise<Client>)
      : fromCreationConfig(this.#client, argument);
  }

  evalScript(script: Script, keys: readonly string[], args: readonly ScriptArg[], direct: boolean): Promise<unknown> {
    const tail = [String(keys.length), ...keys, ...args.map(toArg)];
    const route = keys[0];
    // GLIDE's core logs a WARN line for every error reply, NOSCRIPT included, into the user's logs: a script's
    // first call from this client goes by EVAL (which caches it on the server), so that a new process meets
    // no NOSCRIPT (a restarted server or another Cluster node still may, once per script).
    const first = !this.#evaluated.has(script.sha1);
    if (first) this.#evaluated.add(script.sha1);
    return bySha(
      direct || first,
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
    if (this.#ended) return 'down';
    return this.#downSince !== undefined && monotonicNow() - this.#downSince < DOWN_PROBE_MS ? 'down' : 'ready';
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
      // WAIT goes on the connection that carries the slot's scripts (GLIDE multiplexes every call to a node on
      // one connection), and GLIDE tells no reconnect: the connection's identity tells it (CheckedMaster).
      const send = (args: string[]): Promise<unknown> =>
        this.#send(args, this.topology === 'cluster' ? key : undefined);
      master = checkedMaster(send);
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

  adminNodes(): AdminNodes {
    return new GlideNodes(this.#client, this.#argument, this.#createSubscriber);
  }

  /** One command; on a cluster to the primary of `routeKey`'s slot. */
  #send(args: GlideString[], routeKey: string | undefined): Promise<GlideReturnType> {
    // Not async: one reaction per command on top of GLIDE's own promise (every script call comes here).
    const client = this.#client;
    const sent = promiseOf(() =>
      isClusterClient(client) && routeKey !== undefined
        ? client.customCommand(args, { route: { type: 'primarySlotKey', key: routeKey }, decoder: STRING })
        : client.customCommand(args, { decoder: STRING }),
    );
    return sent.then(
      (reply) => {
        this.#downSince = undefined;
        return reply;
      },
      (error: unknown) => {
        const name = errorName(error);
        if (name === 'ConnectionError') this.#downSince = monotonicNow();
        if (name === 'ClosingError' && !this.#ended) {
          this.#ended = true;
          this.#onEnd?.();
        }
        throw error;
      },
    );
  }
}

/**
 * The creation config the client keeps in its `config` field (private in GLIDE's types, as BullMQ's GLIDE
 * adapter reads it); undefined if it shows none.
 */
function creationConfig(client: Client): GlideClientConfiguration | GlideClusterClientConfiguration | undefined {
  const config = (client as unknown as { config?: GlideClientConfiguration | GlideClusterClientConfiguration }).config;
  return typeof config === 'object' ? config : undefined;
}

/**
 * A subscriber factory from the creation config the user's client keeps: a client of its class on the same
 * servers and credentials, on RESP3, connected at once. Without that config, a TypeError that names the
 * option which replaces it.
 */
function fromCreationConfig(client: Client, argument: string): (pubsub: PubSubConfig) => Promise<Client> {
  return (pubsub) => {
    const config = creationConfig(client);
    const create = (client.constructor as { createClient?: (config: object) => Promise<Client> }).createClient;
    if (!config || typeof create !== 'function') {
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

/** A client from a subscriber factory, which may throw, or resolve to anything. */
function subscriberClient(create: (pubsub: PubSubConfig) => Promise<unknown>, pubsub: PubSubConfig): Promise<Client> {
  return Promise.resolve()
    .then(() => create(pubsub))
    .then((client) => {
      if (!isGlide(client)) throw new TypeError('options.glideSubscriber must resolve to a GLIDE client');
      return client as Client;
    });
}

/**
 * The library's own GLIDE client for pub/sub, created with the message callback. GLIDE subscribes again by
 * itself after a reconnect and tells nobody; this reports, from `getSubscriptions()` every
 * SUBSCRIPTIONS_CHECK_MS, a confirmed channel missing on the server (`lost`) and its return (`restored`). A
 * reconnect that no check saw (short, or in a process too busy to run the checks) may still have lost
 * messages: it moves the core's last subscription sync time, which this then follows up with the connections'
 * CLIENT IDs, first asked before the client's first SUBSCRIBE (a new connection has a new id; the sync time is
 * the process's, and moves for every GLIDE client's subscribe too). A creation that failed is tried again at
 * the next subscribe call.
 */
class GlideSubscriber implements Subscriber {
  readonly #create: (pubsub: PubSubConfig) => Promise<unknown>;
  readonly #pubsub: PubSubConfig;
  /** The client, being created; created again at the next subscribe call once a creation failed. */
  #connection: Promise<Client>;
  #creationFailed = false;
  /** The first look at the client's connections, before its first SUBSCRIBE. */
  #baseline: Promise<void> | undefined;
  readonly #mode: PubSubMode;
  readonly #events: SubscriberEvents;
  /** Channels subscribed or being subscribed. */
  readonly #channels = new Set<string>();
  /** Channels whose subscribe call succeeded (only those can be missed on the server). */
  readonly #confirmed = new Set<string>();
  /** Unsubscribe calls in flight, by channel: a subscribe to the same channel waits for its outcome. */
  readonly #leaving = new Map<string, Promise<void>>();
  #timer: NodeJS.Timeout | undefined;
  #lost = false;
  #syncedAt: string | undefined;
  /**
   * The CLIENT IDs of the subscriber's connections, as last seen (undefined: not known, the first look having
   * failed), and when they were asked for.
   */
  #connectionIds: string | undefined;
  #connectionCheckedAt = -Infinity;
  #checking = false;
  #closed = false;

  constructor(create: (pubsub: PubSubConfig) => Promise<unknown>, mode: PubSubMode, events: SubscriberEvents) {
    this.#create = create;
    this.#mode = mode;
    this.#events = events;
    this.#pubsub = {
      channelsAndPatterns: {},
      callback: (message) => {
        if (!this.#closed) this.#events.message(String(message.channel), String(message.message));
      },
    };
    this.#connection = this.#created();
  }

  /** Creates the client (a factory that throws rejects the subscribe calls rather than this constructor). */
  #created(): Promise<Client> {
    const connection = subscriberClient(this.#create, this.#pubsub);
    this.#baseline = undefined;
    // A client created after close() is closed at once; a failed creation fails the subscribe calls until the
    // next one, which creates the client again (a server down for a moment failed it for good, issue 38).
    connection.then(
      (client) => {
        if (this.#closed) client.close();
      },
      () => {
        if (this.#connection === connection) this.#creationFailed = true;
      },
    );
    return connection;
  }

  async subscribe(channels: readonly string[]): Promise<void> {
    const fresh = channels.filter((channel) => !this.#channels.has(channel));
    if (fresh.length === 0) return;
    for (const channel of fresh) this.#channels.add(channel);
    let sent: string[] = [];
    try {
      // GLIDE's core answers a subscribe as soon as it counts the channel subscribed, and an UNSUBSCRIBE
      // still in flight leaves it counted: the call returned at once, the UNSUBSCRIBE then took the channel
      // away on the server, and the core subscribed it again only seconds later (not within 6 s in the
      // GLIDE model, whose waiters slept out the holder's lease meanwhile). So subscribe after it.
      for (;;) {
        const leaving = fresh.flatMap((channel) => this.#leaving.get(channel) ?? []);
        if (leaving.length === 0) break;
        await Promise.allSettled(leaving);
      }
      if (this.#creationFailed && !this.#closed) {
        this.#creationFailed = false;
        this.#connection = this.#created();
      }
      const client = await this.#connection;
      // The connections as they are before any SUBSCRIBE: a reconnect from then on changes an id, and moves
      // the sync time past the one read here.
      if (!this.#baseline) this.#syncedAt = syncTime(client);
      this.#baseline ??= connectionIds(client, this.#mode).then(
        (ids) => {
          this.#connectionIds = ids;
        },
        () => undefined,
      );
      await this.#baseline;
      if (this.#closed) return;
      // A channel unsubscribed while this call waited is no longer wanted: that UNSUBSCRIBE went to GLIDE
      // first, and a SUBSCRIBE after it would leave the channel subscribed with no queue.
      sent = fresh.filter((channel) => this.#channels.has(channel));
      if (sent.length > 0) {
        await (this.#mode === 'sharded' && isClusterClient(client)
          ? client.ssubscribe(new Set(sent), SUBSCRIBE_TIMEOUT_MS)
          : client.subscribe(new Set(sent), SUBSCRIBE_TIMEOUT_MS));
      }
    } catch (error) {
      // Asked for again by the next subscribe call.
      for (const channel of fresh) this.#channels.delete(channel);
      // GLIDE's core keeps wanting a channel whose subscribe timed out, and its SUBSCRIBE may still reach the
      // server: withdrawn, or it would stay subscribed with nobody listening (in the background: the
      // caller's error stands; a subscribe of the same channel waits for it).
      if (sent.length > 0) this.#withdraw(sent).catch(() => undefined);
      throw error;
    }
    const client = await this.#connection;
    // A channel unsubscribed meanwhile was unsubscribed after this call (GLIDE keeps the order).
    for (const channel of sent) if (this.#channels.has(channel)) this.#confirmed.add(channel);
    this.#watch(client);
  }

  async unsubscribe(channels: readonly string[]): Promise<void> {
    const known = channels.filter((channel) => this.#channels.delete(channel));
    if (known.length === 0) return;
    await this.#withdraw(known);
  }

  /** Unsubscribes `channels` (no longer in #channels), which subscribe calls of the same channels wait for. */
  #withdraw(channels: readonly string[]): Promise<void> {
    for (const channel of channels) this.#confirmed.delete(channel);
    const done = this.#connection.then((client) =>
      this.#closed ? undefined : this.#unsubscribeOn(client, new Set(channels), SUBSCRIBE_TIMEOUT_MS),
    );
    for (const channel of channels) this.#leaving.set(channel, done);
    // Registered first, so this runs before any subscribe that waits for `done` looks again.
    const forget = (): void => {
      for (const channel of channels) if (this.#leaving.get(channel) === done) this.#leaving.delete(channel);
    };
    done.then(forget, forget);
    return done;
  }

  /** UNSUBSCRIBE, or SUNSUBSCRIBE for a cluster's shard channels, waiting at most `timeoutMs`. */
  #unsubscribeOn(client: Client, channels: Set<string>, timeoutMs: number): Promise<void> {
    return this.#mode === 'sharded' && isClusterClient(client)
      ? client.sunsubscribe(channels, timeoutMs)
      : client.unsubscribe(channels, timeoutMs);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    // GLIDE's close() leaves the connections to its core, which drops them up to 3 s later: unsubscribed
    // first, the channels stop counting this subscriber (PUBSUB NUMSUB, the CLI's waiters) at once.
    const channels = new Set(this.#channels);
    this.#channels.clear();
    this.#confirmed.clear();
    this.#connection.then(
      async (client) => {
        if (channels.size > 0) {
          await this.#unsubscribeOn(client, channels, UNSUBSCRIBE_AT_CLOSE_MS).catch(() => undefined);
        }
        client.close();
      },
      () => undefined,
    );
  }

  /** Read through a call: TypeScript would keep a check made before an await narrowed after it. */
  #isClosed(): boolean {
    return this.#closed;
  }

  /** Starts the subscription checks (once). */
  #watch(client: Client): void {
    if (this.#timer || this.#closed) return;
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
    // The core syncs every 3 s, and for every subscribe call (ours too): while a channel is subscribed, one
    // CLIENT ID round trip each time. With none, nothing can be missed; the ids are compared at the next sync.
    const syncedAt = syncTime(client);
    if (syncedAt === this.#syncedAt || this.#confirmed.size === 0) return;
    // Left unseen until the next check: at most one CLIENT ID round trip per CONNECTION_CHECK_MS.
    if (performance.now() - this.#connectionCheckedAt < CONNECTION_CHECK_MS) return;
    this.#syncedAt = syncedAt;
    this.#connectionCheckedAt = performance.now();
    const ids = await connectionIds(client, this.#mode);
    if (this.#isClosed() || ids === this.#connectionIds) return;
    // A new connection (or the first look failed, with one dropped then): messages may have been lost.
    this.#connectionIds = ids;
    this.#events.restored(true);
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
  const pairs = byNode(reply).map(([address, id]) => [address, String(id)]);
  return JSON.stringify(pairs.sort(([a = ''], [b = '']) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** A reply of several nodes, one per node address, in no fixed order (a record, or a list of {key, value}). */
function byNode(reply: unknown): [string, unknown][] {
  return Array.isArray(reply)
    ? (reply as { key: unknown; value: unknown }[]).map(({ key, value }) => [String(key), value])
    : Object.entries(reply as Record<string, unknown>);
}

/** When GLIDE's core last synchronised subscriptions with the servers (any client of the process). */
function syncTime(client: Client): string | undefined {
  const statistics = client.getStatistics() as Record<string, unknown>;
  const value = statistics['subscription_last_sync_timestamp'];
  return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
}

let glideModule: Promise<typeof Glide> | undefined;

/**
 * The package, for its batch classes and its standalone client: loaded when first needed (whoever has a GLIDE
 * client has it installed), once.
 */
function loadGlide(): Promise<typeof Glide> {
  glideModule ??= import('@valkey/valkey-glide');
  return glideModule;
}

/** A node's host and port, as GLIDE routes to it. */
interface Endpoint {
  readonly host: string;
  readonly port: number;
}

/** `host:port`, split at its last colon (the host may be an IPv6 address). */
function endpointOf(address: string): Endpoint {
  const colon = address.lastIndexOf(':');
  return { host: address.slice(0, colon), port: Number(address.slice(colon + 1)) };
}

function routeTo({ host, port }: Endpoint): RouteByAddress {
  return { type: 'routeByAddress', host, port };
}

/**
 * A standalone client of `flowlock/admin`'s own on one node (primary or replica) of the user's cluster, from
 * the creation config its client keeps.
 */
async function nodeClient(
  client: GlideClusterClient,
  argument: string,
  node: Endpoint,
  pubsub: PubSubConfig | undefined,
): Promise<GlideClient> {
  const config = creationConfig(client);
  if (!config) {
    throw new TypeError(
      `${argument} does not show its creation config: flowlock/admin cannot connect to ${node.host}:${node.port}`,
    );
  }
  const { GlideClient } = await loadGlide();
  // The cluster's credentials, TLS and timeouts; none of its subscriptions, whose callback is the user's.
  const settings: object = {
    ...config,
    addresses: [{ host: node.host, port: node.port }],
    nodeDiscoveryMode: STATIC_DISCOVERY,
    protocol: RESP3,
    lazyConnect: false,
    pubsubSubscriptions: pubsub,
  };
  return GlideClient.createClient(settings as GlideClientConfiguration);
}

/**
 * A reply decoded with Decoder.Bytes, as text (or kept binary), with RESP3 maps (GLIDE's lists of {key,
 * value}) as lists of pairs, which callers read as they read other clients' maps.
 */
function decoded(reply: unknown, binary: boolean): unknown {
  if (Buffer.isBuffer(reply)) return binary ? reply : reply.toString();
  if (!Array.isArray(reply)) return reply;
  return reply.map((item: unknown) =>
    typeof item === 'object' && item !== null && 'key' in item && 'value' in item
      ? [decoded(item.key, binary), decoded(item.value, binary)]
      : decoded(item, binary),
  );
}

/**
 * Runs `work` on a client that reaches the node: the user's client, with the route to the node on a cluster,
 * or a client of the node's own.
 */
type Reach = <T>(work: (client: Client, route: RouteByAddress | undefined) => Promise<T>) => Promise<T>;

/** Creates a client to listen with, given its pub/sub config (GLIDE takes the message callback only so). */
type OpenListener = (pubsub: PubSubConfig) => Promise<Client>;

/** The options of a call on a cluster client: to the node, decoded as bytes (see BYTES). */
function decoding(route: RouteByAddress | undefined): DecoderOption & { route?: RouteByAddress } {
  return route ? { route, decoder: BYTES } : { decoder: BYTES };
}

/**
 * The nodes of a GLIDE client for `flowlock/admin`. Standalone: the client itself. Cluster: the primaries as
 * GLIDE routes to them (its replies from every primary name each node by the address it routes by), each
 * reached through the user's client; and the replicas that CLUSTER NODES lists, which the user's client has
 * no connection to unless it reads from replicas: each call to one opens a standalone client, and closes it.
 * Listening takes clients of its own (see GlideListener).
 */
class GlideNodes implements AdminNodes {
  readonly database: number;
  readonly #client: Client;
  readonly #argument: string;
  readonly #createSubscriber: (pubsub: PubSubConfig) => Promise<unknown>;

  constructor(client: Client, argument: string, createSubscriber: (pubsub: PubSubConfig) => Promise<unknown>) {
    this.#client = client;
    this.#argument = argument;
    this.#createSubscriber = createSubscriber;
    this.database = isClusterClient(client) ? 0 : (creationConfig(client)?.databaseId ?? 0);
  }

  async masters(): Promise<AdminNode[]> {
    const client = this.#client;
    if (!isClusterClient(client)) return [this.#standalone()];
    return [...(await this.#primaries(client)).values()].map((node) => this.#primary(client, node));
  }

  async all(): Promise<AdminNode[]> {
    const client = this.#client;
    if (!isClusterClient(client)) return [this.#standalone()];
    const primaries = [...(await this.#primaries(client)).values()];
    const [asked] = primaries;
    if (!asked) return [];
    const nodes = new Map(primaries.map((node) => [`${node.host}:${node.port}`, this.#primary(client, node)]));
    // Not from CLUSTER SLOTS (see replicasIn).
    const reply = await client.customCommand(['CLUSTER', 'NODES'], decoding(routeTo(asked)));
    for (const replica of replicasIn(String(decoded(reply, false)))) {
      const address = `${replica.host}:${replica.port}`;
      if (!nodes.has(address)) nodes.set(address, this.#replica(client, replica));
    }
    return [...nodes.values()];
  }

  async masterOf(key: string): Promise<AdminNode> {
    const client = this.#client;
    if (!isClusterClient(client)) return this.#standalone();
    // The primary GLIDE sends `key`'s commands to, told by its id.
    const [primaries, id] = await Promise.all([
      this.#primaries(client),
      client.customCommand(['CLUSTER', 'MYID'], { route: { type: 'primarySlotKey', key }, decoder: BYTES }),
    ]);
    const node = primaries.get(String(decoded(id, false)));
    if (!node) throw new Error(`no master known for the slot of ${key}`);
    return this.#primary(client, node);
  }

  /** The primaries GLIDE routes to, by node id. */
  async #primaries(client: GlideClusterClient): Promise<Map<string, Endpoint>> {
    const reply = await client.customCommand(['CLUSTER', 'MYID'], { route: 'allPrimaries', decoder: BYTES });
    return new Map(byNode(reply).map(([address, id]) => [String(decoded(id, false)), endpointOf(address)]));
  }

  #standalone(): AdminNode {
    const client = this.#client;
    const [first] = creationConfig(client)?.addresses ?? [];
    return new GlideNode(
      first ? `${first.host}:${first.port ?? 6379}` : 'unknown',
      (work) => work(client, undefined),
      (pubsub) => subscriberClient(this.#createSubscriber, pubsub),
      undefined,
    );
  }

  #primary(client: GlideClusterClient, node: Endpoint): AdminNode {
    const route = routeTo(node);
    return new GlideNode(
      `${node.host}:${node.port}`,
      (work) => work(client, route),
      (pubsub) => nodeClient(client, this.#argument, node, pubsub),
      (pubsub) => subscriberClient(this.#createSubscriber, pubsub),
    );
  }

  #replica(client: GlideClusterClient, node: Endpoint): AdminNode {
    return new GlideNode(
      `${node.host}:${node.port}`,
      async (work) => {
        const own = await nodeClient(client, this.#argument, node, undefined);
        try {
          return await work(own, undefined);
        } finally {
          own.close();
        }
      },
      (pubsub) => nodeClient(client, this.#argument, node, pubsub),
      (pubsub) => subscriberClient(this.#createSubscriber, pubsub),
    );
  }
}

/** One node of a GLIDE client: how to reach it, and how to open clients to listen on it. */
class GlideNode implements AdminNode {
  readonly address: string;
  readonly #reach: Reach;
  readonly #openClassic: OpenListener;
  /** A cluster client (it subscribes on the channels' slot owner); undefined on a standalone client. */
  readonly #openSharded: OpenListener | undefined;

  constructor(address: string, reach: Reach, openClassic: OpenListener, openSharded: OpenListener | undefined) {
    this.address = address;
    this.#reach = reach;
    this.#openClassic = openClassic;
    this.#openSharded = openSharded;
  }

  async call(command: AdminCommand): Promise<unknown> {
    const args = command.map(String);
    const reply = await this.#reach((client, route) =>
      isClusterClient(client)
        ? client.customCommand(args, decoding(route))
        : client.customCommand(args, { decoder: BYTES }),
    );
    return decoded(reply, false);
  }

  /** No keyPrefix to remove: GLIDE has none. One command's error is its reply (raiseOnError false). */
  async batch(commands: readonly AdminCommand[], atomic: boolean, binary?: ReadonlySet<number>): Promise<AdminReply[]> {
    const { Batch, ClusterBatch } = await loadGlide();
    const replies = await this.#reach((client, route) =>
      isClusterClient(client)
        ? client.exec(queued(new ClusterBatch(atomic), commands), false, decoding(route))
        : client.exec(queued(new Batch(atomic), commands), false, { decoder: BYTES }),
    );
    return (replies ?? []).map((reply, index) =>
      reply instanceof Error ? { error: reply } : { value: decoded(reply, binary?.has(index) ?? false) },
    );
  }

  listen(events: AdminListenerEvents): AdminListener {
    return new GlideListener(this.#openClassic, this.#openSharded, events);
  }
}

function queued<T extends { customCommand(args: GlideString[]): unknown }>(
  batch: T,
  commands: readonly AdminCommand[],
): T {
  for (const command of commands) batch.customCommand(command.map(String));
  return batch;
}

/**
 * A listening connection of `flowlock/admin`: a client created, with the message callback, at the first
 * subscribe of its kind: one on the node for channels and patterns, and on a cluster one for shard channels
 * (GLIDE's standalone client has none). GLIDE reconnects and subscribes again by itself, and tells of no end:
 * `closed` never comes.
 */
class GlideListener implements AdminListener {
  readonly #open: Readonly<Record<'classic' | 'sharded', OpenListener | undefined>>;
  readonly #clients: { classic?: Promise<Client>; sharded?: Promise<Client> } = {};
  readonly #pubsub: PubSubConfig;
  #closed = false;

  constructor(openClassic: OpenListener, openSharded: OpenListener | undefined, events: AdminListenerEvents) {
    this.#open = { classic: openClassic, sharded: openSharded };
    this.#pubsub = {
      channelsAndPatterns: {},
      callback: (message) => {
        if (!this.#closed) events.message(String(message.channel), String(message.message));
      },
    };
  }

  async psubscribe(patterns: readonly string[]): Promise<void> {
    const client = await this.#client('classic');
    await client?.psubscribe(new Set(patterns), SUBSCRIBE_TIMEOUT_MS);
  }

  async ssubscribe(channels: readonly string[]): Promise<void> {
    const client = await this.#client('sharded');
    if (client && !isClusterClient(client)) {
      throw new TypeError('options.glideSubscriber must resolve to a GlideClusterClient');
    }
    await client?.ssubscribe(new Set(channels), SUBSCRIBE_TIMEOUT_MS);
  }

  async subscribe(channels: readonly string[]): Promise<void> {
    const client = await this.#client('classic');
    await client?.subscribe(new Set(channels), SUBSCRIBE_TIMEOUT_MS);
  }

  /** Closes the clients, those still being created once they are. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const client of Object.values(this.#clients)) {
      client.then(
        (created) => created.close(),
        () => undefined,
      );
    }
  }

  /** Read through a call: TypeScript would keep a check made before an await narrowed after it. */
  #isClosed(): boolean {
    return this.#closed;
  }

  /** The client of `kind`, created at its first subscribe (a failed creation fails every one); none once closed. */
  async #client(kind: 'classic' | 'sharded'): Promise<Client | undefined> {
    if (this.#closed) return undefined;
    const open = this.#open[kind];
    if (!open) throw new Error("GLIDE's standalone client has no shard channels (SSUBSCRIBE)");
    const client = await (this.#clients[kind] ??= open(this.#pubsub));
    return this.#isClosed() ? undefined : client;
  }
}
