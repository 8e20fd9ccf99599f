/**
 * Every TypeScript block in README.md, README.zh-CN.md and docs/ type-checks, as a reader would
 * copy it, in a fresh application outside this repository that installed the packed tarball:
 * `npm pack` of the built package, extracted to the app's `node_modules/idemkit` (what `npm
 * install idemkit-<version>.tgz` puts there, without the network), beside links to the packages
 * the blocks import and the package's own dependencies (with their `@types`), taken from this
 * repository's node_modules. `idemkit/...` resolves through the tarball's `exports` to the
 * tarball's declarations, so a file the package forgets to ship fails the block that needs it.
 * The app is `type: module`, checked under `strict`, `NodeNext` and the other checks `tsc --init`
 * turns on.
 *
 * A block may declare what it elides in a hidden prelude: an HTML comment right above its fence,
 * `<!-- prelude` … `-->`, whose lines are compiled before the block (and not shown). What the
 * reader sees and copies is the block itself; the prelude only declares the context around it (an
 * `app` made earlier on the page, a `pool` the reader already has). Pseudo-code and signatures are
 * fenced as `text`, not `ts`.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
/** The temporary directory that holds the tarball and the app; outside the repository. */
let scratch: string | undefined;

interface Snippet {
  /** `docs/patterns.md:120`: where the block's fence opens. */
  readonly where: string;
  readonly markdown: string;
  /** The markdown line of the block's first code line. */
  readonly firstLine: number;
  /** Spaces stripped from each line (a block inside a list item is indented). */
  readonly indent: number;
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

/** Any fence that says TypeScript, whatever follows the language (`ts title="x"`), at any indent. */
const OPENING = /^( *)```(?:ts|typescript|tsx|mts)(?:[^\S\n][^\n]*)?$/gim;
/** The hidden prelude: a `<!-- prelude` comment (without a `-->` inside) followed only by blank lines. */
const PRELUDE = /<!--\s*prelude[^\S\n]*\n((?:(?!-->)[\s\S])*?)-->\s*$/;

function snippetsOf(path: string): Snippet[] {
  const text = readFileSync(path, 'utf8');
  const markdown = relative(root, path);
  const found: Snippet[] = [];
  for (const open of text.matchAll(OPENING)) {
    const indent = open[1]!.length;
    const before = text.slice(0, open.index);
    const fenceLine = before.split('\n').length;
    const where = `${markdown}:${fenceLine}`;
    const bodyStart = open.index + open[0].length + 1;
    // The closing fence has at most the opening's indent (CommonMark allows less).
    const close = new RegExp(`^ {0,${indent}}\`\`\`[^\\S\\n]*$`, 'm').exec(text.slice(bodyStart));
    if (!close) throw new Error(`${where}: the TypeScript block is never closed`);
    const code = text
      .slice(bodyStart, bodyStart + close.index)
      .split('\n')
      .map((line) => line.slice(Math.min(indent, line.length - line.trimStart().length)))
      .join('\n');
    const preludeStart = before.lastIndexOf('<!-- prelude');
    const prelude = preludeStart === -1 ? '' : (PRELUDE.exec(before.slice(preludeStart))?.[1] ?? '');
    const file = `${where.replace(/[^A-Za-z0-9]+/g, '_')}.ts`;
    found.push({ where, markdown, firstLine: fenceLine + 1, indent, file, prelude, code });
  }
  return found;
}

const snippets = markdownFiles().flatMap(snippetsOf);
const byFile = new Map(snippets.map((snippet) => [snippet.file, snippet]));
const declarations = join(root, 'dist', 'core', 'index.d.ts');
const built = existsSync(declarations);

/** The newest modification time under a directory. */
function newest(dir: string): number {
  let time = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    time = Math.max(time, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs);
  }
  return time;
}
/** `npm run build` empties dist first, so a source newer than dist's entry point was not built. */
const stale = built && newest(join(root, 'src')) > statSync(declarations).mtimeMs;

/**
 * The package a bare import specifier names (`mysql2/promise` → `mysql2`), or undefined for a
 * relative or builtin one (`node:…`, and a runtime's own module such as `bun:sqlite`).
 */
function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('/') || /^[a-z]+:/.test(specifier) || builtinModules.includes(specifier.split('/')[0]!)) return undefined;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/** Every package the blocks (and their preludes) import, but idemkit. */
function importedPackages(): Set<string> {
  const names = new Set<string>();
  for (const { prelude, code } of snippets) {
    for (const match of `${prelude}\n${code}`.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm)) {
      const name = packageOf(match[1]!);
      if (name !== undefined && name !== 'idemkit') names.add(name);
    }
  }
  return names;
}

/** `@types/<name>` for a package (`@scope/pkg` → `@types/scope__pkg`). */
const typesOf = (name: string) => `@types/${name.startsWith('@') ? name.slice(1).replace('/', '__') : name}`;

/**
 * A fresh app in `dir` with the packed tarball installed as npm would (extracted into
 * `node_modules/idemkit`), and links to what else it needs from this repository's node_modules:
 * the tarball's dependencies and required peers, every package a block imports, their `@types`,
 * and `@types/node`. Nothing is fetched.
 */
function installApp(dir: string, tarball: string): void {
  const modules = join(dir, 'node_modules');
  const installed = join(modules, 'idemkit');
  mkdirSync(installed, { recursive: true });
  // npm's tarballs hold everything under `package/`.
  const tar = spawnSync('tar', ['-xzf', tarball, '-C', installed, '--strip-components=1'], { encoding: 'utf8' });
  if (tar.status !== 0) throw new Error(`tar could not extract ${tarball}: ${tar.stderr}`);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'snippets-app', private: true, type: 'module', dependencies: { idemkit: `file:${tarball}` } }, null, 2));
  const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
    peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  };
  const requiredPeers = Object.keys(manifest.peerDependencies ?? {}).filter((name) => !manifest.peerDependenciesMeta?.[name]?.optional);
  const wanted = new Set([...Object.keys(manifest.dependencies ?? {}), ...requiredPeers, ...importedPackages()]);
  const links = new Set(['@types/node']);
  for (const name of wanted) {
    if (!existsSync(join(root, 'node_modules', name))) throw new Error(`a block imports ${name}, which this repository's node_modules does not have: add it to devDependencies`);
    links.add(name);
    if (existsSync(join(root, 'node_modules', typesOf(name)))) links.add(typesOf(name));
  }
  for (const name of links) {
    mkdirSync(join(modules, name, '..'), { recursive: true });
    symlinkSync(join(root, 'node_modules', name), join(modules, name), 'dir');
  }
}

/**
 * The relative imports of the tarball's declarations that name no file in it. `skipLibCheck` (which
 * `tsc --init` turns on, and without which other packages' declarations fail) would type such an
 * import as `any` without a word, so a block could still compile against a package missing a file.
 */
function unresolvedDeclarationImports(installed: string): string[] {
  const missing: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.d.ts')) {
        const text = readFileSync(path, 'utf8');
        for (const match of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*)['"](\.{1,2}\/[^'"]+)['"]/g)) {
          const target = join(path, '..', match[1]!.replace(/\.js$/, '.d.ts'));
          if (!existsSync(target)) missing.push(`${relative(installed, path)} imports ${match[1]}`);
        }
      }
    }
  };
  walk(join(installed, 'dist'));
  return missing;
}
/** What `unresolvedDeclarationImports` found in the installed tarball. */
let unresolved: string[] = [];

/** Diagnostics by snippet file, filled by one `tsc` run over every block. */
const diagnostics = new Map<string, string[]>();
/** Diagnostics no block owns (a prelude's, a file tsc found on its own): they fail a test too. */
const stray: string[] = [];
/** How many lines the prelude and the module marker take ahead of the block, per file. */
const offsets = new Map<string, number>();

beforeAll(() => {
  if (!built) return;
  scratch = mkdtempSync(join(tmpdir(), 'idemkit-snippets-'));
  // Offline: packing reads the working tree only; `--ignore-scripts` keeps it from building again.
  const pack = spawnSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', scratch], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, npm_config_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false' },
  });
  if (pack.status !== 0) throw new Error(`npm pack failed: ${pack.stderr}`);
  const tarball = join(scratch, (JSON.parse(pack.stdout) as Array<{ filename: string }>)[0]!.filename);
  const workDir = join(scratch, 'app');
  installApp(workDir, tarball);
  unresolved = unresolvedDeclarationImports(join(workDir, 'node_modules', 'idemkit'));
  for (const snippet of snippets) {
    // Without an import or export a block would be a script, sharing its top-level names with every other block.
    const head = `${snippet.prelude}export {};\n`;
    offsets.set(snippet.file, head.split('\n').length - 1);
    writeFileSync(join(workDir, snippet.file), head + snippet.code);
  }
  writeFileSync(
    join(workDir, 'tsconfig.json'),
    JSON.stringify({
      // What a reader's project most likely has: `tsc --init`'s checks, on Node's ESM resolution.
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
        skipLibCheck: true,
        // What a NestJS project has (`nest new`): the docs/nest.md blocks use Nest's decorators,
        // which are legacy (experimental) decorators, parameter decorators included.
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
      },
      include: ['*.ts'],
    }),
  );
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', workDir, '--pretty', 'false'], {
    cwd: workDir,
    encoding: 'utf8',
  });
  let last: string[] | undefined;
  for (const line of tsc.stdout.split('\n')) {
    const match = /^(.+?\.ts)\((\d+),(\d+)\): (error .*)$/.exec(line);
    if (!match) {
      // tsc indents the rest of a multi-line message ("Type 'x' is not assignable… / Property 'y' is missing…").
      if (last && /^\s+\S/.test(line)) last[last.length - 1] += `\n${line}`;
      continue;
    }
    const snippet = byFile.get(match[1]!.split(/[\\/]/).pop()!);
    const blockLine = Number(match[2]) - (snippet ? offsets.get(snippet.file)! : 0);
    if (!snippet || blockLine <= 0) {
      stray.push(`${snippet ? `${snippet.where} (prelude)` : match[1]}: ${line}`);
      last = stray;
      continue;
    }
    // Where the reader finds it: the markdown file, line and column.
    const at = `${snippet.markdown}:${snippet.firstLine + blockLine - 1}:${Number(match[3]) + snippet.indent}`;
    last = diagnostics.get(snippet.file) ?? [];
    last.push(`${at} ${match[4]}`);
    diagnostics.set(snippet.file, last);
  }
  if (tsc.status !== 0 && diagnostics.size === 0 && stray.length === 0) throw new Error(`tsc failed without diagnostics: ${tsc.stdout}${tsc.stderr}`);
}, 120_000);

afterAll(() => {
  if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
});

describe('TypeScript blocks in the READMEs and docs/', () => {
  it('are found (a changed fence syntax must not make this suite vacuous)', () => {
    expect(snippets.length).toBeGreaterThan(30);
    if (!built || stale) {
      const why = built ? 'dist/ is older than src/' : 'dist/ is missing';
      // CI builds first; elsewhere say loudly why nothing (or an old build) was checked.
      if (process.env.CI === 'true') throw new Error(`${why}: run \`npm run build\` before the tests`);
      console.warn(`docs-snippets: ${why}, so the blocks are ${built ? 'checked against an old build' : 'not type-checked'}; run \`npm run build\` first`);
    }
  });

  it("compile against a tarball whose declarations import only files it ships", () => {
    if (!built) return;
    expect(unresolved).toEqual([]);
  });

  it('leave no diagnostic outside a block (preludes compile too)', () => {
    if (!built) return;
    expect(stray).toEqual([]);
  });

  it.each(snippets.map((snippet) => [snippet.where, snippet] as const))('%s compiles', (_where, snippet) => {
    if (!built) return;
    expect(diagnostics.get(snippet.file) ?? []).toEqual([]);
  });
});
