import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // `idemkit/...` imports (the package naming itself) resolve to src/ through the
  // `idemkit-source` condition of package.json's exports, as in tsconfig.json.
  ssr: { resolve: { conditions: ['idemkit-source', ...defaultServerConditions] } },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The machine has 2 cores; concurrency suites spawn their own load.
    maxWorkers: 2,
  },
});
