/**
 * The diagnostics-channel subscriber behind FlowlockInstrumentation: it turns flowlock's channels
 * (src/diagnostics/channels.ts, the binding contract) into spans and metrics. One is made per enable() and
 * closed by disable(), which unsubscribes everything it subscribed.
 *
 * Nothing here may throw into a publisher: a throw in a diagnostics subscriber becomes an
 * uncaughtException. Every handler and store transform is wrapped, and what it catches goes to
 * OpenTelemetry's own `diag` logger.
 */
import type { AsyncLocalStorage } from 'node:async_hooks';
import diagnostics from 'node:diagnostics_channel';
import {
  context,
  diag,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import {
  CHANNELS,
  type AcquireTraceContext,
  type HoldEndMessage,
  type HoldStartMessage,
  type LockIdentity,
  type ReleaseTraceContext,
  type RenewTraceContext,
  type WaitEndMessage,
  type WaitStartMessage,
  type WithLockTraceContext,
} from '../diagnostics/channels.js';
import type { ResolvedConfig } from './config.js';
import type { Instruments } from './instruments.js';

/** What the subscriber reads at each event: the instrumentation may swap providers while it is subscribed. */
export interface Host {
  readonly config: ResolvedConfig;
  readonly tracer: Tracer;
  readonly instruments: Instruments;
}

/** A traced call's context as a tracing channel hands it over: `error` is present once the call failed. */
type Traced = object & { error?: unknown };

/**
 * The store bound on a tracing channel's `start`. Node's `start.runStores(ctx, fn)` calls only
 * `store.run(transform(ctx), fn)` (lib/diagnostics_channel.js, checked on Node 20.19+, 22 and 24: any
 * object with `run` is accepted), so the store hands the context to OpenTelemetry's context manager instead
 * of being an AsyncLocalStorage of its own. `context.with` is the public API for "run fn with this context
 * active": it works with whatever manager the application registered (the SDK's
 * AsyncLocalStorageContextManager, the older AsyncHooksContextManager) without reaching into the SDK for
 * its private AsyncLocalStorage, and the span is then active exactly while the traced function runs, so
 * the Redis client's command spans and the caller's own spans nest under it.
 */
const store = {
  run<T>(active: Context, fn: () => T): T {
    return context.with(active, fn);
  },
} as unknown as AsyncLocalStorage<Context>;

export class ChannelSubscriber {
  readonly #host: Host;
  readonly #subscribed: [name: string, handler: (message: unknown) => void][] = [];
  readonly #bound: diagnostics.Channel[] = [];
  /** The span of each traced call in flight, by its trace context (ended and dropped when the call settles). */
  readonly #spans = new Map<object, Span>();
  /**
   * The trace context of each acquire span in flight: `wait:start` finds its acquisition's span as the
   * active one. (A Map, dropped at the end like #spans: cheaper than a WeakMap for entries this short-lived.)
   */
  readonly #acquireOf = new Map<Span, AcquireTraceContext>();
  /** withLock calls in flight with a span, by client and lock name: where a loss adds `flowlock.lost`. */
  readonly #inside = new Index<WithLockTraceContext>();
  /**
   * Holds and waits open now, with the attributes they count under in `flowlock.hold.active` and
   * `flowlock.wait.active` (read at each collection): each end takes out exactly what its start put in.
   */
  readonly #holds = new OpenCounts();
  readonly #waits = new OpenCounts();
  readonly #renewStarts = new WeakMap<object, number>();

  /** Subscribed by awaitTelemetry: only watching for telemetry to appear. */
  idle = false;

  constructor(host: Host) {
    this.#host = host;
  }

  /**
   * While spans and metrics have nowhere to go, listens only to the cheap point events of new holds and
   * waits (so that the library does not trace its calls for nothing), asking `stillIdle` at each; once it
   * says no, `wake` runs on a microtask (not inside the publish, whose subscriber list it changes).
   */
  awaitTelemetry(stillIdle: () => boolean, wake: () => void): void {
    this.idle = true;
    const check = (): void => {
      if (!stillIdle()) queueMicrotask(wake);
    };
    this.#on(CHANNELS.holdStart, check);
    this.#on(CHANNELS.waitStart, check);
  }

  subscribe(): void {
    const { spans } = this.#host.config;
    this.#settled(CHANNELS.acquire, (ctx: AcquireTraceContext) => this.#acquireEnded(ctx));
    if (spans.acquire) this.#bind(CHANNELS.acquire, (ctx: AcquireTraceContext) => this.#acquireStarted(ctx));
    if (spans.withLock) {
      this.#settled(CHANNELS.withLock, (ctx: WithLockTraceContext) => this.#withLockEnded(ctx));
      this.#bind(CHANNELS.withLock, (ctx: WithLockTraceContext) => this.#withLockStarted(ctx));
    }
    if (spans.release) {
      this.#settled(CHANNELS.release, (ctx: ReleaseTraceContext) => this.#releaseEnded(ctx));
      this.#bind(CHANNELS.release, (ctx: ReleaseTraceContext) => this.#releaseStarted(ctx));
    }
    // Bound whether or not renewals get spans: see #renewStarted.
    this.#settled(CHANNELS.renew, (ctx: RenewTraceContext) => this.#renewEnded(ctx));
    this.#bind(CHANNELS.renew, (ctx: RenewTraceContext) => this.#renewStarted(ctx), ROOT_CONTEXT);
    this.#on(CHANNELS.waitStart, (message: WaitStartMessage) => this.#waitStarted(message));
    this.#on(CHANNELS.waitEnd, (message: WaitEndMessage) => this.#waitEnded(message));
    this.#on(CHANNELS.holdStart, (message: HoldStartMessage) => this.#holdStarted(message));
    this.#on(CHANNELS.holdEnd, (message: HoldEndMessage) => this.#holdEnded(message));
  }

  /**
   * Unsubscribes everything. What is still in flight is followed no further: its spans end now (without an
   * outcome), and its holds and waits leave the active counters, whose ends will not be seen.
   */
  close(): void {
    for (const [name, handler] of this.#subscribed.splice(0)) diagnostics.unsubscribe(name, handler);
    for (const channel of this.#bound.splice(0)) channel.unbindStore(store);
    for (const span of this.#spans.values()) span.end();
    this.#spans.clear();
    this.#acquireOf.clear();
    this.#inside.clear();
    this.#holds.clear();
    this.#waits.clear();
  }

  /** The holds and waits open now, by their attributes: what the active counters report (instruments.ts). */
  openNow(): { holds: Iterable<Attributes>; waits: Iterable<Attributes> } {
    return { holds: this.#holds.values(), waits: this.#waits.values() };
  }

  /**
   * Subscribes `handler`, guarded. Handlers take the payload type the contract gives their channel
   * (channels.ts); `never` lets each declare its own, since a channel hands over `unknown`.
   */
  #on(name: string, handler: (message: never) => void): void {
    const guarded = (message: unknown): void => {
      try {
        handler(message as never);
      } catch (error) {
        report(error);
      }
    };
    diagnostics.subscribe(name, guarded);
    this.#subscribed.push([name, guarded]);
  }

  /**
   * Calls `finish` once when a traced call settles. TracingChannel.tracePromise publishes `end` before the
   * promise settles, then `asyncStart`/`asyncEnd` once it has (a rejection: `error` first); a synchronous
   * throw publishes `error` and `end` only. So a failure finishes at `error`, a success at `asyncEnd`.
   */
  #settled(name: string, finish: (ctx: never) => void): void {
    this.#on(`tracing:${name}:error`, finish);
    this.#on(`tracing:${name}:asyncEnd`, (ctx: Traced) => {
      if (!('error' in ctx)) finish(ctx as never);
    });
  }

  /** Runs the traced functions of `name` in the context `transform` returns (see `store`). */
  #bind(name: string, transform: (ctx: never) => Context, fallback?: Context): void {
    const channel = diagnostics.channel(`tracing:${name}:start`);
    channel.bindStore(store, (message: unknown) => {
      try {
        return transform(message as never);
      } catch (error) {
        report(error);
        return fallback ?? context.active();
      }
    });
    this.#bound.push(channel);
  }

  #acquireStarted(ctx: AcquireTraceContext): Context {
    const attributes: Attributes = {
      ...this.#nameAttributes(ctx),
      'flowlock.lock.kind': ctx.kind,
      'flowlock.lease.mode': ctx.mode,
    };
    if (ctx.owner !== undefined) attributes['flowlock.owner'] = ctx.owner;
    const { span, active } = this.#startSpan('flowlock.acquire', ctx, attributes);
    if (span) this.#acquireOf.set(span, ctx);
    return active;
  }

  #acquireEnded(ctx: AcquireTraceContext): void {
    const span = this.#endSpan(ctx);
    const { instruments } = this.#host;
    if (!span && !instruments.recording) return;
    const failed = 'error' in ctx;
    const outcome = ctx.outcome ?? 'error';
    const attributes: Attributes = {
      'flowlock.acquire.outcome': outcome,
      'flowlock.acquire.contended': ctx.contended,
      'flowlock.lock.kind': ctx.kind,
    };
    // Only a hold has a re-entrant or a fresh acquisition behind it.
    if (outcome === 'acquired' || outcome === 'reentered') {
      attributes['flowlock.acquire.reentrant'] = outcome === 'reentered';
    }
    if (failed) attributes['error.type'] = errorType(ctx.error);
    if (instruments.recording)
      instruments.acquireDuration.record(ctx.waitedMs / 1000, this.#withGroup(attributes, ctx.name));
    if (!span) return;
    this.#acquireOf.delete(span);
    span.setAttributes({
      ...attributes,
      'flowlock.attempts': ctx.attempts,
      'flowlock.wakeups.message': ctx.wakeups.message,
      'flowlock.wakeups.timeout': ctx.wakeups.timeout,
    });
    if (ctx.holdCount !== undefined) span.setAttribute('flowlock.hold_count', ctx.holdCount);
    if (ctx.fencingToken !== undefined) span.setAttribute('flowlock.fencing_token', String(ctx.fencingToken));
    finishSpan(span, ctx);
  }

  #withLockStarted(ctx: WithLockTraceContext): Context {
    const { span, active } = this.#startSpan('flowlock.withLock', ctx, {
      ...this.#nameAttributes(ctx),
      'flowlock.lock.kind': ctx.kind,
      'flowlock.lease.mode': ctx.mode,
    });
    if (span) for (const name of ctx.names ?? [ctx.name]) this.#inside.add(lockKey(ctx.clientId, name), ctx);
    return active;
  }

  #withLockEnded(ctx: WithLockTraceContext): void {
    const span = this.#endSpan(ctx);
    if (!span) return;
    for (const name of ctx.names ?? [ctx.name]) this.#inside.delete(lockKey(ctx.clientId, name), ctx);
    if (ctx.outcome !== undefined) span.setAttribute('flowlock.acquire.outcome', ctx.outcome);
    if (ctx.fencingToken !== undefined) span.setAttribute('flowlock.fencing_token', String(ctx.fencingToken));
    finishSpan(span, ctx);
  }

  #releaseStarted(ctx: ReleaseTraceContext): Context {
    const attributes: Attributes = {
      ...this.#nameAttributes(ctx),
      'flowlock.lock.kind': ctx.kind,
      'flowlock.release.force': ctx.force,
    };
    if (ctx.owner !== undefined) attributes['flowlock.owner'] = ctx.owner;
    return this.#startSpan('flowlock.release', ctx, attributes).active;
  }

  #releaseEnded(ctx: ReleaseTraceContext): void {
    const span = this.#endSpan(ctx);
    if (!span) return;
    span.setAttribute('flowlock.release.freed', ctx.freed);
    if (ctx.remaining !== undefined) span.setAttribute('flowlock.release.remaining', ctx.remaining);
    if (ctx.woken !== undefined) span.setAttribute('flowlock.release.woken', ctx.woken);
    if (ctx.fencingToken !== undefined) span.setAttribute('flowlock.fencing_token', String(ctx.fencingToken));
    finishSpan(span, ctx);
  }

  /**
   * A renewal is background work of the watchdog, caused by no caller. Its timer was scheduled from within
   * whichever acquisition started the watchdog, so its context would otherwise carry that call's span, and
   * every renewal's Redis command spans would join a long-finished trace. So the renewal runs in the root
   * context, or under a root `flowlock.renew` span when those are on.
   */
  #renewStarted(ctx: RenewTraceContext): Context {
    this.#renewStarts.set(ctx, performance.now());
    this.#host.instruments.watchdogDelay.record(ctx.lateMs / 1000);
    if (!this.#host.config.spans.renew) return ROOT_CONTEXT;
    const span = this.#host.tracer.startSpan(
      'flowlock.renew',
      {
        kind: SpanKind.INTERNAL,
        root: true,
        attributes: { 'flowlock.renew.locks': ctx.locks, 'flowlock.watchdog.delay_ms': ctx.lateMs },
      },
      ROOT_CONTEXT,
    );
    if (!span.isRecording()) return ROOT_CONTEXT;
    this.#spans.set(ctx, span);
    return trace.setSpan(ROOT_CONTEXT, span);
  }

  #renewEnded(ctx: RenewTraceContext): void {
    const startedAt = this.#renewStarts.get(ctx);
    const failed = 'error' in ctx;
    if (startedAt !== undefined) {
      const attributes: Attributes = { 'flowlock.renew.outcome': failed ? 'error' : 'ok' };
      if (failed) attributes['error.type'] = errorType(ctx.error);
      this.#host.instruments.renewDuration.record((performance.now() - startedAt) / 1000, attributes);
    }
    const span = this.#endSpan(ctx);
    if (!span) return;
    if (ctx.rejected !== undefined) span.setAttribute('flowlock.renew.rejected', ctx.rejected);
    finishSpan(span, ctx);
  }

  #waitStarted(message: WaitStartMessage): void {
    const { instruments } = this.#host;
    if (instruments.recording) {
      this.#waits.add(message, this.#withGroup({ 'flowlock.lock.kind': message.kind }, message.name));
    }
    // wait:start is published from inside the acquisition's traced call, where its span is the active one
    // (checked against the message: with acquire spans off, the active span is someone else's).
    const span = trace.getSpan(context.active());
    const ctx = span && this.#acquireOf.get(span);
    if (ctx?.clientId === message.clientId && ctx.name === message.name && ctx.owner === message.owner) {
      span?.addEvent('flowlock.wait', { 'flowlock.holder_ttl_ms': message.holderTtlMs });
    }
  }

  #waitEnded(message: WaitEndMessage): void {
    this.#waits.take(message.start);
  }

  #holdStarted(message: HoldStartMessage): void {
    const { instruments } = this.#host;
    if (!instruments.recording) return;
    this.#holds.add(
      message,
      this.#withGroup({ 'flowlock.lease.mode': message.mode, 'flowlock.lock.kind': message.kind }, message.name),
    );
  }

  #holdEnded(message: HoldEndMessage): void {
    const { instruments } = this.#host;
    this.#holds.take(message.start);
    const lossReason = message.reason === 'lost' ? (message.lossReason ?? 'unknown') : undefined;
    if (instruments.recording) {
      const base: Attributes = { 'flowlock.lease.mode': message.mode, 'flowlock.lock.kind': message.kind };
      instruments.holdDuration.record(
        message.heldMs / 1000,
        this.#withGroup({ ...base, 'flowlock.hold.end_reason': message.reason }, message.name),
      );
      if (lossReason !== undefined) {
        instruments.holdLosses.add(
          1,
          this.#withGroup({ ...base, 'flowlock.hold.loss_reason': lossReason }, message.name),
        );
      }
    }
    if (lossReason === undefined) return;
    // The critical sections running on this hold: the same client and lock, and the hold's fencing token
    // (a multi-lock's withLock, which has one per member, by its member names once it holds them all).
    for (const ctx of this.#inside.get(lockKey(message.clientId, message.name))) {
      const holds = ctx.names
        ? ctx.outcome === 'acquired' || ctx.outcome === 'reentered'
        : ctx.kind === message.kind && ctx.fencingToken === message.fencingToken;
      if (holds) this.#spans.get(ctx)?.addEvent('flowlock.lost', { 'flowlock.hold.loss_reason': lossReason });
    }
  }

  /**
   * Starts the span of a traced call as a child of the caller's active span, and returns the context to run
   * the call in. A span that records nothing (no SDK registered, or sampled out) is dropped at once: the call
   * runs in the caller's context, and nothing is kept for it.
   */
  #startSpan(name: string, ctx: object, attributes: Attributes): { span: Span | undefined; active: Context } {
    const parent = context.active();
    const span = this.#host.tracer.startSpan(name, { kind: SpanKind.INTERNAL, attributes }, parent);
    if (!span.isRecording()) return { span: undefined, active: parent };
    this.#spans.set(ctx, span);
    return { span, active: trace.setSpan(parent, span) };
  }

  /** Takes the span of a settled call out of the table; undefined if it had none (spans off when it began). */
  #endSpan(ctx: object): Span | undefined {
    const span = this.#spans.get(ctx);
    this.#spans.delete(ctx);
    return span;
  }

  #nameAttributes(ctx: LockIdentity & { readonly names?: readonly string[] }): Attributes {
    if (!this.#host.config.lockNameOnSpans) return {};
    return ctx.names
      ? { 'flowlock.lock.name': ctx.name, 'flowlock.lock.names': [...ctx.names] }
      : { 'flowlock.lock.name': ctx.name };
  }

  /** `attributes` plus `flowlock.lock.group` when the config maps `name` to one. */
  #withGroup(attributes: Attributes, name: string): Attributes {
    const { lockGroup } = this.#host.config;
    if (!lockGroup) return attributes;
    try {
      const group = lockGroup(name);
      if (typeof group === 'string') attributes['flowlock.lock.group'] = group;
    } catch (error) {
      report(error);
    }
    return attributes;
  }
}

/** Sets the outcome of a settled call on its span and ends it: ERROR only when the call threw. */
function finishSpan(span: Span, ctx: Traced): void {
  if ('error' in ctx) {
    const { error } = ctx;
    span.setAttribute('error.type', errorType(error));
    if (error instanceof Error) {
      span.recordException(error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
    } else {
      span.setStatus({ code: SpanStatusCode.ERROR });
    }
  }
  span.end();
}

/**
 * `error.type`: the error's string `code` where it has one (every LockError's is stable across versions:
 * LOCK_ACQUIRE_TIMEOUT, LOCK_NOT_HELD, …; Node's system errors: ECONNRESET, …), else its class name;
 * `_OTHER` (OpenTelemetry's fallback) for a thrown non-error, such as an abort reason that is a string.
 */
function errorType(error: unknown): string {
  if (!(error instanceof Error)) return '_OTHER';
  const { code } = error as { code?: unknown };
  return typeof code === 'string' && code !== '' ? code : error.name;
}

function report(error: unknown): void {
  try {
    diag.error('flowlock instrumentation: a diagnostics subscriber failed', error);
  } catch {
    // A logger that throws must not reach the publisher either.
  }
}

function lockKey(clientId: string, name: string): string {
  return `${clientId}\n${name}`;
}

/** Sets of items by key, for the in-flight lookups. */
class Index<T> {
  readonly #sets = new Map<string, Set<T>>();

  add(key: string, item: T): void {
    const set = this.#sets.get(key);
    if (set) set.add(item);
    else this.#sets.set(key, new Set([item]));
  }

  delete(key: string, item: T): void {
    const set = this.#sets.get(key);
    if (set?.delete(item) && set.size === 0) this.#sets.delete(key);
  }

  get(key: string): Iterable<T> {
    return this.#sets.get(key) ?? [];
  }

  clear(): void {
    this.#sets.clear();
  }
}

/**
 * The holds (or waits) this subscriber saw start and not yet end: each start message, with the attributes it
 * counts under. The end message names its start (`start`, the same object), so an end whose start was not
 * seen (the subscriber came in between, or metrics were off) takes nothing out: the counters never go
 * below zero.
 */
class OpenCounts {
  readonly #open = new Map<object, Attributes>();

  add(start: object, attributes: Attributes): void {
    this.#open.set(start, attributes);
  }

  take(start: object): void {
    this.#open.delete(start);
  }

  values(): Iterable<Attributes> {
    return this.#open.values();
  }

  clear(): void {
    this.#open.clear();
  }
}
