import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

// docs/kit.md shows map-store.test.ts whole: the file is what typechecks and runs, so the page
// stays a working example only while it is the same text.
it('docs/kit.md shows test/kit/map-store.test.ts exactly', () => {
  const page = readFileSync(join(root, 'docs/kit.md'), 'utf8');
  const block = /```ts\n(\/\/ map-store\.test\.ts[\s\S]*?)```/.exec(page)?.[1];
  expect(block).toBe(readFileSync(join(root, 'test/kit/map-store.test.ts'), 'utf8'));
});
