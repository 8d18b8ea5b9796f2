// Faults particular to Valkey GLIDE (../shared/CLIENTS.md §7), on the client under test when it is GLIDE:
// a call that outlives `requestTimeout` (GLIDE rejects it, and the server still runs it), a subscriber
// connection dropped under a waiter (GLIDE subscribes again without a word: the adapter must notice that a
// release may have been missed), and a flushed script cache (GLIDE's error says NoScriptError, not
// NOSCRIPT). The shard channel's slot migration under a GLIDE waiter is in clients.test.ts.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { lockKeys } from '../../../src/redis/keys.js';
import { onGlide } from '../../support/clients.js';
import { commandCalls, everyNode, onCluster, uniqueName, useRedis } from '../../support/fixture.js';

const redis = useRedis();

async function evalCalls(): Promise<number> {
  return (await commandCalls(redis.admin))['eval'] ?? 0;
}

/** Keeps the server busy for `ms` (a Lua busy loop: every other command waits behind it). */
function blockServer(ms: number): Promise<unknown> {
  const script =
    "local t = redis.call('TIME') while true do local n = redis.call('TIME') " +
    'if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > tonumber(ARGV[1]) * 1000 then break end end return 1';
  // On a cluster: every node, the lock's master among them.
  return Promise.all(everyNode(redis.admin).map((node) => node.eval(script, 0, ms).catch(() => undefined)));
}

describe.runIf(onGlide)('GLIDE faults', () => {
  it('an acquire that outlives requestTimeout leaves no hold behind, whether it resolves or rejects', async () => {
    // 100 ms: the server is kept busy for 400 ms, so the acquire, sent meanwhile, times out client-side and
    // runs when the server is free again (so does the adapter's one resend, answered as the first was).
    const locks = redis.locks({}, { glide: { requestTimeout: 100 } });
    const name = uniqueName('glide-timeout');
    // The scripts are known to the server, and the connection is up, before the server is kept busy.
    await locks.getLock(name).withLock(() => undefined);
    const callsBefore = await commandCalls(redis.admin);
    const blocked = blockServer(400);
    await sleep(20);
    const outcome = await locks.run(async () => {
      try {
        const held = await locks.getLock(name).tryLock(0, 60_000);
        if (held) await locks.getLock(name).unlock();
        return held ? 'held' : 'not held';
      } catch (error) {
        return error instanceof Error ? error.name : 'error';
      }
    });
    await blocked;
    // Whatever the caller was told, the grant the server ran after the timeout must not outlive it: a
    // 60 s lease left behind would show here (the undo of a grant of unknown outcome runs within seconds).
    await expect.poll(() => redis.admin.exists(name), { timeout: 10_000, interval: 100 }).toBe(0);
    // GLIDE's TimeoutError or ConnectionError reaches the caller as the cause of a RedisUnavailableError.
    expect(['held', 'not held', 'RedisUnavailableError']).toContain(outcome);
    // The acquire timed out client-side and was sent again (the adapter's one resend of an unknown outcome):
    // the server ran it twice, answering the second as the first; and a release (or an undo) followed.
    const callsAfter = await commandCalls(redis.admin);
    const scripts = (calls: Record<string, number>): number => (calls['evalsha'] ?? 0) + (calls['eval'] ?? 0);
    expect(scripts(callsAfter) - scripts(callsBefore)).toBeGreaterThanOrEqual(3);
  });

  it.skipIf(onCluster)(
    'a waiter whose subscriber connection dropped is woken although the release message was lost',
    async () => {
      const holder = redis.locks();
      const waiter = redis.locks();
      const name = uniqueName('glide-resubscribe');
      const lease = await holder.getLock(name).acquire({ leaseTime: 20_000 });
      const waiting = waiter.run(() => waiter.getLock(name).tryLock(15_000, 5000));
      waiting.catch(() => undefined); // awaited below
      await expect.poll(() => waiter.waits()[0]?.subscription, { timeout: 5000, interval: 20 }).toBe('active');
      // The subscriber's connection drops, and the release is announced before GLIDE subscribed again: nobody
      // hears it. Only the adapter's inference (a channel missing, the core's resubscription) wakes the waiter
      // before the 20 s lease would have run out.
      await redis.admin.client('KILL', 'TYPE', 'pubsub');
      const released = performance.now();
      await lease.release();
      expect(await waiting).toBe(true);
      const wokeMs = performance.now() - released;
      expect(wokeMs).toBeLessThan(3000);
      const channel = lockKeys('', name, onCluster).channel;
      // Subscribed again on the server (lingering after the waiter left, then unsubscribed).
      expect(Number(((await redis.admin.pubsub('NUMSUB', channel)) as [string, string])[1])).toBeLessThanOrEqual(1);
      await waiter.getLock(name).forceUnlock();
    },
  );

  it('runs every script again after SCRIPT FLUSH: GLIDE’s NoScriptError is NOSCRIPT', async () => {
    const locks = redis.locks();
    const name = uniqueName('glide-flush');
    await locks.getLock(name).withLock(() => undefined);
    for (const node of everyNode(redis.admin)) await node.script('FLUSH');
    const evalsBefore = await evalCalls();
    const lease = await locks.getLock(name).acquire({ leaseTime: 10_000 });
    await lease.release();
    // The acquire and the release each met NOSCRIPT and ran by EVAL; then the server knows them again.
    expect((await evalCalls()) - evalsBefore).toBe(2);
    const evalsAfter = await evalCalls();
    await locks.getLock(name).withLock(() => undefined);
    expect(await evalCalls()).toBe(evalsAfter);
    expect(await redis.admin.exists(name)).toBe(0);
  });
});
