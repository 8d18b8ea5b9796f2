// flowlock/opentelemetry against real Redis and the real OpenTelemetry SDK: metric names, units, buckets and
// attributes, span attributes and parentage (the Redis client's command spans under flowlock.acquire and
// flowlock.release, the caller's work under flowlock.withLock), events for waits and losses, and that
// enabling, disabling and reconfiguring leave no subscriber behind and no counter off.
import diagnostics from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  context,
  diag,
  DiagLogLevel,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Span,
  ValueType,
  type TracerProvider,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { registerInstrumentations, type Instrumentation } from '@opentelemetry/instrumentation';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import {
  DataPointType,
  MeterProvider,
  MetricReader,
  type DataPoint,
  type Histogram,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FlowlockInstrumentation } from '../../src/opentelemetry/index.js';
import { clientKind, onNodeRedis, type ClientKind } from '../support/clients.js';
import { uniqueName, useRedis, until } from '../support/fixture.js';

const redis = useRedis();

/** A reader to collect() from whenever a test wants to look (cumulative, as Prometheus scrapes). */
class TestReader extends MetricReader {
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

function newTracing(): { provider: BasicTracerProvider; exporter: InMemorySpanExporter } {
  const exporter = new InMemorySpanExporter();
  return { provider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }), exporter };
}

function newMetrics(): { provider: MeterProvider; reader: TestReader } {
  const reader = new TestReader();
  return { provider: new MeterProvider({ readers: [reader] }), reader };
}

/** flowlock's metrics as `reader` sees them now. */
async function collect(reader: MetricReader): Promise<MetricData[]> {
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  return resourceMetrics.scopeMetrics.filter((s) => s.scope.name === 'flowlock').flatMap((s) => s.metrics);
}

function metric(metrics: readonly MetricData[], name: string): MetricData {
  const found = metrics.find((m) => m.descriptor.name === name);
  if (!found) throw new Error(`no metric ${name} among ${metrics.map((m) => m.descriptor.name).join(', ')}`);
  return found;
}

function histogramPoints(metrics: readonly MetricData[], name: string): DataPoint<Histogram>[] {
  const found = metric(metrics, name);
  expect(found.dataPointType).toBe(DataPointType.HISTOGRAM);
  return found.dataPoints as DataPoint<Histogram>[];
}

/** The value of an UpDownCounter (summed over its series), 0 when it has none yet. */
function sumOf(metrics: readonly MetricData[], name: string): number {
  const found = metrics.find((m) => m.descriptor.name === name);
  if (!found) return 0;
  expect(found.dataPointType).toBe(DataPointType.SUM);
  return (found.dataPoints as DataPoint<number>[]).reduce((sum, point) => sum + point.value, 0);
}

/** The histogram points whose attributes are exactly `attributes`. */
function pointsWith(points: readonly DataPoint<Histogram>[], attributes: Attributes): DataPoint<Histogram>[] {
  return points.filter((p) => JSON.stringify(sorted(p.attributes)) === JSON.stringify(sorted(attributes)));
}

function sorted(attributes: Attributes): [string, unknown][] {
  return Object.entries(attributes).sort(([a], [b]) => a.localeCompare(b));
}

/** Sends what OpenTelemetry's diag logger reports as errors into the returned array (diag.disable() stops it). */
function reportDiagErrors(): unknown[] {
  const reported: unknown[] = [];
  diag.setLogger(
    {
      error: (...args: unknown[]) => reported.push(...args),
      warn: () => undefined,
      info: () => undefined,
      debug: () => undefined,
      verbose: () => undefined,
    },
    DiagLogLevel.ERROR,
  );
  return reported;
}

const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;
const idOf = (span: ReadableSpan): string => span.spanContext().spanId;

const IOREDIS_PACKAGES: Partial<Record<ClientKind, string>> = {
  ioredis5: 'ioredis',
  ioredis6: 'ioredis6',
  iovalkey: 'iovalkey',
};

/**
 * Command spans of the client under test, made the way an application gets them. ioredis 5 and 6 and
 * iovalkey: OpenTelemetry's ioredis instrumentation, its patch applied to the very class the tests use
 * (vitest loads packages past the require hook it would otherwise patch through). node-redis, which has no
 * OpenTelemetry instrumentation here: spans started from its own `node-redis:command` TracingChannel in the
 * active context, as APMs consume it. Both name a span after its command, in lower case.
 */
function traceCommands(tracerProvider: TracerProvider): () => void {
  // GLIDE traces its commands in its native core (its own OpenTelemetry exporter), not through this API.
  if (clientKind === 'glide') return () => undefined;
  if (onNodeRedis) {
    const tracer = tracerProvider.getTracer('test-node-redis');
    const open = new WeakMap<object, Span>();
    const end = (message: unknown) => open.get(message as object)?.end();
    const handlers: [string, (message: unknown) => void][] = [
      [
        'start',
        (message) => {
          const command = (message as { command: string }).command.toLowerCase();
          open.set(message as object, tracer.startSpan(command, { kind: SpanKind.CLIENT }, context.active()));
        },
      ],
      ['asyncEnd', end],
      ['error', end],
    ];
    for (const [event, handler] of handlers) diagnostics.subscribe(`tracing:node-redis:command:${event}`, handler);
    return () => {
      for (const [event, handler] of handlers) diagnostics.unsubscribe(`tracing:node-redis:command:${event}`, handler);
    };
  }
  const packageName = IOREDIS_PACKAGES[clientKind];
  if (packageName === undefined) throw new Error(`no command spans for ${clientKind}`);
  const moduleExports: unknown = createRequire(import.meta.url)(packageName);
  const instrumentation = new IORedisInstrumentation({ enabled: false });
  instrumentation.setTracerProvider(tracerProvider);
  const [definition] = instrumentation.getModuleDefinitions();
  if (!definition?.patch || !definition.unpatch) throw new Error('the ioredis instrumentation patches nothing');
  definition.patch(moduleExports);
  return () => definition.unpatch?.(moduleExports);
}

const tracing = newTracing();
const tracer = tracing.provider.getTracer('test');
const contextManager = new AsyncLocalStorageContextManager();
/** The instrumentation under test; each test gets a fresh meter (metrics are cumulative). */
const instrumentation = new FlowlockInstrumentation({ enabled: false });
let meters = newMetrics();
let untraceCommands: (() => void) | undefined;

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  instrumentation.setTracerProvider(tracing.provider);
  instrumentation.enable();
  untraceCommands = traceCommands(tracing.provider);
});

afterAll(async () => {
  instrumentation.disable();
  untraceCommands?.();
  context.disable();
  await tracing.provider.shutdown();
});

beforeEach(() => {
  tracing.exporter.reset();
  meters = newMetrics();
  instrumentation.setMeterProvider(meters.provider);
});

afterEach(async () => {
  instrumentation.setConfig({});
  instrumentation.enable();
  await meters.provider.shutdown();
});

/** A lock client whose connection is up, so that no command of the test waits in an offline queue. */
async function readyLocks(options?: Parameters<typeof redis.locks>[0]) {
  const locks = redis.locks(options);
  await locks.getLock(uniqueName('warm-up')).isLocked();
  return locks;
}

describe('FlowlockInstrumentation: the OpenTelemetry interface', () => {
  it('is an Instrumentation named flowlock at the package version, and registers as NodeSDK registers it', async () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    const own = new FlowlockInstrumentation({ enabled: false });
    const asOtel: Instrumentation = own;
    expect(asOtel.instrumentationName).toBe('flowlock');
    expect(asOtel.instrumentationVersion).toBe(pkg.version);
    expect(own.getConfig()).toEqual({ enabled: false });

    // registerInstrumentations is what NodeSDK.start() calls: providers first, then enable().
    const ownTracing = newTracing();
    const ownMetrics = newMetrics();
    const unregister = registerInstrumentations({
      instrumentations: [own],
      tracerProvider: ownTracing.provider,
      meterProvider: ownMetrics.provider,
    });
    const locks = await readyLocks();
    await locks.getLock(uniqueName()).withLock(() => undefined);
    unregister();
    await locks.getLock(uniqueName()).withLock(() => undefined);

    const names = ownTracing.exporter.getFinishedSpans().map((s) => s.name);
    expect(names.sort()).toEqual(['flowlock.acquire', 'flowlock.release', 'flowlock.withLock']);
    expect(ownTracing.exporter.getFinishedSpans()[0]?.instrumentationScope).toEqual({
      name: 'flowlock',
      version: pkg.version,
    });
    const acquisitions = histogramPoints(await collect(ownMetrics.reader), 'flowlock.acquire.duration');
    expect(acquisitions.reduce((n, p) => n + p.value.count, 0)).toBe(1);
    await ownMetrics.provider.shutdown();
  });

  it('rejects a bad config with a TypeError that names the option, and keeps the previous one', () => {
    const bad: [unknown, RegExp][] = [
      [null, /^config must be an object, got null/],
      [{ lockGroup: 'orders' }, /^config\.lockGroup must be a function, got string/],
      [{ lockNameOnSpans: 'no' }, /^config\.lockNameOnSpans must be a boolean/],
      [{ enabled: 1 }, /^config\.enabled must be a boolean/],
      [{ spans: [] }, /^config\.spans must be an object, got an array/],
      [{ spans: { renew: 'yes' } }, /^config\.spans\.renew must be a boolean/],
      [{ spans: { commands: true } }, /^config\.spans has an unknown option "commands"/],
      [{ lockGroups: () => 'x' }, /^config has an unknown option "lockGroups"/],
    ];
    const own = new FlowlockInstrumentation({ enabled: false, lockNameOnSpans: false });
    for (const [config, message] of bad) {
      expect(() => new FlowlockInstrumentation(config as never)).toThrow(TypeError);
      expect(() => new FlowlockInstrumentation(config as never)).toThrow(message);
      expect(() => own.setConfig(config as never)).toThrow(message);
    }
    expect(own.getConfig()).toEqual({ enabled: false, lockNameOnSpans: false });
  });
});

describe('FlowlockInstrumentation: metrics', () => {
  it('records acquisitions, holds and waits in seconds with bucket advice, without lock names', async () => {
    const locks = await readyLocks();
    const holder = await readyLocks();
    const name = uniqueName('otel');
    const lock = locks.getLock(name);

    await lock.withLock(() => undefined); // acquired, uncontended, watchdog mode
    const held = await holder.getLock(name).acquire({ leaseTime: 10_000 });
    const waiting = lock.withLock(() => undefined, { waitTime: 10_000 }); // acquired after a wait
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => sumOf(await collect(meters.reader), 'flowlock.wait.active') === 1, 'a waiter');
    expect(sumOf(await collect(meters.reader), 'flowlock.hold.active')).toBe(1);
    await held.release();
    await waiting;
    const heldAgain = await holder.getLock(name).acquire();
    expect(await locks.run(() => lock.tryLock())).toBe(false); // timeout, no error
    await heldAgain.release();
    await locks.run(async () => {
      await lock.lock();
      await lock.lock(); // reentered
      await lock.unlock();
      await lock.unlock();
    });

    const metrics = await collect(meters.reader);
    const acquire = metric(metrics, 'flowlock.acquire.duration');
    expect(acquire.descriptor).toMatchObject({ unit: 's', valueType: ValueType.DOUBLE });
    const acquisitions = histogramPoints(metrics, 'flowlock.acquire.duration');
    for (const point of acquisitions) {
      expect(point.value.buckets.boundaries).toEqual([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60]);
    }
    const fresh = { 'flowlock.acquire.outcome': 'acquired', 'flowlock.lock.kind': 'lock' };
    const uncontended = pointsWith(acquisitions, {
      ...fresh,
      'flowlock.acquire.contended': false,
      'flowlock.acquire.reentrant': false,
    });
    const contended = pointsWith(acquisitions, {
      ...fresh,
      'flowlock.acquire.contended': true,
      'flowlock.acquire.reentrant': false,
    });
    // Five fresh holds; the waiting withLock is contended (a newcomer right after a release may be too, as it
    // lets a woken waiter go first).
    expect((uncontended[0]?.value.count ?? 0) + (contended[0]?.value.count ?? 0)).toBe(5);
    expect(contended[0]?.value.count).toBeGreaterThanOrEqual(1);
    expect(contended[0]?.value.sum).toBeGreaterThan(0);
    const timeout = { 'flowlock.acquire.outcome': 'timeout', 'flowlock.acquire.contended': true };
    expect(pointsWith(acquisitions, { ...timeout, 'flowlock.lock.kind': 'lock' })[0]?.value.count).toBe(1);
    const reentered = {
      'flowlock.acquire.outcome': 'reentered',
      'flowlock.acquire.contended': false,
      'flowlock.acquire.reentrant': true,
      'flowlock.lock.kind': 'lock',
    };
    expect(pointsWith(acquisitions, reentered)[0]?.value.count).toBe(1);

    expect(metric(metrics, 'flowlock.hold.duration').descriptor.unit).toBe('s');
    const holds = histogramPoints(metrics, 'flowlock.hold.duration');
    expect(holds[0]?.value.buckets.boundaries).toEqual([0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800]);
    const released = { 'flowlock.hold.end_reason': 'released', 'flowlock.lock.kind': 'lock' };
    expect(pointsWith(holds, { ...released, 'flowlock.lease.mode': 'lease' })[0]?.value.count).toBe(1);
    expect(pointsWith(holds, { ...released, 'flowlock.lease.mode': 'watchdog' })[0]?.value.count).toBe(4);

    expect(metric(metrics, 'flowlock.hold.active').descriptor.unit).toBe('{hold}');
    expect(metric(metrics, 'flowlock.wait.active').descriptor.unit).toBe('{waiter}');
    expect(sumOf(metrics, 'flowlock.hold.active')).toBe(0);
    expect(sumOf(metrics, 'flowlock.wait.active')).toBe(0);
    expect(JSON.stringify(metrics)).not.toContain(name);
    const keys = new Set(metrics.flatMap((m) => m.dataPoints.flatMap((p) => Object.keys(p.attributes))));
    expect([...keys].sort()).toEqual([
      'flowlock.acquire.contended',
      'flowlock.acquire.outcome',
      'flowlock.acquire.reentrant',
      'flowlock.hold.end_reason',
      'flowlock.lease.mode',
      'flowlock.lock.kind',
    ]);
  });

  it('adds flowlock.lock.group from lockGroup, and records without one when lockGroup throws', async () => {
    const locks = await readyLocks();
    const name = uniqueName('orders');
    instrumentation.setConfig({ lockGroup: (n) => (n === name ? 'orders' : undefined) });
    await locks.getLock(name).withLock(() => undefined);
    await locks.getLock(uniqueName('other')).withLock(() => undefined);
    let metrics = await collect(meters.reader);
    const groups = (metricName: string) =>
      metric(metrics, metricName).dataPoints.map((p) => p.attributes['flowlock.lock.group']);
    expect(groups('flowlock.acquire.duration').sort()).toEqual(['orders', undefined]);
    expect(groups('flowlock.hold.duration').sort()).toEqual(['orders', undefined]);
    expect(JSON.stringify(metrics)).not.toContain(name);

    const reported = reportDiagErrors();
    try {
      instrumentation.setConfig({
        lockGroup: () => {
          throw new Error('no group today');
        },
      });
      await locks.getLock(name).withLock(() => undefined);
    } finally {
      diag.disable();
    }
    // Recorded all the same (without a group), and the error went to diag, not to an uncaughtException.
    metrics = await collect(meters.reader);
    const counts = histogramPoints(metrics, 'flowlock.acquire.duration').map((p) => p.value.count);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(3);
    expect(reported).toContainEqual(expect.objectContaining({ message: 'no group today' }));
  });

  it("counts waits that have no owner (a semaphore's) one by one, each with its own flowlock.wait event", async () => {
    const locks = await readyLocks();
    const semaphore = locks.getSemaphore(uniqueName('permits'));
    tracing.exporter.reset();
    const waiting = [semaphore.acquire(), semaphore.acquire()];
    for (const w of waiting) w.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => sumOf(await collect(meters.reader), 'flowlock.wait.active') === 2, 'two waiters');
    await semaphore.addPermits(2);
    await Promise.all(waiting);

    const metrics = await collect(meters.reader);
    expect(sumOf(metrics, 'flowlock.wait.active')).toBe(0);
    expect(metric(metrics, 'flowlock.wait.active').dataPoints.map((p) => p.attributes)).toEqual([
      { 'flowlock.lock.kind': 'semaphore' },
    ]);
    const acquisitions = histogramPoints(metrics, 'flowlock.acquire.duration');
    expect(acquisitions.map((p) => [p.attributes['flowlock.lock.kind'], p.value.count])).toEqual([['semaphore', 2]]);
    const spans = tracing.exporter.getFinishedSpans().filter((s) => s.name === 'flowlock.acquire');
    expect(spans.map((s) => s.events.map((e) => e.name))).toEqual([['flowlock.wait'], ['flowlock.wait']]);
    for (const span of spans) expect(span.attributes['flowlock.owner']).toBeUndefined();
  });

  it('counts a lost hold by its reason, and renewals with the watchdog tick delay', async () => {
    const locks = await readyLocks({ watchdogTimeout: 1500 });
    const name = uniqueName();
    const lease = await locks.getLock(name).acquire();
    await sleep(600); // one renewal (every 500 ms)
    await redis.admin.del(name);
    await until(() => Promise.resolve(lease.signal.aborted), 'the loss', 3000);

    const metrics = await collect(meters.reader);
    const losses = metric(metrics, 'flowlock.hold.losses');
    expect(losses.descriptor.unit).toBe('{loss}');
    expect(losses.dataPoints).toEqual([
      expect.objectContaining({
        attributes: {
          'flowlock.hold.loss_reason': 'renewal_rejected',
          'flowlock.lease.mode': 'watchdog',
          'flowlock.lock.kind': 'lock',
        },
        value: 1,
      }),
    ]);
    const lost = histogramPoints(metrics, 'flowlock.hold.duration');
    expect(lost.map((p) => p.attributes['flowlock.hold.end_reason'])).toEqual(['lost']);
    expect(sumOf(metrics, 'flowlock.hold.active')).toBe(0);

    const renewals = histogramPoints(metrics, 'flowlock.renew.duration');
    expect(metric(metrics, 'flowlock.renew.duration').descriptor.unit).toBe('s');
    expect(renewals.map((p) => p.attributes)).toEqual([{ 'flowlock.renew.outcome': 'ok' }]);
    expect(renewals[0]?.value.count).toBeGreaterThanOrEqual(1);
    expect(renewals[0]?.value.buckets.boundaries).toEqual([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]);
    const delays = histogramPoints(metrics, 'flowlock.watchdog.delay');
    expect(delays.map((p) => p.attributes)).toEqual([{}]);
    expect(delays[0]?.value.count).toBe(renewals[0]?.value.count);
    await expect(lease.release()).rejects.toMatchObject({ code: 'LOCK_NOT_HELD' });
  });
});

describe('FlowlockInstrumentation: spans', () => {
  // GLIDE's command spans come from its native core (see traceCommands).
  it.skipIf(clientKind === 'glide')(
    "nests the caller's work under flowlock.withLock, and the Redis commands under acquire and release",
    async () => {
      const locks = await readyLocks();
      const name = uniqueName();
      tracing.exporter.reset();
      let token: bigint | undefined;
      await tracer.startActiveSpan('request', async (request) => {
        await locks.getLock(name).withLock(async (_signal, lease) => {
          token = lease.fencingToken;
          await tracer.startActiveSpan('work', async (work) => {
            await sleep(1);
            work.end();
          });
        });
        request.end();
      });

      const finished = tracing.exporter.getFinishedSpans();
      const one = (spanName: string): ReadableSpan => {
        const found = finished.filter((s) => s.name === spanName);
        expect(found, spanName).toHaveLength(1);
        return found[0]!;
      };
      const request = one('request');
      const withLock = one('flowlock.withLock');
      const acquire = one('flowlock.acquire');
      const release = one('flowlock.release');
      expect(parentOf(withLock)).toBe(idOf(request));
      expect(parentOf(one('work'))).toBe(idOf(withLock));
      expect(parentOf(acquire)).toBe(idOf(withLock));
      expect(parentOf(release)).toBe(idOf(withLock));
      for (const span of [withLock, acquire, release]) {
        expect(span.kind).toBe(SpanKind.INTERNAL);
        expect(span.status.code).toBe(SpanStatusCode.UNSET);
        expect(span.instrumentationScope.name).toBe('flowlock');
      }

      // The client's own spans of the acquire and release scripts, one level down.
      const scripts = new Set(['evalsha', 'eval']);
      const commandsUnder = (span: ReadableSpan) =>
        finished.filter((s) => parentOf(s) === idOf(span)).map((s) => s.name);
      expect(commandsUnder(acquire).filter((c) => scripts.has(c)).length).toBeGreaterThanOrEqual(1);
      expect(commandsUnder(release).filter((c) => scripts.has(c)).length).toBeGreaterThanOrEqual(1);
      const clientSpans = finished.filter((s) => s.kind === SpanKind.CLIENT);
      expect(clientSpans.every((s) => parentOf(s) === idOf(acquire) || parentOf(s) === idOf(release))).toBe(true);

      expect(token).toBeTypeOf('bigint');
      expect(withLock.attributes).toEqual({
        'flowlock.lock.name': name,
        'flowlock.lock.kind': 'lock',
        'flowlock.lease.mode': 'watchdog',
        'flowlock.acquire.outcome': 'acquired',
        'flowlock.fencing_token': String(token),
      });
      expect(acquire.attributes).toEqual({
        'flowlock.lock.name': name,
        'flowlock.lock.kind': 'lock',
        'flowlock.lease.mode': 'watchdog',
        'flowlock.owner': expect.stringMatching(new RegExp(`^${locks.clientId}:\\d+$`)) as string,
        'flowlock.acquire.outcome': 'acquired',
        'flowlock.acquire.contended': false,
        'flowlock.acquire.reentrant': false,
        'flowlock.attempts': 1,
        'flowlock.wakeups.message': 0,
        'flowlock.wakeups.timeout': 0,
        'flowlock.hold_count': 1,
        'flowlock.fencing_token': String(token),
      });
      expect(release.attributes).toMatchObject({
        'flowlock.lock.name': name,
        'flowlock.release.force': false,
        'flowlock.release.freed': true,
        'flowlock.release.remaining': 0,
        'flowlock.fencing_token': String(token),
      });
    },
  );

  it('marks only a throw as an error: a tryLock that gets false is not one, a withLock that times out is', async () => {
    const locks = await readyLocks();
    const holder = await readyLocks();
    const name = uniqueName();
    const held = await holder.getLock(name).acquire();
    tracing.exporter.reset();
    expect(await locks.run(() => locks.getLock(name).tryLock())).toBe(false);
    // A wait time that outlasts the first attempt's reply on a loaded machine: an attempt still unanswered at
    // the deadline ends the acquisition without knowing whether it was contended.
    await expect(locks.getLock(name).withLock(() => undefined, { waitTime: 1000 })).rejects.toMatchObject({
      code: 'LOCK_ACQUIRE_TIMEOUT',
    });
    await held.release();

    const finished = tracing.exporter.getFinishedSpans();
    const [tried, timedOut] = finished.filter((s) => s.name === 'flowlock.acquire');
    for (const acquire of [tried, timedOut]) {
      expect(acquire?.attributes).toMatchObject({
        'flowlock.acquire.outcome': 'timeout',
        'flowlock.acquire.contended': true,
      });
      expect(acquire?.attributes['flowlock.acquire.reentrant']).toBeUndefined();
    }
    expect(tried?.status.code).toBe(SpanStatusCode.UNSET);
    expect(tried?.attributes['error.type']).toBeUndefined();
    const withLock = finished.find((s) => s.name === 'flowlock.withLock');
    expect(parentOf(timedOut!)).toBe(idOf(withLock!));
    expect(withLock?.attributes).toMatchObject({
      'flowlock.acquire.outcome': 'timeout',
      'error.type': 'LOCK_ACQUIRE_TIMEOUT',
    });
    expect(withLock?.attributes['flowlock.fencing_token']).toBeUndefined();
    expect(withLock?.status).toEqual({ code: SpanStatusCode.ERROR, message: expect.any(String) as string });
    expect(withLock?.events.map((e) => e.name)).toEqual(['exception']);
  });

  it('adds flowlock.wait to the span of an acquisition that has to wait', async () => {
    const locks = await readyLocks();
    const holder = await readyLocks();
    const name = uniqueName();
    const held = await holder.getLock(name).acquire({ leaseTime: 10_000 });
    tracing.exporter.reset();
    const waiting = locks.getLock(name).withLock(() => undefined, { waitTime: 10_000 });
    waiting.catch(() => undefined); // awaited below; a failed assertion before that must not leave it unhandled
    await until(async () => sumOf(await collect(meters.reader), 'flowlock.wait.active') === 1, 'a waiter');
    await held.release();
    await waiting;

    const acquire = tracing.exporter.getFinishedSpans().filter((s) => s.name === 'flowlock.acquire');
    expect(acquire).toHaveLength(1);
    expect(acquire[0]?.attributes).toMatchObject({ 'flowlock.acquire.contended': true });
    expect(acquire[0]?.attributes['flowlock.attempts']).toBeGreaterThanOrEqual(2);
    const events = acquire[0]?.events ?? [];
    expect(events.map((e) => e.name)).toEqual(['flowlock.wait']);
    const ttl = events[0]?.attributes?.['flowlock.holder_ttl_ms'];
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(10_000);
  });

  it("shows a lost hold as flowlock.lost inside the critical section's span", async () => {
    const locks = await readyLocks({ watchdogTimeout: 1500 });
    const name = uniqueName();
    tracing.exporter.reset();
    const outcome = locks.getLock(name).withLock(async (signal) => {
      await redis.admin.del(name); // the watchdog's next renewal finds it gone
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      return 'done';
    });
    await expect(outcome).rejects.toMatchObject({ code: 'LOCK_LOST', result: 'done' });

    const withLock = tracing.exporter.getFinishedSpans().filter((s) => s.name === 'flowlock.withLock');
    expect(withLock).toHaveLength(1);
    const lost = withLock[0]?.events.filter((e) => e.name === 'flowlock.lost');
    expect(lost?.map((e) => e.attributes)).toEqual([{ 'flowlock.hold.loss_reason': 'renewal_rejected' }]);
    expect(withLock[0]?.status.code).toBe(SpanStatusCode.ERROR);
    expect(withLock[0]?.attributes['error.type']).toBe('LOCK_LOST');
  });

  it('keeps renewals out of the callers’ traces: root flowlock.renew spans when asked for, none by default', async () => {
    const renewSpans = async (): Promise<{ renew: ReadableSpan[]; request: ReadableSpan; all: ReadableSpan[] }> => {
      // Renewals every 500 ms: a 1 s hold is renewed at least once, and a stall of a loaded machine does not
      // cost it the lease.
      const locks = await readyLocks({ watchdogTimeout: 1500 });
      tracing.exporter.reset();
      await tracer.startActiveSpan('request', async (request) => {
        await locks.getLock(uniqueName()).withLock(() => sleep(1000));
        request.end();
      });
      const all = tracing.exporter.getFinishedSpans();
      const request = all.find((s) => s.name === 'request')!;
      return { renew: all.filter((s) => s.name === 'flowlock.renew'), request, all };
    };

    const quiet = await renewSpans();
    expect(quiet.renew).toEqual([]);
    const requestTrace = quiet.all.filter((s) => s.spanContext().traceId === quiet.request.spanContext().traceId);
    // The request's trace has one acquire and one release script call, not a renewal's.
    const names = (spans: ReadableSpan[]) => spans.map((s) => s.name).sort();
    const flowlockSpans = ['flowlock.acquire', 'flowlock.release', 'flowlock.withLock', 'request'];
    const requestClientSpans = requestTrace.filter((s) => s.kind === SpanKind.CLIENT);
    expect(names(requestTrace.filter((s) => s.kind !== SpanKind.CLIENT))).toEqual(flowlockSpans);
    expect(requestClientSpans.length).toBeLessThanOrEqual(4); // EVALSHA, or EVALSHA + EVAL on NOSCRIPT, twice

    instrumentation.setConfig({ spans: { renew: true } });
    const traced = await renewSpans();
    expect(traced.renew.length).toBeGreaterThanOrEqual(1);
    for (const renew of traced.renew) {
      expect(parentOf(renew)).toBeUndefined();
      expect(renew.spanContext().traceId).not.toBe(traced.request.spanContext().traceId);
      expect(renew.attributes).toMatchObject({ 'flowlock.renew.locks': 1, 'flowlock.renew.rejected': 0 });
      expect(renew.attributes['flowlock.watchdog.delay_ms']).toBeGreaterThanOrEqual(0);
      // The renewal script call is the renew span's child (GLIDE's command spans are not seen here).
      if (clientKind !== 'glide') {
        expect(traced.all.filter((s) => parentOf(s) === idOf(renew)).map((s) => s.name)).toContain('evalsha');
      }
    }
  });

  it('leaves lock names off spans with lockNameOnSpans: false', async () => {
    const locks = await readyLocks();
    const name = uniqueName();
    instrumentation.setConfig({ lockNameOnSpans: false });
    tracing.exporter.reset();
    await locks.getLock(name).withLock(() => undefined);
    const flowlockSpans = tracing.exporter.getFinishedSpans().filter((s) => s.name.startsWith('flowlock.'));
    expect(flowlockSpans).toHaveLength(3);
    for (const span of flowlockSpans) {
      expect(span.attributes['flowlock.lock.name']).toBeUndefined();
      expect(span.attributes['flowlock.lock.kind']).toBe('lock');
    }
  });
});

describe('FlowlockInstrumentation: subscribing', () => {
  const channelNames = [
    ...['acquire', 'release', 'withLock', 'renew'].flatMap((n) =>
      ['start', 'end', 'asyncStart', 'asyncEnd', 'error'].map((e) => `tracing:flowlock:${n}:${e}`),
    ),
    ...['wait:start', 'wait:end', 'hold:start', 'hold:end', 'pubsub'].map((n) => `flowlock:${n}`),
  ];

  it('disable() unsubscribes from every channel; enable() twice subscribes once', async () => {
    const locks = await readyLocks();
    instrumentation.enable();
    tracing.exporter.reset();
    await locks.getLock(uniqueName()).withLock(() => undefined);
    expect(tracing.exporter.getFinishedSpans().filter((s) => s.name === 'flowlock.withLock')).toHaveLength(1);
    let points = histogramPoints(await collect(meters.reader), 'flowlock.acquire.duration');
    expect(points.reduce((n, p) => n + p.value.count, 0)).toBe(1);

    instrumentation.disable();
    instrumentation.disable();
    for (const name of channelNames) expect(diagnostics.hasSubscribers(name), name).toBe(false);
    for (const name of ['acquire', 'release', 'withLock', 'renew']) {
      expect(diagnostics.tracingChannel(`flowlock:${name}`).hasSubscribers, name).toBe(false);
    }
    tracing.exporter.reset();
    await locks.getLock(uniqueName()).withLock(() => undefined);
    expect(tracing.exporter.getFinishedSpans().filter((s) => s.name.startsWith('flowlock.'))).toEqual([]);
    points = histogramPoints(await collect(meters.reader), 'flowlock.acquire.duration');
    expect(points.reduce((n, p) => n + p.value.count, 0)).toBe(1);
  });

  it('stays idle while nothing records (no SDK), and traces once a tracer provider is registered', async () => {
    const locks = await readyLocks();
    instrumentation.disable();
    // No provider of its own and none registered globally: every span and metric would be a no-op.
    const idle = new FlowlockInstrumentation();
    const global = newTracing();
    try {
      for (const name of ['acquire', 'release', 'withLock', 'renew']) {
        expect(diagnostics.tracingChannel(`flowlock:${name}`).hasSubscribers, name).toBe(false);
      }
      expect(diagnostics.hasSubscribers('flowlock:hold:end')).toBe(false);
      await locks.getLock(uniqueName()).withLock(() => undefined);

      expect(trace.setGlobalTracerProvider(global.provider)).toBe(true);
      // The next new hold wakes it up; from the call after that on, everything is traced.
      await locks.getLock(uniqueName()).withLock(() => undefined);
      await until(() => Promise.resolve(diagnostics.tracingChannel('flowlock:acquire').hasSubscribers), 'awake');
      global.exporter.reset();
      await locks.getLock(uniqueName()).withLock(() => undefined);
      const names = global.exporter.getFinishedSpans().map((s) => s.name);
      expect(names.sort()).toEqual(['flowlock.acquire', 'flowlock.release', 'flowlock.withLock']);
    } finally {
      idle.disable();
      trace.disable();
      await global.provider.shutdown();
      instrumentation.enable();
    }
    for (const name of ['acquire', 'release', 'withLock', 'renew']) {
      expect(diagnostics.tracingChannel(`flowlock:${name}`).hasSubscribers, name).toBe(true);
    }
  });

  it('counts only the holds it saw begin, moves them to a new meter, and takes them back on disable()', async () => {
    const locks = await readyLocks();
    instrumentation.disable();
    // Someone else listening makes the library announce holds while this instrumentation does not.
    const other = (): void => undefined;
    diagnostics.subscribe('flowlock:hold:start', other);
    diagnostics.subscribe('flowlock:hold:end', other);
    try {
      const before = await locks.getLock(uniqueName()).acquire();
      instrumentation.enable();
      const after = await locks.getLock(uniqueName()).acquire();
      expect(sumOf(await collect(meters.reader), 'flowlock.hold.active')).toBe(1);
      await before.release(); // its end is published, but its start was not counted here
      expect(sumOf(await collect(meters.reader), 'flowlock.hold.active')).toBe(1);

      const next = newMetrics();
      instrumentation.setMeterProvider(next.provider);
      expect(sumOf(await collect(meters.reader), 'flowlock.hold.active')).toBe(0);
      expect(sumOf(await collect(next.reader), 'flowlock.hold.active')).toBe(1);
      instrumentation.disable();
      expect(sumOf(await collect(next.reader), 'flowlock.hold.active')).toBe(0);
      await after.release();
      expect(sumOf(await collect(next.reader), 'flowlock.hold.active')).toBe(0);
      await next.provider.shutdown();
    } finally {
      diagnostics.unsubscribe('flowlock:hold:start', other);
      diagnostics.unsubscribe('flowlock:hold:end', other);
    }
  });

  it('never throws into the library: a failing subscriber is reported to diag', async () => {
    const locks = await readyLocks();
    const reported = reportDiagErrors();
    const broken = new Error('span processor down');
    const throwing = {
      getTracer: () => ({
        startSpan: () => {
          throw broken;
        },
      }),
    } as unknown as TracerProvider;
    try {
      instrumentation.setTracerProvider(throwing);
      const result = await locks.getLock(uniqueName()).withLock(() => 'still works');
      expect(result).toBe('still works');
    } finally {
      instrumentation.setTracerProvider(tracing.provider);
      diag.disable();
    }
    expect(reported).toContain(broken);
    // Metrics went on without the spans.
    const points = histogramPoints(await collect(meters.reader), 'flowlock.acquire.duration');
    expect(points.reduce((n, p) => n + p.value.count, 0)).toBe(1);
  });
});
