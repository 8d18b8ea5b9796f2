/**
 * The smallest PostgreSQL client the partition suite needs (the `pg` package is not a dependency of this
 * repository): protocol 3.0 over TCP, trust authentication only, one query at a time through the extended
 * protocol (Parse, Bind, Describe, Execute, Sync) with text parameters, so values travel as parameters, never
 * spliced into SQL. Its `query(text, values)` has the shape of `pg`'s, which is all the fencing recipe
 * (fenced-postgres.ts) uses.
 */
import { connect, type Socket } from 'node:net';

export interface QueryResult {
  readonly rowCount: number | null;
  readonly rows: Record<string, string | null>[];
}

function cstring(text: string): Buffer {
  return Buffer.concat([Buffer.from(text, 'utf8'), Buffer.from([0])]);
}

function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

function int16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n);
  return b;
}

function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}

interface Pending {
  resolve: (result: QueryResult) => void;
  reject: (error: Error) => void;
  fields: string[];
  rows: Record<string, string | null>[];
  rowCount: number | null;
  error: Error | undefined;
}

export class PgConnection {
  readonly #socket: Socket;
  #buffer = Buffer.alloc(0);
  #ready: Promise<void>;
  #readyResolve!: () => void;
  #readyReject!: (error: Error) => void;
  #pending: Pending | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #closed: Error | undefined;

  private constructor(host: string, port: number, user: string, database: string) {
    this.#ready = new Promise((resolve, reject) => {
      this.#readyResolve = resolve;
      this.#readyReject = reject;
    });
    this.#socket = connect({ host, port });
    this.#socket.setNoDelay(true);
    this.#socket.on('connect', () => {
      const body = Buffer.concat([
        int32(196_608),
        cstring('user'),
        cstring(user),
        cstring('database'),
        cstring(database),
        Buffer.from([0]),
      ]);
      this.#socket.write(Buffer.concat([int32(body.length + 4), body]));
    });
    this.#socket.on('data', (chunk: Buffer) => this.#read(chunk));
    this.#socket.on('error', (error) => this.#fail(error));
    this.#socket.on('close', () => this.#fail(new Error('PostgreSQL connection closed')));
  }

  static async connect(options: { host: string; port: number; user: string; database: string }): Promise<PgConnection> {
    const connection = new PgConnection(options.host, options.port, options.user, options.database);
    await connection.#ready;
    return connection;
  }

  /** Runs one statement with `$1..$n` parameters (sent as text); rejects with the server's error. */
  query(text: string, values: readonly unknown[] = []): Promise<QueryResult> {
    const run = this.#queue.then(() => this.#send(text, values));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  close(): void {
    this.#socket.end(message('X', Buffer.alloc(0)));
    this.#socket.destroy();
  }

  #send(text: string, values: readonly unknown[]): Promise<QueryResult> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise((resolve, reject) => {
      this.#pending = { resolve, reject, fields: [], rows: [], rowCount: null, error: undefined };
      const params = values.map((value) => {
        if (value === null || value === undefined) return int32(-1);
        if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'bigint')
          throw new TypeError(`query values: a string, number or bigint, got ${typeof value}`);
        const bytes = Buffer.from(value.toString(), 'utf8');
        return Buffer.concat([int32(bytes.length), bytes]);
      });
      this.#socket.write(
        Buffer.concat([
          message('P', Buffer.concat([cstring(''), cstring(text), int16(0)])),
          message('B', Buffer.concat([cstring(''), cstring(''), int16(0), int16(values.length), ...params, int16(0)])),
          message('D', Buffer.concat([Buffer.from('P'), cstring('')])),
          message('E', Buffer.concat([cstring(''), int32(0)])),
          message('S', Buffer.alloc(0)),
        ]),
      );
    });
  }

  #fail(error: Error): void {
    if (this.#closed) return;
    this.#closed = error;
    this.#readyReject(error);
    this.#pending?.reject(error);
    this.#pending = undefined;
  }

  #read(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    while (this.#buffer.length >= 5) {
      const length = this.#buffer.readInt32BE(1);
      if (this.#buffer.length < 1 + length) return;
      const type = String.fromCharCode(this.#buffer[0]!);
      const body = this.#buffer.subarray(5, 1 + length);
      this.#buffer = this.#buffer.subarray(1 + length);
      this.#handle(type, body);
    }
  }

  #handle(type: string, body: Buffer): void {
    const pending = this.#pending;
    switch (type) {
      case 'R':
        if (body.readInt32BE(0) !== 0)
          this.#fail(new Error('PostgreSQL asks for a password: this client speaks trust only'));
        return;
      case 'E': {
        const fields = new Map<string, string>();
        let at = 0;
        while (at < body.length && body[at] !== 0) {
          const code = String.fromCharCode(body[at]!);
          const end = body.indexOf(0, at + 1);
          fields.set(code, body.toString('utf8', at + 1, end));
          at = end + 1;
        }
        const error = new Error(`PostgreSQL: ${fields.get('M') ?? 'error'} (${fields.get('C') ?? '?'})`);
        if (pending) pending.error = error;
        else this.#fail(error);
        return;
      }
      case 'Z':
        this.#readyResolve();
        if (pending) {
          this.#pending = undefined;
          if (pending.error) pending.reject(pending.error);
          else pending.resolve({ rowCount: pending.rowCount, rows: pending.rows });
        }
        return;
      case 'T': {
        if (!pending) return;
        const count = body.readInt16BE(0);
        let at = 2;
        for (let i = 0; i < count; i++) {
          const end = body.indexOf(0, at);
          pending.fields.push(body.toString('utf8', at, end));
          at = end + 1 + 18;
        }
        return;
      }
      case 'D': {
        if (!pending) return;
        const count = body.readInt16BE(0);
        let at = 2;
        const row: Record<string, string | null> = {};
        for (let i = 0; i < count; i++) {
          const length = body.readInt32BE(at);
          at += 4;
          row[pending.fields[i] ?? String(i)] = length < 0 ? null : body.toString('utf8', at, at + length);
          if (length > 0) at += length;
        }
        pending.rows.push(row);
        return;
      }
      case 'C': {
        if (!pending) return;
        const tag = body.toString('utf8', 0, body.length - 1);
        const count = /(\d+)$/.exec(tag)?.[1];
        pending.rowCount = count === undefined ? null : Number(count);
        return;
      }
      default:
        // ParameterStatus, BackendKeyData, ParseComplete, BindComplete, NoData, notices: nothing to keep.
        return;
    }
  }
}
