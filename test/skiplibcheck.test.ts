/**
 * Issue 26 item 19 (docs part): what a strict app needs in its tsconfig.json for the libraries the
 * docs introduce. A fresh app outside the repository (links to this repository's node_modules),
 * checked under `strict`, `NodeNext` and the checks `tsc --init` turns on, but `skipLibCheck:
 * false`, imports drizzle-orm/node-postgres (docs/orm.md, "Drizzle") and ioredis (docs/stores/
 * redis.md). Found: Drizzle's own declarations fail (so the docs say `skipLibCheck: true` where
 * Drizzle is introduced); ioredis's compile (so nothing needs saying there). When either changes,
 * this test fails and the docs are to follow.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const app = mkdtempSync(join(tmpdir(), 'idemkit-skiplibcheck-'));
afterAll(() => rmSync(app, { recursive: true, force: true }));

for (const name of ['drizzle-orm', 'ioredis', 'pg', '@types/pg', '@types/node']) {
  mkdirSync(join(app, 'node_modules', name, '..'), { recursive: true });
  symlinkSync(join(root, 'node_modules', name), join(app, 'node_modules', name), 'dir');
}
writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'strict-app', private: true, type: 'module' }));
// What docs/orm.md's Drizzle block and docs/stores/redis.md's first block make.
writeFileSync(join(app, 'drizzle.ts'), "import { drizzle } from 'drizzle-orm/node-postgres';\nimport pg from 'pg';\nexport const db = drizzle(new pg.Pool());\n");
writeFileSync(join(app, 'redis.ts'), "import { Redis } from 'ioredis';\nexport const client = new Redis({ enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });\n");

/** tsc's diagnostics for `files` with `skipLibCheck` as given: one line per error, paths relative to the app. */
function check(files: string[], skipLibCheck: boolean): string[] {
  const config = `tsconfig.${skipLibCheck ? 'skip' : 'full'}.json`;
  writeFileSync(
    join(app, config),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2023', 'DOM', 'DOM.Iterable'],
        types: ['node'],
        strict: true,
        noUncheckedIndexedAccess: true,
        exactOptionalPropertyTypes: true,
        verbatimModuleSyntax: true,
        isolatedModules: true,
        noEmit: true,
        skipLibCheck,
      },
      files,
    }),
  );
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', config, '--pretty', 'false'], { cwd: app, encoding: 'utf8' });
  if (tsc.status !== 0 && !/error TS/.test(tsc.stdout)) throw new Error(`tsc failed without diagnostics: ${tsc.stdout}${tsc.stderr}`);
  return tsc.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
}

describe('a strict app with skipLibCheck: false', () => {
  it("fails inside drizzle-orm's own declarations (and only there); ioredis compiles", () => {
    const errors = check(['drizzle.ts', 'redis.ts'], false);
    expect(errors.length).toBeGreaterThan(0);
    // tsc names the linked packages by their real path (this repository's node_modules).
    expect(errors.filter((line) => !/^(?:[^(]*\/)?node_modules\/drizzle-orm\//.test(line))).toEqual([]);
  }, 120_000);

  it('compiles with skipLibCheck: true', () => {
    expect(check(['drizzle.ts', 'redis.ts'], true)).toEqual([]);
  }, 60_000);

  it('the docs say so where Drizzle is introduced (docs/orm.md, the README table in both languages)', () => {
    const drizzleSection = /^## Drizzle\n([\s\S]*?)^## /m.exec(readFileSync(join(root, 'docs', 'orm.md'), 'utf8'))?.[1] ?? '';
    expect(drizzleSection).toContain('"skipLibCheck": true');
    for (const readme of ['README.md', 'README.zh-CN.md']) {
      const row = readFileSync(join(root, readme), 'utf8').split('\n').find((line) => line.startsWith('| `idemkit/kysely`'));
      expect(row).toContain('"skipLibCheck": true');
    }
  });
});
