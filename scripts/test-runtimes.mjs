#!/usr/bin/env node
// `npm run test:runtimes` (issue 31): the suites whose behaviour can differ by runtime, run with
// vitest under each runtime idemkit supports besides the Node 20 that `npm test` uses. The
// binaries are devDependencies (node22, node24, @oven/bun-linux-x64, @deno/linux-x64-glibc), so
// nothing is downloaded; Deno runs with --no-remote. One leg: `npm run test:runtimes -- bun`.
//
// - Node 22 and 24: the package test from the tarball, the core, the client, the HTTP matrix on
//   every adapter (memory store, transactional SQLite), the Web and Hono adapters on the memory,
//   SQLite, Redis and PostgreSQL stores, the memory and Redis store suites (ioredis and node-redis),
//   and the SQLite store on node:sqlite (better-sqlite3's prebuilt binary is built for the installing
//   Node's ABI and does not load there: test/support/sqlite-driver.ts picks node:sqlite).
// - Bun and Deno: the Web and Hono matrix served by Bun.serve / Deno.serve, the Web and Hono
//   adapters on the memory, SQLite (bun:sqlite; node:sqlite on Deno), Redis (ioredis) and
//   PostgreSQL (pg) stores with idemkit/client, the client's own suite (each runtime's fetch fails
//   differently: test/support/fetch-failures.ts), and the SQLite store contract on the built-in
//   driver. Bun also runs test/core. Deno runs test/core/duplicate-keys.test.ts, not the rest of
//   test/core: Deno 2.9.6's JSON.parse (V8 15.0) keeps the first of two equal keys where one is
//   escaped, when a later key holds an escape too, and not the same one on every parse:
//   JSON.parse('{"\\u0061":"x","\\u0061":[1],"\\\\":{"a":"y"}}').a is "x" or [1] there, [1] on Node
//   and Bun. canonicalJsonText reads such texts itself on Deno (src/core/canonical-json.ts), so a
//   fingerprint does not depend on it, which duplicate-keys.test.ts checks; but the random-text
//   properties of test/core/canonical-json.test.ts take JSON.parse as their oracle, which is wrong there.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import process from 'node:process';

const root = join(import.meta.dirname, '..');
const bin = (path) => join(root, 'node_modules', path);
const vitest = join(root, 'node_modules', 'vitest', 'vitest.mjs');

const nodeFiles = [
  'test/package.test.ts',
  'test/core',
  'test/client',
  'test/http/express.test.ts',
  'test/http/fastify.test.ts',
  'test/http/koa.test.ts',
  'test/http/nest.test.ts',
  'test/http/web.test.ts',
  'test/http/hono.test.ts',
  'test/http/problem-types.test.ts',
  'test/http/disconnect-sql.test.ts',
  'test/http/sqlite-shared-connection.test.ts',
  'test/http/runtime-stores.test.ts',
  'test/stores/memory.test.ts',
  'test/stores/redis.test.ts',
  'test/stores/sqlite-builtin.test.ts',
];
const fetchRuntimeFiles = [
  'test/client',
  'test/http/web.test.ts',
  'test/http/hono.test.ts',
  'test/http/runtime-stores.test.ts',
  'test/stores/sqlite-builtin.test.ts',
];

const legs = [
  { name: 'node22', command: [bin('node22/bin/node'), vitest], files: nodeFiles, path: bin('node22/bin') },
  { name: 'node24', command: [bin('node24/bin/node'), vitest], files: nodeFiles, path: bin('node24/bin') },
  { name: 'bun', command: [bin('@oven/bun-linux-x64/bin/bun'), vitest], files: ['test/core', ...fetchRuntimeFiles] },
  { name: 'deno', command: [bin('@deno/linux-x64-glibc/deno'), 'run', '--allow-all', '--no-remote', '--no-prompt', vitest], files: ['test/core/duplicate-keys.test.ts', ...fetchRuntimeFiles] },
];

const wanted = process.argv.slice(2);
const unknown = wanted.filter((name) => !legs.some((leg) => leg.name === name));
if (unknown.length > 0) {
  process.stderr.write(`test:runtimes: no leg ${unknown.join(', ')} (legs: ${legs.map((leg) => leg.name).join(', ')})\n`);
  process.exit(2);
}

const results = [];
for (const leg of legs.filter((l) => wanted.length === 0 || wanted.includes(l.name))) {
  if (!existsSync(leg.command[0])) {
    process.stderr.write(`!! ${leg.name}: ${leg.command[0]} is missing (run npm ci)\n`);
    results.push({ name: leg.name, ok: false, seconds: 0 });
    continue;
  }
  process.stdout.write(`\n== ${leg.name}: ${[...leg.command, 'run', ...leg.files].map((a) => a.replace(`${root}/`, '')).join(' ')}\n`);
  const env = {
    ...process.env,
    // The leg's own node first on PATH, for what a suite spawns as `node`.
    ...(leg.path ? { PATH: `${leg.path}:${process.env.PATH ?? ''}` } : {}),
    DENO_NO_UPDATE_CHECK: '1',
    NO_COLOR: process.env.NO_COLOR ?? '',
  };
  const started = performance.now();
  const run = spawnSync(leg.command[0], [...leg.command.slice(1), 'run', ...leg.files], { cwd: root, env, stdio: 'inherit' });
  const seconds = (performance.now() - started) / 1000;
  results.push({ name: leg.name, ok: run.status === 0, seconds });
  process.stdout.write(`== ${leg.name}: ${run.status === 0 ? 'passed' : `FAILED (exit ${run.status ?? run.signal})`} in ${seconds.toFixed(0)} s\n`);
}

process.stdout.write('\n== test:runtimes\n');
for (const r of results) process.stdout.write(`   ${r.name.padEnd(7)} ${r.ok ? 'passed' : 'FAILED'}  ${r.seconds.toFixed(0).padStart(4)} s\n`);
const total = results.reduce((sum, r) => sum + r.seconds, 0);
process.stdout.write(`   total           ${total.toFixed(0).padStart(4)} s\n`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
