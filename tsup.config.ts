import { defineConfig } from 'tsup';

export default defineConfig({
  // The package's entry points: the library, its OpenTelemetry instrumentation, the admin functions the
  // CLI is built on, and the `flowlock` command.
  entry: {
    index: 'src/index.ts',
    opentelemetry: 'src/opentelemetry/index.ts',
    admin: 'src/admin/index.ts',
    cli: 'src/cli/main.ts',
  },
  format: ['esm', 'cjs'],
  // Constructors marked @internal take the library's machinery (made by createLockClient and the getters):
  // stripped from the published types, so that these do not drag the machinery's types along.
  dts: { compilerOptions: { stripInternal: true } },
  clean: true,
  sourcemap: true,
  target: 'node20',
  platform: 'node',
  external: ['ioredis', 'redis', 'iovalkey', '@opentelemetry/api'],
});
