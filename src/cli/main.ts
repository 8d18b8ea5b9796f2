#!/usr/bin/env node
/**
 * `flowlock`: inspect, list, unlock and watch the locks of the flowlock family (and Redisson's) in Redis,
 * and check the server's settings. A thin shell over `flowlock/admin`: `node:util` parseArgs (strict, one
 * positional subcommand), one connection per run, closed before the process exits.
 *
 * Exit codes: 0 done, 1 runtime error (connection, ACL denial, unexpected reply), 2 usage error,
 * 3 precondition not met (not held, owner mismatch, unlock refused, a failing doctor check).
 */
import manifest from '../../package.json' with { type: 'json' };
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import type { LockKind } from '../admin/index.js';
import { checkKind, PreconditionError } from '../admin/target.js';
import { checkLockName, resolveClientOptions } from '../options.js';
import {
  cleanup,
  doctor,
  inspect,
  list,
  notify,
  unlock,
  watch,
  type Context,
  type ListFlags,
  type UnlockFlags,
  type WatchFlags,
} from './commands.js';
import { connect, defaultUrls } from './connect.js';
import { CliError, usage } from './errors.js';
import { colorFor, escaped, painter } from './format.js';

const GLOBAL_OPTIONS = {
  url: { type: 'string', multiple: true },
  cluster: { type: 'boolean' },
  prefix: { type: 'string' },
  json: { type: 'boolean' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
} as const satisfies ParseArgsOptionsConfig;

const COMMAND_OPTIONS = {
  inspect: { kind: { type: 'string' } },
  list: { match: { type: 'string' }, all: { type: 'boolean' }, limit: { type: 'string' }, count: { type: 'string' } },
  unlock: { owner: { type: 'string' }, force: { type: 'boolean' }, yes: { type: 'boolean' }, kind: { type: 'string' } },
  watch: {
    interval: { type: 'string' },
    events: { type: 'boolean' },
    duration: { type: 'string' },
    limit: { type: 'string' },
  },
  doctor: {},
  cleanup: { yes: { type: 'boolean' } },
} as const satisfies Record<string, ParseArgsOptionsConfig>;

type Command = keyof typeof COMMAND_OPTIONS;

const GLOBAL_HELP = `Usage: flowlock <command> [options]

Inspect and operate the locks of flowlock (and Redisson) in Redis.

Commands:
  inspect <name>          everything Redis knows about one lock, semaphore or latch
  list                    held locks on every master (SCAN: costs O(keys in the database))
  unlock <name>           release a holder (--owner) or the whole lock (--force)
  watch [<name|glob>...]  live log of acquisitions, releases and expirations
  doctor                  check the server settings that decide lock safety
  cleanup                 remove the keys the previous (per-name) layout left (--yes)

Global options:
  --url <url>        redis[s]://[user:password@]host[:port][/db]; repeat for Cluster seeds
                     (default: $FLOWLOCK_REDIS_URL, $REDIS_URL, redis://127.0.0.1:6379;
                     password from the URL or $REDISCLI_AUTH)
  --cluster          connect as a Cluster client (default: when the server has cluster_enabled)
  --prefix <prefix>  the lock clients' keyPrefix
  --json             machine-readable output (watch: one JSON object per line)
  --timeout <time>   connecting and each command, e.g. 5000, 5s (default 5s)
  -h, --help         help (flowlock <command> --help for a command's)
  --version          the version

Exit codes: 0 done, 1 runtime error, 2 usage error, 3 precondition not met.
NO_COLOR turns colour off; there is none when the output is not a terminal.`;

const COMMAND_HELP: Readonly<Record<Command, string>> = {
  inspect: `Usage: flowlock inspect <name> [--kind <kind>]

Holders (owner id, hold count, since when, host and pid), TTL, fencing token, waiters, slot and node.
--kind <kind>  read the name as lock, fair-lock, read-write-lock, semaphore,
               permit-expirable-semaphore or count-down-latch (default: detected)
Always exits 0 when the read succeeds (scripts: flowlock inspect x --json | jq -e .held).`,
  list: `Usage: flowlock list [--match <glob>] [--all] [--limit <n>] [--count <n>]

Held locks, oldest first, from SCAN MATCH <prefix><glob> TYPE hash on every master: it walks the
whole keyspace of each master (the summary on stderr says how many keys). Keep lock keys under a
--prefix to make the match selective.
--match <glob>  Redis glob on lock names (default *)
--all           also names only flowlock's own keys show (hold keys, old per-name counters)
--limit <n>     stop after n locks
--count <n>     SCAN COUNT: keys examined per call (default 1000)`,
  unlock: `Usage: flowlock unlock <name> (--owner <id> | --force) [--yes] [--kind <kind>]

--owner <id>  release every hold of this owner (as inspect shows it), compare-and-release: nothing
              happens if someone else holds the lock now. On an expirable semaphore: a permit id.
--force       free the lock whoever holds it
--yes         do not ask (required when stdin is not a terminal)
Without --owner or --force it refuses (exit 3) and shows the holder. Waiters are woken either way;
the holder notices at its next renewal (within watchdogTimeout/3).`,
  watch: `Usage: flowlock watch [<name|glob>...] [--interval <time>] [--events] [--duration <time>] [--limit <n>]

Live log: holders found at the start, then acquired, released, brief (a hold that began and ended
between two reads: holder not seen), expired (and evicted) events, from release messages, fencing
counters and reads every --interval; globs are scanned each time (O(keys)).
--interval <time>  between reads (default 2s)
--events           keyspace notifications too (needs notify-keyspace-events with E and x, and h):
                   the server's proof that a lease ran out without a release, and a read at each
                   new hold, so that short holds show with their holders
--duration <time>  stop after this long (default: until Ctrl-C)
--limit <n>        stop after n events`,
  doctor: `Usage: flowlock doctor

Checks on every master: version and pub/sub mode, maxmemory-policy (anything but noeviction fails),
persistence, replicas, notify-keyspace-events (? when CONFIG is denied), clock offset.
Also counts the keys the previous layout left (per-name fencing counters, side fields in lock
hashes): a SCAN of every master, O(keys in the database).
Exits 3 when a check fails (✖).`,
  cleanup: `Usage: flowlock cleanup [--yes]

Removes what the previous Redis layout left under --prefix: the per-name fencing counters
(flowlock:fence:…, no expiry; each value first moves into the shared counter, so fencing tokens keep
rising) and the side fields (<owner>:acq, :rel, :info) in the hashes of locks its clients hold.
Run it once no client of the previous version runs. SCANs every master: O(keys in the database).
--yes  remove; without it, cleanup shows what it would remove and refuses (exit 3)`,
};

/** The longest duration a flag takes: Node's timers fire at once for anything longer (about 24.8 days). */
const MAX_DURATION_MS = 2 ** 31 - 1;

/** Milliseconds from `500`, `500ms`, `2s`, `1.5m` or `1h`, at most MAX_DURATION_MS; a usage error otherwise. */
function parseDuration(value: string, flag: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(value.trim());
  if (!match) throw new CliError(2, `${flag} must be a duration like 500, 500ms, 2s or 1m, got "${value}"`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[match[2] ?? 'ms'] ?? 1;
  const ms = Math.round(Number(match[1]) * unit);
  if (ms > MAX_DURATION_MS) {
    throw new CliError(2, `${flag} must be at most ${MAX_DURATION_MS} ms (about 596h), got "${value}" (${ms} ms)`);
  }
  return ms;
}

function parseCount(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < 1)
    throw new CliError(2, `${flag} must be a whole number >= 1, got "${value}"`);
  return Number(value);
}

/** Every option of every command at once (strict); which command allows which is checked after. */
function parse(argv: readonly string[]) {
  const options: ParseArgsOptionsConfig = { ...GLOBAL_OPTIONS };
  for (const own of Object.values(COMMAND_OPTIONS)) Object.assign(options, own);
  try {
    return parseArgs({ args: [...argv], options, allowPositionals: true, strict: true, tokens: true });
  } catch (error) {
    throw new CliError(2, (error as Error).message);
  }
}

/** What the command line asks for, checked before any connection. */
interface Invocation {
  readonly command: Command;
  readonly name: string;
  readonly prefix: string | undefined;
  readonly json: boolean;
  readonly urls: readonly string[];
  readonly cluster: true | undefined;
  readonly timeoutMs: number;
  readonly kind: LockKind | undefined;
  readonly list: ListFlags;
  readonly unlock: UnlockFlags;
  readonly watch: WatchFlags;
  readonly yes: boolean;
}

/** The invocation; help or the version (printed: undefined); a usage error (CliError 2). */
function invocation(argv: readonly string[]): Invocation | undefined {
  const { values, positionals, tokens } = parse(argv);
  const [commandName, ...operands] = positionals;
  if (values['version'] === true) {
    process.stdout.write(`${manifest.version}\n`);
    return undefined;
  }
  if (commandName !== undefined && !(commandName in COMMAND_OPTIONS)) {
    throw new CliError(2, `unknown command "${commandName}" (commands: ${Object.keys(COMMAND_OPTIONS).join(', ')})`);
  }
  const command = commandName as Command | undefined;
  if (values['help'] === true) {
    process.stdout.write(`${command ? COMMAND_HELP[command] : GLOBAL_HELP}\n`);
    return undefined;
  }
  if (!command) throw new CliError(2, 'a command is needed: inspect, list, unlock, watch, doctor or cleanup');
  const allowed = new Set([...Object.keys(GLOBAL_OPTIONS), ...Object.keys(COMMAND_OPTIONS[command])]);
  for (const token of tokens) {
    if (token.kind === 'option' && !allowed.has(token.name)) {
      throw new CliError(2, `${token.rawName} is not an option of ${command} (flowlock ${command} --help)`);
    }
  }
  const string = (option: string): string | undefined => values[option] as string | undefined;
  const flag = (option: string): boolean => values[option] === true;
  const needsName = command === 'inspect' || command === 'unlock';
  if (needsName && operands.length !== 1) throw new CliError(2, `${command} takes one lock name`);
  if ((command === 'list' || command === 'doctor' || command === 'cleanup') && operands.length > 0) {
    throw new CliError(2, `${command} takes no operands (flowlock ${command} --help)`);
  }
  if (command === 'unlock' && string('owner') !== undefined && flag('force')) {
    throw new CliError(2, 'unlock takes --owner or --force, not both');
  }
  const name = operands[0] ?? '';
  if (needsName) usage(() => checkLockName(name));
  const prefix = string('prefix');
  try {
    // The lock client's own rules for a keyPrefix.
    resolveClientOptions({ keyPrefix: prefix ?? '' });
  } catch (error) {
    throw new CliError(2, `--prefix ${(error as Error).message.replace(/^options\.keyPrefix /, '')}`);
  }
  const kind = usage(() => checkKind(string('kind'), '--kind'));
  const timeoutMs = parseDuration(string('timeout') ?? '5s', '--timeout');
  if (timeoutMs < 1) throw new CliError(2, '--timeout must be at least 1 ms');
  const duration = (option: string): number | undefined => {
    const text = string(option);
    return text === undefined ? undefined : parseDuration(text, `--${option}`);
  };
  const limit = parseCount(string('limit'), '--limit');
  return {
    command,
    name,
    prefix,
    json: flag('json'),
    urls: defaultUrls((values['url'] as string[] | undefined) ?? [], process.env),
    cluster: flag('cluster') || undefined,
    timeoutMs,
    kind,
    list: { match: string('match'), all: flag('all'), limit, count: parseCount(string('count'), '--count') },
    unlock: { owner: string('owner'), force: flag('force'), yes: flag('yes'), kind },
    watch: {
      names: operands,
      intervalMs: duration('interval'),
      events: flag('events'),
      durationMs: duration('duration'),
      limit,
    },
    yes: flag('yes'),
  };
}

async function run(argv: readonly string[]): Promise<number> {
  const asked = invocation(argv);
  if (!asked) return 0;
  const connection = await connect({
    urls: asked.urls,
    cluster: asked.cluster,
    timeoutMs: asked.timeoutMs,
    env: process.env,
  });
  try {
    const context: Context = {
      client: connection.client,
      prefix: asked.prefix,
      json: asked.json,
      stdout: process.stdout,
      stderr: process.stderr,
      stdin: process.stdin,
      paint: { out: painter(colorFor(process.stdout)), err: painter(colorFor(process.stderr)) },
    };
    notify(context, connection.notices);
    switch (asked.command) {
      case 'inspect':
        return await inspect(context, asked.name, asked.kind);
      case 'list':
        return await list(context, asked.list);
      case 'unlock':
        return await unlock(context, asked.name, asked.unlock);
      case 'watch':
        return await watch(context, asked.watch);
      case 'doctor':
        return await doctor(context);
      case 'cleanup':
        return await cleanup(context, asked.yes);
    }
  } finally {
    await connection.close();
  }
}

function exitCodeOf(error: unknown): number {
  if (error instanceof CliError) return error.exitCode;
  if (error instanceof PreconditionError) return 3;
  return 1;
}

// `flowlock list | head` closes stdout early: nothing more to say, not an error.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

run(process.argv.slice(2))
  .then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      const code = exitCodeOf(error);
      // One line: a library's own line breaks (GLIDE ends its messages with one) become spaces rather than
      // `\u000a`; any other control character is escaped, so that nothing in a message can forge output.
      const message = (error instanceof Error ? error.message : String(error))
        .replace(/\s*[\r\n]+\s*(?=\))/g, '')
        .replace(/\s*[\r\n]+\s*/g, ' ')
        .trim();
      process.stderr.write(`flowlock: ${escaped(message)}\n`);
      if (code === 2) process.stderr.write('Run flowlock --help for usage.\n');
      process.exitCode = code;
    },
  )
  .finally(() => {
    // Every connection is closed by now and the process ends on its own; should a client library leave a
    // handle behind, this ends it anyway (unref'd: it never keeps the process alive itself).
    setTimeout(() => process.exit(), 1000).unref();
  });
