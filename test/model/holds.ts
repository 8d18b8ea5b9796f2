/**
 * What the models of lock holds with fixed leases share (the read-write lock's, the multi-lock's): the
 * lease and the bounds, an acquisition call told a timeout as `false`, taking in what settled calls were
 * told (in the order they settled, each grant judged by the model), and the liveness round at the end of a
 * run (waiters take turns, each granted within a bound of the previous release).
 */
import { LockAcquireTimeoutError } from '../../src/index.js';
import { fmt, ModelHarness, type PrimitiveActor, type PrimitiveWorld, type WaitJob } from './primitive.js';
import { settlesWithin } from './world.js';

/** Every hold's lease: longer than any run, so that only a fault takes a hold away. */
export const LEASE_MS = 30_000;
/**
 * How long after a command (and the end of its faults) the state may take to become stable: a release
 * message or a waiter's own retry, a killed subscriber's reconnect, a given-back grant of an abandoned
 * attempt, and margin for a loaded 2-core machine.
 */
export const STABLE_MS = 6000;
/** How long an acquisition step is watched before the command ends (it then waits in the background). */
export const WATCH_MS = 150;

/** Runs an acquisition: true once `take` resolved, false when it ran out of wait time; other errors reject. */
export async function acquiredInTime(take: () => Promise<unknown>): Promise<boolean> {
  try {
    await take();
    return true;
  } catch (error) {
    if (error instanceof LockAcquireTimeoutError) return false;
    throw error;
  }
}

/** A model harness of holds: `adopt` and the closing liveness round, around the model's own judging. */
export abstract class HoldHarness<P, W extends PrimitiveWorld<P>, J extends WaitJob<P>> extends ModelHarness<P, W> {
  /** The actor's current call, if it is one of this model's acquisitions. */
  protected abstract jobOf(actor: PrimitiveActor<P>): J | undefined;
  /** Judges a grant against the live holds, and takes it in (before the job counts as adopted). */
  protected abstract granted(job: J, who: string): void;
  /** Judges a call that settled without a grant, before judgeEnded (if the model judges more). */
  protected notGranted?(job: J, who: string): void;

  /**
   * Takes in what settled acquisitions were told (oldest first): a grant as `granted` judges it; anything
   * else as judgeEnded does, and an unbounded call may not give up.
   */
  adopt(): void {
    const settled = this.world.actors
      .map((actor) => this.jobOf(actor))
      .filter((job): job is J => job?.outcome !== undefined && !job.adopted)
      .sort((a, b) => (a.outcome?.at ?? 0) - (b.outcome?.at ?? 0));
    for (const job of settled) {
      const who = `${job.actor.name} ${String(job)}`;
      if (job.outcome?.value) this.granted(job, who);
      else this.notGranted?.(job, who);
      job.adopted = true;
      this.judgeEnded(job);
      if (job.outcome?.value === false && job.outcome.error === undefined && job.wait === undefined)
        throw this.violation(`${who} gave up without a waitTime`);
      this.note(
        `${who} -> ${job.outcome?.value ? 'granted' : 'not granted'} after ${fmt((job.outcome?.at ?? 0) - job.startedAt)} ms`,
      );
    }
  }

  /**
   * Aborts every wait still running and settles (the start of every finish): an aborted wait may have been
   * granted all the same, and is adopted then (for the model to release before liveness).
   */
  protected async endWaits(): Promise<void> {
    await this.abortWaits();
    await this.settle();
  }

  /**
   * Liveness once the faults stopped: each actor starts `make(actor)` (an unbounded acquisition), and each
   * is granted within STABLE_MS of the previous release; `release` gives a granted call's hold back at once
   * (false: the call holds nothing). `redisState` describes Redis for a violation.
   */
  protected async takeTurns(
    make: (actor: PrimitiveActor<P>) => J,
    release: (job: J) => Promise<boolean>,
    redisState: () => Promise<string>,
  ): Promise<void> {
    const jobs = this.world.actors.map((actor) => {
      const job = make(actor);
      actor.last = job;
      this.note(`liveness: ${actor.name} ${String(job)} on ${job.client.label}`);
      return job;
    });
    const released = new Set<J>();
    while (released.size < jobs.length) {
      const next = Promise.race(jobs.filter((j) => !released.has(j)).map((j) => j.done));
      if (!(await settlesWithin(next, STABLE_MS)))
        throw this.violation(
          `liveness: no waiter granted within ${STABLE_MS} ms of the previous release (Redis: ${await redisState()})`,
        );
      this.adopt();
      for (const job of jobs) {
        if (job.adopted && !released.has(job)) {
          released.add(job);
          if (!(await release(job)))
            throw this.violation(`liveness: ${job.actor.name} ${String(job)} ended without a hold`);
        }
      }
    }
  }
}
