// Model-based test of RPermitExpirableSemaphore against a real redis-server: six actors on two lock clients
// take permits under watchdog-renewed or short fixed leases, hold them and give them back (by lease, by id,
// from either client, withPermit), interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL and PEXPIRE
// of the count, of the permits out and of the permit queue's keys, killed subscriber connections, close()
// mid-flight, aborts); what the model checks after every step: test/model/permit-expirable-semaphore.ts.
// Budget, seeds and replay: test/model/runner.ts (MODEL_SECONDS defaults to 30 here); MODEL_DEBUG=1 adds a
// timestamped trace.
import { useRedis } from '../support/fixture.js';
import { PesHarness, permitExpirableSemaphoreCommands, stats } from './permit-expirable-semaphore.js';
import { runModel } from './runner.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

runModel<PesHarness>({
  title: 'the permit-expirable semaphore agrees with its model under random operations and faults',
  scenario: 'model-permit-expirable-semaphore',
  label: 'model-based permit-expirable semaphore test',
  defaultSeconds: 30,
  stats,
  commands: permitExpirableSemaphoreCommands,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`pes${runIndex}`]);
    return PesHarness.create(server, admin, names[0] ?? '');
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
