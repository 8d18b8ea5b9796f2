// The legs of the test matrix and which test files each leg runs, shared by scripts/test-matrix.mjs (`npm test`,
// `npm run test:all`) and scripts/test-repeat.mjs (chosen files of one leg, many times), and how a leg's JSON
// report names its failed tests.
import { existsSync, readdirSync, readFileSync } from 'node:fs';

/**
 * What each test file exercises, which decides its legs. Every `*.test.ts` under test/integration is listed here
 * (by its path under test/integration, without `.test.ts`); a file that is not, or an entry whose file is gone,
 * stops both commands with a message before any test runs: a new file's legs are a decision, not a default.
 * test/unit and test/model need no entry (below).
 *
 * One of four kinds says which client libraries a file needs:
 * - `logic`: the library's own logic and its Lua scripts (a queue, a count, leases, the layout, the CLI's
 *   formatting). Every call reaches Redis through the adapter, and the adapter's conformance tests check each
 *   library's adapter, so the file runs once, on the default client (ioredis 5).
 * - `each`: the file itself runs every client library, whatever REDIS_CLIENT says (the adapter conformance
 *   tests, the per-client quirks): on the default client too, which covers them all.
 * - `seam`: where the client libraries differ and the adapter must make up for it, tested through the lock:
 *   lost replies and resends, the subscriber's wake-ups and handshake, NOSCRIPT (GLIDE's NoScriptError), GLIDE's
 *   own faults. On every client, in `npm test` as well.
 * - `client`: scenarios that go through a library's own connection handling or its own API: pub/sub and
 *   connection faults (killed subscriber connections, restarts, offline queues, quitting), TLS and ACL users,
 *   Sentinel, its Cluster client under a failover, the quorum lock's many connections, the admin functions and
 *   the CLI on its client, its command spans. On every client in `npm run test:all`.
 * and `cluster` beside it: the fixture's topology changes what the file checks (keys in one slot, sharded pub/sub,
 * scripts cached per node, admin calls per master), so it also runs on the Cluster legs: on the default client's
 * if it is `logic` or `each`, on every Cluster leg if it is `seam` or `client`. Files that start their own
 * servers (the Cluster, Sentinel and quorum tests) or skip on a Cluster are not `cluster`: REDIS_TOPOLOGY changes
 * nothing for them.
 *
 * A file that once found a bug on one client library only stays on that library's legs: `seam` or `client`
 * (the CLI and admin functions on GLIDE and iovalkey, the latch's await() on GLIDE and node-redis, T13 on
 * node-redis 6, the semaphore faults on ioredis 6, Sentinel on node-redis 6, the quorum lock on iovalkey).
 */
const integration = {
  // ACL users through each library's own handshake (standalone and Cluster: CLUSTER SLOTS, CLIENT SETNAME).
  acl: 'client cluster',
  adapter: 'each cluster',
  admin: 'client cluster',
  'attempt-deadline': 'logic',
  cli: 'client cluster',
  client: 'seam cluster',
  cluster: 'client',
  'count-down-latch': 'seam cluster',
  diagnostics: 'logic cluster',
  // Each library's own timeout and closed-connection errors, named by the lock's.
  errors: 'client',
  expiry: 'logic cluster',
  'fair-lock': 'logic cluster',
  'faults/clients': 'each cluster',
  'faults/count-down-latch': 'client',
  'faults/diagnostics': 'logic',
  'faults/exclusion': 'client',
  'faults/fair-lock': 'logic',
  'faults/glide': 'seam cluster',
  'faults/holder': 'logic',
  'faults/network': 'seam',
  'faults/read-write-lock': 'logic',
  'faults/security': 'client',
  'faults/semaphore': 'client',
  'faults/server': 'client',
  footprint: 'logic cluster',
  // GLIDE only (it skips elsewhere), standalone and Cluster: the user's decoder, GLIDE's own log lines.
  'glide-client': 'client cluster',
  hardening: 'logic',
  'hold-events': 'logic',
  'leave-after-attempt': 'logic',
  'legacy-layout': 'logic cluster',
  lock: 'seam cluster',
  messages: 'client',
  'multi-lock': 'logic cluster',
  offline: 'client',
  // Each library's CROSSSLOT error, read through the lock (a cluster-mode server of its own: not `cluster`).
  'one-slot-endpoint': 'seam',
  opentelemetry: 'client',
  package: 'logic',
  'permit-expirable-semaphore': 'logic cluster',
  process: 'logic',
  'quorum-lock': 'client',
  'read-write-lock': 'logic cluster',
  'readme-recipes': 'logic',
  'redis-layout': 'logic cluster',
  'redisson-interop': 'logic cluster',
  replication: 'client',
  // MONITORed request sizes and slots; GLIDE's in-flight request limit once lost every renewal.
  'request-limits': 'client',
  scripts: 'seam cluster',
  semaphore: 'logic cluster',
  sentinel: 'client',
  // Starts its own Cluster: a script call cut off when the client drops a node from its map (issue 38.5).
  'cluster-resend': 'client',
  // Each library's script errors and INFO reply, read at the first refusal.
  'server-floor': 'client',
  shutdown: 'client',
  'subscribe-handshake': 'seam',
  waiting: 'seam cluster',
  // A wait time never cuts the first round trip: each library's reply path through a slow link.
  'wait-time': 'seam',
};
const KINDS = ['logic', 'each', 'seam', 'client'];

/** The test/integration files as [path, kind, onCluster]; exits (status 2) when the list above and the folder differ. */
function classified() {
  const root = 'test/integration';
  const present = readdirSync(root, { recursive: true })
    .map((path) => String(path).replaceAll('\\', '/'))
    .filter((path) => path.endsWith('.test.ts'))
    .map((path) => path.slice(0, -'.test.ts'.length))
    .sort();
  const problems = [
    ...present.filter((name) => !(name in integration)).map((name) => `${root}/${name}.test.ts is not classified`),
    ...Object.keys(integration)
      .filter((name) => !present.includes(name))
      .map((name) => `"${name}" is classified but ${root}/${name}.test.ts does not exist`),
  ];
  const files = present
    .filter((name) => name in integration)
    .map((name) => {
      const [kind, ...rest] = integration[name].split(' ');
      if (!KINDS.includes(kind) || rest.some((word) => word !== 'cluster'))
        problems.push(`"${name}": "${integration[name]}" is not one of ${KINDS.join(', ')}, optionally with cluster`);
      return { path: `${root}/${name}.test.ts`, kind, cluster: rest.includes('cluster') };
    });
  if (problems.length > 0) {
    console.error(
      `scripts/test-legs.mjs: ${problems.join('; ')}.\nSay in its \`integration\` list what each file exercises ` +
        `(logic, each, seam or client, and cluster if the fixture's topology changes what it checks).`,
    );
    process.exit(2);
  }
  return files;
}

/** The client every file runs on (with test/unit, and test/model's short runs in `npm test`). */
const DEFAULT_CLIENT = 'ioredis5';

/**
 * Each leg: its name, the environment that picks the client library and topology (vitest.config.ts,
 * test/support/clients.ts), and whether `npm run test:all` runs the model tests (test/model) there at their own
 * budgets (30 to 60 s each): GLIDE, whose connections fail calls and reconnect in their own way, which the
 * models' faults reach (two library bugs found standalone), and GLIDE on the Cluster, where every key of a run
 * sits on one master (test/model/world.ts, modelSite; a bug of every client found there). Not node-redis, whose
 * queues the models cannot see (docs/internals/model-tests.md), and no longer ioredis 5 on the Cluster: its
 * runs found harness fixes only, the same harness runs on GLIDE's Cluster, and they cost about 3 minutes of
 * `test:all`. The default client's leg runs every file, the models included, for BRIEF_MODEL_SECONDS each, in
 * both commands.
 */
const legList = [
  { name: 'ioredis5', env: { REDIS_CLIENT: 'ioredis5' } },
  { name: 'ioredis6', env: { REDIS_CLIENT: 'ioredis6' } },
  { name: 'node-redis6', env: { REDIS_CLIENT: 'node-redis6' } },
  { name: 'node-redis5', env: { REDIS_CLIENT: 'node-redis5' } },
  { name: 'iovalkey', env: { REDIS_CLIENT: 'iovalkey' } },
  { name: 'glide', env: { REDIS_CLIENT: 'glide' }, models: true },
  { name: 'cluster:ioredis5', env: { REDIS_CLIENT: 'ioredis5', REDIS_TOPOLOGY: 'cluster' } },
  { name: 'cluster:node-redis6', env: { REDIS_CLIENT: 'node-redis6', REDIS_TOPOLOGY: 'cluster' } },
  { name: 'cluster:glide', env: { REDIS_CLIENT: 'glide', REDIS_TOPOLOGY: 'cluster' }, models: true },
];

/**
 * Seconds per model on the default client's leg (MODEL_SECONDS, unless the environment sets it): a short run that still finds what a model
 * finds at once (a broken script, a wrong wake-up); the long budgets run on the legs marked `models`.
 */
const BRIEF_MODEL_SECONDS = '10';

/**
 * The legs of a suite with their files (`[]`: every file, test/unit and test/model included): `all` is
 * `npm run test:all` (CI), `quick` is `npm test`. A leg with nothing to run in the suite is left out.
 *   quick: the default client: every file (the models for BRIEF_MODEL_SECONDS each); each other standalone
 *          client: the `seam` files. No Cluster legs.
 *   all:   the same default leg; each other standalone client: `seam` and `client` files; a Cluster leg: the
 *          `cluster` files (of every kind on the default client's, `seam` and `client` on the others');
 *          test/model on the legs marked `models`.
 */
export function legsOf(suite) {
  const files = classified();
  const result = [];
  for (const leg of legList) {
    const { REDIS_CLIENT: client, REDIS_TOPOLOGY: topology } = leg.env;
    const isDefault = client === DEFAULT_CLIENT;
    if (isDefault && topology === undefined) {
      result.push({
        name: leg.name,
        env: { ...leg.env, MODEL_SECONDS: process.env['MODEL_SECONDS'] || BRIEF_MODEL_SECONDS },
        files: [],
      });
      continue;
    }
    if (suite === 'quick' && topology !== undefined) continue;
    const perClient = (file) => file.kind === 'seam' || (suite === 'all' && file.kind === 'client');
    const wanted = (file) =>
      topology === 'cluster' ? file.cluster && (isDefault || perClient(file)) : perClient(file);
    const chosen = files.filter(wanted).map((file) => file.path);
    if (leg.models && suite === 'all') chosen.push('test/model');
    if (chosen.length > 0) result.push({ name: leg.name, env: leg.env, files: chosen });
  }
  return result;
}

/** The legs of `suite` named in `names`, in matrix order; exits with a usage line (status 2) on an unknown name. */
export function pickLegs(names, suite = 'all') {
  const legs = legsOf(suite);
  const unknown = names.filter((name) => !legs.some((leg) => leg.name === name));
  if (unknown.length > 0) {
    console.error(`unknown legs: ${unknown.join(', ')}; legs: ${legs.map((leg) => leg.name).join(', ')}`);
    process.exit(2);
  }
  return legs.filter((leg) => names.includes(leg.name));
}

/** The JSON report a leg writes under CI=1, as vitest.config.ts names it. */
export function reportOf(leg) {
  const { REDIS_CLIENT: client, REDIS_TOPOLOGY: topology } = leg.env;
  return `.vitest-results/${client}${topology ? `-${topology}` : ''}.json`;
}

/**
 * What failed in a run, read from its Vitest JSON report: `file > full test name: first line of the message`
 * (a file that failed outside any test, in a hook or on an escaped error, names the file).
 */
export function failuresIn(reportFile) {
  if (!existsSync(reportFile))
    return [`(no JSON report ${reportFile}: Vitest writes it under CI=1, and not when it did not start)`];
  const report = JSON.parse(readFileSync(reportFile, 'utf8'));
  const firstLine = (text) =>
    String(text ?? '')
      .split('\n')
      .find((line) => line.trim() !== '') ?? '';
  const failures = [];
  for (const result of report.testResults ?? []) {
    const path = String(result.name).replace(`${process.cwd()}/`, '');
    const failed = (result.assertionResults ?? []).filter((a) => a.status === 'failed');
    for (const a of failed)
      failures.push(`${path} > ${a.fullName}: ${firstLine(a.failureMessages?.[0])}`.slice(0, 400));
    if (failed.length === 0 && result.status === 'failed')
      failures.push(`${path}: ${firstLine(result.message)}`.slice(0, 400));
  }
  return failures;
}
