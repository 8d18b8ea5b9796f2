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
    throw new Error(`${escaped.length} unhandled error(s) escaped: ${escaped.map(String).join('; ')}`);
  }
});
