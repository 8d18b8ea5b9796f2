/**
 * Worker processes for the fault tests (a fixture script on the built package: test/fixtures/lock-worker.ts
 * by default, or semaphore-worker.ts): start them, wait for their messages, command them, pause, kill, and
 * see them exit. A worker inherits this process's environment, `REDIS_CLIENT` included: its lock client runs
 * on the client under test (test/fixtures/worker-client.ts).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import type { WorkerConfig } from '../fixtures/lock-worker.ts';

export type { WorkerConfig };

/** The path of the fixture script `name` (`lock-worker.ts`, `semaphore-worker.ts`). */
export function fixturePath(name: string): string {
  return join(import.meta.dirname, '..', 'fixtures', name);
}

export interface WorkerMessage {
  readonly id: string;
  readonly type: string;
  readonly [field: string]: unknown;
}

/**
 * A worker process running a fixture script (its one argument: the JSON of `config`). Messages are kept;
 * `next` takes them in order, by type and optional fields; a worker's `error` message fails whoever waits.
 */
export class Worker {
  readonly id: string;
  readonly child: ChildProcess;
  readonly messages: WorkerMessage[] = [];
  readonly exited: Promise<number | null>;
  readonly #taken = new WeakSet<WorkerMessage>();
  #waiters: {
    matches: (m: WorkerMessage) => boolean;
    resolve: (m: WorkerMessage) => void;
    reject: (error: Error) => void;
  }[] = [];

  /** lock-worker.ts with its config, or another fixture `script` with its own. */
  constructor(config: WorkerConfig);
  constructor(config: { readonly id: string }, script: string);
  constructor(config: { readonly id: string }, script = fixturePath('lock-worker.ts')) {
    this.id = config.id;
    this.child = fork(script, [JSON.stringify(config)], {
      env: process.env,
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      execArgv: ['--no-warnings'],
    });
    this.exited = once(this.child, 'exit').then(([code]) => code as number | null);
    this.child.on('message', (message: WorkerMessage) => {
      this.messages.push(message);
      // A worker that failed sends nothing more: whoever waits for it learns why at once.
      if (message.type === 'error') {
        for (const waiter of this.#waiters.splice(0)) waiter.reject(this.#failure(message));
        return;
      }
      const index = this.#waiters.findIndex((w) => w.matches(message));
      if (index !== -1) {
        this.#taken.add(message);
        this.#waiters.splice(index, 1)[0]?.resolve(message);
      }
    });
  }

  /**
   * The first message of `type` (and `fields`, compared with ===) not yet taken by an earlier call, within
   * `timeoutMs`.
   */
  next<T extends WorkerMessage = WorkerMessage>(type: string, timeoutMs?: number): Promise<T>;
  next<T extends WorkerMessage = WorkerMessage>(
    type: string,
    fields: Record<string, unknown>,
    timeoutMs?: number,
  ): Promise<T>;
  next<T extends WorkerMessage = WorkerMessage>(
    type: string,
    fieldsOrTimeout: Record<string, unknown> | number = {},
    timeout?: number,
  ): Promise<T> {
    const fields = typeof fieldsOrTimeout === 'number' ? {} : fieldsOrTimeout;
    const timeoutMs = (typeof fieldsOrTimeout === 'number' ? fieldsOrTimeout : timeout) ?? 20_000;
    const matches = (m: WorkerMessage): boolean =>
      m.type === type && !this.#taken.has(m) && Object.entries(fields).every(([k, v]) => m[k] === v);
    const seen = this.messages.find(matches);
    if (seen) {
      this.#taken.add(seen);
      return Promise.resolve(seen as T);
    }
    const failure = this.messages.find((m) => m.type === 'error');
    if (failure) return Promise.reject(this.#failure(failure));
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        const index = this.#waiters.indexOf(waiter);
        if (index !== -1) this.#waiters.splice(index, 1);
        const got = JSON.stringify(this.messages.map((m) => m.type));
        reject(new Error(`${this.id}: no "${type}" ${JSON.stringify(fields)} within ${timeoutMs} ms; got ${got}`));
      }, timeoutMs);
      const waiter = {
        matches,
        resolve: (m: WorkerMessage) => {
          clearTimeout(timer);
          resolve(m as T);
        },
        reject: (error: Error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      this.#waiters.push(waiter);
    });
  }

  send(command: Record<string, unknown>): void {
    if (this.child.connected) this.child.send(command);
  }

  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /** Sends `close` and waits for the exit code (a worker must exit by itself once its client is closed). */
  async close(timeoutMs = 10_000): Promise<number | null> {
    this.send({ cmd: 'close' });
    const timer = setTimeout(() => void this.kill(), timeoutMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }

  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGCONT');
      this.child.kill('SIGKILL');
    }
    await this.exited;
  }

  #failure(message: WorkerMessage): Error {
    return new Error(`${this.id}: ${String(message['message'])}`);
  }
}

export function startWorkers(configs: readonly WorkerConfig[]): Worker[] {
  return configs.map((config) => new Worker(config));
}
