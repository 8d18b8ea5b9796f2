import { defineConfig, type Options } from 'tsup';

/** The package's `exports`: the library, its OpenTelemetry instrumentation, the admin functions the CLI uses. */
const exported = {
  index: 'src/index.ts',
  opentelemetry: 'src/opentelemetry/index.ts',
  admin: 'src/admin/index.ts',
};

const common = {
  // Constructors marked @internal take the library's machinery (made by createLockClient and the getters):
  // stripped from the published types, so that these do not drag the machinery's types along.
  dts: { entry: exported, compilerOptions: { stripInternal: true } },
  sourcemap: true,
  target: 'node20',
  platform: 'node',
  external: ['ioredis', 'redis', 'iovalkey', '@opentelemetry/api'],
} satisfies Options;

// Two builds into dist/, cleaned beforehand by `npm run build` (a `clean` here could race the other build).
// Only what package.json's `exports` and `bin` name is built (scripts/check-pack.mjs checks the tarball):
export default defineConfig([
  // ESM: the exports and the `flowlock` command (`bin`: dist/cli.js), which share chunks.
  { ...common, entry: { ...exported, cli: 'src/cli/main.ts' }, format: ['esm'] },
  // CommonJS: the exports only; nothing requires the command.
  { ...common, entry: exported, format: ['cjs'] },
]);
