// Model-based test of RSemaphore against a real redis-server: six actors on two lock clients take and give
// back permits of one semaphore, interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL and PEXPIRE of
// the count and of the permit queue's keys, killed subscriber connections, close() mid-flight); what the
// model checks after every step: test/model/semaphore.ts. Budget, seeds and replay: test/model/runner.ts
// (MODEL_SECONDS defaults to 30 here); MODEL_DEBUG=1 adds a timestamped trace.
import { useRedis } from '../support/fixture.js';
import { runModel } from './runner.js';
import { SemHarness, semaphoreCommands, stats } from './semaphore.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

runModel<SemHarness>({
  title: 'the semaphore agrees with its model under random operations and faults',
  scenario: 'model-semaphore',
  label: 'model-based semaphore test',
  defaultSeconds: 30,
  stats,
  commands: semaphoreCommands,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`sem${runIndex}`]);
    return SemHarness.create(server, admin, names[0] ?? '');
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
