/**
 * Issue 26 item 17: `instrumentStore` and an ORM bridge compose in either order.
 * `instrumentStore(knexTransactions(store, knex))` traced claim, begin, complete and commit;
 * `knexTransactions(instrumentStore(store), knex)` compiled and silently traced the claim only,
 * since the bridge's transactions passed the instrumentation by. Both orders now give the same
 * spans, on real databases (a SQLite file, and PostgreSQL when it is up), through Knex and Kysely.
 */
import Database from 'better-sqlite3';
import { SpanKind, trace } from '@opentelemetry/api';
import { Hono } from 'hono';
import knexFactory from 'knex';
import type { Knex } from 'knex';
import { Kysely, SqliteDialect } from 'kysely';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';
import { isTransactionalStore } from '../../src/core/store.js';
import { idempotency } from '../../src/http/hono.js';
import { knexTransactions } from '../../src/orm/knex.js';
import { kyselyTransactions } from '../../src/orm/kysely.js';
import { instrumentStore, telemetryEvents } from '../../src/otel/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { POSTGRES, requireService } from '../support/services.js';
import { sqliteFile } from '../support/sqlite-file.js';
import { startTestSdk } from './sdk.js';

const sdk = startTestSdk();
const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  await sdk.shutdown();
});
beforeEach(() => sdk.clearSpans());

const silent = { warn: () => {}, error: () => {} };

/** One request with a fresh key, then its retry, through a Hono app in transactional mode; the store spans of each, as [name, in a transaction]. */
async function spansOf(store: TransactionalStore, insert: (tx: unknown, key: string) => Promise<void>): Promise<{ first: string[]; retry: string[] }> {
  const hono = new Hono();
  hono.use('*', (c, next) =>
    trace.getTracer('test-http').startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
      try {
        await next();
      } finally {
        span.end();
      }
    }),
  );
  hono.use('/orders', idempotency({ store, transactional: true, events: telemetryEvents(), logger: silent }));
  hono.post('/orders', async (c) => {
    const ctx = (c.get as (name: string) => { tx: unknown; key: string })('idempotency');
    await insert(ctx.tx, ctx.key);
    return c.json({ ok: true }, 201);
  });
  const key = randomUUID();
  const post = () => hono.request('/orders', { method: 'POST', body: '{}', headers: { 'content-type': 'application/json', 'idempotency-key': key } });
  const names = () =>
    sdk
      .spans()
      .filter((span) => span.name.startsWith('idemkit.store.'))
      .map((span) => `${span.name}${span.attributes['idemkit.store.transaction'] === true ? ' (transaction)' : ''}`);
  sdk.clearSpans();
  expect((await post()).status).toBe(201);
  const first = names();
  sdk.clearSpans();
  const again = await post();
  expect(again.status).toBe(201);
  expect(again.headers.get('idempotent-replayed')).toBe('true');
  return { first, retry: names() };
}

const EXPECTED = {
  first: ['idemkit.store.claim', 'idemkit.store.begin_transaction', 'idemkit.store.complete (transaction)', 'idemkit.store.commit (transaction)'],
  retry: ['idemkit.store.claim'],
};

interface Bridged {
  /** The bridge over `store` (instrumented or not). */
  bridge(store: IdempotencyStore): TransactionalStore;
  insert(tx: unknown, key: string): Promise<void>;
  count(): Promise<number>;
}

async function bothOrders(plain: IdempotencyStore, bridged: Bridged): Promise<void> {
  const outside = instrumentStore(bridged.bridge(plain));
  const inside = bridged.bridge(instrumentStore(plain));
  expect(isTransactionalStore(inside)).toBe(true);
  expect(inside.name).toBe(plain.name);
  const a = await spansOf(outside, bridged.insert);
  const b = await spansOf(inside, bridged.insert);
  expect(a).toEqual(EXPECTED);
  expect(b).toEqual(EXPECTED);
  // One business row per request: the transactions are the ORM's in both orders.
  expect(await bridged.count()).toBe(2);
}

describe('SQLite (a real file)', () => {
  it('knexTransactions: instrumented inside or outside, the same spans', async () => {
    const file = sqliteFile('order-knex.db');
    const plain = sqliteStore({ database: file.db });
    file.db.exec('CREATE TABLE orders (key TEXT NOT NULL)');
    const knex: Knex = knexFactory({ client: 'better-sqlite3', connection: { filename: file.file }, useNullAsDefault: true });
    cleanups.push(async () => {
      await knex.destroy();
      plain.close();
      file.cleanup();
    });
    await bothOrders(plain, {
      bridge: (store) => knexTransactions(store, knex),
      insert: async (tx, key) => void (await (tx as Knex.Transaction)('orders').insert({ key })),
      count: async () => (file.db.prepare('SELECT count(*) AS n FROM orders').get() as { n: number }).n,
    });
  });

  it('kyselyTransactions: the same', async () => {
    const file = sqliteFile('order-kysely.db');
    const plain = sqliteStore({ database: file.db });
    file.db.exec('CREATE TABLE orders (key TEXT NOT NULL)');
    const db = new Kysely<{ orders: { key: string } }>({ dialect: new SqliteDialect({ database: new Database(file.file) }) });
    cleanups.push(async () => {
      await db.destroy();
      plain.close();
      file.cleanup();
    });
    await bothOrders(plain, {
      bridge: (store) => kyselyTransactions(store, db),
      insert: async (tx, key) => void (await (tx as typeof db).insertInto('orders').values({ key }).execute()),
      count: async () => (file.db.prepare('SELECT count(*) AS n FROM orders').get() as { n: number }).n,
    });
  });

  it('instrumented twice around a bridge: each layer traces the transaction once', async () => {
    const file = sqliteFile('order-twice.db');
    const plain = sqliteStore({ database: file.db });
    file.db.exec('CREATE TABLE orders (key TEXT NOT NULL)');
    const knex: Knex = knexFactory({ client: 'better-sqlite3', connection: { filename: file.file }, useNullAsDefault: true });
    cleanups.push(async () => {
      await knex.destroy();
      plain.close();
      file.cleanup();
    });
    const store = instrumentStore(knexTransactions(instrumentStore(plain), knex));
    const { first } = await spansOf(store, async (tx, key) => void (await (tx as Knex.Transaction)('orders').insert({ key })));
    expect([...first].sort()).toEqual([...EXPECTED.first, ...EXPECTED.first].sort());
  });
});

describe.runIf(await requireService(POSTGRES))('PostgreSQL', () => {
  it('knexTransactions: instrumented inside or outside, the same spans', async () => {
    const table = `otel_order_${process.pid}`;
    const orders = `otel_order_rows_${process.pid}`;
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:5432/test', max: 4 });
    pool.on('error', () => {});
    const plain = postgresStore({ pool, table });
    await plain.migrate();
    const knex: Knex = knexFactory({ client: 'pg', connection: 'postgres://postgres@127.0.0.1:5432/test', pool: { min: 0, max: 4 } });
    await knex.raw(`DROP TABLE IF EXISTS ${orders}; CREATE TABLE ${orders} (key text NOT NULL)`);
    cleanups.push(async () => {
      await knex.raw(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
      await knex.destroy();
      await pool.end();
    });
    await bothOrders(plain, {
      bridge: (store) => knexTransactions(store, knex),
      insert: async (tx, key) => void (await (tx as Knex.Transaction)(orders).insert({ key })),
      count: async () => Number(((await knex(orders).count({ n: '*' })) as Array<{ n: string | number }>)[0]!.n),
    });
  });
});
