import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  exports: Record<string, string | Record<string, string>>;
};
const entries = Object.entries(pkg.exports).filter((e): e is [string, Record<string, string>] => typeof e[1] === 'object');

describe('package exports', () => {
  it('lists every subpath the docs promise, types first', () => {
    expect(entries.map(([name]) => name)).toEqual([
      '.',
      './stores/memory',
      './stores/sqlite',
      './web',
      './hono',
      './express',
      './fastify',
      './stores/postgres',
      './stores/redis',
      './stores/mysql',
      './client',
    ]);
    for (const [, conditions] of entries) expect(Object.keys(conditions)[0]).toBe('types');
  });

  it.each(entries)('%s points at existing sources, and at built files once built', async (_name, conditions) => {
    expect(existsSync(join(root, conditions['idemkit-source']!))).toBe(true);
    const built = join(root, conditions.default!);
    if (!existsSync(join(root, 'dist'))) return; // `npm run build` has not run (CI builds first)
    expect(existsSync(join(root, conditions.types!))).toBe(true);
    const module = await import(built);
    expect(Object.keys(module).length).toBeGreaterThan(0);
  });
});
