import type { Redis } from 'ioredis';

/**
 * A MONITOR connection duplicated from `base`. Not ioredis's `monitor()`: ioredis enters its monitoring state a
 * microtask after MONITOR's OK, so a line read in the same chunk (a request of another client, sent before the
 * caller's own) is taken for a reply to no command, emitted as "Command queue state error", and rejects
 * `monitor()`. That line alone is dropped, so that error is ignored here, and also the same error at the end:
 * lines still in the socket when the connection closes are read after ioredis has left its monitoring state.
 */
export async function openMonitor(base: Redis): Promise<Redis> {
  const connection = base.duplicate({ monitor: true, lazyConnect: true });
  const monitoring = new Promise((resolve, reject) => {
    connection.once('monitoring', resolve);
    connection.on('error', (error: Error) => {
      if (!error.message.startsWith('Command queue state error')) reject(error);
    });
  });
  await connection.connect();
  await monitoring;
  return connection;
}
