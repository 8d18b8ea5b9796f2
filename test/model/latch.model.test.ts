// Model-based test of RCountDownLatch against a real redis-server: six actors on two lock clients await,
// count down, arm and read one latch, interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL and
// PEXPIRE of the count, killed subscriber and data connections, close() mid-flight); what the model checks
// after every step: test/model/latch.ts. Budget, seeds and replay: test/model/runner.ts (MODEL_SECONDS
// defaults to 30 here); MODEL_DEBUG=1 adds a timestamped trace.
import { useRedis } from '../support/fixture.js';
import { LatchHarness, latchCommands, stats } from './latch.js';
import { runModel } from './runner.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

runModel<LatchHarness>({
  title: 'the count-down latch agrees with its model under random operations and faults',
  scenario: 'model-latch',
  label: 'model-based latch test',
  defaultSeconds: 30,
  stats,
  commands: latchCommands,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`latch${runIndex}`]);
    return LatchHarness.create(server, admin, names[0] ?? '');
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
