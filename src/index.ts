export { createLockClient } from './client.js';
export type { LockClient, LockClientEvents, LockLostEvent } from './client.js';
export type { RLock, LockLease } from './lock.js';
export type { AcquireOptions, LockClientOptions, LockOptions } from './options.js';
export {
  LockError,
  LockAcquireTimeoutError,
  LockNotHeldError,
  LockLostError,
  NoFlowError,
  LockClientClosedError,
} from './errors.js';
export type { LockErrorCode } from './errors.js';
