// The fencing recipe for PostgreSQL, as docs/guide/guarantees.md shows it (the suite checks that the page's
// block is this file, byte for byte): one row per protected resource, which remembers the newest fencing token
// that wrote it and refuses an older one in the same statement as the write.

/** What the recipe needs of a PostgreSQL client: `pg`'s `Client` and `Pool` have it. */
export interface Queryable {
  query(text: string, values: unknown[]): Promise<{ rowCount: number | null }>;
}

export const CREATE_FENCED_TABLE = `
CREATE TABLE IF NOT EXISTS fenced_resource (
  name   text   PRIMARY KEY,
  token  bigint NOT NULL DEFAULT 0,  -- the newest fencing token that wrote this row
  value  text,
  writes bigint NOT NULL DEFAULT 0   -- accepted writes, for the audit
)`;

/**
 * Writes `value` to the resource `name` on behalf of the holder of `token` (its lease's `fencingToken`).
 * False: a holder with a newer token has written since, so this holder's lease ended (it was paused, cut off,
 * or the lock was lost in a failover) and the write is refused, atomically, by the row lock of the UPDATE.
 */
export async function fencedWrite(db: Queryable, name: string, token: bigint, value: string): Promise<boolean> {
  const result = await db.query(
    'UPDATE fenced_resource SET token = $2, value = $3, writes = writes + 1 WHERE name = $1 AND token < $2',
    [name, token.toString(), value],
  );
  return result.rowCount === 1;
}
