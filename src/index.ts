/**
 * `flowlock`: reentrant distributed locks on Redis with Redisson's semantics and wire layout. Start at
 * {@link createLockClient}; the quorum lock over independent masters is {@link createQuorumLockClient}.
 *
 * @module flowlock
 */
export { createLockClient } from './client.js';
export type { LockClient, LockClientEvents, LockLostEvent } from './client.js';
export type { HoldSnapshot } from './machinery/watchdog.js';
export type { WaitSnapshot } from './machinery/waiting.js';
export { CHANNELS } from './diagnostics/channels.js';
export type {
  AcquireOutcome,
  AcquireStart,
  AcquireTraceContext,
  HoldEndMessage,
  HoldEndReason,
  HoldStartMessage,
  LeaseMode,
  LockIdentity,
  LossReason,
  PrimitiveKind,
  PubSubMessage,
  ReleaseTraceContext,
  RenewTraceContext,
  WaitEndMessage,
  WaitStartMessage,
  Wakeups,
  WithLockTraceContext,
} from './diagnostics/channels.js';
export type { RLock, LockLease } from './primitives/lock.js';
export type { RFairLock } from './primitives/fair-lock.js';
export type { RReadWriteLock, RReadLock, RWriteLock } from './primitives/read-write-lock.js';
export type { RMultiLock, MultiLockLease } from './primitives/multi-lock.js';
export type { RSemaphore } from './primitives/semaphore.js';
export type { RPermitExpirableSemaphore, PermitLease } from './primitives/permit-expirable-semaphore.js';
export type { RCountDownLatch } from './primitives/count-down-latch.js';
export { createQuorumLockClient } from './primitives/quorum-lock.js';
export type { QuorumLock, QuorumLease, QuorumLockClient } from './primitives/quorum-lock.js';
export type {
  AcquireOptions,
  GlideClientLike,
  GlidePubSubConfig,
  GlideSubscriberFactory,
  IoredisClient,
  LatchAwaitOptions,
  LockClientOptions,
  CloseOptions,
  LockOptions,
  NodeRedisClient,
  QuorumLockOptions,
  RedisClient,
  SemaphoreAcquireOptions,
  SemaphoreTryAcquireOptions,
  HolderInfo,
  PreviousLayout,
  SyncReplicas,
} from './options.js';
export {
  LockError,
  LockAcquireTimeoutError,
  LockNotHeldError,
  LockLostError,
  NoFlowError,
  LockClientClosedError,
  RedisNotOpenError,
  LockNotReplicatedError,
  LockUpgradeError,
  PermitNotHeldError,
  LockRenewalUnansweredError,
  LockPermissionError,
  RedisUnavailableError,
  LocksNotReleasedError,
  UnsupportedServerError,
  LockCrossSlotError,
} from './errors.js';
export type { LockErrorCode, UnreleasedHold } from './errors.js';
