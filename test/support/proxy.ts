/**
 * An in-repo TCP proxy between a client and Redis, for network faults: added latency per direction, a
 * dropped reply (the connection is cut after a request reached the server, before its reply reaches the
 * client), and a stop of all forwarding.
 */
import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';

interface Pipe {
  readonly client: Socket;
  readonly server: Socket;
}

export class TcpProxy {
  readonly #server: Server;
  readonly #targetPort: number;
  readonly #pipes = new Set<Pipe>();
  /** Milliseconds added to every chunk, per direction. */
  latency = { toServer: 0, toClient: 0 };
  #dropReplies = 0;
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

  /** Replies still to be dropped (set by dropNextReplies; 0 cancels what is left). */
  get pendingDrops(): number {
    return this.#dropReplies;
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
      this.#forward(chunk, server, this.latency.toServer);
    });
    server.on('data', (chunk: Buffer) => {
      if (this.#dropReplies > 0) {
        this.#dropReplies--;
        this.#cut(pipe);
        return;
      }
      this.#forward(chunk, client, this.latency.toClient);
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
