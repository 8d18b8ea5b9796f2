// Model-based test of RFairLock: the lock model (test/model/model.ts, commands.ts: six flows on two clients,
// two names, faults between and during steps) run against getFairLock, which shares RLock's interface and
// everything RLock's model checks (one holder, hold counts, leases, fencing, lockLost, a free lock reaches a
// waiter), plus the fair lock's own: grants in arrival order among live waiters, and no queue entry living
// past its waiter lease (watchdogTimeout). Budget, seeds and replay: test/model/runner.ts (MODEL_SECONDS
// defaults to 30 here).
import { useRedis } from '../support/fixture.js';
import { commandArbs, Harness, stats } from './commands.js';
import { runModel } from './runner.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

runModel<Harness>({
  title: 'the fair lock agrees with its model under random operations and faults',
  scenario: 'model-fair-lock',
  label: 'model-based fair lock test',
  defaultSeconds: 30,
  stats,
  commands: commandArbs,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`fair${runIndex}a`, `fair${runIndex}b`]);
    return Harness.create(server, admin, names, 'fair');
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
