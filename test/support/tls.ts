/**
 * A private CA and a redis-server that speaks TLS only, for the tests of TLS connections (the lock client's,
 * faults/security.test.ts; the CLI's messages, cli.test.ts). Certificates come from the machine's `openssl`,
 * valid for two days, in a folder the caller makes and removes.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, startRedisServer, type LocalRedis } from './redis-server.js';

/**
 * Writes into `dir`: a CA (`ca.crt`, `ca.key`) and a server certificate it signed (`server.crt`,
 * `server.key`) for localhost and 127.0.0.1. The server's is an end-entity certificate: rustls, under GLIDE,
 * refuses a CA certificate used as a server's.
 */
export function makeCertificates(dir: string): void {
  const openssl = (...args: string[]): void => {
    execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  };
  const days = ['-days', '2'];
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    ...days,
    '-subj',
    '/CN=flowlock-test-ca',
  );
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'server.key',
    '-out',
    'server.csr',
    '-subj',
    '/CN=localhost',
  );
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n');
  openssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    ...days,
    '-extfile',
    'san.ext',
  );
}

/**
 * A redis-server on a free port that speaks TLS only (`--port 0`: every connection, a subscriber's included,
 * must), with the certificates of `dir` (makeCertificates) and no client certificates asked; `extra`: more
 * arguments (users, say).
 */
export async function startTlsServer(dir: string, extra: readonly string[] = []): Promise<LocalRedis> {
  const port = await freePort();
  return startRedisServer(
    [
      ...['--port', '0', '--tls-port', String(port)],
      ...['--tls-cert-file', join(dir, 'server.crt'), '--tls-key-file', join(dir, 'server.key')],
      ...['--tls-ca-cert-file', join(dir, 'ca.crt'), '--tls-auth-clients', 'no'],
      ...extra,
    ],
    { port, tls: true },
  );
}
