// The public surface: every name each subpath exports, read by the TypeScript checker from the
// sources package.json points at. `test/surface.txt` is the list a reviewer reads: a change to it
// in a diff is a decision to grow (or shrink) what users may import. After a deliberate change,
// `npx vitest run test/surface.test.ts -u` rewrites it.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, string | Record<string, string>> };
const entries = Object.entries(pkg.exports).flatMap(([subpath, target]) =>
  typeof target === 'object' ? [{ subpath: subpath === '.' ? 'idemkit' : `idemkit/${subpath.slice(2)}`, file: join(root, target['idemkit-source']!) }] : [],
);

function readSurface(): Map<string, string[]> {
  const program = ts.createProgram(
    entries.map((entry) => entry.file),
    {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      strict: true,
      skipLibCheck: true,
      noEmit: true,
      customConditions: ['idemkit-source'],
    },
  );
  const checker = program.getTypeChecker();
  const surface = new Map<string, string[]>();
  for (const { subpath, file } of entries) {
    const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
    surface.set(subpath, checker.getExportsOfModule(module).map((symbol) => symbol.name).sort());
  }
  return surface;
}

describe('the public surface', { timeout: 120_000 }, () => {
  const surface = readSurface();
  const distinct = new Set([...surface.values()].flat());

  it('is the reviewed list in test/surface.txt', async () => {
    const lines = [`# ${distinct.size} distinct names; ${[...surface.values()].flat().length} exports in all`];
    for (const [subpath, names] of surface) lines.push('', `${subpath} (${names.length})`, ...names.map((name) => `  ${name}`));
    await expect(lines.join('\n') + '\n').toMatchFileSnapshot('./surface.txt');
  });

  it('keeps the root to what an application author imports', () => {
    expect(surface.get('idemkit')!.length).toBeLessThanOrEqual(60);
  });

  it('exports no name from both the root and idemkit/kit: the kit adds to the root', () => {
    const rootNames = new Set(surface.get('idemkit'));
    expect(surface.get('idemkit/kit')!.filter((name) => rootNames.has(name))).toEqual([]);
  });

  // Issue 27 brought the 23 subpaths it found to 299 distinct names; they stay within 300. A subpath
  // added since has its own budget here, so every new entry point is a visible, sized decision.
  const reshaped = new Set(['idemkit', 'idemkit/stores/memory', 'idemkit/stores/sqlite', 'idemkit/web', 'idemkit/hono', 'idemkit/express', 'idemkit/fastify', 'idemkit/koa', 'idemkit/nest', 'idemkit/stores/postgres', 'idemkit/stores/redis', 'idemkit/stores/mysql', 'idemkit/client', 'idemkit/patterns', 'idemkit/messaging', 'idemkit/check', 'idemkit/kit', 'idemkit/otel', 'idemkit/kysely', 'idemkit/drizzle', 'idemkit/knex', 'idemkit/typeorm', 'idemkit/prisma']);
  const budgets: Record<string, number> = {
    'idemkit/stores/dynamodb': 4,
    'idemkit/stores/durable-objects': 4,
    'idemkit/lambda': 8,
    'idemkit/middy': 3,
  };

  it('keeps the subpaths issue 27 reshaped within 300 distinct names', () => {
    const names = new Set([...surface].filter(([subpath]) => reshaped.has(subpath)).flatMap(([, list]) => list));
    expect(names.size).toBeLessThanOrEqual(300);
  });

  it('keeps every subpath added since within its budget', () => {
    const over = [...surface]
      .filter(([subpath]) => !reshaped.has(subpath))
      .filter(([subpath, list]) => budgets[subpath] === undefined || list.length > budgets[subpath])
      .map(([subpath, list]) => `${subpath}: ${list.length} names, budget ${budgets[subpath] ?? 'none (add one here)'}`);
    expect(over).toEqual([]);
  });

  it('carries no deprecated alias', () => {
    const deprecated = ['Admission', 'integerOption', 'booleanOption', 'durationOption', 'LeaseLostHttpError', 'StoreUnavailableHttpError', 'WatchedResponse'];
    expect([...distinct].filter((name) => deprecated.includes(name))).toEqual([]);
  });
});
