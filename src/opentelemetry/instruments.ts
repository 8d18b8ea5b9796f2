/**
 * The metric instruments, made on one Meter. OpenTelemetry has no semantic convention for locks, so the
 * names are flowlock's own (`flowlock.*`), modelled on the database connection-pool metrics
 * (`db.client.connection.wait_time`, `use_time`, `pending_requests`, `count`): a lock is a pool of one.
 * Durations are in seconds, with bucket advice: the SDK's default buckets (0 … 10 000) assume milliseconds
 * and would put every lock operation in the first bucket.
 */
import {
  createNoopMeter,
  ValueType,
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
  type ObservableResult,
  type ObservableUpDownCounter,
} from '@opentelemetry/api';

/**
 * The holds and waits open now, each by the attributes it counts under: what `flowlock.hold.active` and
 * `flowlock.wait.active` report at each collection. Undefined while the instrumentation is disabled.
 */
export type OpenNow = () => { holds: Iterable<Attributes>; waits: Iterable<Attributes> } | undefined;

/** Acquisitions: from a millisecond (uncontended, on loopback) to a minute of waiting. */
export const ACQUIRE_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60];
/** Holds: from a short critical section to half an hour (a batch job in watchdog mode). */
export const HOLD_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800];
/** One Redis round trip, and a watchdog tick's lateness: `db.client.operation.duration`'s advice. */
export const ROUND_TRIP_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10];

export class Instruments {
  /**
   * Whether the meter records anything: false for the API's no-op meter (no SDK registered when the
   * instrumentation was made), where the subscriber skips its metric bookkeeping altogether.
   */
  readonly recording: boolean;
  readonly acquireDuration: Histogram;
  readonly holdDuration: Histogram;
  readonly holdActive: ObservableUpDownCounter;
  readonly waitActive: ObservableUpDownCounter;
  readonly holdLosses: Counter;
  readonly renewDuration: Histogram;
  readonly watchdogDelay: Histogram;

  /** Replaced by instruments on another meter: report every series as 0 from now on. */
  #detached = false;
  /** The attribute sets each counter has reported, by their key: a set no hold has any more reports 0. */
  readonly #seen = { holds: new Map<string, Attributes>(), waits: new Map<string, Attributes>() };

  /**
   * The two "active" counters are asynchronous: read from `open` when the SDK collects, so that a hold or
   * a wait costs them nothing while it starts and ends (an add each way would hash its attributes twice a
   * cycle in the SDK, the larger part of the metrics' cost in the uncontended cycle).
   */
  constructor(meter: Meter, open: OpenNow) {
    this.recording = meter !== createNoopMeter();
    const seconds = (description: string, buckets: number[]) => ({
      description,
      unit: 's',
      valueType: ValueType.DOUBLE,
      advice: { explicitBucketBoundaries: buckets },
    });
    this.acquireDuration = meter.createHistogram(
      'flowlock.acquire.duration',
      seconds('Time from asking for a lock (or permits) to the outcome, waiting included.', ACQUIRE_BUCKETS),
    );
    this.holdDuration = meter.createHistogram(
      'flowlock.hold.duration',
      seconds('Time a hold lasted, from taking the lock to its release, loss or the client closing.', HOLD_BUCKETS),
    );
    this.holdActive = meter.createObservableUpDownCounter('flowlock.hold.active', {
      description: 'Holds this process has now (re-entries count once).',
      unit: '{hold}',
      valueType: ValueType.INT,
    });
    this.holdActive.addCallback((result) => this.#observe(result, 'holds', open()?.holds));
    this.waitActive = meter.createObservableUpDownCounter('flowlock.wait.active', {
      description: 'Acquisitions waiting now for a lock someone else holds.',
      unit: '{waiter}',
      valueType: ValueType.INT,
    });
    this.waitActive.addCallback((result) => this.#observe(result, 'waits', open()?.waits));
    this.holdLosses = meter.createCounter('flowlock.hold.losses', {
      description: 'Holds lost before their release: their signal aborted while the holder may still run.',
      unit: '{loss}',
      valueType: ValueType.INT,
    });
    this.renewDuration = meter.createHistogram(
      'flowlock.renew.duration',
      seconds('Duration of one watchdog renewal call (one per hash slot and 570 holds).', ROUND_TRIP_BUCKETS),
    );
    this.watchdogDelay = meter.createHistogram(
      'flowlock.watchdog.delay',
      seconds(
        'How late a watchdog tick ran against its schedule, per renewal call: a stalled event loop shows here.',
        ROUND_TRIP_BUCKETS,
      ),
    );
  }

  /** Stops reporting: instruments on another meter count the holds and waits from now on. */
  detach(): void {
    this.#detached = true;
  }

  /**
   * Reports the open items by attribute set, and 0 for every set reported before that has none now (the
   * series ends at 0 rather than keeping its last count). The sets are few: lease mode, kind and group.
   */
  #observe(result: ObservableResult, which: 'holds' | 'waits', open: Iterable<Attributes> | undefined): void {
    const counts = new Map<string, number>();
    const seen = this.#seen[which];
    if (!this.#detached && open) {
      for (const attributes of open) {
        const key = JSON.stringify(attributes);
        counts.set(key, (counts.get(key) ?? 0) + 1);
        if (!seen.has(key)) seen.set(key, attributes);
      }
    }
    for (const [key, attributes] of seen) result.observe(counts.get(key) ?? 0, attributes);
  }
}
