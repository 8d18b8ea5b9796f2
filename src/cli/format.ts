/**
 * How the `flowlock` command prints what the admin functions return, for people (the default; `--json`
 * prints the admin functions' objects as they are). Colour only on a terminal and never with NO_COLOR set
 * (no-color.org) or TERM=dumb; times are UTC, durations short (`0.4s`, `21.4s`, `3m12s`, `2h05m`).
 */
import type { Writable } from 'node:stream';
import type { Holder, LockInfo, LockKind, ScanStats, ServerReport, UnlockResult, WatchEvent } from '../admin/index.js';

/** Whether to colour what goes to `stream`. */
export function colorFor(stream: Writable & { isTTY?: boolean }, env: NodeJS.ProcessEnv = process.env): boolean {
  return stream.isTTY === true && !env['NO_COLOR'] && env['TERM'] !== 'dumb';
}

/** SGR codes by name; `paint` wraps text in one when colour is on. */
const CODES = { red: 31, green: 32, yellow: 33, bold: 1, dim: 2 } as const;
export type Paint = (style: keyof typeof CODES, text: string) => string;
export const painter =
  (color: boolean): Paint =>
  (style, text) =>
    color ? `\u001b[${CODES[style]}m${text}\u001b[0m` : text;

/**
 * Characters that must not reach a terminal as they are: C0 and C1 controls (a newline would start a forged
 * row, an ESC an ANSI sequence), the Unicode line and paragraph separators, and the bidirectional formatting
 * marks (they reorder what is shown).
 */
const UNPRINTABLE = /[\p{Cc}\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;
const UNPRINTABLE_ALL = new RegExp(UNPRINTABLE.source, 'gu');

/** `text` with every unprintable character written as a `\uXXXX` escape: one line whatever it holds. */
export function escaped(text: string): string {
  return text.replace(UNPRINTABLE_ALL, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * `text` (a name, an owner, a label: whatever Redis or the command line gave) as it may be printed: as it is
 * when it has only printable characters, else quoted with every such character escaped (`"a\nb"`,
 * `"\u001b[31m"`). A text that itself starts with a quote is quoted too, so that no name can pass for the
 * escaped form of another.
 */
export function shown(text: string): string {
  if (!UNPRINTABLE.test(text) && !text.startsWith('"')) return text;
  return escaped(JSON.stringify(text));
}

/** A duration in the shortest readable form. */
export function duration(ms: number): string {
  if (ms < 0) return `-${duration(-ms)}`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const seconds = Math.floor(ms / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${String(seconds % 60).padStart(2, '0')}s`;
  if (seconds < 86_400)
    return `${Math.floor(seconds / 3600)}h${String(Math.floor(seconds / 60) % 60).padStart(2, '0')}m`;
  return `${Math.floor(seconds / 86_400)}d${String(Math.floor(seconds / 3600) % 24).padStart(2, '0')}h`;
}

/** `HH:MM:SS` (or with milliseconds) of an ISO time, UTC, with a Z. */
export function clock(iso: string, millis = false): string {
  return `${iso.slice(11, millis ? 23 : 19)}Z`;
}

/**
 * An owner id cut to fit a line: the first 8 characters of a long client id, then the flow id (and `:write`).
 * An id without a flow id (a permit id) stays whole.
 */
export function shortOwner(owner: string): string {
  const write = owner.endsWith(':write') ? ':write' : '';
  const id = owner.slice(0, owner.length - write.length);
  const colon = id.lastIndexOf(':');
  if (colon === -1) return owner;
  const client = id.slice(0, colon);
  return `${client.length > 12 ? `${client.slice(0, 8)}…` : client}${id.slice(colon)}${write}`;
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/** An owner's line of facts: holds, since when, who (or that the holder recorded nothing). */
function holderFacts(holder: Holder): string {
  const parts = [holder.mode ?? '', `holds ${holder.holdCount}`].filter(Boolean);
  if (holder.leaseMs !== null) parts.push(`lease ${duration(holder.leaseMs)}`);
  if (holder.since !== null && holder.heldMs !== null)
    parts.push(`since ${clock(holder.since)} (${duration(holder.heldMs)})`);
  parts.push(holder.who === null ? '(no owner info)' : shown(holder.who));
  return parts.join('  ');
}

const KIND_WORDS: Readonly<Record<LockKind, string>> = {
  lock: 'lock',
  'fair-lock': 'fair lock',
  'read-write-lock': 'read-write lock',
  semaphore: 'semaphore',
  'permit-expirable-semaphore': 'permit-expirable semaphore',
  'count-down-latch': 'count-down latch',
};

/** The kind in words, and the kinds the keys cannot rule out. */
function kindWords(info: LockInfo): string {
  const kind = info.kind === null ? '' : KIND_WORDS[info.kind];
  return info.alsoMatches.length > 0 ? `${kind} (or ${info.alsoMatches.map((k) => KIND_WORDS[k]).join(', ')})` : kind;
}

/** How many waiters queued in Redis want how many permits (only the first entries are read: "at least"). */
function waiters(info: LockInfo): string | null {
  if (info.queueLength === 0) return null;
  const wanted = info.queue.reduce((sum, entry) => sum + (entry.permits ?? 0), 0);
  const some = info.queueLength > info.queue.length ? 'at least ' : '';
  const want = info.queueLength === 1 ? 'wants' : 'want';
  return `${plural(info.queueLength, 'waiter')} ${want} ${some}${plural(wanted, 'permit')}`;
}

/** The first line of `inspect`: name, state, kind and the facts that matter most for it. */
function headline(info: LockInfo, paint: Paint): string {
  const name = paint('bold', shown(info.name));
  if (info.kind === null) {
    return info.type === 'none'
      ? `${name}  ${paint('green', 'FREE')}  (nothing of it in Redis: never locked, or freed)`
      : `${name}  ${paint('yellow', 'NOT A LOCK')}  (a ${info.type} of another shape)`;
  }
  const ttl = info.ttlMs === null ? null : `ttl ${duration(info.ttlMs)}`;
  if (info.permits) {
    const { available, out } = info.permits;
    // No permit free is what a waiter runs into, whatever else is true of the semaphore.
    const state =
      available <= 0 ? paint('red', 'NO PERMIT FREE') : info.held ? paint('red', 'HELD') : paint('green', 'AVAILABLE');
    const counts = `${available} available${out === null ? '' : `, ${out} out`}`;
    return [name, state, kindWords(info), counts, ttl, waiters(info)].filter(Boolean).join('  ');
  }
  if (info.count !== null) {
    const state = info.count > 0 ? paint('yellow', 'COUNTING') : paint('green', 'OPEN');
    return [name, state, kindWords(info), info.count > 0 ? `count ${info.count}` : null].filter(Boolean).join('  ');
  }
  if (!info.held) {
    const last = info.fencingToken === null ? '' : `  (last fencing ${shown(info.fencingToken)})`;
    return `${name}  ${paint('green', 'FREE')}  ${kindWords(info)}${last}`;
  }
  const mode = info.mode === null ? '' : ` (${info.mode})`;
  const fencing = info.fencingToken === null ? null : `fencing ${shown(info.fencingToken)}`;
  // A held lock without a TTL is never freed unless someone releases it.
  const lease = ttl ?? paint('yellow', 'no expiry');
  return [name, paint('red', 'HELD'), kindWords(info) + mode, lease, fencing].filter(Boolean).join('  ');
}

/** `inspect`'s human output. */
export function inspection(info: LockInfo, paint: Paint): string {
  const lines = [headline(info, paint)];
  const row = (label: string, text: string): void => void lines.push(`  ${label.padEnd(8)} ${text}`);
  const waiting = (): void => {
    const [first] = info.channels;
    const others = info.channels.length > 1 ? ` and ${plural(info.channels.length - 1, 'other channel')}` : '';
    row(
      'waiting',
      `${plural(info.waitingConnections ?? 0, 'subscriber connection')} on ${shown(first ?? '')}${others}`,
    );
  };
  // A free lock is one line, unless someone still waits on it.
  if (!info.held && info.permits === null && info.count === null) {
    if ((info.waitingConnections ?? 0) > 0) waiting();
    return lines.join('\n');
  }
  for (const holder of info.owners) row('owner', `${shown(holder.owner)}  ${holderFacts(holder)}`);
  for (const lease of info.permits?.leases ?? []) {
    row(
      'permit',
      `${shown(lease.permitId)}  ${lease.leaseMs === null ? 'no lease' : `lease ${duration(lease.leaseMs)} left`}`,
    );
  }
  if (info.queueLength > 0) {
    const entries = info.queue.slice(0, 5).map((entry) => {
      const left = entry.deadlineInMs === null ? '' : ` (${duration(entry.deadlineInMs)} left)`;
      return `${entry.permits === null ? shown(entry.id) : plural(entry.permits, 'permit')}${left}`;
    });
    const more = info.queueLength > entries.length ? `, ${info.queueLength - entries.length} more` : '';
    row(
      info.kind === 'read-write-lock' ? 'writers' : 'queue',
      `${info.queueLength} waiting: ${entries.join(', ')}${more}`,
    );
  }
  row('key', `${shown(info.key)}  slot ${info.slot} @ ${shown(info.node)}`);
  if (info.waitingConnections !== null && info.channels.length > 0) waiting();
  return lines.join('\n');
}

/** Oldest hold first (by when it began: ages read at different moments do not compare); no age last; by name. */
export function byAge(a: LockInfo, b: LockInfo): number {
  const since = (info: LockInfo): string => info.owners[0]?.since ?? '~';
  const [x, y] = [since(a), since(b)];
  if (x !== y) return x < y ? -1 : 1;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** `list`'s table: one row per holder (a read-write lock may have several). */
export function table(locks: readonly LockInfo[], paint: Paint): string {
  const rows = [['NAME', 'KIND', 'OWNER', 'HOLDS', 'TTL', 'AGE', 'WHO']];
  for (const info of locks) {
    const kind = info.kind === 'read-write-lock' ? 'rw' : info.kind === 'fair-lock' ? 'fair' : (info.kind ?? '?');
    const ttl = info.ttlMs === null ? '-' : duration(info.ttlMs);
    if (info.owners.length === 0) rows.push([shown(info.name), kind, '-', '-', ttl, '-', 'free']);
    for (const holder of info.owners) {
      const age = holder.heldMs === null ? '-' : duration(holder.heldMs);
      rows.push([
        shown(info.name),
        kind,
        shown(shortOwner(holder.owner)),
        String(holder.holdCount),
        ttl,
        age,
        holder.who === null ? '(no owner info)' : shown(holder.who),
      ]);
    }
  }
  const widths = rows[0]?.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length))) ?? [];
  return rows
    .map((row, index) => {
      const line = row
        .map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
        .join('  ');
      return index === 0 ? paint('dim', line) : line;
    })
    .join('\n');
}

/** `list`'s summary line (stderr): what was found and what the SCAN cost. */
export function scanSummary(found: readonly LockInfo[], all: boolean, stats: ScanStats): string {
  const held = found.filter((info) => info.held).length;
  const what = all ? `${plural(found.length, 'lock')} (${held} held)` : plural(held, 'held lock');
  const keys = stats.keys.toLocaleString('en-US');
  return (
    `${what} · scanned ${keys} keys on ${plural(stats.masters, 'master')} in ` +
    `${(stats.elapsedMs / 1000).toFixed(2)}s (${plural(stats.calls, 'SCAN call')})`
  );
}

/** `unlock`'s refusal (stderr): who holds it, and why not without --owner or --force. */
export function refusal(info: LockInfo): string {
  const holders = info.owners
    .map((holder) => {
      const facts = [plural(holder.holdCount, 'hold')];
      if (holder.heldMs !== null) facts.push(duration(holder.heldMs));
      if (holder.who !== null) facts.push(shown(holder.who));
      return `${shown(holder.owner)} (${facts.join(', ')})`;
    })
    .join(', ');
  return (
    `${shown(info.name)} is held by ${holders}.\n` +
    'Refusing without --owner or --force: the holder keeps working until its watchdog notices\n' +
    '(≤ watchdogTimeout/3); only writes guarded by fencing tokens will reject it.'
  );
}

/** `unlock`'s report of what it did. */
export function unlocked(result: UnlockResult, forced: boolean, owner: string | undefined): string {
  if (forced) {
    const holders = result.holders.map((holder) => shown(shortOwner(holder.owner))).join(', ');
    return `released ${shown(result.name)} by force (held by ${holders || 'nobody'}; its waiters were woken)`;
  }
  const woke = result.woken === null ? '' : `, woke ${plural(result.woken, 'waiting connection')}`;
  return `released ${shown(result.name)} (owner ${shown(shortOwner(owner ?? ''))}${woke})`;
}

/** One line of `watch`. */
export function watchLine(event: WatchEvent, paint: Paint): string {
  const time = paint('dim', clock(event.time, true));
  switch (event.type) {
    case 'notice':
      return `${time}  ${escaped(event.message)}`;
    case 'held':
    case 'acquired': {
      const { holder } = event;
      const fencing = event.fencingToken === null ? [] : [`fencing ${shown(event.fencingToken)}`];
      const since = event.type === 'held' && holder.since !== null ? [`since ${clock(holder.since)}`] : [];
      const word = event.type === 'held' ? paint('dim', 'held    ') : paint('green', 'acquired');
      return [
        time,
        shown(event.name),
        word,
        shown(shortOwner(holder.owner)),
        ...fencing,
        ...since,
        holder.who === null ? '(no owner info)' : shown(holder.who),
      ].join('  ');
    }
    case 'released': {
      const held = event.heldMs === null ? [] : [`held ${duration(event.heldMs)}`];
      return [time, shown(event.name), 'released', shown(shortOwner(event.owner)), ...held].join('  ');
    }
    case 'brief': {
      const holds = event.holds === 1 ? 'a hold' : `${event.holds} holds`;
      const fencing = event.fencingToken === null ? [] : [`fencing ${shown(event.fencingToken)}`];
      const proof = event.proof === 'message' ? 'release message' : 'fencing counter moved';
      return [
        time,
        shown(event.name),
        paint('yellow', 'brief   '),
        `${event.proof === 'fencing' ? 'at least ' : ''}${holds} acquired and released between two reads`,
        ...fencing,
        `(holder not seen; ${proof})`,
      ].join('  ');
    }
    default: {
      const holder = event.owner === null ? 'holder unknown' : `holder ${shown(shortOwner(event.owner))}`;
      const why =
        event.type === 'evicted'
          ? 'evicted by the server under memory pressure'
          : `lease ran out without release (crash or lost lease${event.proof === 'ttl' ? '; inferred from its TTL' : ''})`;
      return [time, shown(event.name), paint('red', event.type.toUpperCase().padEnd(8)), `${holder} — ${why}`].join(
        '  ',
      );
    }
  }
}

const MARKS = { ok: ['green', '✔'], warn: ['yellow', '!'], fail: ['red', '✖'], unknown: ['yellow', '?'] } as const;

/** `doctor`'s checks, one line each (with what it means when not fine). */
export function doctorReport(report: ServerReport, paint: Paint): string {
  return report.checks
    .map((check) => {
      const [style, mark] = MARKS[check.status];
      return `${paint(style, mark)} ${escaped(check.summary)}${check.detail === null ? '' : ` — ${escaped(check.detail)}`}`;
    })
    .join('\n');
}
