/**
 * `NODE_DEBUG=flowlock`: a line on stderr for every acquisition, release, wait, hold, renewal and
 * subscriber change, written by a subscriber of the library's own diagnostics channels (as undici does), so
 * the log can never say something the channels do not, and costs nothing when it is off.
 */
import diagnostics from 'node:diagnostics_channel';
import { debuglog } from 'node:util';
import {
  CHANNELS,
  type AcquireTraceContext,
  type HoldEndMessage,
  type HoldStartMessage,
  type PubSubMessage,
  type ReleaseTraceContext,
  type RenewTraceContext,
  type WaitEndMessage,
  type WaitStartMessage,
} from './channels.js';

/** Set once per process: every copy of the library (ESM and CJS, two versions) publishes on the same channels. */
const STARTED = Symbol.for('flowlock.debugLog');

const ms = (value: number | undefined): string => `${Math.round(value ?? 0)}ms`;
const reason = (error: unknown): string => (error instanceof Error ? `${error.name}: ${error.message}` : String(error));

/** Starts the debug log if NODE_DEBUG names flowlock (checked once; later calls do nothing). */
export function startDebugLog(): void {
  const state = globalThis as { [STARTED]?: boolean };
  if (state[STARTED] !== undefined) return;
  const log = debuglog('flowlock');
  state[STARTED] = log.enabled;
  if (!log.enabled) return;
  diagnostics.subscribe(`tracing:${CHANNELS.acquire}:asyncEnd`, (message) => {
    const c = message as AcquireTraceContext & { readonly error?: unknown };
    const failure = c.error === undefined ? '' : ` (${reason(c.error)})`;
    log(
      `acquire ${c.kind} ${c.name} by ${c.owner ?? '-'}: ${c.outcome ?? 'error'}${failure} after ${ms(c.waitedMs)}, ` +
        `${c.attempts} attempt(s)${c.contended ? ', contended' : ''}` +
        (c.fencingToken === undefined ? '' : `, fencing token ${c.fencingToken}`),
    );
  });
  diagnostics.subscribe(`tracing:${CHANNELS.release}:asyncEnd`, (message) => {
    const c = message as ReleaseTraceContext & { readonly error?: unknown };
    const what = c.error === undefined ? `remaining ${c.remaining ?? '-'}, woke ${c.woken ?? 0}` : reason(c.error);
    log(`release ${c.kind} ${c.name}${c.force ? ' (force)' : ''} by ${c.owner ?? '-'}: ${what}`);
  });
  diagnostics.subscribe(`tracing:${CHANNELS.renew}:asyncEnd`, (message) => {
    const c = message as RenewTraceContext & { readonly error?: unknown };
    const what = c.error === undefined ? `${c.renewed ?? 0} renewed, ${c.rejected ?? 0} rejected` : reason(c.error);
    log(
      `renew ${c.locks} hold(s)${c.slot === undefined ? '' : ` in slot ${c.slot}`}, tick ${ms(c.lateMs)} late: ${what}`,
    );
  });
  diagnostics.subscribe(CHANNELS.waitStart, (message) => {
    const m = message as WaitStartMessage;
    log(`wait ${m.kind} ${m.name} by ${m.owner ?? '-'}: held, ttl ${m.holderTtlMs}ms`);
  });
  diagnostics.subscribe(CHANNELS.waitEnd, (message) => {
    const m = message as WaitEndMessage;
    log(
      `wait end ${m.kind} ${m.name} by ${m.owner ?? '-'}: ${m.outcome} after ${ms(m.waitedMs)}, ` +
        `${m.wakeups.message} message(s), ${m.wakeups.timeout} timeout(s)`,
    );
  });
  diagnostics.subscribe(CHANNELS.holdStart, (message) => {
    const m = message as HoldStartMessage;
    log(`hold ${m.kind} ${m.name} by ${m.owner}: fencing token ${m.fencingToken}, ${m.mode} ${m.leaseMs}ms`);
  });
  diagnostics.subscribe(CHANNELS.holdEnd, (message) => {
    const m = message as HoldEndMessage;
    const loss = m.lossReason === undefined ? '' : ` (${m.lossReason})`;
    log(`hold end ${m.kind} ${m.name} by ${m.owner}: ${m.reason}${loss} after ${ms(m.heldMs)}`);
  });
  diagnostics.subscribe(CHANNELS.pubsub, (message) => {
    const m = message as PubSubMessage;
    const failure = m.error === undefined ? '' : ` (${reason(m.error)})`;
    log(
      `pubsub ${m.event}${m.channel === undefined ? '' : ` ${m.channel}`}${failure}: ${m.channels} channel(s), ${m.mode ?? 'mode unknown'}`,
    );
  });
}
