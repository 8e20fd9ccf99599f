// npm run example:kysely — transactional mode through Kysely: the order and the idempotency
// record commit in one Kysely transaction, or neither does. STORE_URL: sqlite:/path/file.db
// (default: a temp file), postgres://… or mysql://… (MySQL/MariaDB); ORDERS_TABLE names the
// business table (default: orders).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import Database from 'better-sqlite3';
import { Kysely, MysqlDialect, PostgresDialect, SqliteDialect } from 'kysely';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { kyselyTransactions } from 'idemkit/kysely';
import { mysqlStore } from 'idemkit/stores/mysql';
import { postgresStore } from 'idemkit/stores/postgres';
import { sqliteStore } from 'idemkit/stores/sqlite';
import { withIdempotency } from 'idemkit/web';
import { port, tenantOf } from './store.js';

interface Shop {
  [table: string]: { key: string; tenant: string; sku: string; quantity: number };
}
const orders = process.env.ORDERS_TABLE ?? 'orders';
const url = process.env.STORE_URL ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'idemkit-')), 'shop.db')}`;

async function open() {
  if (url.startsWith('postgres')) {
    const pool = new pg.Pool({ connectionString: url });
    const store = postgresStore({ pool });
    await store.migrate();
    return { store, db: new Kysely<Shop>({ dialect: new PostgresDialect({ pool }) }) };
  }
  if (/^(mysql|mariadb):/.test(url)) {
    const pool = mysql.createPool(url.replace(/^mariadb:/, 'mysql:'));
    const store = mysqlStore({ pool });
    await store.migrate();
    // Kysely's MySQL dialect takes mysql2's callback pool: the promise pool's own, so both share connections.
    return { store, db: new Kysely<Shop>({ dialect: new MysqlDialect({ pool: pool.pool }) }) };
  }
  const file = url.slice('sqlite:'.length);
  // The idempotency store and Kysely each open the file: Kysely's connection carries the
  // transactions, the store's own serves claims and replays.
  return { store: sqliteStore({ database: new Database(file) }), db: new Kysely<Shop>({ dialect: new SqliteDialect({ database: new Database(file) }) }) };
}

const { store, db } = await open();
// Kysely's schema builder quotes each name as the database wants it (`key` is reserved in MySQL).
await db.schema
  .createTable(orders)
  .ifNotExists()
  .addColumn('key', 'varchar(255)', (column) => column.primaryKey())
  .addColumn('tenant', 'varchar(255)', (column) => column.notNull())
  .addColumn('sku', 'varchar(255)', (column) => column.notNull())
  .addColumn('quantity', 'integer', (column) => column.notNull())
  .execute();

const placeOrder = withIdempotency(
  async (request, ctx) => {
    const { sku, quantity } = (await request.json()) as { sku: string; quantity: number };
    // ctx.tx is Kysely's Transaction<Shop>: this insert commits with the record, or not at all.
    await ctx!.tx.insertInto(orders).values({ key: ctx!.key, tenant: ctx!.scope, sku, quantity }).execute();
    return Response.json({ order: ctx!.key, sku, quantity }, { status: 201 });
  },
  { store: kyselyTransactions(store, db), transactional: true, required: true, scope: (request) => tenantOf(request.headers.get('authorization')) ?? '' },
);

const server = serve({ port, hostname: '127.0.0.1', fetch: async (request) => {
  if (!tenantOf(request.headers.get('authorization'))) return Response.json({ error: 'unauthorized' }, { status: 401 });
  const { pathname } = new URL(request.url);
  if (pathname === '/orders' && request.method === 'POST') return placeOrder(request);
  if (pathname === '/orders' && request.method === 'GET') {
    const rows = await db.selectFrom(orders).select(['key', 'sku', 'quantity']).where('tenant', '=', tenantOf(request.headers.get('authorization'))!).execute();
    return Response.json(rows);
  }
  return new Response('not found', { status: 404 });
} }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
// On SIGTERM: stop accepting, let requests finish, then end the connections (Kysely's pool is the store's).
process.on('SIGTERM', () => server.close(() => void db.destroy()));
