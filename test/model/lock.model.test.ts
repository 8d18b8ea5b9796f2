// Model-based test of the lock against a real redis-server: random sequences of lock operations by six
// flows on two lock clients and two lock names, interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL
// and PEXPIRE of lock keys, killed subscriber connections, close() mid-flight) and a played Redisson client
// taking and unlocking the same locks, each step compared with a
// reference model (test/model/model.ts). fast-check shrinks a failure to a minimal sequence of commands.
//
// Budget, seeds and replay: test/model/runner.ts (MODEL_SECONDS defaults to 60 here). Hunting aids:
// MODEL_DEBUG=1 adds a timestamped trace to a failure (2: and the server's MONITOR feed), MODEL_SET=basic|ops
// leaves the faults out, MODEL_IGNORE=<check ids> skips checks (model.ts).
import { useRedis } from '../support/fixture.js';
import { basicCommandArbs, commandArbs, Harness, opsCommandArbs, stats } from './commands.js';
import { runModel } from './runner.js';
import { modelSite, traceLog } from './world.js';

const redis = useRedis();

/** MODEL_SET=basic|ops narrows the commands down (no faults) when hunting a problem. */
const commandSet = { basic: basicCommandArbs, ops: opsCommandArbs }[process.env['MODEL_SET'] ?? ''] ?? commandArbs;

runModel<Harness>({
  title: 'the lock agrees with its model under random operations and faults',
  scenario: 'model',
  label: 'model-based lock test',
  defaultSeconds: 60,
  stats,
  commands: commandSet,
  beforeRun: () => {
    traceLog.length = 0;
  },
  create: async (runIndex) => {
    const { server, admin, names } = await modelSite(redis, [`model${runIndex}a`, `model${runIndex}b`]);
    return Harness.create(server, admin, names);
  },
  finish: (h) => h.finish(),
  teardown: (h) => h.world.teardown(),
});
