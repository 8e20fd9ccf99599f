/**
 * Issue 26 item 4, follow-up: the memory store no longer evicts a record to make room (a new key
 * is refused with 503 `store-full`), and an unmigrated table is its own `store-schema-missing`
 * failure. Comments and docs written before then said otherwise; these are the places that did.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');

describe('text that described the memory store evicting, and the old unmigrated-store log line', () => {
  it.each(['bench/README.md', 'bench/shared.ts'])('%s says a full memory store refuses new keys, not that it evicts', (path) => {
    const text = read(path);
    expect(text).not.toMatch(/evict/i);
    expect(text).toContain('store-full');
  });

  it("src/core/options.ts's `logger` doc names the log lines the engine now writes", () => {
    const doc = /Where failures are logged:([\s\S]*?)@default console/.exec(read('src/core/options.ts'))?.[1] ?? '';
    expect(doc).not.toContain('naming the missing function');
    expect(doc).toContain('store-schema-missing');
    expect(doc).toContain('store-full');
  });
});
