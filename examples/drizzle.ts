// npm run example:drizzle — transactional mode through Drizzle: the order and the idempotency
// record commit in one Drizzle transaction, or neither does. STORE_URL: sqlite:/path/file.db
// (default: a temp file; better-sqlite3 driver) or postgres://… (node-postgres driver);
// ORDERS_TABLE names the business table (default: orders).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import Database from 'better-sqlite3';
import { eq, sql } from 'drizzle-orm';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { integer as pgInteger, pgTable, text as pgText } from 'drizzle-orm/pg-core';
import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import pg from 'pg';
import { drizzleTransactions } from 'idemkit/drizzle';
import { postgresStore } from 'idemkit/stores/postgres';
import { sqliteStore } from 'idemkit/stores/sqlite';
import { withIdempotency } from 'idemkit/web';
import { port, tenantOf } from './store.js';

const orders = process.env.ORDERS_TABLE ?? 'orders';
const url = process.env.STORE_URL ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'idemkit-')), 'shop.db')}`;

// The orders table, in each driver's table builder (drizzle-kit would create it; here a CREATE below).
const pgOrders = pgTable(orders, { key: pgText('key').primaryKey(), tenant: pgText('tenant').notNull(), sku: pgText('sku').notNull(), quantity: pgInteger('quantity').notNull() });
const sqliteOrders = sqliteTable(orders, { key: text('key').primaryKey(), tenant: text('tenant').notNull(), sku: text('sku').notNull(), quantity: integer('quantity').notNull() });
const createOrders = (table: typeof pgOrders | typeof sqliteOrders) =>
  sql`CREATE TABLE IF NOT EXISTS ${table} (key TEXT PRIMARY KEY, tenant TEXT NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL)`;

interface Order { key: string; tenant: string; sku: string; quantity: number }
const orderOf = async (request: Request, key: string, tenant: string): Promise<Order> => {
  const { sku, quantity } = (await request.json()) as { sku: string; quantity: number };
  return { key, tenant, sku, quantity };
};
const placed = (order: Order) => Response.json({ order: order.key, sku: order.sku, quantity: order.quantity }, { status: 201 });
const options = { transactional: true, required: true, scope: (request: Request) => tenantOf(request.headers.get('authorization')) ?? '' } as const;

async function open() {
  if (url.startsWith('postgres')) {
    const pool = new pg.Pool({ connectionString: url });
    const store = postgresStore({ pool });
    await store.migrate();
    const db = drizzlePg(pool);
    await db.execute(createOrders(pgOrders));
    const placeOrder = withIdempotency(async (request, ctx) => {
      const order = await orderOf(request, ctx!.key, ctx!.scope);
      // ctx.tx is Drizzle's PgTransaction: this insert commits with the record, or not at all.
      await ctx!.tx.insert(pgOrders).values(order);
      return placed(order);
    }, { ...options, store: drizzleTransactions(store, db) });
    const list = (tenant: string) => db.select({ key: pgOrders.key, sku: pgOrders.sku, quantity: pgOrders.quantity }).from(pgOrders).where(eq(pgOrders.tenant, tenant));
    return { placeOrder, list, close: () => pool.end() };
  }
  const file = url.slice('sqlite:'.length);
  // Three connections to the file: the store's own (claims, replays); the bridge's Drizzle, which
  // carries the requests' transactions and nothing else (a statement sent through it while one is
  // open would join it); and one for reads.
  const store = sqliteStore({ database: new Database(file) });
  const db = drizzleSqlite(new Database(file));
  const reads = drizzleSqlite(new Database(file));
  reads.run(createOrders(sqliteOrders));
  const placeOrder = withIdempotency(async (request, ctx) => {
    const order = await orderOf(request, ctx!.key, ctx!.scope);
    // ctx.tx is Drizzle's SQLiteTransaction: this insert commits with the record, or not at all.
    await ctx!.tx.insert(sqliteOrders).values(order);
    return placed(order);
  }, { ...options, store: drizzleTransactions(store, db) });
  const list = (tenant: string) => reads.select({ key: sqliteOrders.key, sku: sqliteOrders.sku, quantity: sqliteOrders.quantity }).from(sqliteOrders).where(eq(sqliteOrders.tenant, tenant));
  return { placeOrder, list, close: async () => {} };
}

const { placeOrder, list, close } = await open();

const server = serve({ port, hostname: '127.0.0.1', fetch: async (request) => {
  const tenant = tenantOf(request.headers.get('authorization'));
  if (!tenant) return Response.json({ error: 'unauthorized' }, { status: 401 });
  const { pathname } = new URL(request.url);
  if (pathname === '/orders' && request.method === 'POST') return placeOrder(request);
  if (pathname === '/orders' && request.method === 'GET') return Response.json(await list(tenant));
  return new Response('not found', { status: 404 });
} }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
// On SIGTERM: stop accepting, let requests finish, then end the connections.
process.on('SIGTERM', () => server.close(() => void close()));
