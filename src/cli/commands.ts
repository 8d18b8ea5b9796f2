/**
 * The six commands, each over one admin function: data to stdout (for people, or as JSON with `--json`),
 * messages to stderr, and the exit code: 0 done, 3 precondition not met (a lock not held, an owner that
 * does not match, a refused unlock, a failing doctor check). Errors (1) and usage errors (2) are thrown.
 */
import { createInterface } from 'node:readline/promises';
import type { RedisClient } from '../options.js';
import {
  checkServer,
  findLegacyLayout,
  forceUnlock,
  inspectLock,
  listLocks,
  releaseOwner,
  removeLegacyLayout,
  watchLocks,
  PreconditionError,
  type LockInfo,
  type LockKind,
} from '../admin/index.js';
import { CliError, usage } from './errors.js';
import {
  byAge,
  doctorReport,
  inspection,
  refusal,
  scanSummary,
  shown,
  escaped,
  table,
  unlocked,
  watchLine,
  type Paint,
} from './format.js';

/** What every command works with. */
export interface Context {
  readonly client: RedisClient;
  /** `--prefix`, as the admin functions take it. */
  readonly prefix: string | undefined;
  readonly json: boolean;
  readonly stdout: NodeJS.WriteStream;
  readonly stderr: NodeJS.WriteStream;
  readonly stdin: NodeJS.ReadStream;
  /** Colour for stdout and stderr (each only on a terminal, never with NO_COLOR). */
  readonly paint: { readonly out: Paint; readonly err: Paint };
}

const withPrefix = (context: Context): { prefix?: string } =>
  context.prefix === undefined ? {} : { prefix: context.prefix };

function print(context: Context, text: string): void {
  if (text !== '') context.stdout.write(`${text}\n`);
}

function tell(context: Context, text: string): void {
  context.stderr.write(`${text}\n`);
}

/** What could not be read (a command the server refused) and what that leaves unknown: stderr, in yellow. */
export function notify(context: Pick<Context, 'stderr' | 'paint'>, notices: readonly string[]): void {
  for (const notice of notices)
    context.stderr.write(`${context.paint.err('yellow', `flowlock: ${escaped(notice)}`)}\n`);
}

const json = (value: unknown): string => JSON.stringify(value, null, 2);

export async function inspect(context: Context, name: string, kind: LockKind | undefined): Promise<number> {
  const info = await inspectLock(context.client, name, { ...withPrefix(context), ...(kind ? { kind } : {}) });
  notify(context, info.notices);
  print(context, context.json ? json(info) : inspection(info, context.paint.out));
  return 0;
}

export interface ListFlags {
  readonly match: string | undefined;
  readonly all: boolean;
  readonly limit: number | undefined;
  readonly count: number | undefined;
}

export async function list(context: Context, flags: ListFlags): Promise<number> {
  const listing = usage(() =>
    listLocks(context.client, {
      ...withPrefix(context),
      all: flags.all,
      ...(flags.match === undefined ? {} : { match: flags.match }),
      ...(flags.limit === undefined ? {} : { limit: flags.limit }),
      ...(flags.count === undefined ? {} : { count: flags.count }),
    }),
  );
  const found: LockInfo[] = [];
  for await (const info of listing) found.push(info);
  found.sort(byAge);
  if (context.json) print(context, json(found));
  else if (found.length > 0) print(context, table(found, context.paint.out));
  notify(context, listing.stats.notices);
  tell(context, context.paint.err('dim', scanSummary(found, flags.all, listing.stats)));
  return 0;
}

export interface UnlockFlags {
  readonly owner: string | undefined;
  readonly force: boolean;
  readonly yes: boolean;
  readonly kind: LockKind | undefined;
}

/** Asks on the terminal; true for y or yes. */
async function confirm(context: Context, question: string): Promise<boolean> {
  const prompt = createInterface({ input: context.stdin, output: context.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(`${question} [y/N] `)).trim());
  } finally {
    prompt.close();
  }
}

export async function unlock(context: Context, name: string, flags: UnlockFlags): Promise<number> {
  const options = { ...withPrefix(context), ...(flags.kind ? { kind: flags.kind } : {}) };
  const info = await inspectLock(context.client, name, options);
  notify(context, info.notices);
  if (info.kind === 'semaphore' || info.kind === 'count-down-latch') {
    throw new PreconditionError(`${shown(name)} is a ${info.kind}: it has no holder to release`);
  }
  if (!info.held) {
    tell(context, `${shown(name)} is not held${info.kind === null ? '' : ` (${info.kind})`}: nothing to release.`);
    return 3;
  }
  if (flags.owner === undefined && !flags.force) {
    tell(context, refusal(info));
    return 3;
  }
  const owner = flags.owner;
  const lockKind = info.kind !== 'permit-expirable-semaphore';
  if (owner !== undefined && lockKind && !info.owners.some((holder) => holder.owner === owner)) {
    const holders = info.owners.map((holder) => shown(holder.owner)).join(', ');
    tell(context, `${shown(name)} is not held by ${shown(owner)}: it is held by ${holders}.`);
    return 3;
  }
  if (!flags.yes) {
    // No prompt without a terminal (a script, a pipe): --yes says it was meant.
    if (!context.stdin.isTTY) throw new CliError(2, 'unlock needs --yes when stdin is not a terminal');
    const whom = owner === undefined ? info.owners.map((holder) => shown(holder.owner)).join(', ') : shown(owner);
    if (!(await confirm(context, `Release ${shown(name)} held by ${whom}?`))) {
      tell(context, 'Not released.');
      return 3;
    }
  }
  const result =
    owner === undefined
      ? await forceUnlock(context.client, name, options)
      : await releaseOwner(context.client, name, owner, options);
  if (!result.released) {
    const who = owner === undefined ? 'it was' : `${shown(owner)} was`;
    tell(context, `${shown(name)} was not released: ${who} no longer holding it.`);
    return 3;
  }
  print(context, context.json ? json(result) : unlocked(result, owner === undefined, owner));
  return 0;
}

export interface WatchFlags {
  readonly names: readonly string[];
  readonly intervalMs: number | undefined;
  readonly events: boolean;
  /** Stop after this long (ms). */
  readonly durationMs: number | undefined;
  /** Stop after this many events. */
  readonly limit: number | undefined;
}

/** Runs until SIGINT or SIGTERM, `--duration` or `--limit` events; exits 0 then. */
export async function watch(context: Context, flags: WatchFlags): Promise<number> {
  const controller = new AbortController();
  const stop = (): void => controller.abort();
  const events = usage(() =>
    watchLocks(context.client, {
      ...withPrefix(context),
      ...(flags.names.length > 0 ? { names: flags.names } : {}),
      ...(flags.intervalMs === undefined ? {} : { intervalMs: flags.intervalMs }),
      events: flags.events,
      signal: controller.signal,
    }),
  );
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const timer = flags.durationMs === undefined ? undefined : setTimeout(stop, flags.durationMs);
  try {
    let seen = 0;
    for await (const event of events) {
      if (event.type === 'notice') {
        notify(context, [event.message]);
        continue;
      }
      print(context, context.json ? JSON.stringify(event) : watchLine(event, context.paint.out));
      if (flags.limit !== undefined && ++seen >= flags.limit) break;
    }
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
  return 0;
}

export async function doctor(context: Context): Promise<number> {
  const report = await checkServer(context.client);
  print(context, context.json ? json(report) : doctorReport(report, context.paint.out));
  return report.ok ? 0 : 3;
}

/**
 * Removes the previous layout's keys under `--prefix` with `--yes`; without it, says what it would remove
 * and refuses (3), like `unlock`.
 */
export async function cleanup(context: Context, yes: boolean): Promise<number> {
  const options = { prefix: context.prefix ?? '' };
  if (!yes) {
    const found = await findLegacyLayout(context.client, options);
    print(
      context,
      context.json
        ? json(found)
        : `${found.fenceKeys} per-name fencing counters, ${found.fields} side fields in ${found.lockHashes} lock hashes` +
            found.examples.map((key) => `\n  ${key}`).join(''),
    );
    tell(context, 'Nothing removed: pass --yes once no client of the previous version runs.');
    return 3;
  }
  const removed = await removeLegacyLayout(context.client, options);
  print(
    context,
    context.json
      ? json(removed)
      : `removed ${removed.fenceKeys} per-name fencing counters (carried into the shared counters) and ` +
          `${removed.fields} side fields from ${removed.lockHashes} lock hashes`,
  );
  return 0;
}
