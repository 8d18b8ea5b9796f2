import { describe, expect, it } from 'vitest';
import { PlainProtocol } from '../../src/primitives/protocol.js';
import { lockKeys } from '../../src/redis/keys.js';
import type { RedisAdapter } from '../../src/redis/seam.js';
import type { LockScripts } from '../../src/redis/scripts.js';

// The plain lock's count of calls in flight per lock key (what decides a lean acquire): nothing Redis decides,
// so the scripts are a stand-in that answers when the test says so.
describe('PlainProtocol traffic', () => {
  function protocols(count: number) {
    const traffic = new Map<string, number>();
    const answers: (() => void)[] = [];
    const scripts = {
      acquire: () => new Promise((resolve) => answers.push(() => resolve({ acquired: false, pttl: 1 }))),
    } as unknown as LockScripts;
    const made = Array.from(
      { length: count },
      (_, i) => new PlainProtocol(scripts, lockKeys('', `name:${i}`, false), {} as RedisAdapter, traffic),
    );
    return { traffic, answers, made };
  }

  it('is busy while a call is in flight and idle once it settled', async () => {
    const { answers, made } = protocols(1);
    const [protocol] = made;
    expect(protocol?.idle()).toBe(true);
    const first = protocol?.acquire(1000, 'r1', ['owner']);
    const second = protocol?.acquire(1000, 'r2', ['owner']);
    expect(protocol?.idle()).toBe(false);
    answers[0]?.();
    await first;
    expect(protocol?.idle()).toBe(false);
    answers[1]?.();
    await second;
    expect(protocol?.idle()).toBe(true);
  });

  it('keeps a bounded table however many distinct names were used', async () => {
    const { traffic, answers, made } = protocols(5000);
    for (const protocol of made) {
      const call = protocol.acquire(1000, 'r', ['owner']);
      answers.shift()?.();
      await call;
    }
    expect(made.every((protocol) => protocol.idle())).toBe(true);
    expect(traffic.size).toBeLessThanOrEqual(1025);
  });
});
