// npm run example:typeorm — transactional mode through TypeORM: the order and the idempotency
// record commit in one TypeORM transaction, or neither does. STORE_URL: sqlite:/path/file.db
// (default: a temp file; better-sqlite3), postgres://… or mysql://… (MySQL/MariaDB); ORDERS_TABLE
// names the business table (default: orders).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { DataSource, EntitySchema } from 'typeorm';
import type { DataSourceOptions } from 'typeorm';
import { mysqlStore } from 'idemkit/stores/mysql';
import { postgresStore } from 'idemkit/stores/postgres';
import { sqliteStore } from 'idemkit/stores/sqlite';
import { typeormTransactions } from 'idemkit/typeorm';
import { withIdempotency } from 'idemkit/web';
import { port, tenantOf } from './store.js';

const url = process.env.STORE_URL ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'idemkit-')), 'shop.db')}`;

interface Order { key: string; tenant: string; sku: string; quantity: number }
// An EntitySchema rather than a decorated class: the same entity, no decorators to compile.
const Order = new EntitySchema<Order>({
  name: 'Order',
  tableName: process.env.ORDERS_TABLE ?? 'orders',
  columns: {
    key: { type: 'varchar', length: 100, primary: true },
    tenant: { type: 'varchar', length: 100 },
    sku: { type: 'varchar', length: 100 },
    quantity: { type: 'int' },
  },
});

async function open() {
  if (url.startsWith('postgres')) {
    const pool = new pg.Pool({ connectionString: url });
    const store = postgresStore({ pool });
    await store.migrate();
    return { store, connection: { type: 'postgres', url } satisfies DataSourceOptions, close: () => pool.end() };
  }
  if (/^(mysql|mariadb):/.test(url)) {
    const mysqlUrl = url.replace(/^mariadb:/, 'mysql:');
    const pool = mysql.createPool(mysqlUrl);
    const store = mysqlStore({ pool });
    await store.migrate();
    return { store, connection: { type: 'mysql', url: mysqlUrl } satisfies DataSourceOptions, close: () => pool.end() };
  }
  const file = url.slice('sqlite:'.length);
  return { store: sqliteStore({ database: new Database(file) }), connection: { type: 'better-sqlite3', database: file } satisfies DataSourceOptions, close: async () => {} };
}

const { store, connection, close } = await open();
// synchronize creates the orders table at start-up; a real service runs TypeORM migrations.
const dataSource = await new DataSource({ ...connection, entities: [Order], synchronize: true }).initialize();
// On SQLite a DataSource is one connection, and TypeORM runs every query of it there: a read sent
// through it while a request's transaction is open would run inside that transaction (another
// transaction would nest in it). The bridge gets a DataSource of its own; reads go through another.
const reads = connection.type === 'better-sqlite3' ? await new DataSource({ ...connection, entities: [Order] }).initialize() : dataSource;

const placeOrder = withIdempotency(
  async (request, ctx) => {
    const { sku, quantity } = (await request.json()) as { sku: string; quantity: number };
    // ctx.tx is the transaction's EntityManager: this insert commits with the record, or not at all.
    await ctx!.tx.getRepository(Order).insert({ key: ctx!.key, tenant: ctx!.scope, sku, quantity });
    return Response.json({ order: ctx!.key, sku, quantity }, { status: 201 });
  },
  { store: typeormTransactions(store, dataSource), transactional: true, required: true, scope: (request) => tenantOf(request.headers.get('authorization')) ?? '' },
);

const server = serve({ port, hostname: '127.0.0.1', fetch: async (request) => {
  const tenant = tenantOf(request.headers.get('authorization'));
  if (!tenant) return Response.json({ error: 'unauthorized' }, { status: 401 });
  const { pathname } = new URL(request.url);
  if (pathname === '/orders' && request.method === 'POST') return placeOrder(request);
  if (pathname === '/orders' && request.method === 'GET') {
    return Response.json(await reads.getRepository(Order).find({ select: { key: true, sku: true, quantity: true }, where: { tenant } }));
  }
  return new Response('not found', { status: 404 });
} }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
// On SIGTERM: stop accepting, let requests finish, then end the connections.
const shutdown = async () => {
  await dataSource.destroy();
  if (reads !== dataSource) await reads.destroy();
  await close();
};
process.on('SIGTERM', () => server.close(() => void shutdown()));
