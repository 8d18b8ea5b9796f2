import { existsSync } from 'node:fs';
import { defineConfig, type DefaultTheme } from 'vitepress';

// The API reference is generated into docs/api/ by `npm run docs:api` (TypeDoc), before every build.
const apiSidebar: DefaultTheme.SidebarItem[] = existsSync(new URL('../api/index.md', import.meta.url))
  ? [
      { text: 'Overview', link: '/api/' },
      { text: 'flowlock', link: '/api/flowlock/' },
      { text: 'flowlock/opentelemetry', link: '/api/flowlock/opentelemetry/' },
      { text: 'flowlock/admin', link: '/api/flowlock/admin/' },
    ]
  : [];

export default defineConfig({
  title: 'flowlock',
  description:
    'Reentrant distributed locks on Redis for Node.js: Redisson RLock semantics, pub/sub waiting, watchdog leases, async-flow ownership, fencing tokens.',
  head: [
    ['link', { rel: 'icon', type: 'image/svg+xml', href: '/favicon.svg' }],
    // Code blocks wrap long lines instead of scrolling sideways: at 1280 px the column holds about 75
    // characters, and the samples (formatted at 120, with comments that say why) are read, not scrolled.
    // `npm run docs:browser` checks that no code block of the site scrolls.
    [
      'style',
      {},
      ".vp-doc [class*='language-'] pre, .vp-doc [class*='language-'] code { white-space: pre-wrap; " +
        'overflow-wrap: anywhere; } ' +
        ".vp-doc [class*='language-'] code { width: auto; }",
    ],
  ],
  cleanUrls: false,
  lastUpdated: false,
  // The local search index is one chunk of about 1 MB: expected, not a problem to warn about.
  vite: { build: { chunkSizeWarningLimit: 2_000 } },
  // Generated material that is not a page of its own.
  srcExclude: ['**/README.md'],
  themeConfig: {
    search: { provider: 'local' },
    nav: [
      { text: 'Guide', link: '/guide/getting-started' },
      { text: 'Primitives', link: '/primitives/lock' },
      { text: 'Operations', link: '/operations/shutdown' },
      { text: 'API', link: '/api/' },
    ],
    socialLinks: [{ icon: 'github', link: 'https://github.com/flowlock/flowlock' }],
    sidebar: [
      {
        text: 'Guide',
        items: [
          { text: 'Getting started', link: '/guide/getting-started' },
          { text: 'The lock client', link: '/guide/client' },
          { text: 'Flows and re-entry', link: '/guide/flows' },
          { text: 'Waiting', link: '/guide/waiting' },
          { text: 'Leases and the watchdog', link: '/guide/watchdog' },
          { text: 'Fencing: what a lock can promise', link: '/guide/fencing' },
          { text: 'Guarantees under faults, measured', link: '/guide/guarantees' },
        ],
      },
      {
        text: 'Primitives',
        items: [
          { text: 'Lock', link: '/primitives/lock' },
          { text: 'Fair lock', link: '/primitives/fair-lock' },
          { text: 'Read-write lock', link: '/primitives/read-write-lock' },
          { text: 'Semaphore', link: '/primitives/semaphore' },
          { text: 'Permit-expirable semaphore', link: '/primitives/permit-expirable-semaphore' },
          { text: 'Count-down latch', link: '/primitives/count-down-latch' },
          { text: 'Multi-lock', link: '/primitives/multi-lock' },
          { text: 'Quorum lock', link: '/primitives/quorum-lock' },
        ],
      },
      {
        text: 'Clients and topologies',
        items: [
          { text: 'Client libraries', link: '/clients' },
          { text: 'Topologies: Sentinel, Cluster, quorum', link: '/topologies' },
          { text: 'Where it runs: servers, providers, ACL', link: '/where-it-runs' },
        ],
      },
      {
        text: 'Operations',
        items: [
          { text: 'Shutdown', link: '/operations/shutdown' },
          { text: 'Observability', link: '/operations/observability' },
          { text: 'OpenTelemetry and alerts', link: '/operations/opentelemetry' },
          { text: 'The flowlock command', link: '/operations/cli' },
          { text: 'What stays in Redis', link: '/operations/redis-data' },
          { text: 'Security: ACL and TLS', link: '/operations/security' },
          { text: 'TLS with a private CA', link: '/operations/tls' },
          { text: 'What the package ships', link: '/operations/package' },
        ],
      },
      {
        text: 'Redisson',
        items: [{ text: 'Interop and migration', link: '/redisson' }],
      },
      {
        text: 'Internals',
        items: [
          { text: 'Redis layout', link: '/internals/layout' },
          { text: 'Scripts and source', link: '/internals/scripts' },
          { text: 'Fault model', link: '/internals/fault-model' },
          { text: 'Model-based tests', link: '/internals/model-tests' },
        ],
      },
      {
        text: 'Benchmarks',
        items: [
          { text: 'Summary', link: '/benchmarks/' },
          { text: 'Results and charts', link: '/benchmarks/results' },
        ],
      },
      { text: 'Contributing', items: [{ text: 'Tests, CI, docs', link: '/contributing' }] },
      ...(apiSidebar.length ? [{ text: 'API reference', items: apiSidebar }] : []),
    ],
  },
});
