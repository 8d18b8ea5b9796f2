/**
 * Helpers every adapter uses (ioredis.ts, node-redis.ts, glide.ts): the script runner's NOSCRIPT rule, the
 * Cluster redirections a client gives up on, key prefixes, and the connection check under WAIT. They live
 * apart from adapter.ts, which picks the adapter and so imports every adapter file.
 */
import type { MasterConnection } from './seam.js';

/**
 * Whether `error` is an ACL refusal: NOPERM for the command itself; inside a script, Redis 6.x and 7.0 say
 * "The user executing the script can't ..." and 7.2 and Valkey "ACL failure in script"; GLIDE names the
 * server's NOPERM "PermissionDenied".
 */
export function isPermissionDenial(error: unknown): boolean {
  return (
    error instanceof Error &&
    /^NOPERM |- PermissionDenied:|The user executing the script can't|ACL failure in script/.test(error.message)
  );
}

/**
 * Whether `error` is the server's refusal of a call whose keys lie in different hash slots: `CROSSSLOT ...`
 * (GLIDE: `... - CrossSlot: ...`). The call did not run.
 */
export function isCrossSlot(error: unknown): boolean {
  return error instanceof Error && /^CROSSSLOT |- CrossSlot:/.test(error.message);
}

/** An error's class: node-redis' errors keep the name "Error" (its TimeoutError has no message either). */
export function errorClass(error: Error): string {
  return error.name === 'Error' ? error.constructor.name : error.name;
}

/**
 * Whether `error` says the command got no answer from Redis, and how: `timeout` (the client's command
 * timeout: ioredis "Command timed out", node-redis' and GLIDE's TimeoutError) or `closed` (the connection is
 * closed or gave up: ioredis "Connection is closed." and MaxRetriesPerRequestError, node-redis'
 * ClientClosedError, ClientOfflineError, "Socket closed unexpectedly" and "Disconnects client" (a cluster
 * dropped the node's connection), GLIDE's ConnectionError and ClosingError); undefined for anything else (a
 * reply of the server's, a bug).
 */
export function unansweredBy(error: unknown): 'timeout' | 'closed' | undefined {
  if (!(error instanceof Error)) return undefined;
  const name = errorClass(error);
  if (name === 'TimeoutError' || /^Command timed out|^Socket timeout/.test(error.message)) return 'timeout';
  if (
    /^(ClientClosedError|ClientOfflineError|SocketClosedUnexpectedlyError|DisconnectsClientError|ConnectionError|ClosingError|MaxRetriesPerRequestError)$/.test(
      name,
    ) ||
    /^(Connection is closed|Stream isn't writeable|The client is closed|Socket closed unexpectedly|Disconnects client)/.test(
      error.message,
    )
  ) {
    return 'closed';
  }
  return undefined;
}

/** Whether `error` is the server's NOSCRIPT (the script cache was flushed, or this node never had it). */
function isNoScript(error: unknown): boolean {
  // GLIDE names the server's error by its kind: "An error was signalled by the server: - NoScriptError: ...".
  return error instanceof Error && /^NOSCRIPT|- NoScriptError:/i.test(error.message);
}

/**
 * The script runner's rule for every adapter: `evalsha()`, and `evaluate()` (EVAL, on the same route) when
 * the server answers NOSCRIPT; `evaluate()` at once when `direct`.
 */
export function bySha(
  direct: boolean,
  evalsha: () => Promise<unknown>,
  evaluate: () => Promise<unknown>,
): Promise<unknown> {
  // Not async: a call the server knows costs one reaction, not an async function's two promises.
  if (direct) return evaluate();
  return evalsha().catch((error: unknown) => {
    if (!isNoScript(error)) throw error;
    return evaluate();
  });
}

/** The Cluster redirections both client families give up on (or pass on): the command did not run. */
export function isRedirectionMessage(error: unknown): boolean {
  return (
    error instanceof Error && /^(Too many Cluster redirections|MOVED |ASK |TRYAGAIN|CLUSTERDOWN)/.test(error.message)
  );
}

/** `key` without the client's prefix, for the client to put back. */
export function unprefixed(key: string, prefix: string): string {
  if (prefix === '') return key;
  if (!key.startsWith(prefix)) throw new Error(`key "${key}" does not start with the client's keyPrefix "${prefix}"`);
  return key.slice(prefix.length);
}

/**
 * The replicas a CLUSTER NODES reply lists, as the server names them (`host:port`), but those flagged failed
 * or without an address. For `flowlock/admin`, which needs every node: CLUSTER SLOTS, which the clients read,
 * leaves out a replica that has not replicated a first byte yet, whose subscribers count all the same. A
 * line: id, `ip:port@cport[,hostname]`, flags, and more.
 */
export function replicasIn(clusterNodes: string): { readonly host: string; readonly port: number }[] {
  const replicas: { host: string; port: number }[] = [];
  for (const line of clusterNodes.split('\n')) {
    const [, endpoint = '', flagList = ''] = line.split(' ');
    const flags = flagList.split(',');
    const [, host, port] = /^(.+):(\d+)@/.exec(endpoint) ?? [];
    if (host === undefined || port === undefined || !flags.includes('slave')) continue;
    if (flags.includes('fail') || flags.includes('noaddr')) continue;
    replicas.push({ host, port: Number(port) });
  }
  return replicas;
}

/** `keys` without the client's prefix (`keys` itself when there is none: the callers only read it). */
export function unprefixedKeys(keys: readonly string[], prefix: string): readonly string[] {
  return prefix === '' ? keys : keys.map((key) => unprefixed(key, prefix));
}

/**
 * What one WAIT came to, with the identity of the connection that answered the CLIENT ID sent right behind
 * it (undefined when that failed; `refusal`: the ACL refused CLIENT ID): `failed` with WAIT's error, or
 * WAIT's reply.
 */
export type WaitOutcome = { readonly identity: string | undefined; readonly refusal?: Error } & (
  { readonly failed: false; readonly acknowledged: unknown } | { readonly failed: true; readonly error: unknown }
);

/**
 * Sends WAIT and CLIENT ID one behind the other on the connection of `send` (the client writes them in that
 * order, and a connection answers in order): the id is of the connection that answered WAIT, or of a later
 * one. `label`, read when the id comes back, adds what the client knows of that connection, for ids are
 * unique per server process only.
 */
export async function waitWithIdentity(
  send: (args: string[]) => Promise<unknown>,
  replicas: number,
  timeoutMs: number,
  label: () => string = () => '',
): Promise<WaitOutcome> {
  const [waited, identity] = await Promise.allSettled([
    send(['WAIT', String(replicas), String(timeoutMs)]),
    identityOf(send, label),
  ]);
  // identityOf rejects only with the server's refusal, an Error (isPermissionDenial).
  const known =
    identity.status === 'fulfilled'
      ? { identity: identity.value }
      : { identity: undefined, refusal: identity.reason as Error };
  return waited.status === 'fulfilled'
    ? { ...known, failed: false, acknowledged: waited.value }
    : { ...known, failed: true, error: waited.reason };
}

/**
 * The identity of the connection of `send` (see waitWithIdentity); undefined when CLIENT ID failed, and
 * rejected with the server's refusal when the ACL does not allow it (no grant can be confirmed then).
 */
export function identityOf(
  send: (args: string[]) => Promise<unknown>,
  label: () => string = () => '',
): Promise<string | undefined> {
  return send(['CLIENT', 'ID']).then(
    (id) => `${label()}#${String(id)}`,
    (error: unknown) => {
      if (isPermissionDenial(error)) throw error;
      return undefined;
    },
  );
}

/**
 * The connection WAIT goes to, checked by its identity (CLIENT ID, and what the client knows of it): asked
 * when this is made (before the first grant it confirms, on the same connection) and right behind every
 * WAIT. A WAIT whose identity differs from the one before it may have run on another connection than the
 * grant: counted as a close, so the grant is not confirmed by it. Every client library may send a WAIT again
 * on a new connection without a word (ioredis and node-redis' Sentinel resend a call cut off by its
 * connection, and a call still queued goes out on the next connection), where it counts writes the
 * connection never carried: none, so it answers at once. This cannot miss a reconnect the way an event can.
 * A reconnect between the last identity and a grant counts too: that grant is refused, on the safe side.
 * `reconnects`: how often the client says the connection closed (a count it keeps), added to the closes. It
 * needs `+client|id` in an ACL rule: refused, every WAIT fails with the refusal.
 */
export class CheckedMaster implements MasterConnection {
  #changes = 0;
  #identity: Promise<string | undefined>;
  readonly #wait: (replicas: number, timeoutMs: number) => Promise<WaitOutcome>;
  readonly #reconnects: () => number;

  constructor(
    wait: (replicas: number, timeoutMs: number) => Promise<WaitOutcome>,
    identify: () => Promise<string | undefined>,
    reconnects: () => number = () => 0,
  ) {
    this.#wait = wait;
    this.#reconnects = reconnects;
    // A refusal is met again behind the first WAIT, and said then.
    this.#identity = identify().catch(() => undefined);
  }

  get closes(): number {
    return this.#changes + this.#reconnects();
  }

  async wait(replicas: number, timeoutMs: number): Promise<number> {
    const before = this.#identity;
    // A connection that could not even be had (a cluster's node client failing to connect) fails this WAIT only.
    const waited = this.#wait(replicas, timeoutMs).catch((error: unknown): WaitOutcome => ({
      identity: undefined,
      failed: true,
      error,
    }));
    // The next WAIT compares with the identity asked for behind this one, whether or not this one failed.
    this.#identity = waited.then((outcome) => outcome.identity);
    const [previous, outcome] = await Promise.all([before, waited]);
    if (previous === undefined || outcome.identity === undefined || previous !== outcome.identity) this.#changes++;
    if (outcome.failed) throw outcome.error;
    // Without CLIENT ID no WAIT confirms anything: the ACL's refusal is the caller's error, not a replica count.
    if (outcome.refusal !== undefined) throw outcome.refusal;
    return Number(outcome.acknowledged);
  }
}

/**
 * The CheckedMaster of one connection that `send` reaches (its WAIT and the CLIENT IDs around it), labelled by
 * `label` and with the client's own count of reconnects (`reconnects`), for adapters whose WAIT needs no
 * connection picked per call.
 */
export function checkedMaster(
  send: (args: string[]) => Promise<unknown>,
  label: () => string = () => '',
  reconnects: () => number = () => 0,
): CheckedMaster {
  return new CheckedMaster(
    (replicas, timeoutMs) => waitWithIdentity(send, replicas, timeoutMs, label),
    () => identityOf(send, label),
    reconnects,
  );
}
