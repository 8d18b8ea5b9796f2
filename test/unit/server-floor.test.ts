/**
 * The static server-floor check (scripts/check-server-floor.mjs, `npm run check:floor` in CI) on small
 * fixtures: it catches a form of Redis 7.0, one of 6.2, a command or option it cannot classify, a key built by
 * concatenation, a channel built in Lua, a key read from Redis; it lets pass a clean script that takes its keys
 * through locals, parameters, tables and the publish command chosen from ARGV; and it reads every script and
 * source file of the repository.
 */
import { describe, expect, it } from 'vitest';
import {
  checkLua,
  checkTypeScript,
  compareVersions,
  repositoryFiles,
  type Finding,
} from '../../scripts/check-server-floor.mjs';

/** Runs the Lua check over `files` (path -> source); the first is the script. */
function lua(files: Record<string, string>): Finding[] {
  return checkLua(Object.keys(files), (path) => {
    const source = files[path];
    if (source === undefined) throw new Error(`no fixture ${path}`);
    return source;
  });
}

function typescript(source: string, gate = true): Finding[] {
  return checkTypeScript(['src/admin/fixture.ts'], () => source, { gateHolds: () => gate });
}

const messages = (findings: readonly Finding[]): string[] => findings.map((f) => `${f.file}:${f.line}: ${f.message}`);

describe('the server-floor check: command forms', () => {
  it('fails on a Redis 7.0 form (SET ... NX GET), naming file:line, the form, its version and the floor', () => {
    const findings = lua({ 'lua/t/a.lua': "local k = KEYS[1]\nredis.call('SET', k, 'v', 'PX', 100, 'NX', 'GET')\n" });
    expect(messages(findings)).toEqual(['lua/t/a.lua:2: SET PX NX GET needs Redis 7.0.0, above the floor 6.0.0']);
  });

  it('fails on Redis 6.2 forms (SET ... GET, ZADD GT, ZRANGE BYSCORE, LPOP count)', () => {
    const findings = lua({
      'lua/t/a.lua': [
        "redis.call('SET', KEYS[1], 'v', 'GET')",
        "redis.call('ZADD', KEYS[2], 'GT', 5, 'member')",
        "redis.call('ZRANGE', KEYS[2], 0, 10, 'BYSCORE', 'LIMIT', 0, 1)",
        "redis.call('LPOP', KEYS[3], 2)",
      ].join('\n'),
    });
    expect(messages(findings)).toEqual([
      'lua/t/a.lua:1: SET GET needs Redis 6.2.0, above the floor 6.0.0',
      'lua/t/a.lua:2: ZADD GT needs Redis 6.2.0, above the floor 6.0.0',
      'lua/t/a.lua:3: ZRANGE BYSCORE LIMIT needs Redis 6.2.0, above the floor 6.0.0',
      'lua/t/a.lua:4: LPOP (the count argument) needs Redis 6.2.0, above the floor 6.0.0',
    ]);
  });

  it('fails on a command, an option or a command name it cannot classify', () => {
    const findings = lua({
      'lua/t/a.lua': [
        "redis.call('FROBNICATE', KEYS[1])",
        "redis.call('SET', KEYS[1], 'v', 'SOMEDAY')",
        "redis.call('SET', KEYS[1], 'v', ARGV[1])",
        'redis.call(ARGV[2], KEYS[1])',
      ].join('\n'),
    });
    expect(messages(findings)).toEqual([
      'lua/t/a.lua:1: cannot classify FROBNICATE: the command is not in the table; add it to scripts/server-floor/commands.mjs',
      "lua/t/a.lua:2: cannot classify SET: 'SOMEDAY' where an option is expected; add it to scripts/server-floor/commands.mjs",
      'lua/t/a.lua:3: cannot classify SET: `ARGV[1]` where an option is expected; add it to scripts/server-floor/commands.mjs',
      'lua/t/a.lua:4: cannot classify the command ARGV[2]: not a literal (add its values to the script as literals)',
    ]);
  });

  it('checks an include where it is written, and once', () => {
    const findings = lua({
      'lua/t/a.lua': '--- @include "token"\nreturn nextToken(KEYS[1])\n',
      'lua/includes/token.lua': "local function nextToken(key)\n  return redis.call('SET', key, 1, 'GET')\nend\n",
    });
    expect(messages(findings)).toEqual(['lua/includes/token.lua:2: SET GET needs Redis 6.2.0, above the floor 6.0.0']);
  });

  it('checks the commands the TypeScript sends: arrays, call(), gated forms', () => {
    const source = [
      "node.call(['GETDEL', key]);",
      "node.call(['CLIENT', 'NO-EVICT', 'on']);",
      "node.call(['SCAN', cursor, 'MATCH', pattern, 'TYPE', 'hash']);",
      "client.call('CLUSTER', 'SHARDS');",
      "node.call(['PUBSUB', 'SHARDNUMSUB', ...channels]);",
      "node.call(['HOCUSPOCUS']);",
      "node.call(['INFO', 'server', 'clients']);",
    ].join('\n');
    expect(messages(typescript(source))).toEqual([
      'src/admin/fixture.ts:1: GETDEL needs Redis 6.2.0, above the floor 6.0.0',
      'src/admin/fixture.ts:2: CLIENT NO-EVICT needs Redis 7.0.0, above the floor 6.0.0',
      'src/admin/fixture.ts:4: CLUSTER SHARDS needs Redis 7.0.0, above the floor 6.0.0',
      'src/admin/fixture.ts:6: cannot classify HOCUSPOCUS: the command is not in the table; add it to scripts/server-floor/commands.mjs',
      'src/admin/fixture.ts:7: INFO (several sections) needs Redis 7.0.0, above the floor 6.0.0',
    ]);
    // PUBSUB SHARDNUMSUB passes only while its gate (sharded pub/sub on a Redis 7+ Cluster) is in place.
    expect(messages(typescript(source, false))).toContain(
      'src/admin/fixture.ts:5: PUBSUB SHARDNUMSUB needs Redis 7.0.0, above the floor 6.0.0',
    );
  });

  it('compares versions numerically', () => {
    expect(compareVersions('6.0.6', '6.0.0')).toBe(1);
    expect(compareVersions('6.10.0', '6.2.0')).toBe(1);
    expect(compareVersions('2.6.12', '6.0.0')).toBe(-1);
    expect(compareVersions('7.0.0', '7.0.0')).toBe(0);
  });
});

describe('the server-floor check: every key and channel declared in KEYS', () => {
  it('fails on a key built by concatenation, directly, through a local, a function, or a table', () => {
    const findings = lua({
      'lua/t/a.lua': [
        'local base = KEYS[1]',
        "local derived = base .. ':x'",
        "local function keyOf(n) return base .. ':' .. n end",
        "local t = {other = KEYS[2] .. 'y'}",
        "redis.call('GET', KEYS[1] .. ':' .. ARGV[1])",
        "redis.call('DEL', base, derived)",
        "redis.call('PTTL', keyOf(3))",
        "redis.call('HGET', t.other, 'f')",
      ].join('\n'),
    });
    expect(messages(findings)).toEqual([
      "lua/t/a.lua:5: key of GET (KEYS[1] .. ':' .. ARGV[1]) is not declared in KEYS: it is built by concatenation (KEYS[1] .. ':' .. ARGV[1])",
      "lua/t/a.lua:6: key of DEL (derived) is not declared in KEYS: it is built by concatenation (base .. ':x')",
      "lua/t/a.lua:7: key of PTTL (keyOf(3)) is not declared in KEYS: keyOf() returns a value that is no key: it is built by concatenation (base .. ':' .. n)",
      "lua/t/a.lua:8: key of HGET (t.other) is not declared in KEYS: it is built by concatenation (KEYS[2] .. 'y')",
    ]);
  });

  it('fails on a channel built in Lua, and on a key read from Redis or taken from ARGV', () => {
    const findings = lua({
      'lua/t/a.lua': [
        "local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'",
        'local function wake(channelBase, waiter)',
        "  redis.call(publish, channelBase .. ':' .. waiter, '0')",
        'end',
        "wake(KEYS[1], redis.call('LINDEX', KEYS[2], 0))",
        "local next = redis.call('LINDEX', KEYS[2], 0)",
        "redis.call('DEL', next)",
        "redis.call('DEL', ARGV[2])",
      ].join('\n'),
    });
    expect(messages(findings)).toEqual([
      "lua/t/a.lua:3: channel of SPUBLISH (channelBase .. ':' .. waiter) is not declared in KEYS: it is built by concatenation (channelBase .. ':' .. waiter)",
      "lua/t/a.lua:3: channel of PUBLISH (channelBase .. ':' .. waiter) is not declared in KEYS: it is built by concatenation (channelBase .. ':' .. waiter)",
      "lua/t/a.lua:7: key of DEL (next) is not declared in KEYS: it is read from Redis (redis.call('LINDEX', KEYS[2], 0))",
      'lua/t/a.lua:8: key of DEL (ARGV[2]) is not declared in KEYS: it comes from ARGV (ARGV[2])',
    ]);
  });

  it('passes a clean script: keys through locals, parameters, tables, loops, and a publish command from ARGV', () => {
    const findings = lua({
      'lua/t/clean.lua': [
        '--[[ a header',
        "  redis.call('SET', 'not', 'code', 'GET') ]]",
        'local lockKey = KEYS[1]',
        'local channel = KEYS[2]',
        "local publish = ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'",
        '--- @include "queue"',
        'local q = {',
        '  queueKey = KEYS[3], channel = channel, publish = publish,',
        '}',
        'local timeouts = {unpack(KEYS, 4)}',
        'for _, key in ipairs(timeouts) do',
        "  redis.call('PEXPIRE', key, 1000)",
        'end',
        'local function extend(key, ms)',
        "  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end",
        'end',
        'extend(lockKey, 30000)',
        'extend(#timeouts > 0 and timeouts[1] or lockKey, 30000)',
        "redis.call('HSET', lockKey, 'mode', 'write', ARGV[2], 1)",
        "redis.call('SET', KEYS[3], 1, 'PX', 100, 'NX')",
        "redis.call('EXISTS', lockKey, lockKey, KEYS[2])",
        'wake(q)',
        "redis.call(publish, channel, '0')",
      ].join('\n'),
      'lua/includes/queue.lua': [
        'local function wake(q)',
        "  local head = redis.call('LPOP', q.queueKey)",
        '  if head then redis.call(q.publish, q.channel, head) end',
        'end',
      ].join('\n'),
    });
    expect(messages(findings)).toEqual([]);
  });
});

describe('the server-floor check on the repository', () => {
  it('reads every Lua script and source file, and classifies every command form they send', () => {
    const { lua: scripts, typescript: sources, readFile } = repositoryFiles();
    expect(scripts.length).toBeGreaterThan(20);
    const findings = [...checkLua(scripts, readFile), ...checkTypeScript(sources, readFile)];
    // Forms above the floor and undeclared keys are what the CI step reports; what it cannot read or
    // classify would be a gap in the table or in the parser.
    expect(messages(findings).filter((m) => /cannot (read|classify)/.test(m))).toEqual([]);
  });
});
