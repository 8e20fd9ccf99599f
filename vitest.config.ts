import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // `idemkit/...` imports (the package naming itself) resolve to src/ through the
  // `idemkit-source` condition of package.json's exports, as in tsconfig.json.
  // Without vite's `module` condition, which Node does not know: @opentelemetry/api's `module` build
  // imports without file extensions, and Node refuses it.
  ssr: { resolve: { conditions: ['idemkit-source', ...defaultServerConditions.filter((condition) => condition !== 'module')] } },
  test: {
    include: ['test/**/*.test.ts'],
    // idemkit's expected log lines are printed only for a failing test (test/support/quiet-logs.ts).
    setupFiles: ['test/support/quiet-logs.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The machine has 2 cores; concurrency suites spawn their own load.
    maxWorkers: 2,
  },
});
