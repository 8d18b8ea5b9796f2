/**
 * Helpers every adapter uses (ioredis.ts, node-redis.ts, glide.ts): the script runner's NOSCRIPT rule, the
 * Cluster redirections a client gives up on, and key prefixes. They live apart from adapter.ts, which picks
 * the adapter and so imports every adapter file.
 */

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

/** An error's class: node-redis' errors keep the name "Error" (its TimeoutError has no message either). */
export function errorClass(error: Error): string {
  return error.name === 'Error' ? error.constructor.name : error.name;
}

/**
 * Whether `error` says the command got no answer from Redis, and how: `timeout` (the client's command
 * timeout: ioredis "Command timed out", node-redis' and GLIDE's TimeoutError) or `closed` (the connection is
 * closed or gave up: ioredis "Connection is closed." and MaxRetriesPerRequestError, node-redis'
 * ClientClosedError, ClientOfflineError and "Socket closed unexpectedly", GLIDE's ConnectionError and
 * ClosingError); undefined for anything else (a reply of the server's, a bug).
 */
export function unansweredBy(error: unknown): 'timeout' | 'closed' | undefined {
  if (!(error instanceof Error)) return undefined;
  const name = errorClass(error);
  if (name === 'TimeoutError' || /^Command timed out|^Socket timeout/.test(error.message)) return 'timeout';
  if (
    /^(ClientClosedError|ClientOfflineError|SocketClosedUnexpectedlyError|ConnectionError|ClosingError|MaxRetriesPerRequestError)$/.test(
      name,
    ) ||
    /^(Connection is closed|Stream isn't writeable|The client is closed|Socket closed unexpectedly)/.test(error.message)
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
export async function bySha(
  direct: boolean,
  evalsha: () => Promise<unknown>,
  evaluate: () => Promise<unknown>,
): Promise<unknown> {
  if (direct) return evaluate();
  try {
    return await evalsha();
  } catch (error) {
    if (!isNoScript(error)) throw error;
    return await evaluate();
  }
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

/** `keys` without the client's prefix. */
export function unprefixedKeys(keys: readonly string[], prefix: string): string[] {
  return prefix === '' ? [...keys] : keys.map((key) => unprefixed(key, prefix));
}
