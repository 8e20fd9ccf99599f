/**
 * Every TypeScript block in README.md, README.zh-CN.md and docs/ type-checks, as a reader would
 * copy it, against the built package (`idemkit/...` resolves through package.json `exports` to
 * dist's declarations), under `strict` and `NodeNext`.
 *
 * A block may declare what it elides in a hidden prelude: an HTML comment right above its fence,
 * `<!-- prelude` … `-->`, whose lines are compiled before the block (and not shown). What the
 * reader sees and copies is the block itself; the prelude only declares the context around it (an
 * `app` made earlier on the page, a `pool` the reader already has).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const workDir = join(root, '.docs-check');

interface Snippet {
  /** `docs/patterns.md:120`: where the block's fence opens. */
  readonly where: string;
  readonly file: string;
  readonly prelude: string;
  readonly code: string;
}

function markdownFiles(): string[] {
  const files = ['README.md', 'README.zh-CN.md'].map((name) => join(root, name));
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) files.push(path);
    }
  };
  walk(join(root, 'docs'));
  return files;
}

const FENCE = /^```(?:ts|typescript)[^\S\n]*\n([\s\S]*?)^```[^\S\n]*$/gm;
const PRELUDE = /^<!--\s*prelude[^\S\n]*\n([\s\S]*?)-->\s*$/;

/** The hidden prelude right above a fence: the last `<!-- prelude` comment, with nothing but blank lines after it. */
function preludeAbove(before: string): string {
  const start = before.lastIndexOf('<!-- prelude');
  return start === -1 ? '' : (PRELUDE.exec(before.slice(start))?.[1] ?? '');
}

function snippetsOf(path: string): Snippet[] {
  const text = readFileSync(path, 'utf8');
  const found: Snippet[] = [];
  for (const match of text.matchAll(FENCE)) {
    const before = text.slice(0, match.index);
    const line = before.split('\n').length;
    const prelude = preludeAbove(before);
    const where = `${relative(root, path)}:${line}`;
    const file = `${where.replace(/[^A-Za-z0-9]+/g, '_')}.ts`;
    found.push({ where, file, prelude, code: match[1]! });
  }
  return found;
}

const snippets = markdownFiles().flatMap(snippetsOf);
const built = existsSync(join(root, 'dist', 'core', 'index.d.ts'));
/** Diagnostics by snippet file, filled by one `tsc` run over every block. */
const diagnostics = new Map<string, string[]>();
/** How many lines the prelude and the module marker take ahead of the block, per file. */
const offsets = new Map<string, number>();

beforeAll(() => {
  if (!built) return;
  rmSync(workDir, { recursive: true, force: true });
  mkdirSync(workDir, { recursive: true });
  for (const snippet of snippets) {
    // Without an import or export a block would be a script, sharing its top-level names with every other block.
    const head = `${snippet.prelude}export {};\n`;
    offsets.set(snippet.file, head.split('\n').length - 1);
    writeFileSync(join(workDir, snippet.file), head + snippet.code);
  }
  writeFileSync(
    join(workDir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2023', 'DOM', 'DOM.Iterable'],
        types: ['node'],
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        esModuleInterop: true,
      },
      include: ['*.ts'],
    }),
  );
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', workDir, '--pretty', 'false'], {
    cwd: workDir,
    encoding: 'utf8',
  });
  for (const line of tsc.stdout.split('\n')) {
    const match = /^(.+?\.ts)\((\d+),(\d+)\): (error .*)$/.exec(line);
    if (!match) continue;
    const file = match[1]!.split(/[\\/]/).pop()!;
    const blockLine = Number(match[2]) - (offsets.get(file) ?? 0);
    const list = diagnostics.get(file) ?? [];
    list.push(blockLine > 0 ? `block line ${blockLine}: ${match[4]}` : `prelude: ${match[4]}`);
    diagnostics.set(file, list);
  }
  if (tsc.status !== 0 && diagnostics.size === 0) throw new Error(`tsc failed without diagnostics: ${tsc.stdout}${tsc.stderr}`);
}, 120_000);

afterAll(() => rmSync(workDir, { recursive: true, force: true }));

describe('TypeScript blocks in the READMEs and docs/', () => {
  it('are found (a changed fence syntax must not make this suite vacuous)', () => {
    expect(snippets.length).toBeGreaterThan(30);
    if (!built) {
      // CI builds first; elsewhere say loudly why nothing was checked.
      if (process.env.CI === 'true') throw new Error('dist/ is missing: run `npm run build` before the tests');
      console.warn('docs-snippets: dist/ is missing, so no block was type-checked; run `npm run build` first');
    }
  });

  it.each(snippets.map((snippet) => [snippet.where, snippet] as const))('%s compiles', (_where, snippet) => {
    if (!built) return;
    expect(diagnostics.get(snippet.file) ?? []).toEqual([]);
  });
});
