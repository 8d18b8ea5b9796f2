/**
 * Why the `flowlock` command could not connect, when the client library does not say: each library reports a
 * TLS mismatch its own way (`read ECONNRESET`, `Connection is closed.`, GLIDE only a timeout), so after a
 * failure the command looks for itself, with one TCP connection and one TLS handshake of its own, and says
 * what it found: nothing listening, a TLS port reached by a `redis://` URL, a plain port by `rediss://`, or
 * a certificate this process does not trust, and then where the library in use takes a private CA from
 * (node-redis, ioredis and iovalkey: Node's NODE_EXTRA_CA_CERTS; Valkey GLIDE: SSL_CERT_FILE, in its Rust
 * core, which ignores Node's trust settings).
 */
import { readFileSync } from 'node:fs';
import { connect as tcpConnect, isIP } from 'node:net';
import { checkServerIdentity, connect as tlsConnect, rootCertificates } from 'node:tls';

/** What a probe found at host:port; `hint` is a clause to add to the library's message. */
export type Finding = { readonly refused: true } | { readonly refused: false; readonly hint: string | undefined };

interface Target {
  readonly host: string;
  readonly port: number;
  readonly tls: boolean;
}

const GLIDE = '@valkey/valkey-glide';

/** Resolves 'open', 'refused' or 'unreachable' (any other error, or no answer within `ms`). */
export function tcpProbe(target: Target, ms: number): Promise<'open' | 'refused' | 'unreachable'> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: target.host, port: target.port });
    const done = (result: 'open' | 'refused' | 'unreachable'): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done('unreachable'), ms);
    socket.once('connect', () => done('open'));
    socket.once('error', (error: NodeJS.ErrnoException) =>
      done(error.code === 'ECONNREFUSED' ? 'refused' : 'unreachable'),
    );
  });
}

type Handshake =
  { readonly tls: true; readonly untrusted: string | undefined } | { readonly tls: false; readonly reason: string };

/**
 * A TLS handshake with host:port, verifying the certificate as `library` would: Node's trust store (with
 * NODE_EXTRA_CA_CERTS) for the Node libraries; the public roots and SSL_CERT_FILE for GLIDE.
 */
function handshake(target: Target, library: string, env: NodeJS.ProcessEnv, ms: number): Promise<Handshake> {
  let ca: string[] | undefined;
  if (library === GLIDE) {
    ca = [...rootCertificates];
    const file = env['SSL_CERT_FILE'];
    if (file) {
      try {
        ca.push(readFileSync(file, 'utf8'));
      } catch {
        // An unreadable file: GLIDE would trust nothing from it either.
      }
    }
  }
  return new Promise((resolve) => {
    const socket = tlsConnect({
      host: target.host,
      port: target.port,
      ...(isIP(target.host) ? {} : { servername: target.host }),
      // Verified below, so that an untrusted certificate is told apart from a server that speaks no TLS.
      rejectUnauthorized: false,
      ...(ca ? { ca } : {}),
    });
    const done = (result: Handshake): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => done({ tls: false, reason: `no TLS handshake within ${ms} ms` }), ms);
    socket.once('secureConnect', () => {
      if (!socket.authorized) {
        done({ tls: true, untrusted: String(socket.authorizationError) });
        return;
      }
      // A name the certificate does not cover (a client verifies it after the chain).
      const mismatch: Error | undefined = checkServerIdentity(target.host, socket.getPeerCertificate());
      done({ tls: true, untrusted: mismatch?.message });
    });
    socket.once('error', (error: Error) => done({ tls: false, reason: error.message }));
  });
}

/** Where `library` takes the CA that signed the server's certificate from. */
function caAdvice(library: string): string {
  return library === GLIDE
    ? 'Valkey GLIDE trusts the system CAs and SSL_CERT_FILE (not NODE_EXTRA_CA_CERTS): run with ' +
        'SSL_CERT_FILE=/path/to/ca.pem'
    : 'for a private CA, run with NODE_EXTRA_CA_CERTS=/path/to/ca.pem';
}

/** Looks at host:port after `library` failed to connect; at most about 2 × `ms`. */
export async function diagnose(target: Target, library: string, env: NodeJS.ProcessEnv, ms: number): Promise<Finding> {
  const tcp = await tcpProbe(target, ms);
  if (tcp === 'refused') return { refused: true };
  if (tcp === 'unreachable') return { refused: false, hint: undefined };
  const found = await handshake(target, library, env, ms);
  if (!target.tls) {
    return {
      refused: false,
      hint: found.tls ? 'the server speaks TLS on this port: use a rediss:// URL' : undefined,
    };
  }
  if (!found.tls) {
    return {
      refused: false,
      hint: `TLS: no handshake on this port (${found.reason}): for a port without TLS, use a redis:// URL`,
    };
  }
  if (found.untrusted === undefined) return { refused: false, hint: undefined };
  return {
    refused: false,
    hint: `TLS: the server's certificate is not trusted (${found.untrusted}); ${caAdvice(library)}`,
  };
}

/** Where the password goes, for an error that says the server wants one or refused the one given. */
export function authHint(message: string): string | undefined {
  if (/\bNOAUTH\b/.test(message)) {
    return (
      'the server wants a password: give it in the URL, redis://:password@host:port or ' +
      'redis://user:password@host:port for an ACL user, or in REDISCLI_AUTH'
    );
  }
  if (/\bWRONGPASS\b/.test(message)) {
    return 'the user or password from the URL or REDISCLI_AUTH was refused';
  }
  return undefined;
}
