// The unit tests `npm run test:mutation` runs against each mutant (stryker.config.mjs): pure logic
// and the engine on the memory store, with no service to reach, so a mutant's run is short.
import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

export default defineConfig({
  ...base,
  test: {
    ...base.test,
    // Replaces the base's include (mergeConfig would append to it).
    include: [
      'test/core/{key,fingerprint,canonical-json,option-reader,decide,execution,execution-lifecycle,execution-states,engine-claims,lease,timeout,options,events}.test.ts',
      'test/client/*.test.ts',
      'test/fuzz/{key,canonical-json,retry-after}.test.ts',
    ],
    // Instrumented code on a busy machine runs several times slower than the plain suite.
    testTimeout: 120_000,
    // Fewer fuzz runs per property (1,000 in `npm test`): a mutant the fuzzers catch fails in the first few.
    env: { ...base.test?.env, IDEMKIT_FUZZ_RUNS: '100' },
    // Needs PostgreSQL: not a unit test.
    exclude: [...(base.test?.exclude ?? []), 'test/client/schema-missing.test.ts'],
  },
});
