import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  exports: Record<string, string | Record<string, string>>;
  bin: Record<string, string>;
  scripts: Record<string, string>;
  files: string[];
  license: string;
  keywords?: string[];
  dependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
};
const entries = Object.entries(pkg.exports).filter((e): e is [string, Record<string, string>] => typeof e[1] === 'object');

describe('package exports', () => {
  it('lists every subpath the docs promise, the source condition first, then types, then default', () => {
    expect(entries.map(([name]) => name)).toEqual([
      '.',
      './stores/memory',
      './stores/sqlite',
      './web',
      './hono',
      './express',
      './fastify',
      './koa',
      './nest',
      './stores/postgres',
      './stores/redis',
      './stores/dynamodb',
      './stores/mysql',
      './stores/durable-objects',
      './client',
      './patterns',
      './messaging',
      './check',
      './kit',
      './otel',
      './kysely',
      './drizzle',
      './knex',
      './typeorm',
      './prisma',
      './lambda',
      './middy',
    ]);
    // `idemkit-source` goes before `types`: TypeScript (customConditions in tsconfig.json) takes the
    // first condition that matches, and would otherwise check this repository against a stale dist/.
    for (const [, conditions] of entries) expect(Object.keys(conditions)).toEqual(['idemkit-source', 'types', 'default']);
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
    // `npx idemkit` in a clone runs the built file itself: without an execute bit, `Permission denied`.
    if (process.platform !== 'win32') expect(statSync(join(root, pkg.bin.idemkit!)).mode & 0o111).toBe(0o111);
    const run = spawnSync(process.execPath, [join(root, pkg.bin.idemkit!), '--help'], { encoding: 'utf8' });
    expect(run.status).toBe(0);
    expect(run.stdout + run.stderr).toMatch(/check <url>/);
  });
});

describe('the README\'s two commands', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const block = /## Two commands\s+```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
  const commands = block
    .split('\n')
    .map((line) => line.replace(/#.*$/, '').trim())
    .filter(Boolean);

  it('are exactly two, and neither installs what the other already installed', () => {
    expect(commands).toEqual(['npm run demo', 'npm test']);
  });

  it('each installs from the lockfile first when node_modules is missing or stale', () => {
    expect(pkg.scripts.predemo).toBe('node scripts/ensure-deps.mjs');
    expect(pkg.scripts.pretest).toMatch(/^node scripts\/ensure-deps\.mjs && /);
    const script = readFileSync(join(root, 'scripts/ensure-deps.mjs'), 'utf8');
    expect(script).toMatch(/'ci'/);
    expect(script).toMatch(/package-lock\.json/);
  });

  it('the test command builds dist/ first when it is missing or stale, as its suites need it under CI=true (issue 26, item 21)', () => {
    expect(pkg.scripts.pretest).toBe('node scripts/ensure-deps.mjs && node scripts/ensure-build.mjs');
    const script = readFileSync(join(root, 'scripts/ensure-build.mjs'), 'utf8');
    expect(script).toMatch(/'run', '-s', 'build'/);
    expect(script).toMatch(/dist', 'core', 'index\.d\.ts'/);
  });

  it('CI runs the test command exactly as the README gives it, before any install or build of its own (issue 26, item 21)', () => {
    const steps = readFileSync(join(root, '.ci/run'), 'utf8')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => /^npm /.test(line));
    expect(steps[0]).toBe(commands[1]);
    expect(steps).not.toContain('npm ci --no-audit --no-fund');
    expect(steps.indexOf('npm run build')).toBe(-1);
  });
});

describe('package metadata', () => {
  it('`npm pack` builds dist/ first (prepack), so a tarball made from a clone has the built package (issue 26, item 12)', () => {
    expect(pkg.scripts.prepack).toBe('npm run build');
    expect(pkg.files).toContain('dist');
  });


  it('ships the MIT license text it declares', () => {
    expect(pkg.license).toBe('MIT');
    expect(readFileSync(join(root, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
    expect(pkg.files).toContain('LICENSE');
    expect(pkg.keywords).toContain('idempotency');
  });
});

describe('the packed tarball', () => {
  it('ships every file its source maps and its `idemkit-source` condition point at (issue 16, item 12)', () => {
    if (!existsSync(join(root, 'dist'))) return;
    const pack = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' });
    expect(pack.status, pack.stderr).toBe(0);
    const packed = new Set((JSON.parse(pack.stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path));
    const maps = [...packed].filter((path) => path.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(20);
    const missing: string[] = [];
    for (const map of maps) {
      const { sources } = JSON.parse(readFileSync(join(root, map), 'utf8')) as { sources: string[] };
      for (const source of sources) {
        const target = join(dirname(map), source).split(sep).join('/');
        if (!packed.has(target)) missing.push(`${map} → ${target}`);
      }
    }
    for (const [name, conditions] of entries) {
      const target = conditions['idemkit-source']!.replace(/^\.\//, '');
      if (!packed.has(target)) missing.push(`exports["${name}"]["idemkit-source"] → ${target}`);
    }
    expect(missing).toEqual([]);
  });
});

describe('Node 20, as the README promises (issue 16, item 15)', () => {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { dev?: boolean; optional?: boolean; engines?: { node?: string } }>;
  };
  const refusing = (version: string, which: (entry: { dev?: boolean }) => boolean) =>
    Object.entries(lock.packages)
      .filter(([name, entry]) => name !== '' && which(entry) && entry.engines?.node !== undefined)
      .filter(([, entry]) => !semver.satisfies(version, entry.engines!.node!))
      .map(([name, entry]) => `${name} wants node ${entry.engines!.node}`);

  it('every runtime dependency runs on Node 20.0', () => {
    expect(refusing('20.0.0', (entry) => entry.dev !== true)).toEqual([]);
  });

  it('npm ci of the repository warns of no engine on Node 20.19+ (EBADENGINE: cookie@2, @nats-io/nuid@3 and @prisma/streams-local were overridden) (issue 26, item 19)', () => {
    // `prisma dev` (Prisma's local database server, which the tests never start) depends on
    // @prisma/streams-local, whose every version asks for Node 22: package.json overrides it with a
    // stub of the repository's own (scripts/stubs/prisma-streams-local), so `npm ci` is quiet.
    expect(refusing('20.19.0', () => true)).toEqual([]);
    expect((JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { overrides: Record<string, string> }).overrides['@prisma/streams-local']).toBe('file:./scripts/stubs/prisma-streams-local');
  });
});

describe('what an application installs with idemkit (issue 16, item 14)', () => {
  it('is one small runtime dependency (the key header parser); YAML and Fastify helpers are not among them', () => {
    expect(Object.keys(pkg.dependencies)).toEqual(['structured-headers']);
    // `idemkit check --config x.yaml` loads `yaml` only then, as an optional peer.
    expect(pkg.peerDependencies.yaml).toBeDefined();
    expect(pkg.peerDependenciesMeta.yaml?.optional).toBe(true);
  });

  it('OpenTelemetry is an optional peer that only `idemkit/otel` imports (issue 17, item 2)', () => {
    expect(pkg.peerDependencies['@opentelemetry/api']).toBeDefined();
    expect(pkg.peerDependenciesMeta['@opentelemetry/api']?.optional).toBe(true);
    // The range takes the API the repository is tested with.
    const installed = (JSON.parse(readFileSync(join(root, 'node_modules/@opentelemetry/api/package.json'), 'utf8')) as { version: string }).version;
    expect(semver.satisfies(installed, pkg.peerDependencies['@opentelemetry/api']!)).toBe(true);
    const importers = spawnSync('grep', ['-rl', '@opentelemetry/', join(root, 'src')], { encoding: 'utf8' }).stdout.trim().split('\n');
    expect(importers.every((file) => file.slice(root.length + 1).startsWith('src/otel/')), importers.join(', ')).toBe(true);
  });
  it('NestJS and RxJS are optional peers that only `idemkit/nest` imports (issue 18, item 1)', () => {
    for (const name of ['@nestjs/common', '@nestjs/core', 'rxjs']) {
      expect(pkg.peerDependenciesMeta[name]?.optional, name).toBe(true);
      // The range takes the version the repository is tested with (Nest 11: Nest 12 needs Node 22).
      const installed = (JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
      expect(semver.satisfies(installed, pkg.peerDependencies[name]!), `${name}@${installed}`).toBe(true);
    }
    const importers = spawnSync('grep', ['-rlE', "from '(@nestjs/|rxjs)", join(root, 'src')], { encoding: 'utf8' }).stdout.trim().split('\n');
    expect(importers.every((file) => file.slice(root.length + 1).startsWith('src/nest/')), importers.join(', ')).toBe(true);
  });

  it('the AWS SDK for DynamoDB is an optional peer that only `idemkit/stores/dynamodb` imports, in one file (issue 30, item 1)', () => {
    expect(pkg.peerDependenciesMeta['@aws-sdk/client-dynamodb']?.optional).toBe(true);
    expect(pkg.dependencies['@aws-sdk/client-dynamodb']).toBeUndefined();
    const installed = (JSON.parse(readFileSync(join(root, 'node_modules/@aws-sdk/client-dynamodb/package.json'), 'utf8')) as { version: string }).version;
    expect(semver.satisfies(installed, pkg.peerDependencies['@aws-sdk/client-dynamodb']!)).toBe(true);
    const importers = spawnSync('grep', ['-rlE', "from '@aws-sdk/", join(root, 'src')], { encoding: 'utf8' }).stdout.trim().split('\n').filter(Boolean);
    expect(importers.map((file) => file.slice(root.length + 1))).toEqual(['src/stores/dynamodb/client.ts']);
  });

  // Issue 18, item 3: each ORM bridge is its own entry point; nothing else loads the ORM. Prisma's
  // client is generated per application: its bridge reads the types off the instance and imports nothing.
  it.each([
    ['kysely', 'src/orm/kysely.ts', ['src/orm/kysely.ts']],
    ['drizzle-orm', 'src/orm/drizzle.ts', ['src/orm/drizzle.ts']],
    ['knex', 'src/orm/knex.ts', ['src/orm/knex.ts']],
    ['typeorm', 'src/orm/typeorm.ts', ['src/orm/typeorm.ts']],
    ['@prisma/client', 'src/orm/prisma.ts', []],
  ])('%s is an optional peer that only its bridge (%s) may import', (orm, _bridge, expected) => {
    expect(pkg.peerDependencies[orm]).toBeDefined();
    expect(pkg.peerDependenciesMeta[orm]?.optional).toBe(true);
    expect(pkg.dependencies[orm]).toBeUndefined();
    const installed = (JSON.parse(readFileSync(join(root, `node_modules/${orm}/package.json`), 'utf8')) as { version: string }).version;
    expect(semver.satisfies(installed, pkg.peerDependencies[orm]!)).toBe(true);
    const importers = spawnSync('grep', ['-rlE', `from '${orm}(/[^']*)?'`, join(root, 'src')], { encoding: 'utf8' }).stdout.trim().split('\n').filter(Boolean);
    expect(importers.map((file) => file.slice(root.length + 1))).toEqual(expected);
  });
});

describe('mutation testing (issue 26, item 27)', () => {
  it('`npm run test:mutation` runs Stryker on the core files, and docs/mutation.md has a row for each', async () => {
    expect(pkg.scripts['test:mutation']).toBe('stryker run');
    const config = (await import(join(root, 'stryker.config.mjs'))) as { default: { mutate: string[]; testRunner: string } };
    expect(config.default.testRunner).toBe('vitest');
    const page = readFileSync(join(root, 'docs/mutation.md'), 'utf8');
    for (const file of config.default.mutate) expect(page).toContain(`\`${file}\``);
  });
});
