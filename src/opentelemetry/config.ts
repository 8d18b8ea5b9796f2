/**
 * The options of FlowlockInstrumentation, their defaults, and the one place where they are checked: a bad
 * option throws a TypeError naming it, when the instrumentation is made or reconfigured, never later from a
 * diagnostics subscriber (where a throw would become an uncaughtException).
 */

/** Which operations become spans. */
export interface FlowlockSpansConfig {
  /**
   * `flowlock.acquire`: every acquisition (tryLock, lock, acquire, withLock's acquire phase, a semaphore's
   * permits, a latch's await); the Redis client's command spans nest under it.
   * @default true
   */
  readonly acquire?: boolean;
  /**
   * `flowlock.release`: every release (unlock, a lease's release, forceUnlock, a semaphore's release).
   * @default true
   */
  readonly release?: boolean;
  /**
   * `flowlock.withLock`: the whole of withLock/withPermit; the caller's work nests under it, and a lost hold
   * shows on it as the event `flowlock.lost`.
   * @default true
   */
  readonly withLock?: boolean;
  /**
   * `flowlock.renew`: each watchdog renewal call, as a root span of its own (one every `watchdogTimeout / 3`
   * per client while it holds locks, hence off by default; the renewal metrics are recorded either way).
   * @default false
   */
  readonly renew?: boolean;
}

/** Options of `new FlowlockInstrumentation(config)`, OpenTelemetry's InstrumentationConfig plus flowlock's own. */
export interface FlowlockInstrumentationConfig {
  /**
   * Subscribe at construction, as every OpenTelemetry instrumentation does (NodeSDK expects that);
   * `false`: only when `enable()` is called.
   * @default true
   */
  readonly enabled?: boolean;
  /**
   * Maps a lock name to a low-cardinality group, recorded on every metric as `flowlock.lock.group` (for
   * example `(name) => name.split(':')[0]` groups `order:42` and `order:43` as `order`); a name it
   * maps to undefined gets no group. Metrics never carry lock names otherwise: one series per lock would
   * grow without bound. A throw is caught (and reported to OpenTelemetry's `diag`): the metric is then
   * recorded without a group.
   * @default undefined (no group attribute)
   */
  readonly lockGroup?: (name: string) => string | undefined;
  /**
   * Put the lock's name on spans as `flowlock.lock.name` (a multi-lock's names as `flowlock.lock.names`).
   * Spans are per operation, so a name costs no cardinality there; the Redis client's own spans carry the
   * keys anyway. `false` where names are sensitive.
   * @default true
   */
  readonly lockNameOnSpans?: boolean;
  /** @default { acquire: true, release: true, withLock: true, renew: false } */
  readonly spans?: FlowlockSpansConfig;
}

/** A checked config with every default filled in. */
export interface ResolvedConfig {
  readonly enabled: boolean;
  readonly lockGroup: ((name: string) => string | undefined) | undefined;
  readonly lockNameOnSpans: boolean;
  readonly spans: Readonly<Required<FlowlockSpansConfig>>;
}

const CONFIG_KEYS: ReadonlySet<string> = new Set(['enabled', 'lockGroup', 'lockNameOnSpans', 'spans']);
const SPAN_KEYS: ReadonlySet<string> = new Set(['acquire', 'release', 'withLock', 'renew']);

/** Checks `config` (a caller's, typed or not) and fills in the defaults. */
export function resolveConfig(config: unknown): ResolvedConfig {
  if (config === undefined) config = {};
  checkObject(config, 'config', CONFIG_KEYS);
  const { enabled, lockGroup, lockNameOnSpans, spans = {} } = config;
  if (lockGroup !== undefined && typeof lockGroup !== 'function') {
    throw new TypeError(`config.lockGroup must be a function, got ${describe(lockGroup)}`);
  }
  checkObject(spans, 'config.spans', SPAN_KEYS);
  return {
    enabled: flag(enabled, 'config.enabled', true),
    lockGroup: lockGroup as ResolvedConfig['lockGroup'],
    lockNameOnSpans: flag(lockNameOnSpans, 'config.lockNameOnSpans', true),
    spans: {
      acquire: flag(spans['acquire'], 'config.spans.acquire', true),
      release: flag(spans['release'], 'config.spans.release', true),
      withLock: flag(spans['withLock'], 'config.spans.withLock', true),
      renew: flag(spans['renew'], 'config.spans.renew', false),
    },
  };
}

function checkObject(
  value: unknown,
  argument: string,
  known: ReadonlySet<string>,
): asserts value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`${argument} must be an object, got ${describe(value)}`);
  }
  for (const key of Object.keys(value)) {
    if (!known.has(key)) {
      throw new TypeError(`${argument} has an unknown option "${key}" (known: ${[...known].join(', ')})`);
    }
  }
}

function flag(value: unknown, argument: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new TypeError(`${argument} must be a boolean, got ${describe(value)}`);
  return value;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value;
}
