// `npm run test:mutation`: StrykerJS mutates the core files below and runs the unit tests of
// vitest.mutation.config.ts against each mutant. Not in CI (it takes tens of minutes on two cores);
// docs/mutation.md records the scores and how long a run takes.
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts' },
  mutate: [
    'src/core/key.ts',
    'src/core/fingerprint.ts',
    'src/core/canonical-json.ts',
    'src/core/canonical-number.ts',
    'src/core/canonical-writer.ts',
    'src/core/json-lexer.ts',
    'src/core/json-read.ts',
    'src/core/option-reader.ts',
    'src/client/backoff.ts',
    'src/client/budget.ts',
    'src/core/engine.ts',
    'src/core/engine-claim.ts',
    'src/core/engine-outcome.ts',
    'src/core/execution.ts',
    'src/core/execution-context.ts',
    'src/core/execution-finish.ts',
    'src/core/execution-state.ts',
  ],
  coverageAnalysis: 'perTest',
  // A static mutant (a module-level constant) would run every test once per mutant: hours here.
  ignoreStatic: true,
  concurrency: 2,
  reporters: ['clear-text', 'progress', 'json'],
  jsonReporter: { fileName: '.reports/mutation/mutation.json' },
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
  thresholds: { high: 90, low: 85, break: null },
};
