// npm run example:knex — transactional mode through Knex: the order and the idempotency record
// commit in one Knex transaction, or neither does. STORE_URL: sqlite:/path/file.db (default: a
// temp file), postgres://… or mysql://… (MySQL/MariaDB); ORDERS_TABLE names the business table
// (default: orders).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import Database from 'better-sqlite3';
import knexFactory from 'knex';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { knexTransactions } from 'idemkit/knex';
import { mysqlStore } from 'idemkit/stores/mysql';
import { postgresStore } from 'idemkit/stores/postgres';
import { sqliteStore } from 'idemkit/stores/sqlite';
import { withIdempotency } from 'idemkit/web';
import { port, tenantOf } from './store.js';

const orders = process.env.ORDERS_TABLE ?? 'orders';
const url = process.env.STORE_URL ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'idemkit-')), 'shop.db')}`;

async function open() {
  if (url.startsWith('postgres')) {
    const pool = new pg.Pool({ connectionString: url });
    const store = postgresStore({ pool });
    await store.migrate();
    return { store, knex: knexFactory({ client: 'pg', connection: url }), close: () => pool.end() };
  }
  if (/^(mysql|mariadb):/.test(url)) {
    const mysqlUrl = url.replace(/^mariadb:/, 'mysql:');
    const pool = mysql.createPool(mysqlUrl);
    const store = mysqlStore({ pool });
    await store.migrate();
    return { store, knex: knexFactory({ client: 'mysql2', connection: mysqlUrl }), close: () => pool.end() };
  }
  const file = url.slice('sqlite:'.length);
  // The store and Knex each open the file. Knex's SQLite pool is one connection: its other queries
  // wait while a request's transaction is open (so a handler writes through ctx.tx, never `knex`).
  const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true });
  return { store: sqliteStore({ database: new Database(file) }), knex, close: async () => {} };
}

const { store, knex, close } = await open();
if (!(await knex.schema.hasTable(orders))) {
  await knex.schema.createTable(orders, (table) => {
    table.string('key').primary();
    table.string('tenant').notNullable();
    table.string('sku').notNullable();
    table.integer('quantity').notNullable();
  });
}

const placeOrder = withIdempotency(
  async (request, ctx) => {
    const { sku, quantity } = (await request.json()) as { sku: string; quantity: number };
    // ctx.tx is the Knex.Transaction: this insert commits with the record, or not at all.
    await ctx!.tx(orders).insert({ key: ctx!.key, tenant: ctx!.scope, sku, quantity });
    return Response.json({ order: ctx!.key, sku, quantity }, { status: 201 });
  },
  { store: knexTransactions(store, knex), transactional: true, required: true, scope: (request) => tenantOf(request.headers.get('authorization')) ?? '' },
);

const server = serve({ port, hostname: '127.0.0.1', fetch: async (request) => {
  const tenant = tenantOf(request.headers.get('authorization'));
  if (!tenant) return Response.json({ error: 'unauthorized' }, { status: 401 });
  const { pathname } = new URL(request.url);
  if (pathname === '/orders' && request.method === 'POST') return placeOrder(request);
  if (pathname === '/orders' && request.method === 'GET') return Response.json(await knex(orders).select('key', 'sku', 'quantity').where({ tenant }));
  return new Response('not found', { status: 404 });
} }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
// On SIGTERM: stop accepting, let requests finish, then end Knex's pool and the store's.
process.on('SIGTERM', () => server.close(() => void Promise.all([knex.destroy(), close()])));
