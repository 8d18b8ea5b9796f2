/** An error the `flowlock` command ends with: its message goes to stderr, its exit code to the shell. */
export class CliError extends Error {
  override readonly name = 'CliError';
  /** 1 runtime error, 2 usage error, 3 precondition not met. */
  readonly exitCode: 1 | 2 | 3;

  constructor(exitCode: 1 | 2 | 3, message: string) {
    super(message);
    this.exitCode = exitCode;
  }
}

/** Runs `call`, which checks its arguments before any I/O: a TypeError or RangeError it throws is a usage error. */
export function usage<T>(call: () => T): T {
  try {
    return call();
  } catch (error) {
    if (error instanceof TypeError || error instanceof RangeError) throw new CliError(2, error.message);
    throw error;
  }
}
