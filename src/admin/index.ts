/**
 * `flowlock/admin`: plain async functions over any client the lock clients take (ioredis, iovalkey,
 * node-redis, Valkey GLIDE; standalone or Cluster) for operators and tools (the `flowlock` command is a thin
 * shell over them). They run the library's own scripts and read its keys as the lock clients write them; the
 * client stays the caller's (they open only connections of their own, for pub/sub, and close them). No
 * client package is loaded.
 *
 * @module flowlock/admin
 */
export { inspectLock } from './inspect.js';
export type { InspectOptions, LockInfo, Permits, PermitLease, QueueEntry } from './inspect.js';
export { listLocks } from './list.js';
export type { ListOptions, LockListing, ScanStats } from './list.js';
export { releaseOwner, forceUnlock } from './unlock.js';
export type { UnlockOptions, UnlockResult } from './unlock.js';
export { watchLocks } from './watch.js';
export type {
  AcquiredEvent,
  BriefEvent,
  ExpiredEvent,
  HeldEvent,
  NoticeEvent,
  ReleasedEvent,
  WatchEvent,
  WatchOptions,
} from './watch.js';
export { checkServer } from './doctor.js';
export { findLegacyLayout, removeLegacyLayout } from './legacy.js';
export type { LegacyLayout, LegacyOptions, LegacyRemoval } from './legacy.js';
export type { CheckStatus, ServerCheck, ServerReport } from './doctor.js';
export { PreconditionError } from './target.js';
export type { Holder, LockKind } from './shape.js';
