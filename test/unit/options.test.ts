import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import {
  checkLockName,
  checkPermitDelta,
  checkPermits,
  resolveLatchAwaitArgs,
  resolveSemaphoreAcquireArgs,
  resolveSemaphoreTryAcquireArgs,
  resolveAcquireOptions,
  resolveClientOptions,
  resolveQuorumOptions,
  resolveLockArgs,
  resolveQuorumAcquireOptions,
  resolveTryLockArgs,
} from '../../src/options.js';
import { adaptClient } from '../../src/redis/adapter.js';

const checkRedisClient = (client: unknown) => adaptClient(client, 'redis');
/** GLIDE's shape, as the adapter detects it (no connection: the checks come before any I/O). */
const glideShaped = { customCommand() {}, invokeScript() {}, getSubscriptions() {}, getStatistics() {} };

describe('options: bad input fails before any I/O with an error naming the argument', () => {
  const cases: [string, () => unknown, ErrorConstructor, RegExp][] = [
    ['name not a string', () => checkLockName(42), TypeError, /name must be a string/],
    ['name empty', () => checkLockName(''), RangeError, /name must not be empty/],
    ['name too long', () => checkLockName('x'.repeat(513)), RangeError, /name must be at most 512 bytes/],
    ['name too long in UTF-8', () => checkLockName('é'.repeat(257)), RangeError, /512 bytes/],
    ['name with a lone high surrogate', () => checkLockName('x\uD800'), RangeError, /lone UTF-16 surrogate/],
    ['name with a lone low surrogate', () => checkLockName('\uDC00x'), RangeError, /lone UTF-16 surrogate/],
    ['name in the reserved namespace', () => checkLockName('flowlock:fence:{a}'), RangeError, /"flowlock:"/],
    ['clientId with a lone surrogate', () => resolveClientOptions({ clientId: 'a\uDBFF' }), RangeError, /clientId/],
    ['keyPrefix with a lone surrogate', () => resolveClientOptions({ keyPrefix: '\uD83D:' }), RangeError, /keyPrefix/],
    [
      'quorum fixed lease under 3 node timeouts',
      () => resolveQuorumAcquireOptions({ leaseTime: 299 }, 100),
      RangeError,
      /options\.leaseTime must be at least 3 × nodeTimeout \(300 ms\)/,
    ],
    ['client not a Redis client', () => checkRedisClient({}), TypeError, /redis must be a Redis client: an ioredis/],
    ['client null', () => checkRedisClient(null), TypeError, /node-redis/],
    ['client not a Redis client, GLIDE named', () => checkRedisClient({}), TypeError, /GlideClusterClient/],
    [
      'options.glideSubscriber not a function',
      () => adaptClient(glideShaped, 'redis', 'factory'),
      TypeError,
      /options.glideSubscriber must be a function, got string/,
    ],
    [
      'options.glideSubscriber for another client',
      () => adaptClient({}, 'redis', () => Promise.resolve(glideShaped)),
      TypeError,
      /options.glideSubscriber is for a GLIDE client only/,
    ],
    [
      'node-redis client pool',
      () => checkRedisClient({ evalSha() {}, sendCommand() {}, withTypeMapping() {}, isOpen: false }),
      TypeError,
      /redis is a node-redis client pool: pass a client, cluster or sentinel/,
    ],
    [
      "client keyPrefix with options.keyPrefix's stray brace",
      () => resolveClientOptions({ keyPrefix: '{b:' }, 'a}'),
      RangeError,
      /the Redis client's keyPrefix and options.keyPrefix may contain one complete hash tag/,
    ],
    ['options not an object', () => resolveClientOptions(5), TypeError, /options must be an object/],
    ['unknown client option', () => resolveClientOptions({ watchdog: 1 }), TypeError, /unknown option "watchdog"/],
    ['watchdogTimeout NaN', () => resolveClientOptions({ watchdogTimeout: NaN }), RangeError, /watchdogTimeout/],
    ['watchdogTimeout string', () => resolveClientOptions({ watchdogTimeout: '1' }), TypeError, /watchdogTimeout/],
    ['watchdogTimeout tiny', () => resolveClientOptions({ watchdogTimeout: 5 }), RangeError, /watchdogTimeout/],
    ['clientId empty', () => resolveClientOptions({ clientId: '' }), RangeError, /clientId/],
    ['clientId number', () => resolveClientOptions({ clientId: 1 }), TypeError, /clientId/],
    ['keyPrefix number', () => resolveClientOptions({ keyPrefix: 1 }), TypeError, /keyPrefix/],
    ['keyPrefix stray brace', () => resolveClientOptions({ keyPrefix: 'a{b:' }), RangeError, /keyPrefix/],
    ['syncReplicas not an object', () => resolveClientOptions({ syncReplicas: 1 }), TypeError, /syncReplicas/],
    ['holderInfo true', () => resolveClientOptions({ holderInfo: true }), TypeError, /options\.holderInfo must be/],
    [
      'previousLayout misspelled',
      () => resolveClientOptions({ previousLayout: 'retire' }),
      RangeError,
      /options\.previousLayout must be 'shared' or 'retired', got the string "retire"/,
    ],
    [
      'previousLayout boolean',
      () => resolveClientOptions({ previousLayout: false }),
      TypeError,
      /previousLayout.*got false/,
    ],
    ['quorum previousLayout', () => resolveQuorumOptions({ previousLayout: 1 }), TypeError, /options\.previousLayout/],
    ['holderInfo.app number', () => resolveClientOptions({ holderInfo: { app: 1 } }), TypeError, /holderInfo\.app/],
    ['holderInfo.app too long', () => resolveClientOptions({ holderInfo: { app: 'x'.repeat(65) } }), RangeError, /app/],
    [
      'holderInfo unknown',
      () => resolveClientOptions({ holderInfo: { host: 'h' } }),
      TypeError,
      /unknown option "host"/,
    ],
    [
      'syncReplicas unknown key',
      () => resolveClientOptions({ syncReplicas: { replicas: 1, timeout: 5, n: 1 } }),
      TypeError,
      /syncReplicas has an unknown option "n"/,
    ],
    [
      'syncReplicas.replicas zero',
      () => resolveClientOptions({ syncReplicas: { replicas: 0, timeout: 5 } }),
      RangeError,
      /syncReplicas\.replicas/,
    ],
    [
      'syncReplicas.replicas missing',
      () => resolveClientOptions({ syncReplicas: { timeout: 5 } }),
      TypeError,
      /syncReplicas\.replicas/,
    ],
    [
      'syncReplicas.timeout zero (WAIT forever)',
      () => resolveClientOptions({ syncReplicas: { replicas: 1, timeout: 0 } }),
      RangeError,
      /syncReplicas\.timeout/,
    ],
    ['waitTime negative', () => resolveTryLockArgs([-1]), RangeError, /waitTime must be >= 0/],
    ['waitTime fractional', () => resolveTryLockArgs([1.5]), RangeError, /waitTime/],
    ['waitTime NaN', () => resolveTryLockArgs([NaN]), RangeError, /waitTime/],
    ['waitTime Infinity', () => resolveTryLockArgs([Infinity]), RangeError, /waitTime/],
    ['waitTime string', () => resolveTryLockArgs(['10']), TypeError, /waitTime must be a number/],
    ['leaseTime zero', () => resolveTryLockArgs([0, 0]), RangeError, /leaseTime must be >= 30/],
    ['leaseTime below 30', () => resolveTryLockArgs([0, 29]), RangeError, /leaseTime must be >= 30/],
    ['leaseTime -2', () => resolveTryLockArgs([0, -2]), RangeError, /leaseTime/],
    ['leaseTime fractional', () => resolveLockArgs([0.5]), RangeError, /leaseTime/],
    ['tryLock too many args', () => resolveTryLockArgs([1, 2, 3]), TypeError, /at most 2 arguments/],
    ['unknown tryLock option', () => resolveTryLockArgs([{ wait: 1 }]), TypeError, /unknown option "wait"/],
    ['tryLock options.waitTime', () => resolveTryLockArgs([{ waitTime: -5 }]), RangeError, /options\.waitTime/],
    ['lock options.leaseTime', () => resolveLockArgs([{ leaseTime: 0 }]), RangeError, /options\.leaseTime/],
    ['lock unknown option', () => resolveLockArgs([{ waitTime: 1 }]), TypeError, /unknown option "waitTime"/],
    ['signal not a signal', () => resolveAcquireOptions({ signal: {} }), TypeError, /options\.signal/],
    ['acquire options array', () => resolveAcquireOptions([]), TypeError, /options must be an object/],
  ];
  it.each(cases)('%s', (_label, call, type, message) => {
    expect(call).toThrow(type);
    expect(call).toThrow(message);
  });

  it('fills defaults', () => {
    const resolved = resolveClientOptions(undefined);
    expect(resolved.watchdogTimeout).toBe(30_000);
    expect(resolved.keyPrefix).toBe('');
    expect(resolved.clientId).toMatch(/^[0-9a-f-]{36}$/);
    expect(resolveTryLockArgs([])).toEqual({ waitTime: undefined, leaseTime: -1, signal: undefined });
    expect(resolveTryLockArgs([100, -1])).toEqual({ waitTime: 100, leaseTime: -1, signal: undefined });
    expect(resolveLockArgs([500])).toEqual({ waitTime: undefined, leaseTime: 500, signal: undefined });
    expect(resolveAcquireOptions({ waitTime: 0 })).toEqual({ waitTime: 0, leaseTime: -1, signal: undefined });
    expect(resolveClientOptions({ keyPrefix: '{app}:' }).keyPrefix).toBe('{app}:');
    expect(resolveLockArgs([30])).toEqual({ waitTime: undefined, leaseTime: 30, signal: undefined });
    expect(resolveQuorumAcquireOptions({ leaseTime: 300 }, 100).leaseTime).toBe(300);
    expect(checkLockName('a😀')).toBe('a😀');
    expect(checkLockName('app:flow:lock:x')).toBe('app:flow:lock:x');
    expect(checkLockName('lock:x', 'svc:')).toBe('lock:x');
    // Any key prefix's own keys are '<prefix>flowlock:...': no lock key may contain that.
    expect(() => checkLockName('app:flowlock:x')).toThrow(/must not contain "flowlock:"/);
    expect(() => checkLockName('lock:x', 'flow')).toThrow(/the key "flowlock:x"/);
  });

  it('gives a clientId the user chose a suffix of its own, so two clients never share owner ids', () => {
    const a = resolveClientOptions({ clientId: 'billing-service' }).clientId;
    const b = resolveClientOptions({ clientId: 'billing-service' }).clientId;
    expect(a).toMatch(/^billing-service:[\w-]{12}$/);
    expect(b).toMatch(/^billing-service:[\w-]{12}$/);
    expect(a).not.toBe(b);
  });
});

describe('options of the semaphores and the latch', () => {
  const cases: [string, () => unknown, ErrorConstructor, RegExp][] = [
    ['permits not a number', () => checkPermits('3'), TypeError, /permits must be a number/],
    ['permits zero', () => checkPermits(0), RangeError, /permits must be a whole number >= 1/],
    ['permits negative', () => checkPermits(-2), RangeError, /permits must be a whole number >= 1/],
    ['permits fractional', () => checkPermits(1.5), RangeError, /permits must be a whole number/],
    ['permits NaN', () => checkPermits(NaN), RangeError, /permits/],
    ['count zero', () => checkPermits(0, 'count'), RangeError, /count must be a whole number >= 1/],
    ['delta zero', () => checkPermitDelta(0), RangeError, /permits must be a whole number other than 0/],
    ['delta fractional', () => checkPermitDelta(-0.5), RangeError, /other than 0/],
    ['acquire(permits) zero', () => resolveSemaphoreAcquireArgs([0]), RangeError, /permits/],
    [
      'acquire options unknown',
      () => resolveSemaphoreAcquireArgs([{ waitTime: 5 }]),
      TypeError,
      /unknown option "waitTime"/,
    ],
    ['acquire options permits', () => resolveSemaphoreAcquireArgs([{ permits: -1 }]), RangeError, /options\.permits/],
    ['acquire extra argument', () => resolveSemaphoreAcquireArgs([1, 2]), TypeError, /at most 1 argument/],
    ['tryAcquire waitTime', () => resolveSemaphoreTryAcquireArgs([1, -5]), RangeError, /waitTime must be >= 0/],
    ['tryAcquire options', () => resolveSemaphoreTryAcquireArgs([{ permits: 2.5 }]), RangeError, /options\.permits/],
    ['tryAcquire signal', () => resolveSemaphoreTryAcquireArgs([{ signal: {} }]), TypeError, /options\.signal/],
    ['await waitTime', () => resolveLatchAwaitArgs([-1]), RangeError, /waitTime must be >= 0/],
    ['await options', () => resolveLatchAwaitArgs([{ permits: 1 }]), TypeError, /unknown option "permits"/],
  ];
  it.each(cases)('%s', (_label, call, type, message) => {
    expect(call).toThrow(type);
    expect(call).toThrow(message);
  });

  it('fills defaults', () => {
    expect(resolveSemaphoreAcquireArgs([])).toEqual({ permits: 1, waitTime: undefined, signal: undefined });
    expect(resolveSemaphoreTryAcquireArgs([])).toEqual({ permits: 1, waitTime: 0, signal: undefined });
    expect(resolveSemaphoreTryAcquireArgs([3, 100])).toEqual({ permits: 3, waitTime: 100, signal: undefined });
    expect(resolveSemaphoreTryAcquireArgs([{ waitTime: 5 }])).toEqual({ permits: 1, waitTime: 5, signal: undefined });
    expect(resolveLatchAwaitArgs([])).toEqual({ waitTime: undefined, signal: undefined });
    expect(resolveLatchAwaitArgs([{ waitTime: 10 }])).toEqual({ waitTime: 10, signal: undefined });
    expect(checkPermitDelta(-3)).toBe(-3);
    const label = `${hostname()} pid ${process.pid}`;
    expect(resolveClientOptions({}).holderInfo).toBe(label);
    expect(resolveClientOptions({ holderInfo: { app: 'billing' } }).holderInfo).toBe(`${label} (billing)`);
    expect(resolveClientOptions({ holderInfo: false }).holderInfo).toBe('');
    expect(resolveClientOptions({}).previousLayout).toBe('shared');
    expect(resolveClientOptions({ previousLayout: 'retired' }).previousLayout).toBe('retired');
    expect(resolveQuorumOptions({ previousLayout: 'retired' }).previousLayout).toBe('retired');
  });
});
