/**
 * The server floor (DESIGN.md "Servers": Redis 6.0, Valkey 7.2) and what a server's `INFO server` says about
 * it. Valkey reports the Redis version it is compatible with as `redis_version` (7.2.4, whatever its own), so
 * a Valkey is judged by `valkey_version`, named by `server_name`. A leaf: the script runner consults it at a
 * script error that says the server did not understand a command, and `doctor` on every master.
 */

/** The oldest version of each server the library supports, as `major.minor`. */
export const SERVER_FLOOR = { Redis: '6.0', Valkey: '7.2' } as const;

/** The floor as one phrase, for messages. */
export const FLOOR_TEXT = `Redis ${SERVER_FLOOR.Redis} (Valkey ${SERVER_FLOOR.Valkey})`;

/** A server as its INFO names it, and whether it is at or above the floor. */
export interface ServerIdentity {
  /** `Valkey` when `server_name` says so, else `Redis` (forks that report a Redis version are judged by it). */
  readonly product: 'Redis' | 'Valkey';
  /** Its own version: `valkey_version` for a Valkey, else `redis_version`. */
  readonly version: string;
  readonly supported: boolean;
}

/** `major.minor.patch` as numbers (missing parts 0); undefined for text that does not start with a number. */
function versionParts(version: string): [number, number, number] | undefined {
  const match = /^(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(version.trim());
  if (!match) return undefined;
  return [Number(match[1]), Number(match[2] ?? 0), Number(match[3] ?? 0)];
}

/** Whether version `a` is at least `b` (both `major[.minor[.patch]]`). */
export function versionAtLeast(a: string, b: string): boolean {
  const x = versionParts(a);
  const y = versionParts(b);
  if (!x || !y) return false;
  for (let i = 0; i < 3; i++) {
    if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) > (y[i] ?? 0);
  }
  return true;
}

/**
 * The server an `INFO` reply (any sections that include `server`) describes; undefined when it names no
 * version (an INFO cut down by a provider, or not INFO at all): nothing is then judged.
 */
export function serverIdentity(info: string): ServerIdentity | undefined {
  const field = (name: string): string | undefined =>
    new RegExp(`^${name}:([^\\r\\n]*)`, 'm').exec(info)?.[1]?.trim() || undefined;
  const valkey = field('server_name')?.toLowerCase() === 'valkey' || field('valkey_version') !== undefined;
  const product = valkey ? 'Valkey' : 'Redis';
  const version = (valkey ? field('valkey_version') : undefined) ?? field('redis_version');
  if (version === undefined || !versionParts(version)) return undefined;
  return { product, version, supported: versionAtLeast(version, SERVER_FLOOR[product]) };
}

/**
 * Whether a script error says the server did not understand a command the script sent: an option it does not
 * know (`ERR syntax error`), a command or subcommand it does not have, an arity it does not accept, or a
 * `redis.*` function its Lua lacks. The messages of Redis 6.0 to 7.4 and Valkey 8 (recorded in
 * test/unit/server-version.test.ts). An error of this kind on a server below the floor is the floor's doing.
 */
export function isUnderstandingError(error: unknown): boolean {
  const message = error instanceof Error ? error.message : typeof error === 'string' ? error : '';
  return /syntax error|unknown (redis )?command|unknown subcommand|wrong number of arg|attempt to call field/i.test(
    message,
  );
}
