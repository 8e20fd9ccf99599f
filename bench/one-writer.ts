/**
 * The one-writer limit of transactional mode on SQLite, measured: N requests with distinct keys,
 * sent at once, each with a handler that writes one row and then takes `HANDLER_MS` (an await,
 * as a call to a payment provider would). In transactional mode every request holds the file's
 * write lock from its BEGIN IMMEDIATE to its COMMIT, so a file serves them one at a time;
 * outside it, and on PostgreSQL (a transaction per pooled connection), they overlap.
 *
 *   node --conditions=idemkit-source --import tsx bench/one-writer.ts
 *   ONE_WRITER_REQUESTS=20 ONE_WRITER_HANDLER_MS=50 ONE_WRITER_RUNS=5 ONE_WRITER_POSTGRES=postgres://… (or 'none')
 *
 * In process, through the Hono adapter (`app.request`, no sockets): what is measured is the
 * store's concurrency, not HTTP. Prints one Markdown table (median of the runs, and the range).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Hono } from 'hono';
import pg from 'pg';
import type { TransactionalStore } from 'idemkit';
import { idempotency } from 'idemkit/hono';
import type { IdempotencyVariables } from 'idemkit/hono';
import { postgresStore } from 'idemkit/stores/postgres';
import { sqliteStore } from 'idemkit/stores/sqlite';

const REQUESTS = Number(process.env.ONE_WRITER_REQUESTS ?? 20);
const HANDLER_MS = Number(process.env.ONE_WRITER_HANDLER_MS ?? 50);
const RUNS = Number(process.env.ONE_WRITER_RUNS ?? 5);
const POSTGRES = process.env.ONE_WRITER_POSTGRES ?? process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const POOL_SIZE = 20;

interface Backend {
  readonly name: string;
  readonly store: TransactionalStore<unknown>;
  /** Writes one row: through ctx.tx in transactional mode, else through the app's own handle. */
  write(tx: unknown, key: string): Promise<void>;
  close(): Promise<void>;
}

async function sqlite(): Promise<Backend> {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-one-writer-'));
  const database = new Database(join(dir, 'one-writer.db'));
  const store = sqliteStore({ database });
  database.exec('CREATE TABLE effects (key TEXT NOT NULL)');
  return {
    name: 'SQLite (one file)',
    store: store as TransactionalStore<unknown>,
    write: async (tx, key) => {
      if (tx) (tx as Database.Database).prepare('INSERT INTO effects (key) VALUES (?)').run(key);
      else await store.exclusive((db) => db.prepare('INSERT INTO effects (key) VALUES (?)').run(key));
    },
    close: async () => {
      store.close();
      database.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function postgres(): Promise<Backend> {
  const pool = new pg.Pool({ connectionString: POSTGRES, max: POOL_SIZE });
  pool.on('error', () => {});
  const table = `one_writer_${process.pid}`;
  const store = postgresStore({ pool, table });
  await store.migrate();
  await pool.query(`CREATE TABLE ${table}_effects (key TEXT NOT NULL)`);
  return {
    name: `PostgreSQL (pool of ${POOL_SIZE})`,
    store: store as TransactionalStore<unknown>,
    write: async (tx, key) => {
      await ((tx ?? pool) as pg.Pool).query(`INSERT INTO ${table}_effects (key) VALUES ($1)`, [key]);
    },
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS ${table}_effects; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
      await pool.end();
    },
  };
}

/** Wall time for REQUESTS requests with distinct keys, all sent at once. */
async function once(backend: Backend, transactional: boolean, run: number): Promise<number> {
  const app = new Hono<{ Variables: IdempotencyVariables<unknown> }>();
  app.use('/pay', idempotency({ store: backend.store, transactional }));
  app.post('/pay', async (c) => {
    const ctx = c.get('idempotency')!;
    await backend.write(ctx.tx, ctx.key);
    await new Promise((resolve) => setTimeout(resolve, HANDLER_MS));
    return c.json({ ok: true }, 201);
  });
  const started = performance.now();
  const answers = await Promise.all(
    Array.from({ length: REQUESTS }, (_, i) =>
      app.request('/pay', { method: 'POST', headers: { 'idempotency-key': `run-${transactional}-${run}-${i}` } }),
    ),
  );
  const elapsed = performance.now() - started;
  const failed = answers.filter((answer) => answer.status !== 201);
  if (failed.length > 0) throw new Error(`${backend.name}: ${failed.length} requests answered ${failed[0]!.status}: ${await failed[0]!.text()}`);
  return elapsed;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const backends: Array<() => Promise<Backend>> = [sqlite];
if (POSTGRES !== 'none') backends.push(postgres);
const lines = [
  `${REQUESTS} requests with distinct keys sent at once, handler = one write + ${HANDLER_MS} ms await; median of ${RUNS} runs (range)`,
  '',
  '| store | mode | wall time (ms) | requests/s | serial bound (ms) |',
  '|---|---|---:|---:|---:|',
];
for (const open of backends) {
  let backend: Backend;
  try {
    backend = await open();
  } catch (error) {
    lines.push(`| ${open.name} | unavailable: ${(error as Error).message} | | | |`);
    continue;
  }
  try {
    for (const transactional of [false, true]) {
      await once(backend, transactional, -1); // warm-up: prepared statements, pool connections
      const times: number[] = [];
      for (let run = 0; run < RUNS; run++) times.push(await once(backend, transactional, run));
      const m = median(times);
      lines.push(
        `| ${backend.name} | ${transactional ? 'transactional' : 'not transactional'} | ${m.toFixed(0)} (${Math.min(...times).toFixed(0)}–${Math.max(...times).toFixed(0)}) | ${((REQUESTS * 1000) / m).toFixed(0)} | ${REQUESTS * HANDLER_MS} |`,
      );
    }
  } finally {
    await backend.close();
  }
}
process.stdout.write(`${lines.join('\n')}\n`);
