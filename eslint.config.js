import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '.prof/**', 'bench/results/**', 'test/orm/prisma/generated/**', 'examples/prisma/generated/**', '.stryker-tmp/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // Typed rules: a promise nobody awaits or catches is a failure nobody hears of.
    languageOptions: { parserOptions: { projectService: { allowDefaultProject: ['eslint.config.js', 'stryker.config.mjs', 'scripts/*.mjs', 'scripts/stubs/*/*.js'] }, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // `{ ...a, b }` and `{ ...a, ...b }`: on Node 20 (V8 11.3) an object literal that goes on after
    // a spread of a non-empty object costs microseconds, not nanoseconds (docs/performance.md,
    // "Object spread on Node 20"). In the library's request and message paths, copy the fields by
    // name or assign after a copy (`idemkit check` and the admin commands run once per command).
    files: ['src/**/*.ts'],
    ignores: ['src/check/**', 'src/cli/**', 'src/stores/*/admin.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: 'ObjectExpression > SpreadElement + *',
          message: 'A spread followed by more properties is slow on Node 20 (docs/performance.md, "Object spread on Node 20"): name the fields, or Object.assign after the copy.',
        },
      ],
    },
  },
);
