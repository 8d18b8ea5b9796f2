/**
 * What observing the locks costs the process itself, apart from Redis: one lock + unlock cycle (`acquire()`,
 * then the lease's `release()`) against a client that answers every script at once, with no subscriber on
 * the diagnostics channels, with `FlowlockInstrumentation` enabled but no OpenTelemetry SDK, and with the SDK
 * (batch span processor, as NodeSDK sets up; and the simple one, which exports each span as it ends).
 * Without a network in between, the figures are CPU time of this process only: what the library's channels,
 * the instrumentation and the SDK add to every cycle. `npm run bench:adapter` (a vitest run of this file
 * and adapter.bench.ts; this one loads the built package, dist/) writes them to INSTRUMENTATION-OVERHEAD.md;
 * (i) in RESULTS.md shows the same variants on a real server, where a cycle also waits for two round trips.
 */
import { EventEmitter } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { expect, it } from 'vitest';
import { createLockClient } from 'flowlock';
import { FlowlockInstrumentation } from 'flowlock/opentelemetry';
import { luaSources } from '../src/redis/lua-scripts.generated.ts';

/** Cycles per timed round; rounds alternate the variants, each starting with another. */
const CYCLES = Number(process.env['INSTRUMENTATION_BENCH_CYCLES'] ?? 5000);
const ROUNDS = 11;

/** An ioredis-shaped client (the adapter's detection) whose lock scripts succeed at once: no I/O at all. */
function instantClient(): object {
  let token = 1;
  // An EventEmitter like ioredis' client: the lock client listens for its end (it closes with it).
  return Object.assign(new EventEmitter(), {
    status: 'ready',
    options: {},
    // The lock's acquire script (reply: acquired, token, hold count 1, owner 1) and its release (reply: the
    // lock freed by owner 1, nobody woken), told apart by their SHA: their argument counts are the same.
    evalsha: (sha: string) =>
      sha === luaSources['lock/acquire'].sha1
        ? Promise.resolve([1, token++, 1, 1])
        : sha === luaSources['lock/release'].sha1
          ? Promise.resolve([0, 1, 0])
          : Promise.reject(new Error(`not used: script ${sha}`)),
    eval: () => Promise.reject(new Error('not used')),
    call: () => Promise.resolve(''),
    duplicate: () => {
      throw new Error('not used');
    },
    info: () => Promise.resolve('maxmemory_policy:noeviction\r\n'),
  });
}

/** An instrumentation on its own SDK providers (in-memory exporters, dropped every 100 ms), disabled. */
function withSdk(processor: (exporter: InMemorySpanExporter) => SpanProcessor): {
  instrumentation: FlowlockInstrumentation;
  shutdown: () => Promise<void>;
} {
  const exporter = new InMemorySpanExporter();
  const drop = setInterval(() => exporter.reset(), 100);
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [processor(exporter)] });
  const meterProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
        exportIntervalMillis: 1000,
      }),
    ],
  });
  const instrumentation = new FlowlockInstrumentation({ enabled: false });
  instrumentation.setTracerProvider(tracerProvider);
  instrumentation.setMeterProvider(meterProvider);
  return {
    instrumentation,
    shutdown: async () => {
      clearInterval(drop);
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
    },
  };
}

it('measures what the channels, the instrumentation and the SDK add to a cycle (INSTRUMENTATION-OVERHEAD.md)', async () => {
  const locks = createLockClient(instantClient() as never, { watchdogTimeout: 10_000 });
  const lock = locks.getLock('bench:instrumentation');
  const cycles = async (n: number): Promise<number> => {
    const started = performance.now();
    for (let i = 0; i < n; i++) {
      const lease = await lock.acquire({ leaseTime: 10_000 });
      await lease.release();
    }
    return ((performance.now() - started) * 1000) / n;
  };
  const noSdk = new FlowlockInstrumentation({ enabled: false });
  const batch = withSdk((exporter) => new BatchSpanProcessor(exporter));
  const simple = withSdk((exporter) => new SimpleSpanProcessor(exporter));
  const contextManager = new AsyncLocalStorageContextManager();
  /** Each variant sets itself up and returns its undo. */
  const sdkVariant = (instrumentation: FlowlockInstrumentation) => () => {
    context.setGlobalContextManager(contextManager.enable());
    instrumentation.enable();
    return () => {
      instrumentation.disable();
      context.disable();
    };
  };
  const variants: Record<string, () => () => void> = {
    'no subscriber': () => () => undefined,
    'instrumentation, no SDK': () => {
      noSdk.enable();
      return () => noSdk.disable();
    },
    'instrumentation + SDK (batch span processor)': sdkVariant(batch.instrumentation),
    'instrumentation + SDK (simple span processor)': sdkVariant(simple.instrumentation),
  };
  const times: Record<string, number[]> = {};
  const entries = Object.entries(variants);
  try {
    await cycles(CYCLES); // warm-up: the JIT, not the variants
    for (let round = 0; round < ROUNDS; round++) {
      for (let k = 0; k < entries.length; k++) {
        const [name, setUp] = entries[(k + round) % entries.length] ?? ['no subscriber', () => () => undefined];
        const undo = setUp();
        try {
          (times[name] ??= []).push(await cycles(CYCLES));
        } finally {
          undo();
        }
      }
    }
  } finally {
    await locks.close();
    await batch.shutdown();
    await simple.shutdown();
  }
  const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
  const base = median(times['no subscriber'] ?? []);
  const rows = Object.keys(variants).map((name) => {
    const value = median(times[name] ?? []);
    const added = value - base;
    return `| ${name} | ${value.toFixed(2)} | ${name === 'no subscriber' ? '' : `${added < 0 ? '−' : '+'}${Math.abs(added).toFixed(2)}`} |`;
  });
  const table = [
    '# Instrumentation overhead',
    '',
    'One lock + unlock cycle (`acquire()`, then `release()`) against a client that answers every script at once (no',
    `network, no server): this process's own time per cycle. ${CYCLES} cycles per round, ${ROUNDS} rounds after a`,
    'warm-up, each starting with another variant; median µs per cycle. Command: `npm run bench:adapter`. On a',
    'real server a cycle also waits for two round trips (about 200 µs on loopback): (i) in RESULTS.md.',
    '',
    '| variant | µs/cycle | added µs/cycle |',
    '| --- | ---: | ---: |',
    ...rows,
    '',
  ].join('\n');
  console.log(table);
  writeFileSync(join(process.env['BENCH_OUT'] ?? 'benchmarks', 'INSTRUMENTATION-OVERHEAD.md'), table);
  // A sanity bound only (the figures are read, not asserted): every variant completed its cycles.
  for (const name of Object.keys(variants)) expect(median(times[name] ?? [])).toBeGreaterThan(0);
}, 600_000);
