import { describe, expect, it } from 'vitest';
import { hashedPart, keySlot, lockKeys } from '../../src/keys.js';

describe('keys', () => {
  it('computes Redis Cluster slots (reference values from CLUSTER KEYSLOT)', () => {
    expect(keySlot('foo')).toBe(12182);
    expect(keySlot('bar')).toBe(5061);
    expect(keySlot('{user1000}.following')).toBe(keySlot('user1000'));
    expect(keySlot('foo{}{bar}')).toBe(keySlot('foo{}{bar}'));
    expect(hashedPart('foo{}{bar}')).toBe('foo{}{bar}');
    expect(hashedPart('foo{{bar}}zap')).toBe('{bar');
    expect(hashedPart('foo{bar}{zap}')).toBe('bar');
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
        expect(keySlot(keys.fenceKey), `${prefix}${name}`).toBe(slot);
        expect(keySlot(`${keys.releaseMemoPrefix}some-request-id`), `${prefix}${name}`).toBe(slot);
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
        const owner = seen.get(keys.fenceKey);
        if (owner !== undefined) expect(keys.lockKey, `${owner} vs ${prefix}|${name}`).toBe(owner);
        seen.set(keys.fenceKey, keys.lockKey);
      }
    }
  });
});
