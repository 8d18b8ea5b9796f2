/**
 * Worker processes for the fault tests (test/fixtures/lock-worker.ts, on the built package): start them,
 * wait for their messages, command them, pause, kill, and see them exit.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import type { WorkerConfig } from '../fixtures/lock-worker.ts';

export type { WorkerConfig };

const workerPath = join(import.meta.dirname, '..', 'fixtures', 'lock-worker.ts');

export interface WorkerMessage {
  readonly id: string;
  readonly type: string;
  readonly [field: string]: unknown;
}

export class Worker {
  readonly id: string;
  readonly child: ChildProcess;
  readonly messages: WorkerMessage[] = [];
  readonly exited: Promise<number | null>;
  #waiters: { type: string; resolve: (m: WorkerMessage) => void; reject: (error: Error) => void }[] = [];

  constructor(config: WorkerConfig) {
    this.id = config.id;
    this.child = fork(workerPath, [JSON.stringify(config)], {
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      execArgv: ['--no-warnings'],
    });
    this.exited = once(this.child, 'exit').then(([code]) => code as number | null);
    this.child.on('message', (message: WorkerMessage) => {
      this.messages.push(message);
      // A worker that failed sends nothing more: whoever waits for it learns why at once.
      if (message.type === 'error') {
        for (const waiter of this.#waiters.splice(0))
          waiter.reject(new Error(`${this.id}: ${String(message['message'])}`));
        return;
      }
      const index = this.#waiters.findIndex((w) => w.type === message.type);
      if (index !== -1) this.#waiters.splice(index, 1)[0]?.resolve(message);
    });
  }

  /** The first message of `type` not yet taken by an earlier call (waits up to `timeoutMs`). */
  next<T extends WorkerMessage = WorkerMessage>(type: string, timeoutMs = 20_000): Promise<T> {
    const seen = this.messages.find((m) => m.type === type && !taken.has(m));
    if (seen) {
      taken.add(seen);
      return Promise.resolve(seen as T);
    }
    const failure = this.messages.find((m) => m.type === 'error');
    if (failure) return Promise.reject(new Error(`${this.id}: ${String(failure['message'])}`));
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`${this.id}: no "${type}" message within ${timeoutMs} ms; got ${describe(this.messages)}`));
      }, timeoutMs);
      this.#waiters.push({
        type,
        resolve: (m) => {
          clearTimeout(timer);
          taken.add(m);
          resolve(m as T);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
    });
  }

  send(command: Record<string, unknown>): void {
    this.child.send(command);
  }

  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGCONT');
      this.child.kill('SIGKILL');
    }
    await this.exited;
  }
}

const taken = new WeakSet<WorkerMessage>();

function describe(messages: readonly WorkerMessage[]): string {
  return JSON.stringify(messages.map((m) => m.type));
}

export function startWorkers(configs: readonly WorkerConfig[]): Worker[] {
  return configs.map((config) => new Worker(config));
}
