/**
 * Opt-in replica sync (`syncReplicas`): after a grant, `WAIT replicas timeout` on the connection that ran the
 * acquire script, so that a failover right after the grant is less likely to promote a replica that never saw
 * it. Redis replication is asynchronous and WAIT does not make it synchronous: a grant that WAIT confirmed
 * can still be lost (the replica that had it is not the one promoted, or it fails too), so this narrows the
 * window and never closes it. Fencing tokens are what protect the resource.
 */
import { LockNotReplicatedError, LockPermissionError } from '../errors.js';
import type { SyncReplicas } from '../options.js';
import type { MasterConnection, RedisAdapter } from '../redis/adapter.js';
import { isPermissionDenial } from '../redis/shared.js';
import { promiseOf } from '../time.js';

/**
 * Where a grant's WAIT must go, and how often that connection had closed before the grant was sent
 * (`connection` is unknown only on a Cluster client that has not loaded its slots yet).
 */
export interface WaitTicket {
  readonly lockKey: string;
  readonly connection: MasterConnection | undefined;
  readonly closes: number;
}

export class ReplicaSync {
  readonly replicas: number;
  readonly #timeout: number;
  readonly #redis: RedisAdapter;

  constructor(redis: RedisAdapter, { replicas, timeout }: SyncReplicas) {
    this.#redis = redis;
    this.replicas = replicas;
    this.#timeout = timeout;
  }

  /** Taken before the acquire is sent: the connection that will carry it (WAIT counts its writes). */
  ticket(lockKey: string): WaitTicket {
    const connection = this.#redis.masterConnection(lockKey);
    return { lockKey, connection, closes: connection?.closes ?? 0 };
  }

  /**
   * How many replicas acknowledged the connection's writes so far, the grant's included (WAIT's reply); 0
   * when the connection closed since the ticket was taken: the client may then have resent WAIT on the new
   * connection (after a failover, to a master that never saw the grant), where it proves nothing.
   */
  async acknowledged(ticket: WaitTicket): Promise<number> {
    // On a Cluster the grant ran on the slot's owner as the client knows it now: when the slot had moved
    // unseen, the client followed a MOVED (and learnt the new owner) or the resend went there. A WAIT on the
    // ticket's connection would count writes that connection never carried.
    const connection = this.#redis.masterConnection(ticket.lockKey) ?? ticket.connection;
    if (!connection) throw new Error(`no connection to the master of the slot of "${ticket.lockKey}" for WAIT`);
    const closes = connection === ticket.connection ? ticket.closes : connection.closes;
    let acknowledged: number;
    try {
      acknowledged = await connection.wait(this.replicas, this.#timeout);
    } catch (error) {
      // An ACL refusal, of WAIT or of the CLIENT ID that checks its connection, is said as it is.
      if (isPermissionDenial(error)) throw error;
      // A WAIT cut off by its connection closing (node-redis rejects it; ioredis would send it again on the
      // new connection, where it proves nothing): no replica is known to have the grant.
      if (connection.closes !== closes || this.#redis.isLostReply(error)) return 0;
      throw error;
    }
    return connection.closes === closes ? acknowledged : 0;
  }
}

/**
 * Sends a grant (`send`, the acquire script of a lock or a semaphore) and, with `syncReplicas`, confirms it by
 * WAIT on the connection that carried it: a grant too few replicas acknowledged, or whose WAIT failed, is
 * undone before this rejects (LockNotReplicatedError, LockPermissionError for an ACL refusal, or WAIT's
 * error). Without it, the reply as it is.
 */
export function confirmedGrant<R>(
  replicaSync: ReplicaSync | undefined,
  lockKey: string,
  name: string,
  steps: { send: () => Promise<R>; granted: (reply: R) => boolean; undo: () => Promise<void> },
): Promise<R> {
  // Without syncReplicas the grant is the script's reply (no async frame of its own on every acquire); a
  // send that throws rejects, as it would in one.
  if (!replicaSync) return promiseOf(steps.send);
  return confirmedByReplicas(replicaSync, lockKey, name, steps);
}

async function confirmedByReplicas<R>(
  replicaSync: ReplicaSync,
  lockKey: string,
  name: string,
  { send, granted, undo }: { send: () => Promise<R>; granted: (reply: R) => boolean; undo: () => Promise<void> },
): Promise<R> {
  const ticket = replicaSync.ticket(lockKey);
  const reply = await send();
  if (!granted(reply)) return reply;
  let acknowledged: number;
  try {
    acknowledged = await replicaSync.acknowledged(ticket);
  } catch (error) {
    await undo();
    // WAIT, or the CLIENT ID that checks its connection, refused by the ACL: said as every refusal is.
    throw isPermissionDenial(error) ? new LockPermissionError(name, error) : error;
  }
  if (acknowledged >= replicaSync.replicas) return reply;
  await undo();
  throw new LockNotReplicatedError(name, replicaSync.replicas, acknowledged);
}
