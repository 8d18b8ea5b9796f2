// Type-aware lint: catches floating and misused promises among the usual TypeScript mistakes.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'node_modules/',
      'coverage/',
      'examples/',
      'test/fixtures/',
      'test/smoke/',
      'scripts/',
      '.scratch/',
      '.bench-results/',
      // What the tests write (reports, the package test's consumer project).
      '.vitest-*/',
      '*.config.js',
      // The docs site's build output and generated pages, and the browser check's screenshots.
      'docs/.vitepress/cache/',
      'docs/.vitepress/dist/',
      'docs/api/',
      '.docs-results/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      // Abort paths reject with the caller's `signal.reason`, which may be any value by design.
      '@typescript-eslint/prefer-promise-reject-errors': 'off',
      // Style only: `() => void x()` callbacks are idiomatic here.
      '@typescript-eslint/no-confusing-void-expression': 'off',
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-empty-function': 'off',
    },
  },
);
