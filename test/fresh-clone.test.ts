/**
 * Issue 26, items 12 and 21, and its "done when": from what a fresh clone holds (the files git
 * tracks, no dist/), `npm pack` makes a package that works, and the README's 20-line example runs
 * on it in an empty strict application: 201, the replay, 422 for another body, and no bearer
 * token in any stored record.
 *
 * The clone is a copy of the files git would check out (tracked and not ignored, as they are in
 * the working tree), with this repository's node_modules linked in: nothing is downloaded. The app
 * gets the tarball the way `npm install ./idemkit-<version>.tgz` lays it out, beside links to
 * the packages the example imports.
 */
import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const scratch = mkdtempSync(join(tmpdir(), 'idemkit-fresh-clone-'));
const clone = join(scratch, 'clone');
const app = join(scratch, 'app');
let tarball = '';
let packOutput = '';
let server: ChildProcess | undefined;

/** The 20-line example, as the README shows it (the first TypeScript block under "## 20 lines"). */
function twentyLines(): string {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const block = /## 20 lines\s+```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  if (block === undefined) throw new Error('README.md: no ```ts block under "## 20 lines"');
  return block;
}

function run(command: string, args: string[], cwd: string): string {
  const done = spawnSync(command, args, { cwd, encoding: 'utf8', env: { ...process.env, npm_config_loglevel: 'error' } });
  if (done.status !== 0) throw new Error(`${command} ${args.join(' ')} (in ${cwd}) failed with ${done.status}:\n${done.stdout}\n${done.stderr}`);
  return done.stdout;
}

function link(name: string): void {
  const target = join(app, 'node_modules', name);
  mkdirSync(dirname(target), { recursive: true });
  if (!existsSync(target)) symlinkSync(join(root, 'node_modules', name), target, 'dir');
}

beforeAll(() => {
  // What `git clone` checks out: tracked files, and new ones not yet committed but not ignored.
  const files = run('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], root).split('\0').filter(Boolean);
  for (const file of files) {
    const from = join(root, file);
    if (!existsSync(from) || !statSync(from).isFile()) continue; // deleted in the working tree
    mkdirSync(dirname(join(clone, file)), { recursive: true });
    copyFileSync(from, join(clone, file));
  }
  expect(existsSync(join(clone, 'dist'))).toBe(false);
  symlinkSync(join(root, 'node_modules'), join(clone, 'node_modules'), 'dir');
  // `npm pack` runs `prepack`, which builds dist/ in the clone.
  packOutput = run('npm', ['pack', '--json', '--pack-destination', scratch], clone);
  const [packed] = JSON.parse(packOutput.slice(packOutput.indexOf('['))) as Array<{ filename: string }>;
  tarball = join(scratch, packed!.filename);
}, 180_000);

afterAll(() => {
  server?.kill('SIGKILL');
  rmSync(scratch, { recursive: true, force: true });
});

describe('a fresh clone, packed and installed into an empty strict app', () => {
  it('packs dist/ (prepack builds it): the entry points and the CLI are in the tarball', () => {
    const listing = run('tar', ['-tzf', tarball], scratch).split('\n');
    for (const file of ['package/dist/core/index.js', 'package/dist/core/index.d.ts', 'package/dist/http/hono.js', 'package/dist/stores/sqlite/index.js', 'package/dist/cli/main.js']) {
      expect(listing).toContain(file);
    }
  });

  it("runs the README's 20-line example: 201, the replay, 422; no bearer token in any stored record", async () => {
    const { port, child } = await startApp('server.ts');
    const first = await firstAnswer(port, child);
    expect(first.status).toBe(201);
    const created = (await first.json()) as { id: string; amount: number };
    expect(created.amount).toBe(1200);

    const again = await send(port, '{"amount":1200}');
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(((await again.json()) as { id: string }).id).toBe(created.id);

    const other = await send(port, '{"amount":9}');
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toMatch(/^application\/problem\+json/);

    child.kill('SIGKILL');
    server = undefined;
    // Every text a stored record holds, in every table of the example's database.
    const db = new Database(join(app, 'idempotency.db'), { readonly: true });
    try {
      const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((t) => t.name);
      expect(tables.length).toBeGreaterThan(0);
      let rows = 0;
      for (const table of tables) {
        for (const row of db.prepare(`SELECT * FROM "${table}"`).all() as Array<Record<string, unknown>>) {
          rows++;
          for (const value of Object.values(row)) {
            const text = Buffer.isBuffer(value) ? value.toString('latin1') : String(value);
            expect(text).not.toContain(TOKEN);
          }
        }
      }
      expect(rows).toBeGreaterThan(0);
    } finally {
      db.close();
    }
  }, 120_000);

  it('with OpenTelemetry (instrumentStore, telemetryEvents, default options) on the same example: no bearer token on any span', async () => {
    const { port, child } = await startApp('traced.ts');
    expect((await firstAnswer(port, child)).status).toBe(201);
    expect((await send(port, '{"amount":1200}')).headers.get('idempotent-replayed')).toBe('true');
    const spans = (await (await fetch(`http://127.0.0.1:${port}/spans`)).json()) as Array<{ name: string; attributes: Record<string, unknown>; events: unknown[] }>;
    expect(spans.map((span) => span.name)).toContain('idemkit.store.claim');
    expect(spans.some((span) => typeof span.attributes['idemkit.scope'] === 'string')).toBe(true);
    expect(JSON.stringify(spans)).not.toContain(TOKEN);
  }, 120_000);
});

const TOKEN = 'sk_live_7f3a9c1e5b2d4f6a8c0e';

/** The tarball installed into an empty strict app, and the README's example compiled in it (once). */
let installed = false;
function installApp(): void {
  if (installed) return;
  mkdirSync(join(app, 'node_modules', 'idemkit'), { recursive: true });
  run('tar', ['-xzf', tarball, '-C', join(app, 'node_modules', 'idemkit'), '--strip-components=1'], scratch);
  for (const name of ['structured-headers', 'hono', '@hono/node-server', 'better-sqlite3', '@types/better-sqlite3', '@types/node', '@opentelemetry/api', '@opentelemetry/sdk-trace-base', '@opentelemetry/core', '@opentelemetry/resources', '@opentelemetry/semantic-conventions']) link(name);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'strict-app', private: true, type: 'module' }));
  writeFileSync(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noUncheckedIndexedAccess: true, exactOptionalPropertyTypes: true, types: ['node'], outDir: 'out' },
      include: ['server.ts', 'traced.ts'],
    }),
  );
  // The reader's copy, but for the port: the test takes a free one.
  const example = twentyLines();
  expect(example).toMatch(/port: 3000/);
  const server = example.replace('port: 3000', 'port: Number(process.env.PORT)');
  writeFileSync(join(app, 'server.ts'), server);
  // The same app with idemkit/otel as docs/operations.md sets it up, spans kept in memory and served at /spans.
  const traced = server
    .replace('const store = sqliteStore(', 'const store = instrumentStore(sqliteStore(')
    .replace("new Database('idempotency.db') });", "new Database('traced.db') }));")
    .replace(/\n {2}store,\n/, '\n  store,\n  events: telemetryEvents(),\n')
    .replace(
      'serve({',
      "app.get('/spans', (c) => c.json(exporter.getFinishedSpans().map((s) => ({ name: s.name, attributes: s.attributes, events: s.events }))));\nserve({",
    );
  expect(traced).toMatch(/instrumentStore\(sqliteStore\(/);
  expect(traced).toMatch(/events: telemetryEvents\(\)/);
  writeFileSync(
    join(app, 'traced.ts'),
    [
      "import { trace } from '@opentelemetry/api';",
      "import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';",
      "import { instrumentStore, telemetryEvents } from 'idemkit/otel';",
      'const exporter = new InMemorySpanExporter();',
      'trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));',
      traced,
    ].join('\n'),
  );
  run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app, '--pretty', 'false'], app);
  installed = true;
}

async function startApp(file: string): Promise<{ port: number; child: ChildProcess }> {
  installApp();
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address() as AddressInfo;
      probe.close(() => resolve(free));
    });
  });
  server?.kill('SIGKILL');
  const child = spawn(process.execPath, [join('out', file.replace(/\.ts$/, '.js'))], { cwd: app, env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  server = child;
  return { port, child };
}

function send(port: number, body: string): Promise<Response> {
  return fetch(`http://127.0.0.1:${port}/charges`, {
    method: 'POST',
    headers: { 'idempotency-key': '8e03978e', authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body,
  });
}

/** The first answer: the server listens once its module has run, so retry the connection, not a guessed delay. */
async function firstAnswer(port: number, child: ChildProcess): Promise<Response> {
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`the example exited with ${code}:\n${output}`))));
  exited.catch(() => {});
  for (let attempt = 0; ; attempt++) {
    try {
      return await send(port, '{"amount":1200}');
    } catch (error) {
      if (attempt === 500) throw error;
      await Promise.race([new Promise((resolve) => setTimeout(resolve, 20)), exited]);
    }
  }
}
