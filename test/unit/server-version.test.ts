// The server floor's decision (src/redis/server-version.ts) on `INFO server` replies recorded from the real
// builds this project is checked on (test/fixtures/info/: Redis 6.0.20 to 7.4.1 and Valkey 8.0.1, by
// `redis-cli info server`), and its reading of script errors on the error messages those servers gave.
// There is no server below the floor to record (no Redis 5 build here): the below-floor cases are the
// recorded 6.0.20 and Valkey replies with their version line edited, and say so.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isUnderstandingError, serverIdentity, versionAtLeast } from '../../src/redis/server-version.js';

const recorded = (build: string): string =>
  readFileSync(join(import.meta.dirname, '..', 'fixtures', 'info', `${build}.txt`), 'utf8');

describe('serverIdentity on recorded INFO server replies', () => {
  it.each([
    ['6.0.20', 'Redis', '6.0.20'],
    ['6.2.16', 'Redis', '6.2.16'],
    ['7.0.15', 'Redis', '7.0.15'],
    ['7.2.6', 'Redis', '7.2.6'],
    ['7.4.1', 'Redis', '7.4.1'],
    // Reports redis_version:7.2.4 too: judged by its own version.
    ['valkey-8.0.1', 'Valkey', '8.0.1'],
  ])('%s: %s %s, at or above the floor', (build, product, version) => {
    expect(serverIdentity(recorded(build))).toEqual({ product, version, supported: true });
  });

  it('judges a Redis below 6.0 unsupported (the 6.0.20 reply with its version line edited to 5.0.14)', () => {
    const info = recorded('6.0.20').replace('redis_version:6.0.20', 'redis_version:5.0.14');
    expect(serverIdentity(info)).toEqual({ product: 'Redis', version: '5.0.14', supported: false });
    // Redis 6.0's release candidates reported 5.9.x.
    expect(serverIdentity(recorded('6.0.20').replace('6.0.20', '5.9.104'))?.supported).toBe(false);
  });

  it('judges a Valkey by valkey_version, never by the redis_version 7.2.4 it always reports', () => {
    const below = recorded('valkey-8.0.1').replace('valkey_version:8.0.1', 'valkey_version:7.0.0');
    expect(serverIdentity(below)).toEqual({ product: 'Valkey', version: '7.0.0', supported: false });
    // A Redis 7.2.4 is above the Redis floor; the same redis_version in a Valkey at 7.2.4 is at the Valkey one.
    const valkey724 = recorded('valkey-8.0.1').replace('valkey_version:8.0.1', 'valkey_version:7.2.4');
    expect(serverIdentity(valkey724)).toEqual({ product: 'Valkey', version: '7.2.4', supported: true });
  });

  it('judges nothing where INFO names no version (a provider that cuts INFO down)', () => {
    expect(serverIdentity('')).toBeUndefined();
    expect(serverIdentity('# Server\r\nredis_mode:standalone\r\n')).toBeUndefined();
    expect(serverIdentity('redis_version:\r\n')).toBeUndefined();
  });
});

describe('versionAtLeast', () => {
  it('compares major, minor and patch as numbers', () => {
    expect(versionAtLeast('6.0.0', '6.0')).toBe(true);
    expect(versionAtLeast('6.0', '6.0')).toBe(true);
    expect(versionAtLeast('10.0.1', '6.0')).toBe(true);
    expect(versionAtLeast('6.10.0', '6.2')).toBe(true);
    expect(versionAtLeast('5.0.14', '6.0')).toBe(false);
    expect(versionAtLeast('7.1.9', '7.2')).toBe(false);
    expect(versionAtLeast('7.2.0-rc1', '7.2')).toBe(true);
    expect(versionAtLeast('unknown', '6.0')).toBe(false);
  });
});

describe('isUnderstandingError on the script errors of the recorded builds', () => {
  // `EVAL "return redis.call(...)" 0` on each build, as redis-cli printed the error.
  const refusals = {
    // SET ... NX GET on 6.0.20 and 6.2.16 (7.0+ accepts it), ZADD ... GT on 6.0.20 (6.2+ accepts it).
    'an option the server does not know':
      'ERR Error running script (call to f_89ec0c966b0fcc6423d9e06a31075d4ef98f3185): @user_script:1: ERR syntax error',
    'an unknown command, 6.x':
      'ERR Error running script (call to f_dfdca9867f53e8b8d216ffea5a2ad3dbe5ad1739): @user_script:1: @user_script: 1: Unknown Redis command called from Lua script',
    'an unknown command, 7.x':
      'ERR Unknown Redis command called from script script: dfdca9867f53e8b8d216ffea5a2ad3dbe5ad1739, on @user_script:1.',
    'an unknown command, Valkey 8':
      'ERR Unknown command called from script script: dfdca9867f53e8b8d216ffea5a2ad3dbe5ad1739, on @user_script:1.',
    'a wrong arity, 6.x':
      'ERR Error running script (call to f_72273adc3c5955bf8543f1ad6ce893355b89617d): @user_script:1: @user_script: 1: Wrong number of args calling Redis command From Lua script',
    'a wrong arity, Valkey 8':
      'ERR Wrong number of args calling command from script script: 72273adc3c5955bf8543f1ad6ce893355b89617d, on @user_script:1.',
    'an unknown subcommand, 6.x':
      "ERR Error running script (call to f_5aff6fba406f458df7a096b7031ed889f3918595): @user_script:1: ERR Unknown subcommand or wrong number of arguments for 'NOPE'. Try OBJECT HELP.",
    // `return redis.nope(1)`, as Redis 5 would answer redis.setresp (6.0+).
    'a redis.* function the Lua lacks, 6.x':
      "ERR Error running script (call to f_04ea335f4fd48a89e77524a7bd200db6c987441b): @user_script:1: user_script:1: attempt to call field 'nope' (a nil value)",
    'a redis.* function the Lua lacks, 7.x':
      "ERR user_script:1: attempt to call field 'nope' (a nil value) script: 04ea335f4fd48a89e77524a7bd200db6c987441b, on @user_script:1.",
  };
  it.each(Object.entries(refusals))('%s', (_, message) => {
    expect(isUnderstandingError(new Error(message))).toBe(true);
  });

  it('leaves other errors alone', () => {
    for (const message of [
      'WRONGTYPE Operation against a key holding the wrong kind of value',
      "OOM command not allowed when used memory > 'maxmemory'.",
      "READONLY You can't write against a read only replica.",
      "NOPERM this user has no permissions to run the 'evalsha' command",
      'Connection is closed.',
    ]) {
      expect(isUnderstandingError(new Error(message))).toBe(false);
    }
  });
});
