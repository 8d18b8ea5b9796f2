// Any unhandled rejection or uncaught exception fails the test file that produced it.
import { afterAll } from 'vitest';

const escaped: unknown[] = [];
const record = (error: unknown): void => {
  escaped.push(error);
};
process.on('unhandledRejection', record);
process.on('uncaughtException', record);

afterAll(() => {
  process.off('unhandledRejection', record);
  process.off('uncaughtException', record);
  if (escaped.length > 0) {
    // With their stacks: an escaped error names no test, and where it was made is the only lead.
    const described = escaped.map((error) => (error instanceof Error ? (error.stack ?? String(error)) : String(error)));
    throw new Error(`${escaped.length} unhandled error(s) escaped: ${described.join('\n---\n')}`);
  }
});
