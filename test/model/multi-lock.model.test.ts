// Model-based test of RMultiLock against a real redis-server: six actors on two lock clients take
// multi-locks over random subsets of three names (and single locks of those names), re-entering from their
// own flows, interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL and PEXPIRE of a member's hash,
// killed subscriber connections, close() mid-flight, aborts); what the model checks after every step:
// test/model/multi-lock.ts. Budget, seeds and replay: test/model/runner.ts (MODEL_SECONDS defaults to 30
// here); MODEL_DEBUG=1 adds a timestamped trace.
import { useRedis } from '../support/fixture.js';
import { multiLockCommands, MultiHarness, stats } from './multi-lock.js';
import { runModel } from './runner.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

runModel<MultiHarness>({
  title: 'the multi-lock agrees with its model under random operations and faults',
  scenario: 'model-multi-lock',
  label: 'model-based multi-lock test',
  defaultSeconds: 30,
  stats,
  commands: multiLockCommands,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`multi${runIndex}`], { tagged: true });
    return MultiHarness.create(server, admin, names[0] ?? '');
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
