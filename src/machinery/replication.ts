/**
 * Opt-in replica sync (`syncReplicas`): after a grant, `WAIT replicas timeout` on the connection that ran the
 * acquire script, so that a failover right after the grant is less likely to promote a replica that never saw
 * it. Redis replication is asynchronous and WAIT does not make it synchronous: a grant that WAIT confirmed
 * can still be lost (the replica that had it is not the one promoted, or it fails too), so this narrows the
 * window and never closes it. Fencing tokens are what protect the resource.
 */
import type { Cluster, Redis } from 'ioredis';
import { LockNotReplicatedError } from '../errors.js';
import { keySlot } from '../redis/keys.js';
import { isCluster, type RedisClient, type SyncReplicas } from '../options.js';

/**
 * Where a grant's WAIT must go, and how often that connection had closed before the grant was sent
 * (`connection` is unknown only on a Cluster client that has not loaded its slots yet).
 */
export interface WaitTicket {
  readonly lockKey: string;
  readonly connection: Redis | Cluster | undefined;
  readonly closes: number;
}

export class ReplicaSync {
  readonly replicas: number;
  readonly #timeout: number;
  readonly #redis: RedisClient;
  /** Connections WAIT was sent on, with how often each closed (listeners removed by `dispose()`). */
  readonly #closes = new Map<Redis | Cluster, { count: number; listener: () => void }>();

  constructor(redis: RedisClient, { replicas, timeout }: SyncReplicas) {
    this.#redis = redis;
    this.replicas = replicas;
    this.#timeout = timeout;
  }

  /** Taken before the acquire is sent: the connection that will carry it. */
  ticket(lockKey: string): WaitTicket {
    const connection = this.#connectionFor(lockKey);
    return { lockKey, connection, closes: connection ? this.#closeCount(connection) : 0 };
  }

  /**
   * How many replicas acknowledged the connection's writes so far, the grant's included (WAIT's reply); 0
   * when the connection closed since the ticket was taken: ioredis may then have resent WAIT on the new
   * connection (after a failover, to a master that never saw the grant), where it proves nothing.
   */
  async acknowledged(ticket: WaitTicket): Promise<number> {
    // On a Cluster the grant ran on the slot's owner as the client knows it now: when the slot had moved
    // unseen, ioredis followed a MOVED (and learnt the new owner) or the resend went there. A WAIT on the
    // ticket's connection would count writes that connection never carried.
    const connection = this.#connectionFor(ticket.lockKey) ?? ticket.connection;
    if (!connection) throw new Error(`no connection to the master of the slot of "${ticket.lockKey}" for WAIT`);
    const closes = connection === ticket.connection ? ticket.closes : this.#closeCount(connection);
    const acknowledged = await connection.wait(this.replicas, this.#timeout);
    return this.#closeCount(connection) === closes ? acknowledged : 0;
  }

  dispose(): void {
    for (const [connection, { listener }] of this.#closes) connection.off('close', listener);
    this.#closes.clear();
  }

  /**
   * WAIT counts the writes of the connection it is sent on. A standalone or Sentinel client has one
   * connection; on a Cluster it is the connection to the master that owns the key's slot, which is the one
   * that runs the script (ioredis would send a keyless WAIT to any node).
   */
  #connectionFor(lockKey: string): Redis | Cluster | undefined {
    const cluster = this.#redis;
    if (!isCluster(cluster)) return cluster;
    const owner = cluster.slots[keySlot(lockKey)]?.[0];
    return cluster
      .nodes('master')
      .find((candidate) => `${candidate.options.host ?? ''}:${candidate.options.port ?? ''}` === owner);
  }

  #closeCount(connection: Redis | Cluster): number {
    let entry = this.#closes.get(connection);
    if (!entry) {
      const created = {
        count: 0,
        listener: () => {
          created.count++;
        },
      };
      connection.on('close', created.listener);
      this.#closes.set(connection, created);
      entry = created;
    }
    return entry.count;
  }
}

/**
 * Sends a grant (`send`, the acquire script of a lock or a semaphore) and, with `syncReplicas`, confirms it by
 * WAIT on the connection that carried it: a grant too few replicas acknowledged, or whose WAIT failed, is
 * undone before this rejects (LockNotReplicatedError, or WAIT's error). Without it, the reply as it is.
 */
export async function confirmedGrant<R>(
  replicaSync: ReplicaSync | undefined,
  lockKey: string,
  name: string,
  { send, granted, undo }: { send: () => Promise<R>; granted: (reply: R) => boolean; undo: () => Promise<void> },
): Promise<R> {
  const ticket = replicaSync?.ticket(lockKey);
  const reply = await send();
  if (!granted(reply) || !replicaSync || !ticket) return reply;
  let acknowledged: number;
  try {
    acknowledged = await replicaSync.acknowledged(ticket);
  } catch (error) {
    await undo();
    throw error;
  }
  if (acknowledged >= replicaSync.replicas) return reply;
  await undo();
  throw new LockNotReplicatedError(name, replicaSync.replicas, acknowledged);
}
