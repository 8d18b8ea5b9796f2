// Pairing of the diagnostics channels' events under contention: 8 processes, each recording what its lock
// client publishes (test/support/diagnostics-recorder.ts inside test/fixtures/lock-worker.ts).
import { describe, expect, it } from 'vitest';
import { uniqueName } from '../../support/fixture.js';
import { recordFigures } from '../../support/figures.js';
import { useFaultServers } from '../../support/fault-servers.js';
import type { DiagnosticsSummary } from '../../support/diagnostics-recorder.js';
import { startWorkers, type WorkerMessage } from '../../support/workers.js';

// A test that starts worker processes gets 120 s: on a loaded machine their start alone can take 20 s.
const servers = useFaultServers({ resource: true });

describe('diagnostics under contention', () => {
  it('8 processes: every wait and hold start has exactly one end, and the active counts return to 0', async () => {
    const name = uniqueName('pairing');
    const processes = 8;
    const perProcess = 25;
    const workers = startWorkers(
      Array.from({ length: processes }, (_, i) => ({
        mode: 'counter' as const,
        id: `w${i}`,
        lockUrl: servers.lock.url,
        resourceUrl: servers.resource.url,
        name,
        count: perProcess,
        sleepMs: 2,
        flows: 2,
        diagnostics: true,
      })),
    );
    servers.cleanup(() => Promise.all(workers.map((worker) => worker.kill())));
    const summaries = await Promise.all(
      workers.map((worker) => worker.next<WorkerMessage & DiagnosticsSummary>('diagnostics', 120_000)),
    );
    const total = (channel: string): number => summaries.reduce((sum, s) => sum + (s.counts[channel] ?? 0), 0);
    recordFigures('diagnostics pairing, 8 processes', {
      holds: total('flowlock:hold:start'),
      waits: total('flowlock:wait:start'),
      acquisitions: total('tracing:flowlock:acquire:asyncEnd'),
    });
    for (const summary of summaries) {
      expect(summary).toMatchObject({
        unmatchedEnds: 0,
        openHolds: 0,
        openWaits: 0,
        lowestActiveHolds: 0,
        lowestActiveWaits: 0,
      });
      expect(summary.counts['flowlock:hold:start']).toBe(perProcess);
      expect(summary.counts['flowlock:hold:end']).toBe(perProcess);
      expect(summary.counts['flowlock:wait:start']).toBe(summary.counts['flowlock:wait:end']);
      expect(summary.counts['tracing:flowlock:acquire:start']).toBe(
        summary.counts['tracing:flowlock:acquire:asyncEnd'],
      );
    }
    // Contention happened: processes waited for each other.
    expect(total('flowlock:wait:start')).toBeGreaterThan(processes);
  }, 120_000);
});
