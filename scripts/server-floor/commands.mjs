// The command forms flowlock sends, and the first Redis version that accepts each: the table that
// scripts/check-server-floor.mjs checks every Lua script under lua/ and every command of src/ against.
//
// Source: the Redis command reference, as the redis/redis repository keeps it in src/commands/<name>.json
// (fields "since", "history", "arity", "key_specs"; read at commit 4f8cdc2a1ea53e42955af758aabffee67cb455dd,
// 2024-10-18; the same text is on https://redis.io/docs/latest/commands/<name>/ under "History"). Valkey forked
// from Redis 7.2.4 and accepts every form below (its floor is 7.2).
//
// The declared floor is Redis 6.0 (DESIGN.md, "Servers"). A command with a form the check meets must be in
// this table (an unknown command fails the check, so a new command forces an entry here, with its source).
//
// An entry:
//   since       the first version of the command (of the subcommand, for `CLIENT ID` and the like)
//   keys        which arguments are keys: 'first' (the first argument), 'all', 'none'; `channel: true`: the
//               first argument is a pub/sub channel (checked like a key in Lua: it must come from KEYS)
//   positional  how many arguments come before the options (SET key value [options])
//   options     option name -> { args: values it takes, since: first version, notes }; any other literal word
//               in an option position, or a value there that is not a literal, is a form the check cannot
//               classify (and fails). Options not listed are refused the same way.
//   leading     the options come right after the positional arguments and end at the first word that is no
//               option (ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ...)
//   together    [{ all: [options], since }]: options that a version accepts only together from `since` on
//   variadic    [{ minArgs | maxArgs, since, notes }]: the command takes at least `minArgs` (at most `maxArgs`)
//               arguments only from `since` on (a spread of unknown length counts as many)
//   gated       a form above the floor that the library sends only where a check allows it: `file` holds the
//               gate (the check fails if `contains` is no longer there), `says` tells the gate
//
// Versions are compared numerically, major.minor.patch.

/** The oldest Redis the library declares it runs on. */
export const FLOOR = '6.0.0';

/** Sharded pub/sub (Redis 7.0): used only on a Redis 7+ Cluster, as LockScripts.pubsubMode() detects it. */
const SHARDED_GATE = {
  file: 'src/redis/scripts.ts',
  contains: 'pubsubMode(): Promise<PubSubMode>',
  says:
    "LockScripts.pubsubMode() answers 'sharded' only on a Cluster whose INFO reports Redis 7 or later; every " +
    'SPUBLISH, SSUBSCRIBE, SUNSUBSCRIBE and PUBSUB SHARDNUMSUB is sent only in that mode (the scripts take the ' +
    'publish command as an argument)',
};

export const COMMANDS = {
  // Strings
  GET: { since: '1.0.0', keys: 'first' },
  MGET: { since: '1.0.0', keys: 'all' },
  SET: {
    since: '1.0.0',
    keys: 'first',
    positional: 2,
    options: {
      EX: { args: 1, since: '2.6.12' },
      PX: { args: 1, since: '2.6.12' },
      NX: { args: 0, since: '2.6.12' },
      XX: { args: 0, since: '2.6.12' },
      KEEPTTL: { args: 0, since: '6.0.0' },
      GET: { args: 0, since: '6.2.0' },
      EXAT: { args: 1, since: '6.2.0' },
      PXAT: { args: 1, since: '6.2.0' },
    },
    together: [
      {
        all: ['NX', 'GET'],
        since: '7.0.0',
        notes: 'set.json history: "Allowed the NX and GET options to be used together"',
      },
    ],
  },
  INCR: { since: '1.0.0', keys: 'first' },
  INCRBY: { since: '1.0.0', keys: 'first' },
  DECR: { since: '1.0.0', keys: 'first' },
  DECRBY: { since: '1.0.0', keys: 'first' },
  GETDEL: { since: '6.2.0', keys: 'first' },
  GETEX: { since: '6.2.0', keys: 'first' },
  // Keys
  DEL: { since: '1.0.0', keys: 'all' },
  UNLINK: { since: '4.0.0', keys: 'all' },
  EXISTS: { since: '1.0.0', keys: 'all', variadic: [{ minArgs: 2, since: '3.0.3', notes: 'several keys' }] },
  TYPE: { since: '1.0.0', keys: 'first' },
  PTTL: { since: '2.6.0', keys: 'first' },
  PEXPIRE: {
    since: '2.6.0',
    keys: 'first',
    positional: 2,
    options: {
      NX: { args: 0, since: '7.0.0' },
      XX: { args: 0, since: '7.0.0' },
      GT: { args: 0, since: '7.0.0' },
      LT: { args: 0, since: '7.0.0' },
    },
  },
  EXPIRE: {
    since: '1.0.0',
    keys: 'first',
    positional: 2,
    options: {
      NX: { args: 0, since: '7.0.0' },
      XX: { args: 0, since: '7.0.0' },
      GT: { args: 0, since: '7.0.0' },
      LT: { args: 0, since: '7.0.0' },
    },
  },
  COPY: { since: '6.2.0', keys: 'first' },
  SCAN: {
    since: '2.8.0',
    keys: 'none',
    positional: 1,
    options: {
      MATCH: { args: 1, since: '2.8.0' },
      COUNT: { args: 1, since: '2.8.0' },
      TYPE: { args: 1, since: '6.0.0' },
    },
  },
  DBSIZE: { since: '1.0.0', keys: 'none' },
  // Hashes
  HGET: { since: '2.0.0', keys: 'first' },
  HSET: {
    since: '2.0.0',
    keys: 'first',
    variadic: [{ minArgs: 4, since: '4.0.0', notes: 'several field-value pairs' }],
  },
  HMGET: { since: '2.0.0', keys: 'first' },
  HGETALL: { since: '2.0.0', keys: 'first' },
  HINCRBY: { since: '2.0.0', keys: 'first' },
  HEXISTS: { since: '2.0.0', keys: 'first' },
  HDEL: { since: '2.0.0', keys: 'first', variadic: [{ minArgs: 3, since: '2.4.0', notes: 'several fields' }] },
  HLEN: { since: '2.0.0', keys: 'first' },
  // Lists
  LPUSH: { since: '1.0.0', keys: 'first', variadic: [{ minArgs: 3, since: '2.4.0', notes: 'several elements' }] },
  RPUSH: { since: '1.0.0', keys: 'first', variadic: [{ minArgs: 3, since: '2.4.0', notes: 'several elements' }] },
  LPOP: { since: '1.0.0', keys: 'first', variadic: [{ minArgs: 2, since: '6.2.0', notes: 'the count argument' }] },
  RPOP: { since: '1.0.0', keys: 'first', variadic: [{ minArgs: 2, since: '6.2.0', notes: 'the count argument' }] },
  LREM: { since: '1.0.0', keys: 'first' },
  LSET: { since: '1.0.0', keys: 'first' },
  LINDEX: { since: '1.0.0', keys: 'first' },
  LRANGE: { since: '1.0.0', keys: 'first' },
  LLEN: { since: '1.0.0', keys: 'first' },
  LPOS: { since: '6.0.6', keys: 'first' },
  // Sorted sets
  ZADD: {
    since: '1.2.0',
    keys: 'first',
    positional: 1,
    leading: true,
    options: {
      NX: { args: 0, since: '3.0.2' },
      XX: { args: 0, since: '3.0.2' },
      CH: { args: 0, since: '3.0.2' },
      INCR: { args: 0, since: '3.0.2' },
      GT: { args: 0, since: '6.2.0' },
      LT: { args: 0, since: '6.2.0' },
    },
    // Several score-member pairs: Redis 2.4, far below the floor (not counted: the options come first).
  },
  ZREM: { since: '1.2.0', keys: 'first', variadic: [{ minArgs: 3, since: '2.4.0', notes: 'several members' }] },
  ZRANGE: {
    since: '1.2.0',
    keys: 'first',
    positional: 3,
    options: {
      WITHSCORES: { args: 0, since: '1.2.0' },
      BYSCORE: { args: 0, since: '6.2.0' },
      BYLEX: { args: 0, since: '6.2.0' },
      REV: { args: 0, since: '6.2.0' },
      LIMIT: { args: 2, since: '6.2.0' },
    },
  },
  ZRANGEBYSCORE: {
    since: '1.0.5',
    keys: 'first',
    positional: 3,
    options: { WITHSCORES: { args: 0, since: '2.0.0' }, LIMIT: { args: 2, since: '1.0.5' } },
  },
  ZREMRANGEBYSCORE: { since: '1.2.0', keys: 'first' },
  ZSCORE: { since: '1.2.0', keys: 'first' },
  ZCARD: { since: '1.2.0', keys: 'first' },
  // Pub/sub (channels are not keys to Redis, but Dragonfly and the ACL's &channel rules see them)
  PUBLISH: { since: '2.0.0', keys: 'none', channel: true },
  SPUBLISH: { since: '7.0.0', keys: 'none', channel: true, gated: SHARDED_GATE },
  SUBSCRIBE: { since: '2.0.0', keys: 'none' },
  UNSUBSCRIBE: { since: '2.0.0', keys: 'none' },
  PSUBSCRIBE: { since: '2.0.0', keys: 'none' },
  PUNSUBSCRIBE: { since: '2.0.0', keys: 'none' },
  SSUBSCRIBE: { since: '7.0.0', keys: 'none', gated: SHARDED_GATE },
  SUNSUBSCRIBE: { since: '7.0.0', keys: 'none', gated: SHARDED_GATE },
  'PUBSUB NUMSUB': { since: '2.8.0', keys: 'none' },
  'PUBSUB SHARDNUMSUB': { since: '7.0.0', keys: 'none', gated: SHARDED_GATE },
  // Scripts and transactions (sent by the adapters; scripts.json history has no later forms we use)
  EVAL: { since: '2.6.0', keys: 'none' },
  EVALSHA: { since: '2.6.0', keys: 'none' },
  'SCRIPT FLUSH': {
    since: '2.6.0',
    keys: 'none',
    positional: 0,
    options: { ASYNC: { args: 0, since: '6.2.0' }, SYNC: { args: 0, since: '6.2.0' } },
  },
  MULTI: { since: '1.2.0', keys: 'none' },
  EXEC: { since: '1.2.0', keys: 'none' },
  // Server, connection, cluster
  TIME: { since: '2.6.0', keys: 'none' },
  INFO: { since: '1.0.0', keys: 'none', variadic: [{ minArgs: 2, since: '7.0.0', notes: 'several sections' }] },
  'CONFIG GET': {
    since: '2.0.0',
    keys: 'none',
    variadic: [{ minArgs: 2, since: '7.0.0', notes: 'several parameters' }],
  },
  WAIT: { since: '3.0.0', keys: 'none' },
  WAITAOF: { since: '7.2.0', keys: 'none' },
  HELLO: {
    since: '6.0.0',
    keys: 'none',
    variadic: [{ maxArgs: 0, since: '6.2.0', notes: 'without a protocol version' }],
  },
  QUIT: { since: '1.0.0', keys: 'none' },
  'CLIENT ID': { since: '5.0.0', keys: 'none' },
  'CLIENT INFO': { since: '6.2.0', keys: 'none' },
  'CLIENT NO-EVICT': { since: '7.0.0', keys: 'none' },
  'CLIENT KILL': {
    since: '2.4.0',
    keys: 'none',
    positional: 0,
    options: {
      ID: { args: 1, since: '2.8.12' },
      TYPE: { args: 1, since: '2.8.12' },
      USER: { args: 1, since: '6.0.0' },
      ADDR: { args: 1, since: '2.8.12' },
      LADDR: { args: 1, since: '6.2.0' },
      SKIPME: { args: 1, since: '2.8.12' },
      MAXAGE: { args: 1, since: '7.4.0' },
    },
  },
  'CLUSTER NODES': { since: '3.0.0', keys: 'none' },
  'CLUSTER MYID': { since: '3.0.0', keys: 'none' },
  'CLUSTER SHARDS': { since: '7.0.0', keys: 'none' },
  'OBJECT ENCODING': { since: '2.2.3', keys: 'none' },
  'MEMORY USAGE': { since: '4.0.0', keys: 'none' },
};

/** Commands with subcommands: their first argument names the entry (`CLIENT ID`). */
export const CONTAINERS = ['CLIENT', 'CLUSTER', 'CONFIG', 'PUBSUB', 'SCRIPT', 'OBJECT', 'MEMORY'];

/**
 * The client libraries' typed methods that send a command, as the adapters call them (src/redis/*.ts,
 * src/cli/connect.ts): method name -> command. The check reads no options of a typed call: every command
 * listed here is used in a form its first version accepts (the check fails if that first version is above
 * the floor). Names that Map and Set share (`get`, `set`, `delete`) are left out: the adapters' `get` is GET,
 * a Redis 1.0 command with one form.
 */
export const CLIENT_METHODS = {
  files: ['src/redis/ioredis.ts', 'src/redis/node-redis.ts', 'src/redis/glide.ts', 'src/cli/connect.ts'],
  methods: {
    evalsha: 'EVALSHA',
    evalSha: 'EVALSHA',
    eval: 'EVAL',
    hget: 'HGET',
    hGet: 'HGET',
    hgetall: 'HGETALL',
    hGetAll: 'HGETALL',
    exists: 'EXISTS',
    pttl: 'PTTL',
    pTTL: 'PTTL',
    info: 'INFO',
    subscribe: 'SUBSCRIBE',
    unsubscribe: 'UNSUBSCRIBE',
    psubscribe: 'PSUBSCRIBE',
    pSubscribe: 'PSUBSCRIBE',
    ssubscribe: 'SSUBSCRIBE',
    sSubscribe: 'SSUBSCRIBE',
    sunsubscribe: 'SUNSUBSCRIBE',
    sUnsubscribe: 'SUNSUBSCRIBE',
    multi: 'MULTI',
    exec: 'EXEC',
    wait: 'WAIT',
    quit: 'QUIT',
  },
};

/**
 * Arrays of capitals in src/ that are no command: `file` and the array's first word, and why. (The check takes
 * every array literal that starts with a word in capitals for a command.)
 */
export const NOT_COMMANDS = [
  { file: 'src/cli/format.ts', first: 'NO_COLOR', why: 'environment variables that turn colour off' },
  { file: 'src/cli/format.ts', first: 'TERM', why: 'environment variables that turn colour off' },
  { file: 'src/cli/format.ts', first: 'NAME', why: "the header row of `flowlock list`'s table" },
  { file: 'src/cli/connect.ts', first: 'FLOWLOCK_REDIS_URL', why: 'environment variables naming the server' },
  { file: 'src/cli/connect.ts', first: 'REDIS_URL', why: 'environment variables naming the server' },
  { file: 'src/cli/connect.ts', first: 'REDISCLI_AUTH', why: "redis-cli's password variable" },
];
