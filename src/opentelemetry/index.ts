/**
 * `flowlock/opentelemetry`: OpenTelemetry spans and metrics for flowlock, as a subscriber of its
 * `node:diagnostics_channel` channels. Depends on `@opentelemetry/api` only (an optional peer of the
 * package); the main entry never loads this one, so the cost is zero for whoever does not import it.
 *
 * FlowlockInstrumentation has the shape of OpenTelemetry's `Instrumentation` interface, so that it goes
 * into `new NodeSDK({ instrumentations: [...] })` or `registerInstrumentations` as it is, without a
 * dependency on the experimental `@opentelemetry/instrumentation` package (it patches nothing: the channels
 * are process-global, so it sees every copy of flowlock loaded, ESM and CommonJS, whenever they load).
 *
 * @module flowlock/opentelemetry
 */
import { metrics, trace, type MeterProvider, type Tracer, type TracerProvider } from '@opentelemetry/api';
import { resolveConfig, type FlowlockInstrumentationConfig, type ResolvedConfig } from './config.js';
import { Instruments } from './instruments.js';
import { ChannelSubscriber } from './subscriber.js';

export type { FlowlockInstrumentationConfig, FlowlockSpansConfig } from './config.js';

const NAME = 'flowlock';
/** The package's version (a test checks it against package.json): the tracer's and meter's scope version. */
const VERSION = '0.1.0';

/**
 * Whether the global tracer provider is still the API's own proxy with nothing behind it (no SDK registered
 * one): spans would record nothing. The proxy answers `getDelegateTracer` with undefined until then.
 */
function globalTracingOff(): boolean {
  const global = trace.getTracerProvider() as TracerProvider & {
    getDelegateTracer?: (name: string, version?: string) => Tracer | undefined;
  };
  return typeof global.getDelegateTracer === 'function' && global.getDelegateTracer(NAME, VERSION) === undefined;
}

/**
 * Spans and metrics of every flowlock client in the process. Subscribes at construction unless
 * `enabled: false` (as OpenTelemetry instrumentations do); `disable()` unsubscribes everything.
 *
 * Without `setTracerProvider`/`setMeterProvider` (which NodeSDK calls), it uses the global providers: the
 * tracer follows a provider registered later, but the meter is the one registered when it was constructed
 * (OpenTelemetry's global meter provider has no late binding), so register the SDK first.
 *
 * While there is nothing to record to (no provider of its own, the global tracer provider the API's no-op,
 * the meter a no-op) it stays idle: it listens only for new holds and waits, to notice a tracer provider
 * registered later, and the library does not trace its calls for it, so that it costs next to nothing.
 */
export class FlowlockInstrumentation {
  readonly instrumentationName = NAME;
  readonly instrumentationVersion = VERSION;
  #config: FlowlockInstrumentationConfig;
  /** What the subscriber reads at each event (see Host); the setters replace its fields. */
  readonly #host: { config: ResolvedConfig; tracer: Tracer; instruments: Instruments };
  #subscriber: ChannelSubscriber | undefined;
  /** setTracerProvider was called: spans go to that provider, not the global one. */
  #ownTracer = false;
  /** What the active counters read at a collection: the open holds and waits of the subscriber now. */
  readonly #openNow = (): ReturnType<ChannelSubscriber['openNow']> | undefined => this.#subscriber?.openNow();

  /** @throws TypeError naming the option, for a bad `config`. */
  constructor(config: FlowlockInstrumentationConfig = {}) {
    const resolved = resolveConfig(config);
    this.#config = { ...config, enabled: resolved.enabled };
    this.#host = {
      config: resolved,
      tracer: trace.getTracer(NAME, VERSION),
      instruments: new Instruments(metrics.getMeter(NAME, VERSION), this.#openNow),
    };
    if (resolved.enabled) this.enable();
  }

  /** Subscribes to flowlock's channels; a second call does nothing. */
  enable(): void {
    if (this.#subscriber) return;
    this.#subscriber = new ChannelSubscriber(this.#host);
    if (this.#nothingToRecord()) {
      this.#subscriber.awaitTelemetry(
        () => this.#nothingToRecord(),
        () => this.#wake(),
      );
    } else {
      this.#subscriber.subscribe();
    }
  }

  /** Whether spans and metrics would all be no-ops now. */
  #nothingToRecord(): boolean {
    return !this.#ownTracer && !this.#host.instruments.recording && globalTracingOff();
  }

  /** An idle subscriber whose telemetry has somewhere to go now subscribes in full. */
  #wake(): void {
    if (!this.#subscriber?.idle || this.#nothingToRecord()) return;
    this.disable();
    this.enable();
  }

  /**
   * Unsubscribes from every channel. Operations in flight are followed no further: their spans end now, and
   * their holds and waits leave `flowlock.hold.active` and `flowlock.wait.active`.
   */
  disable(): void {
    this.#subscriber?.close();
    this.#subscriber = undefined;
  }

  /** Makes spans on `tracerProvider` instead of the global one (NodeSDK calls this). */
  setTracerProvider(tracerProvider: TracerProvider): void {
    this.#host.tracer = tracerProvider.getTracer(NAME, VERSION);
    this.#ownTracer = true;
    this.#wake();
  }

  /** Makes the instruments on `meterProvider`; they count the holds and waits open now from then on. */
  setMeterProvider(meterProvider: MeterProvider): void {
    this.#host.instruments.detach();
    this.#host.instruments = new Instruments(meterProvider.getMeter(NAME, VERSION), this.#openNow);
    this.#wake();
  }

  /**
   * Replaces the config (`enabled` is read at construction only, as in OpenTelemetry's instrumentations). An
   * enabled instrumentation subscribes again under the new config, as disable() and enable() would.
   * @throws TypeError naming the option, for a bad `config` (the previous config then stays).
   */
  setConfig(config: FlowlockInstrumentationConfig = {}): void {
    const resolved = resolveConfig(config);
    this.#config = { ...config, enabled: resolved.enabled };
    this.#host.config = resolved;
    if (!this.#subscriber) return;
    this.disable();
    this.enable();
  }

  /** The configuration it was made with, or last given to `setConfig`. */
  getConfig(): FlowlockInstrumentationConfig {
    return this.#config;
  }
}
