import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  exports: Record<string, string | Record<string, string>>;
  bin: Record<string, string>;
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
      './patterns',
      './messaging',
      './check',
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

  it('has an `idemkit` bin, built from src/cli/main.ts, that runs under node', () => {
    expect(Object.keys(pkg.bin)).toEqual(['idemkit']);
    expect(readFileSync(join(root, 'src/cli/main.ts'), 'utf8').startsWith('#!/usr/bin/env node')).toBe(true);
    if (!existsSync(join(root, 'dist'))) return;
    expect(readFileSync(join(root, pkg.bin.idemkit!), 'utf8').startsWith('#!/usr/bin/env node')).toBe(true);
    const run = spawnSync(process.execPath, [join(root, pkg.bin.idemkit!), '--help'], { encoding: 'utf8' });
    expect(run.status).toBe(0);
    expect(run.stdout + run.stderr).toMatch(/check <url>/);
  });
});
