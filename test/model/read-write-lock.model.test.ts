// Model-based test of RReadWriteLock against a real redis-server: six actors on two lock clients take the
// read or the write lock of one name, interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL and PEXPIRE
// of the hash and of the waiting writers' registry, killed subscriber connections, close() mid-flight); what
// the model checks after every step: test/model/read-write-lock.ts. Budget, seeds and replay:
// test/model/runner.ts (MODEL_SECONDS defaults to 30 here); MODEL_DEBUG=1 adds a timestamped trace.
import { useRedis } from '../support/fixture.js';
import { readWriteCommands, RwHarness, stats } from './read-write-lock.js';
import { runModel } from './runner.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

runModel<RwHarness>({
  title: 'the read-write lock agrees with its model under random operations and faults',
  scenario: 'model-read-write-lock',
  label: 'model-based read-write lock test',
  defaultSeconds: 30,
  stats,
  commands: readWriteCommands,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`rw${runIndex}`]);
    return RwHarness.create(server, admin, names[0] ?? '');
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
