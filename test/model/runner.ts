/**
 * The runner every model-based test shares: budget, seeds, replay, shrinking budget, the closing summary and
 * the CI figures. A primitive's model file calls `runModel` with its commands and how to build, judge the end
 * of, and tear down one generated sequence's harness; the runner does the rest.
 *
 * Budget: a short run: MODEL_SECONDS (default: the model's own, 60 s for the lock; the ioredis 5 leg of `npm test`
 * and `npm run test:all` sets 10, scripts/test-legs.mjs) or MODEL_RUNS sequences (default 40), whichever ends first, and at most MODEL_SHRINK_SECONDS (default 45) of
 * shrinking after a failure. `npm run test:model` (MODEL_LONG=1) keeps generating for MODEL_MINUTES
 * (default 30) per model, shrinking up to 15 min. The closing line gives the seed; a failure prints seed,
 * path and replayPath: replay it with MODEL_SEED=<seed> MODEL_PATH=<path> MODEL_REPLAY_PATH=<replayPath>.
 * MODEL_MAX_COMMANDS (default 25) caps a sequence.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import fc from 'fast-check';
import { afterAll, it } from 'vitest';
import { clientKind } from '../support/clients.js';
import { closeModelSites } from './world.js';

/** Counts of what ran, for the closing summary (shrink runs counted apart). */
export interface Stats {
  runs: number;
  shrinkRuns: number;
  steps: number;
  innerSteps: number;
  skipped: number;
  shrinkSteps: number;
  /** Unmodeled stalls judged as faults (the lag monitor). */
  stalls: number;
  /** Set by the runner while fast-check shrinks a failure. */
  shrinking: boolean;
  readonly kinds: Record<string, number>;
}

export const newStats = (): Stats => ({
  runs: 0,
  shrinkRuns: 0,
  steps: 0,
  innerSteps: 0,
  skipped: 0,
  shrinkSteps: 0,
  stalls: 0,
  shrinking: false,
  kinds: {},
});

/** Counts one command of kind `kind`: a step of its own, one inside a fault (or next to others), or neither. */
export function countStep(stats: Stats, kind: string, what: 'step' | 'inner' | 'none' = 'none'): void {
  if (stats.shrinking) {
    if (what !== 'none') stats.shrinkSteps++;
    return;
  }
  if (what === 'step') stats.steps++;
  if (what === 'inner') stats.innerSteps++;
  stats.kinds[kind] = (stats.kinds[kind] ?? 0) + 1;
}

/** A step skipped because it no longer applied (counted outside shrinking only). */
export function countSkipped(stats: Stats): void {
  if (!stats.shrinking) stats.skipped++;
}

export const env = (name: string): number | undefined => {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : Number(value);
};

/** What a model file gives the runner. */
export interface ModelSpec<H extends object> {
  /** The test's title. */
  readonly title: string;
  /** Names the model in the summary and the figures ('model' for the lock, as before). */
  readonly scenario: string;
  /** The summary's opening words ("model-based lock test"). */
  readonly label: string;
  /** MODEL_SECONDS' default for this model (the GLIDE and Cluster legs of `npm run test:all`). */
  readonly defaultSeconds: number;
  readonly stats: Stats;
  readonly commands: fc.Arbitrary<fc.AsyncCommand<H, H>>[];
  /** Builds the harness of the run numbered `runIndex` (fresh names, clients, actors). */
  create(runIndex: number): Promise<H>;
  /** Ends a run that passed its commands, judging as it goes. */
  finish(h: H): Promise<void>;
  /** Best effort, no judging: releases and closes everything of the run. */
  teardown(h: H): Promise<void>;
  /** Called before each run (clears a trace). */
  beforeRun?(): void;
}

/** Sequences per fast-check call: a long run is many calls, each with its own seed. */
const CHUNK = 20;
/** The longest one sequence may take (a safety net beyond the budgets; runs are never cut off). */
const LONGEST_RUN_MS = 120_000;

/** Declares the model's test (vitest `it`) with the budget of the environment. */
export function runModel<H extends object>(spec: ModelSpec<H>): void {
  const { stats } = spec;
  afterAll(closeModelSites);
  /** `npm run test:model` (MODEL_LONG=1): a long run, 30 minutes unless MODEL_MINUTES says otherwise. */
  const minutes = env('MODEL_MINUTES') ?? (process.env['MODEL_LONG'] === '1' ? 30 : undefined);
  const budgetMs = minutes !== undefined ? minutes * 60_000 : (env('MODEL_SECONDS') ?? spec.defaultSeconds) * 1000;
  const numRuns = env('MODEL_RUNS') ?? (minutes !== undefined ? Number.MAX_SAFE_INTEGER : 40);
  const shrinkMs = (env('MODEL_SHRINK_SECONDS') ?? (minutes !== undefined ? 900 : 45)) * 1000;
  const maxCommands = env('MODEL_MAX_COMMANDS') ?? 25;
  const baseSeed = env('MODEL_SEED') ?? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0;
  const replayPath = process.env['MODEL_PATH'] || undefined;
  /** The `replayPath` fast-check prints inside a commands counterexample (`/*replayPath="..."*\/`). */
  const commandsReplayPath = process.env['MODEL_REPLAY_PATH'] || undefined;

  it(
    spec.title,
    async () => {
      const started = Date.now();
      const deadline = started + budgetMs;
      let failedAt: number | undefined;
      let runIndex = 0;
      let longestRunMs = 0;
      const property = fc.asyncProperty(
        fc.commands(spec.commands, {
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
          spec.beforeRun?.();
          const runStarted = Date.now();
          const h = await spec.create(runIndex);
          try {
            await fc.asyncModelRun(() => ({ model: h, real: h }), commands);
            await spec.finish(h);
          } catch (error) {
            failedAt ??= Date.now();
            throw error;
          } finally {
            await spec.teardown(h);
            longestRunMs = Math.max(longestRunMs, Date.now() - runStarted);
          }
        },
      );

      let details: fc.RunDetails<[Iterable<fc.AsyncCommand<H, H>>]> | undefined;
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
        scenario: spec.scenario,
        client: clientKind,
        runs: stats.runs,
        steps: stats.steps,
        innerSteps: stats.innerSteps,
        skipped: stats.skipped,
        shrinkRuns: stats.shrinkRuns,
        shrinkSteps: stats.shrinkSteps,
        stalls: stats.stalls,
        seconds: Math.round(seconds),
        longestRunSeconds: Math.round(longestRunMs / 1000),
        seed: baseSeed,
        failed: details.failed,
      };
      console.log(
        `${spec.label} on ${clientKind}: ${stats.runs} sequences, ${stats.steps} steps (+${stats.innerSteps} inside faults, ` +
          `${stats.skipped} skipped, ${stats.stalls} unmodeled stalls judged as faults) in ${seconds.toFixed(0)} s; ` +
          `${stats.shrinkRuns} shrink runs (${stats.shrinkSteps} steps); ` +
          `longest sequence ${(longestRunMs / 1000).toFixed(1)} s; ` +
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
}
