// Model-based test of the lock against a real redis-server: random sequences of lock operations by six
// flows on two lock clients and two lock names, interleaved with faults (event-loop stalls, DEBUG SLEEP, DEL
// and PEXPIRE of lock keys, killed subscriber connections, close() mid-flight), each step compared with a
// reference model (test/model/model.ts). fast-check shrinks a failure to a minimal sequence of commands.
//
// Budget: in `npm test` (CI) a short run: MODEL_SECONDS (default 60) or MODEL_RUNS sequences (default 40),
// whichever ends first, and at most MODEL_SHRINK_SECONDS (default 45) of shrinking after a failure.
// `npm run test:model` (MODEL_LONG=1) keeps generating for MODEL_MINUTES (default 30), shrinking up to 15 min.
// The closing line gives the seed; a failure prints seed, path and replayPath: replay it with
// MODEL_SEED=<seed> MODEL_PATH=<path> MODEL_REPLAY_PATH=<replayPath>. MODEL_MAX_COMMANDS (default 25) caps a
// sequence. Hunting aids: MODEL_DEBUG=1 adds a timestamped trace to a failure (2: and the server's
// MONITOR feed), MODEL_SET=basic|ops leaves the faults out, MODEL_IGNORE=<check ids> skips checks (model.ts).
import { appendFileSync, mkdirSync } from 'node:fs';
import fc from 'fast-check';
import { it } from 'vitest';
import { uniqueName, useRedis, type Redis } from '../support/fixture.js';
import { basicCommandArbs, commandArbs, Harness, opsCommandArbs, stats } from './commands.js';
import { traceLog } from './world.js';

const redis = useRedis();

const env = (name: string): number | undefined => {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : Number(value);
};
/** `npm run test:model` (MODEL_LONG=1): a long run, 30 minutes unless MODEL_MINUTES says otherwise. */
const minutes = env('MODEL_MINUTES') ?? (process.env['MODEL_LONG'] === '1' ? 30 : undefined);
const budgetMs = minutes !== undefined ? minutes * 60_000 : (env('MODEL_SECONDS') ?? 60) * 1000;
const numRuns = env('MODEL_RUNS') ?? (minutes !== undefined ? Number.MAX_SAFE_INTEGER : 40);
const shrinkMs = (env('MODEL_SHRINK_SECONDS') ?? (minutes !== undefined ? 900 : 45)) * 1000;
const maxCommands = env('MODEL_MAX_COMMANDS') ?? 25;
const baseSeed = env('MODEL_SEED') ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
const replayPath = process.env['MODEL_PATH'] || undefined;
/** The `replayPath` fast-check prints inside a commands counterexample (`/*replayPath="..."*\/`). */
const commandsReplayPath = process.env['MODEL_REPLAY_PATH'] || undefined;
/** MODEL_SET=basic|ops narrows the commands down (no faults) when hunting a problem. */
const commandSet = { basic: basicCommandArbs, ops: opsCommandArbs }[process.env['MODEL_SET'] ?? ''] ?? commandArbs;
/** Sequences per fast-check call: a long run is many calls, each with its own seed. */
const CHUNK = 20;
/** The longest one sequence may take (a safety net beyond the budgets; runs are never cut off). */
const LONGEST_RUN_MS = 120_000;

it(
  'the lock agrees with its model under random operations and faults',
  async () => {
    const started = Date.now();
    const deadline = started + budgetMs;
    let failedAt: number | undefined;
    let runIndex = 0;
    const property = fc.asyncProperty(
      fc.commands(commandSet, {
        maxCommands,
        size: 'max',
        ...(commandsReplayPath ? { replayPath: commandsReplayPath } : {}),
      }),
      async (commands) => {
        // Out of budget: pass without running (fast-check cannot stop a run it started, so none is cut off).
        if (failedAt === undefined ? Date.now() > deadline : Date.now() > failedAt + shrinkMs) return;
        stats.shrinking = failedAt !== undefined;
        if (stats.shrinking) stats.shrinkRuns++;
        else stats.runs++;
        runIndex++;
        const names = [uniqueName(`model${runIndex}a`), uniqueName(`model${runIndex}b`)];
        traceLog.length = 0;
        const h = await Harness.create(redis.server, redis.admin as Redis, names);
        try {
          await fc.asyncModelRun(() => ({ model: h, real: h }), commands);
          await h.finish();
        } catch (error) {
          failedAt ??= Date.now();
          throw error;
        } finally {
          await h.world.teardown();
        }
      },
    );

    let details: fc.RunDetails<[Iterable<fc.AsyncCommand<Harness, Harness>>]> | undefined;
    let seed: number | undefined;
    for (let chunk = 0; ; chunk++) {
      seed = (baseSeed + chunk * 7919) | 0;
      const remaining = deadline - Date.now();
      details = await fc.check(property, {
        seed,
        numRuns: Math.min(CHUNK, numRuns - stats.runs),
        ...(replayPath ? { path: replayPath } : {}),
        interruptAfterTimeLimit: Math.max(remaining, 0) + shrinkMs + LONGEST_RUN_MS,
      });
      if (details.failed || replayPath || Date.now() >= deadline || stats.runs >= numRuns) break;
    }

    const seconds = (Date.now() - started) / 1000;
    const figures = {
      scenario: 'model',
      runs: stats.runs,
      steps: stats.steps,
      innerSteps: stats.innerSteps,
      skipped: stats.skipped,
      shrinkRuns: stats.shrinkRuns,
      shrinkSteps: stats.shrinkSteps,
      stalls: stats.stalls,
      seconds: Math.round(seconds),
      seed: baseSeed,
      failed: details.failed,
    };
    console.log(
      `model-based lock test: ${stats.runs} sequences, ${stats.steps} steps (+${stats.innerSteps} inside faults, ` +
        `${stats.skipped} skipped, ${stats.stalls} unmodeled stalls judged as faults) in ${seconds.toFixed(0)} s; ` +
        `${stats.shrinkRuns} shrink runs (${stats.shrinkSteps} steps); ` +
        `seed ${baseSeed} ` +
        `(MODEL_SEED=${baseSeed} replays it)\n  steps by kind: ${JSON.stringify(stats.kinds)}`,
    );
    // Under CI, next to Vitest's JSON reports (test/support/figures.ts does the same for the fault scenarios).
    if (process.env['CI']) {
      mkdirSync('.vitest-results', { recursive: true });
      appendFileSync('.vitest-results/model-figures.jsonl', `${JSON.stringify(figures)}\n`);
    }
    if (details.failed) {
      const error = details.errorInstance;
      throw new Error(
        `${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}\n\n${fc.defaultReportMessage(details) ?? 'failed'}\n(replay: MODEL_SEED=${seed} MODEL_PATH="${details.counterexamplePath ?? ''}" ` +
          'MODEL_REPLAY_PATH=<the replayPath printed with the counterexample>)',
      );
    }
  },
  budgetMs + shrinkMs + 2 * LONGEST_RUN_MS,
);
