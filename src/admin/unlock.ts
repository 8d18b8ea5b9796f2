/**
 * `releaseOwner` and `forceUnlock`: an operator's way to free a lock whose holder is gone or stuck, through
 * the library's own scripts, so that every waiter is woken as by a normal release (the fair lock's first in
 * line on its own channel, the read-write lock's readers or writers with Redisson's message). The holder,
 * if alive, learns of it at its next renewal (within a third of its watchdogTimeout) and its lease's signal
 * aborts; only writes guarded by fencing tokens refuse it before that.
 */
import { checkLockName, describe, PERMIT_ID, type RedisClient } from '../options.js';
import { MEMO_MS, newRequestId, type ReleaseReply } from '../redis/scripts.js';
import { familyKeys, readLock, type LockInfo } from './inspect.js';
import type { Holder, LockKind } from './shape.js';
import { adminTarget, checkKind, checkOptions, PreconditionError, type AdminTarget } from './target.js';

/** Options of `releaseOwner` and `forceUnlock`. */
export interface UnlockOptions {
  /** The lock clients' `keyPrefix` (after the Redis client's own, as for `createLockClient`). @default '' */
  readonly prefix?: string;
  /** Treat the name as this kind, when its keys cannot tell (see `inspectLock`). @default detected */
  readonly kind?: LockKind;
}

/** What an unlock did. */
export interface UnlockResult {
  readonly name: string;
  readonly kind: LockKind | null;
  /** Whether this call released something: the owner's holds, or (forced) the whole lock. */
  readonly released: boolean;
  /** The holders just before the call (the lock may have changed hands in between: then nothing happened). */
  readonly holders: readonly Holder[];
  /**
   * Subscriber connections the release message reached, when the owner's release freed the lock (0 when
   * other holds remain); null for a forced unlock and a permit, whose scripts do not count them.
   */
  readonly woken: number | null;
}

/** The name as an unlockable kind: a lock, or (by permit id) an expirable semaphore. */
function unlockable(info: LockInfo, allowPermits: boolean): LockKind | null {
  const { kind } = info;
  if (kind === 'semaphore' || kind === 'count-down-latch' || (kind === 'permit-expirable-semaphore' && !allowPermits)) {
    throw new PreconditionError(
      kind === 'count-down-latch'
        ? `${info.name} is a count-down latch: it has no holder to release`
        : `${info.name} is a ${kind}: its permits have no owner to release${allowPermits ? '' : ' by force'}`,
    );
  }
  return kind;
}

function checkCall(name: unknown, options: unknown, client: RedisClient): [AdminTarget, LockKind | undefined] {
  checkLockName(name);
  const checked = checkOptions(options, ['prefix', 'kind']);
  const target = adminTarget(client, checked['prefix']);
  return [target, checkKind(checked['kind'], 'options.kind')];
}

/** Runs the release script of `kind` in mode `all` for the one owner `owner`: compare-and-release. */
function releaseAll(target: AdminTarget, name: string, kind: LockKind, owner: string): Promise<ReleaseReply> {
  const { scripts } = target;
  const keys = familyKeys(target, name);
  if (kind === 'fair-lock') {
    return scripts.fairRelease(keys.fair, 'all', [owner]);
  }
  if (kind === 'read-write-lock') {
    const { lockKey, channel, holdKey, releaseMemoPrefix } = keys.readWrite;
    return owner.endsWith(':write')
      ? scripts.releaseBy('read-write-lock/write-release', [lockKey, channel, holdKey], releaseMemoPrefix, 'all', [
          owner,
        ])
      : scripts.readRelease(keys.readWrite, 'all', [owner]);
  }
  return scripts.release(keys.lock, 'all', [owner]);
}

/** Gives back the permit `permitId` of an expirable semaphore; true if it was out. */
async function releasePermit(target: AdminTarget, name: string, permitId: string): Promise<boolean> {
  const { lockKey, timeoutKey, queueKey, deadlinesKey, channel, releaseMemoPrefix, wakeChannel } = familyKeys(
    target,
    name,
  ).semaphore;
  const reply = await target.scripts.runAnnouncing(
    'permit-expirable-semaphore/release',
    [lockKey, timeoutKey, queueKey, deadlinesKey, channel, releaseMemoPrefix + newRequestId(), wakeChannel],
    [Buffer.from(permitId, 'hex'), MEMO_MS],
  );
  return Number(reply) === 1;
}

/**
 * Releases every hold of `owner` (a holder's hash field as `inspectLock` shows it: `<clientId>:<flowId>`, or
 * `<clientId>:<flowId>:write` for a write hold) on lock `name`, through the lock's own release script: it
 * wakes waiters as a normal release does, and does nothing if `owner` no longer holds the lock (someone else
 * may hold it now). On an expirable semaphore `owner` is a permit id, given back the same way. A plain
 * semaphore or a latch has no owners: PreconditionError.
 */
export async function releaseOwner(
  client: RedisClient,
  name: string,
  owner: string,
  options?: UnlockOptions,
): Promise<UnlockResult> {
  const [target, hint] = checkCall(name, options, client);
  if (typeof owner !== 'string' || owner === '') {
    throw new TypeError(`owner must be a non-empty string, got ${describe(owner)}`);
  }
  const info = await readLock(target, name, hint);
  const kind = unlockable(info, true);
  const result = { name, kind, holders: info.owners };
  if (kind === 'permit-expirable-semaphore') {
    if (!PERMIT_ID.test(owner)) {
      throw new PreconditionError(`${name} is an expirable semaphore: owner must be a permit id (32 hex digits)`);
    }
    return { ...result, released: await releasePermit(target, name, owner), woken: null };
  }
  if (kind === null || !info.owners.some((holder) => holder.owner === owner)) {
    return { ...result, released: false, woken: null };
  }
  const reply = await releaseAll(target, name, kind, owner);
  return { ...result, released: reply.remaining === 0, woken: reply.remaining === 0 ? reply.woken : null };
}

/**
 * Frees lock `name` whoever holds it (Redisson's forceUnlock), through the lock's force-unlock script:
 * deletes it and wakes its waiters. Resolves `released: false` when it was not held. Semaphores and latches
 * are refused (PreconditionError): they have no holder to force out.
 */
export async function forceUnlock(client: RedisClient, name: string, options?: UnlockOptions): Promise<UnlockResult> {
  const [target, hint] = checkCall(name, options, client);
  let info = await readLock(target, name, hint);
  const kind = unlockable(info, false);
  const result = { name, kind, holders: info.owners, woken: null };
  if (kind === null || !info.held) return { ...result, released: false };
  const keys = familyKeys(target, name);
  const { scripts } = target;
  if (kind === 'fair-lock') {
    return { ...result, released: await scripts.fairForceUnlock(keys.fair) };
  }
  if (kind === 'read-write-lock') {
    // The script frees only a lock held in the mode it is told (Redisson's read and write forceUnlock): a
    // mode that changed since it was read is read again, once.
    for (let attempt = 0; attempt < 2 && info.mode !== null; attempt++) {
      const { lockKey, channel, holdKey } = keys.readWrite;
      const rwKeys = [lockKey, channel, holdKey];
      if (Number(await scripts.runAnnouncing('read-write-lock/force-unlock', rwKeys, [info.mode])) === 1) {
        return { ...result, released: true };
      }
      info = await readLock(target, name, kind);
    }
    return { ...result, released: false };
  }
  return { ...result, released: await scripts.forceUnlock(keys.lock) };
}
