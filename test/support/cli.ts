/**
 * The `flowlock` command as the tests run it: the built `dist/cli.js` (`npm run build` first) in a child process
 * on this machine's Node, with only the leg's client library loadable (test/fixtures/only-client.mjs: each leg
 * runs the command on its own library), no colour, and no Redis address from the environment.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { clientPackage, type Address, type Target } from './clients.js';

export const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const ONLY_CLIENT_HOOK = fileURLToPath(new URL('../fixtures/only-client.mjs', import.meta.url));

/** How one run of the command ended (`code` null: killed after RUN_LIMIT_MS), and how long it took. */
export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

/** The longest one run may take before it is killed. */
const RUN_LIMIT_MS = 20_000;

export interface CliOptions {
  /** Added to (and over) the command's environment. */
  readonly env?: NodeJS.ProcessEnv;
  /** Node's own flags, before the command. */
  readonly nodeArgs?: readonly string[];
}

/**
 * The `--url` flags of `target`: the server, or every master of a cluster as a seed; `credentials`
 * (`user:password@`, or '') go into each.
 */
export function cliUrls(target: Target, credentials = ''): string[] {
  const url = ({ host, port }: Address): string[] => ['--url', `redis://${credentials}${host}:${port}`];
  if (target.topology === 'cluster') return target.nodes.flatMap(url);
  if (target.topology === 'standalone') return url(target);
  throw new Error('the command is not run against Sentinel here');
}

/** Starts `flowlock <args>`; its stdin, stdout and stderr are pipes. The caller ends it. */
export function startCli(args: readonly string[], options: CliOptions = {}): ChildProcess {
  return spawn(process.execPath, ['--import', ONLY_CLIENT_HOOK, ...(options.nodeArgs ?? []), CLI, ...args], {
    env: {
      ...process.env,
      NO_COLOR: '1',
      FLOWLOCK_REDIS_URL: '',
      REDIS_URL: '',
      FLOWLOCK_TEST_ONLY_CLIENT: clientPackage,
      ...options.env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

/** Runs `flowlock <args>` with nothing on its stdin, to its end (killed after RUN_LIMIT_MS: code null). */
export async function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliRun> {
  const started = performance.now();
  const child = startCli(args, options);
  child.stdin?.end();
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), RUN_LIMIT_MS);
  const code = await new Promise<number | null>((resolve) => child.on('close', (exit) => resolve(exit)));
  clearTimeout(killer);
  return { code, stdout, stderr, ms: performance.now() - started };
}
