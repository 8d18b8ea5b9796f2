import { describe, expect, it } from 'vitest';
import {
  fairLockKeys,
  hashedPart,
  keySlot,
  latchKeys,
  lockKeys,
  readWriteLockKeys,
  semaphoreKeys,
} from '../../src/redis/keys.js';

describe('keys', () => {
  it('computes Redis Cluster slots (reference values from CLUSTER KEYSLOT)', () => {
    expect(keySlot('foo')).toBe(12182);
    expect(keySlot('bar')).toBe(5061);
    expect(keySlot('{user1000}.following')).toBe(keySlot('user1000'));
    expect(keySlot('foo{}{bar}')).toBe(keySlot('foo{}{bar}'));
    expect(hashedPart('foo{}{bar}')).toBe('foo{}{bar}');
    expect(hashedPart('foo{{bar}}zap')).toBe('{bar');
    expect(hashedPart('foo{bar}{zap}')).toBe('bar');
    // Beyond ASCII the slot is the CRC of the UTF-8 bytes.
    expect(keySlot('ünï🔒')).toBe(9611);
    expect(keySlot('é')).toBe(10180);
    expect(keySlot('日本{語}')).toBe(6482);
  });

  it("names each slot's fencing counter by the shortest decimal number in that slot, whatever slots came first", () => {
    // The layout: clients of every version must name the same counter for a slot.
    const shortest = (slot: number): string => {
      for (let i = 0; ; i++) if (keySlot(String(i)) === slot) return String(i);
    };
    // Slots asked for out of order, the rarest last (its number is the highest of all: 109 757).
    for (const name of ['order:42', 'ünï🔒', 'a}b', 'zz', 'order:1', '{}']) {
      const keys = lockKeys('', name);
      expect(keys.fenceKey, name).toBe(`flowlock:fencing:{${shortest(keySlot(keys.lockKey))}}`);
    }
    expect(lockKeys('', '{109757}').fenceKey).toBe('flowlock:fencing:{109757}');
    expect(lockKeys('', 'order:42').fenceKey).toBe('flowlock:fencing:{633}');
  });

  it("uses Redisson's names for the hash and the channel", () => {
    const keys = lockKeys('', 'order:42');
    expect(keys.lockKey).toBe('order:42');
    expect(keys.channel).toBe('redisson_lock__channel:{order:42}');
    const prefixed = lockKeys('app:', 'order:42');
    expect(prefixed.lockKey).toBe('app:order:42');
    expect(prefixed.channel).toBe('app:redisson_lock__channel:{order:42}');
  });

  const hostile = [
    'plain',
    'a{b}c',
    'x{}y',
    'a}b',
    '{',
    '}',
    '{}',
    '*?[',
    'line\nbreak',
    'ünï🔒',
    'a:b',
    '../x',
    '{a}{b}',
  ];

  it('keeps every auxiliary key in the slot of the lock hash, whatever the name', () => {
    for (const prefix of ['', 'app:', '{tenant}:']) {
      for (const name of hostile) {
        const keys = lockKeys(prefix, name);
        const slot = keySlot(keys.lockKey);
        expect(keySlot(keys.holdKey), `${prefix}${name}`).toBe(slot);
        expect(keySlot(keys.legacyFenceKey), `${prefix}${name}`).toBe(slot);
        expect(keySlot(`${keys.releaseMemoPrefix}some-request-id`), `${prefix}${name}`).toBe(slot);
        // The fencing counter is one per slot and prefix, on a server as on a Cluster: one slot per script call.
        expect(keySlot(keys.fenceKey), `${prefix}${name}`).toBe(slot);
        expect(lockKeys(prefix, name, true).fenceKey).toBe(keys.fenceKey);
        expect(keys.fenceKey.startsWith(`${prefix}flowlock:fencing:{`)).toBe(true);
      }
    }
  });

  it('on Cluster keeps the channel in the lock slot, and Redisson’s channel wherever that already is', () => {
    expect(lockKeys('', 'order:42', true).channel).toBe('redisson_lock__channel:{order:42}');
    for (const prefix of ['', 'app:', '{tenant}:']) {
      for (const name of hostile) {
        const keys = lockKeys(prefix, name, true);
        expect(keySlot(keys.channel), `${prefix}${name}`).toBe(keySlot(keys.lockKey));
      }
    }
    const channels = new Set(hostile.map((name) => lockKeys('app:', name, true).channel));
    expect(channels.size).toBe(hostile.length);
  });

  it('never lets two (prefix, name) pairs share an auxiliary key', () => {
    const seen = new Map<string, string>();
    for (const prefix of ['', 'a', 'a:', 'a:b']) {
      for (const name of [...hostile, 'b:c', 'c', 'b', ':c']) {
        const keys = lockKeys(prefix, name);
        for (const key of [keys.holdKey, keys.legacyFenceKey]) {
          const owner = seen.get(key);
          if (owner !== undefined) expect(keys.lockKey, `${owner} vs ${prefix}|${name}`).toBe(owner);
          seen.set(key, keys.lockKey);
        }
      }
    }
  });

  it("uses Redisson's names for the fair lock and the read-write lock", () => {
    expect(fairLockKeys('', 'jobs')).toMatchObject({
      lockKey: 'jobs',
      queueKey: 'redisson_lock_queue:{jobs}',
      timeoutKey: 'redisson_lock_timeout:{jobs}',
      channel: 'redisson_lock__channel:{jobs}',
    });
    expect(readWriteLockKeys('', 'catalog')).toMatchObject({
      lockKey: 'catalog',
      channel: 'redisson_rwlock:{catalog}',
      timeoutBase: '{catalog}',
    });
    // Redisson adds no braces to a name that has its own (prefixName / suffixName).
    expect(fairLockKeys('', '{t}x').queueKey).toBe('redisson_lock_queue:{t}x');
    expect(readWriteLockKeys('', '{t}x')).toMatchObject({ channel: 'redisson_rwlock:{t}x', timeoutBase: '{t}x' });
    expect(lockKeys('', '{t}x').channel).toBe('redisson_lock__channel:{t}x');
  });

  it('on Cluster keeps every key and channel of the family in the lock slot, whatever the name', () => {
    for (const prefix of ['', 'app:', '{tenant}:']) {
      for (const name of hostile) {
        const fair = fairLockKeys(prefix, name, true);
        const slot = keySlot(fair.lockKey);
        for (const key of [
          fair.queueKey,
          fair.timeoutKey,
          fair.channel,
          `${fair.channel}:client:w0`,
          fair.holdKey,
          fair.fenceKey,
        ]) {
          expect(keySlot(key), `${prefix}${name}: ${key}`).toBe(slot);
        }
        const rw = readWriteLockKeys(prefix, name, true);
        for (const key of [
          rw.channel,
          `${rw.timeoutBase}:owner:1:rwlock_timeout:1`,
          rw.writersKey,
          rw.holdKey,
          rw.fenceKey,
        ]) {
          expect(keySlot(key), `${prefix}${name}: ${key}`).toBe(slot);
        }
      }
    }
  });

  it("uses Redisson's names for the semaphores and the count-down latch", () => {
    expect(semaphoreKeys('', 'pool')).toMatchObject({
      lockKey: 'pool',
      channel: 'redisson_sc:{pool}',
      timeoutKey: '{pool}:timeout',
    });
    expect(semaphoreKeys('', '{t}x')).toMatchObject({ channel: 'redisson_sc:{t}x', timeoutKey: '{t}x:timeout' });
    expect(semaphoreKeys('app:', 'pool')).toMatchObject({
      lockKey: 'app:pool',
      channel: 'app:redisson_sc:{pool}',
      timeoutKey: 'app:{pool}:timeout',
    });
    expect(latchKeys('', 'boot')).toMatchObject({
      lockKey: 'boot',
      channel: 'redisson_countdownlatch__channel__{boot}',
    });
    // The latch's channel wraps the name in braces whatever it holds (no prefixName there)...
    expect(latchKeys('', '{t}x').channel).toBe('redisson_countdownlatch__channel__{{t}x}');
    // ...which lands in another slot than the count on a Cluster: there the channel carries the count's tag.
    expect(keySlot('redisson_countdownlatch__channel__{{t}x}')).not.toBe(keySlot('{t}x'));
    expect(latchKeys('', '{t}x', true).channel).toBe('redisson_countdownlatch__channel__{t}:{t}x');
    expect(latchKeys('', 'boot', true).channel).toBe('redisson_countdownlatch__channel__{boot}');
  });

  it('on Cluster keeps every key and channel of the semaphores and the latch in one slot, whatever the name', () => {
    for (const prefix of ['', 'app:', '{tenant}:']) {
      for (const name of hostile) {
        const semaphore = semaphoreKeys(prefix, name, true);
        const slot = keySlot(semaphore.lockKey);
        for (const key of [
          semaphore.channel,
          semaphore.timeoutKey,
          semaphore.queueKey,
          semaphore.deadlinesKey,
          semaphore.wakeChannel,
          `${semaphore.acquireMemoPrefix}r1`,
          `${semaphore.releaseMemoPrefix}r1`,
        ]) {
          expect(keySlot(key), `${prefix}${name}: ${key}`).toBe(slot);
        }
        const latch = latchKeys(prefix, name, true);
        for (const key of [latch.channel, `${latch.countDownMemoPrefix}r1`]) {
          expect(keySlot(key), `${prefix}${name}: ${key}`).toBe(keySlot(latch.lockKey));
        }
      }
    }
    const queues = new Set(hostile.map((name) => semaphoreKeys('app:', name, true).queueKey));
    expect(queues.size).toBe(hostile.length);
  });
});

describe('the shared fencing counter', () => {
  it('is one key per slot and prefix, on a server as on a Cluster, in the slot of the locks it serves', () => {
    const names = Array.from({ length: 5000 }, (_, i) => `order:${i}`);
    for (const [prefix, cluster] of [
      ['', true],
      ['', false],
      ['app:', false],
    ] as const) {
      const bySlot = new Map<number, Set<string>>();
      for (const name of names) {
        const keys = lockKeys(prefix, name, cluster);
        const slot = keySlot(keys.lockKey);
        expect(keySlot(keys.fenceKey)).toBe(slot);
        bySlot.set(slot, (bySlot.get(slot) ?? new Set()).add(keys.fenceKey));
      }
      for (const counters of bySlot.values()) expect(counters.size).toBe(1);
    }
    // A prefix with a hash tag puts every lock, and so its counter, in one slot.
    expect(new Set(names.map((name) => lockKeys('{tenant}:', name).fenceKey)).size).toBe(1);
  });
});
