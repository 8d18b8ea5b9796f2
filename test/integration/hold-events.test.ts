// `flowlock:hold:end` on its own (the README's loss-logging recipe subscribes to it and to renewal errors
// only) gets the end of every hold, while a subscriber that comes in mid-hold still sees no end without its
// start, and counts built on start/end pairs never go negative.
import diagnostics from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import type { HoldEndMessage, HoldStartMessage } from '../../src/index.js';
import { uniqueName, until, useRedis } from '../support/fixture.js';

const redis = useRedis();

const subscriptions: [string, (message: unknown) => void][] = [];

function listen(channel: string, listener: (message: unknown) => void): void {
  diagnostics.subscribe(channel, listener);
  subscriptions.push([channel, listener]);
}

afterEach(() => {
  for (const [channel, listener] of subscriptions.splice(0)) diagnostics.unsubscribe(channel, listener);
});

describe('hold events, each channel on its own (issue 22, item 2)', () => {
  it('a subscriber of flowlock:hold:end alone gets released and lost holds', async () => {
    const ends: HoldEndMessage[] = [];
    listen('flowlock:hold:end', (message) => ends.push(message as HoldEndMessage));
    const locks = redis.locks();
    const name = uniqueName('end-only');
    const lease = await locks.getLock(name).acquire();
    await lease.release();
    const lost = await locks.getLock(`${name}:lost`).acquire({ leaseTime: 200 });
    await until(() => lost.signal.aborted, 'the fixed lease ran out', 5000);
    await until(() => ends.length === 2, 'two hold:end events', 2000);
    expect(ends).toMatchObject([
      { name, reason: 'released' },
      { name: `${name}:lost`, reason: 'lost', lossReason: 'lease_expired' },
    ]);
  });

  it('a subscriber of both that comes in mid-hold sees no end without its start; pair counts stay >= 0', async () => {
    const locks = redis.locks();
    const name = uniqueName('mid-hold');
    const before = await locks.getLock(name).acquire();
    let active = 0;
    let lowest = 0;
    const starts = new Set<HoldStartMessage>();
    listen('flowlock:hold:start', (message) => {
      starts.add(message as HoldStartMessage);
      active++;
    });
    const unmatched: HoldEndMessage[] = [];
    listen('flowlock:hold:end', (message) => {
      const end = message as HoldEndMessage;
      if (!starts.has(end.start)) unmatched.push(end);
      lowest = Math.min(lowest, --active);
    });
    const after = await locks.getLock(`${name}:after`).acquire();
    await before.release();
    await after.release();
    expect(unmatched).toEqual([]);
    expect(lowest).toBe(0);
    expect(active).toBe(0);
  });
});
