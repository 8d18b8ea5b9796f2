/**
 * An in-repo TCP proxy between a client and Redis, for network faults: added latency per direction, a
 * dropped reply (the connection is cut after a request reached the server, before its reply reaches the
 * client; the next reply on any connection, or the reply to the next request that matches a pattern), a
 * reply held back until the test lets it go, a stop of all forwarding, and replies rewritten on their way
 * (a server made to report another version).
 */
import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

interface Pipe {
  readonly client: Socket;
  readonly server: Socket;
  /** A request sent on it matched `dropReplyTo`'s pattern: its next reply cuts it. */
  cutOnReply?: boolean;
  /** A request sent on it matched `holdReplyTo`'s pattern: replies wait here until the hold is let go. */
  heldReplies?: Buffer[];
}

/** What `holdReplyTo` set up: its pattern, the pipe it matched (once one did), and what to tell then. */
interface Hold {
  readonly pattern: RegExp;
  readonly matched: () => void;
  pipe?: Pipe;
}

/** A reply `holdReplyTo` holds back. */
export interface HeldReply {
  /** Settles once a matching request has gone to the server (its reply is then held). */
  readonly held: Promise<void>;
  /** Forwards what was held back, and lets later replies through. */
  letGo(): void;
  /**
   * Forwards the first chunk held back (the matching request's reply, where the server answered it before
   * the next request on the connection was sent) and holds the rest, and what comes after, until `letGo()`.
   */
  letGoFirst(): void;
  /** Chunks held back now. */
  readonly heldChunks: number;
}

export class TcpProxy {
  readonly #server: Server;
  readonly #targetPort: number;
  readonly #pipes = new Set<Pipe>();
  /** Milliseconds added to every chunk, per direction. */
  latency = { toServer: 0, toClient: 0 };
  /** Rewrites each chunk of replies before it reaches the client (keep RESP lengths right). */
  rewriteReplies: ((chunk: Buffer) => Buffer) | undefined;
  #dropReplies = 0;
  #dropReplyTo: RegExp | undefined;
  #holdReplyTo: Hold | undefined;
  #stopped = false;

  private constructor(server: Server, targetPort: number) {
    this.#server = server;
    this.#targetPort = targetPort;
    server.on('connection', (client) => {
      this.#connect(client);
    });
  }

  static async start(targetPort: number): Promise<TcpProxy> {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return new TcpProxy(server, targetPort);
  }

  get port(): number {
    const address = this.#server.address();
    if (address === null || typeof address === 'string') throw new Error('proxy not listening');
    return address.port;
  }

  get connections(): number {
    return this.#pipes.size;
  }

  /** The next `count` replies are dropped: each cuts its connection instead of reaching the client. */
  dropNextReplies(count = 1): void {
    this.#dropReplies = count;
  }

  /**
   * The reply to the next request whose bytes (RESP, read as latin1) match `pattern` is dropped: the
   * connection that carried the request is cut at its next reply instead (a reply to an earlier request
   * still in flight on it is then lost too).
   */
  dropReplyTo(pattern: RegExp): void {
    this.#dropReplyTo = pattern;
  }

  /**
   * The replies on the connection of the next request whose bytes match `pattern`, from that request's on,
   * are held back until `letGo()`: a reply that arrives late, while everything else flows.
   */
  holdReplyTo(pattern: RegExp): HeldReply {
    let matched = (): void => undefined;
    const held = new Promise<void>((resolve) => (matched = resolve));
    const hold: Hold = { pattern, matched };
    this.#holdReplyTo = hold;
    return {
      held,
      letGo: () => {
        if (this.#holdReplyTo === hold) this.#holdReplyTo = undefined;
        const pipe = hold.pipe;
        if (!pipe) return;
        for (const chunk of pipe.heldReplies?.splice(0) ?? []) this.#forward(chunk, pipe.client, this.latency.toClient);
        delete pipe.heldReplies;
      },
      letGoFirst: () => {
        const pipe = hold.pipe;
        const first = pipe?.heldReplies?.shift();
        if (pipe && first) this.#forward(first, pipe.client, this.latency.toClient);
      },
      get heldChunks() {
        return hold.pipe?.heldReplies?.length ?? 0;
      },
    };
  }

  /** Replies still to be dropped (set by dropNextReplies or dropReplyTo; 0 cancels what is left). */
  get pendingDrops(): number {
    const armed = [...this.#pipes].filter((pipe) => pipe.cutOnReply).length;
    return this.#dropReplies + (this.#dropReplyTo ? 1 : 0) + armed;
  }

  /** Stops forwarding in both directions (bytes are held back, connections stay open) until `resume()`. */
  stop(): void {
    this.#stopped = true;
    for (const pipe of this.#pipes) {
      pipe.client.pause();
      pipe.server.pause();
    }
  }

  resume(): void {
    this.#stopped = false;
    for (const pipe of this.#pipes) {
      pipe.client.resume();
      pipe.server.resume();
    }
  }

  /** Cuts every connection (the client sees a reset and reconnects). */
  cutAll(): void {
    for (const pipe of this.#pipes) this.#cut(pipe);
  }

  async close(): Promise<void> {
    this.cutAll();
    this.#server.close();
    await once(this.#server, 'close');
  }

  #connect(client: Socket): void {
    const server = createConnection({ host: '127.0.0.1', port: this.#targetPort });
    const pipe: Pipe = { client, server };
    this.#pipes.add(pipe);
    if (this.#stopped) {
      client.pause();
      server.pause();
    }
    const end = (): void => {
      this.#cut(pipe);
    };
    client.on('error', end).on('close', end);
    server.on('error', end).on('close', end);
    client.on('data', (chunk: Buffer) => {
      if (this.#dropReplyTo?.test(chunk.toString('latin1'))) {
        this.#dropReplyTo = undefined;
        pipe.cutOnReply = true;
      }
      const hold = this.#holdReplyTo;
      if (hold && !hold.pipe && hold.pattern.test(chunk.toString('latin1'))) {
        hold.pipe = pipe;
        pipe.heldReplies = [];
        hold.matched();
      }
      this.#forward(chunk, server, this.latency.toServer);
    });
    server.on('data', (chunk: Buffer) => {
      if (pipe.cutOnReply) {
        this.#cut(pipe);
        return;
      }
      if (this.#dropReplies > 0) {
        this.#dropReplies--;
        this.#cut(pipe);
        return;
      }
      const reply = this.rewriteReplies ? this.rewriteReplies(chunk) : chunk;
      if (pipe.heldReplies) {
        pipe.heldReplies.push(reply);
        return;
      }
      this.#forward(reply, client, this.latency.toClient);
    });
  }

  #forward(chunk: Buffer, to: Socket, delayMs: number): void {
    if (delayMs <= 0) {
      if (!to.destroyed) to.write(chunk);
      return;
    }
    setTimeout(() => {
      if (!to.destroyed) to.write(chunk);
    }, delayMs);
  }

  #cut(pipe: Pipe): void {
    if (!this.#pipes.delete(pipe)) return;
    pipe.client.destroy();
    pipe.server.destroy();
  }
}

/** The version INFO judges a server by, and a version of the same length below its floor (Redis 6.0, Valkey 7.2). */
export function versionBelowFloor(info: string): { real: string; fake: string; product: 'Redis' | 'Valkey' } {
  const valkey = /^valkey_version:/m.test(info);
  const field = valkey ? 'valkey_version' : 'redis_version';
  const real = new RegExp(`^${field}:([0-9.]+)`, 'm').exec(info)?.[1] ?? '';
  return { real, fake: `${valkey ? '7' : '5'}.0.${'9'.repeat(real.length - 4)}`, product: valkey ? 'Valkey' : 'Redis' };
}

/**
 * A proxy to the server on `port`, whose `INFO server` reply is `info`, that reports `versionBelowFloor(info)`
 * instead of its version: same length, so the RESP length of the reply stays right.
 */
export async function proxyBelowFloor(port: number, info: string): Promise<TcpProxy> {
  const { real, fake, product } = versionBelowFloor(info);
  const field = product === 'Valkey' ? 'valkey_version' : 'redis_version';
  const proxy = await TcpProxy.start(port);
  proxy.rewriteReplies = (chunk) =>
    Buffer.from(chunk.toString('latin1').replace(`${field}:${real}`, `${field}:${fake}`), 'latin1');
  return proxy;
}
