/**
 * Records what the library publishes on its diagnostics channels (by their documented names, as any
 * subscriber would), and checks the pairing rules: every `wait:start` and `hold:start` gets exactly one
 * end, no end comes without its start (an end names its start message as `start`), and the running counts
 * of active holds and waits never go below 0.
 * Used in-process by the tests and inside worker processes (test/fixtures/lock-worker.ts).
 */
import diagnostics from 'node:diagnostics_channel';

const POINT = [
  'flowlock:wait:start',
  'flowlock:wait:end',
  'flowlock:hold:start',
  'flowlock:hold:end',
  'flowlock:pubsub',
];
const TRACED = ['flowlock:acquire', 'flowlock:release', 'flowlock:withLock', 'flowlock:renew'];
const PHASES = ['start', 'end', 'asyncStart', 'asyncEnd', 'error'];

export interface RecordedEvent {
  /** The channel: a point channel's name, or `tracing:<name>:<phase>`. */
  readonly channel: string;
  readonly message: Record<string, unknown>;
}

/** What a run published, checked. */
export interface DiagnosticsSummary {
  /** Events per channel. */
  readonly counts: Record<string, number>;
  /** Ends that came without their start, or a second end for one start. */
  readonly unmatchedEnds: number;
  /** Starts still without an end. */
  readonly openHolds: number;
  readonly openWaits: number;
  /** The lowest the running count of active holds (and waits) went: below 0 means an end before its start. */
  readonly lowestActiveHolds: number;
  readonly lowestActiveWaits: number;
}

export interface DiagnosticsRecorder {
  readonly events: RecordedEvent[];
  /** Events of `channel`, in order. */
  of(channel: string): Record<string, unknown>[];
  summary(): DiagnosticsSummary;
  /** Unsubscribes from every channel. */
  dispose(): void;
}

const holdKey = (m: Record<string, unknown>): string =>
  `${String(m['clientId'])}|${String(m['key'])}|${String(m['owner'])}|${String(m['fencingToken'])}`;
const waitKey = (m: Record<string, unknown>): string =>
  `${String(m['clientId'])}|${String(m['key'])}|${String(m['owner'])}|${String(m['kind'])}`;

export function recordDiagnostics(): DiagnosticsRecorder {
  const events: RecordedEvent[] = [];
  const open = { holds: new Map<string, number>(), waits: new Map<string, number>() };
  const active = { holds: 0, waits: 0, lowestHolds: 0, lowestWaits: 0 };
  let unmatchedEnds = 0;
  // Start messages not yet ended: an end must name one of them as its `start` (the same object).
  const openStarts = new Set<unknown>();
  const started = (map: Map<string, number>, m: Record<string, unknown>, key: string): void => {
    map.set(key, (map.get(key) ?? 0) + 1);
    openStarts.add(m);
  };
  const ended = (map: Map<string, number>, m: Record<string, unknown>, key: string): void => {
    const count = map.get(key) ?? 0;
    if (count === 0 || !openStarts.delete(m['start'])) unmatchedEnds++;
    else if (count === 1) map.delete(key);
    else map.set(key, count - 1);
  };
  const handlers = new Map<string, (message: unknown) => void>();
  const listen = (channel: string, check?: (message: Record<string, unknown>) => void): void => {
    const handler = (message: unknown): void => {
      const record = message as Record<string, unknown>;
      events.push({ channel, message: record });
      check?.(record);
    };
    handlers.set(channel, handler);
    diagnostics.subscribe(channel, handler);
  };
  for (const name of POINT) {
    listen(name, (m) => {
      if (name === 'flowlock:hold:start') {
        started(open.holds, m, holdKey(m));
        active.holds++;
      } else if (name === 'flowlock:hold:end') {
        ended(open.holds, m, holdKey(m));
        active.lowestHolds = Math.min(active.lowestHolds, --active.holds);
      } else if (name === 'flowlock:wait:start') {
        started(open.waits, m, waitKey(m));
        active.waits++;
      } else if (name === 'flowlock:wait:end') {
        ended(open.waits, m, waitKey(m));
        active.lowestWaits = Math.min(active.lowestWaits, --active.waits);
      }
    });
  }
  for (const name of TRACED) for (const phase of PHASES) listen(`tracing:${name}:${phase}`);
  const sum = (map: Map<string, number>): number => [...map.values()].reduce((a, b) => a + b, 0);
  return {
    events,
    of: (channel) => events.filter((event) => event.channel === channel).map((event) => event.message),
    summary: () => {
      const counts: Record<string, number> = {};
      for (const event of events) counts[event.channel] = (counts[event.channel] ?? 0) + 1;
      return {
        counts,
        unmatchedEnds,
        openHolds: sum(open.holds),
        openWaits: sum(open.waits),
        lowestActiveHolds: active.lowestHolds,
        lowestActiveWaits: active.lowestWaits,
      };
    },
    dispose: () => {
      for (const [channel, handler] of handlers) diagnostics.unsubscribe(channel, handler);
      handlers.clear();
    },
  };
}
