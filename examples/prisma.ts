// npm run example:prisma — transactional mode through Prisma 7 (@prisma/adapter-pg): the order and
// the idempotency record commit in one interactive transaction, or neither does. PostgreSQL only:
// STORE_URL=postgres://… (required). The client is generated from examples/prisma/schema.prisma
// into examples/prisma/generated/ by `npm run preexample:prisma` (npm runs it first, offline:
// PRISMA_SCHEMA_ENGINE_BINARY=/bin/true, see docs/orm.md). The orders table is the schema's
// (@@map("prisma_example_orders")): a generated client's table names are fixed, so ORDERS_TABLE
// does not apply here.
import { serve } from '@hono/node-server';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { prismaTransactions } from 'idemkit/prisma';
import { postgresStore } from 'idemkit/stores/postgres';
import { withIdempotency } from 'idemkit/web';
import { PrismaClient } from './prisma/generated/client.js';
import { port, tenantOf } from './store.js';

const url = process.env.STORE_URL ?? '';
if (!/^postgres(ql)?:\/\//.test(url)) {
  console.error('STORE_URL=postgres://… is required: the Prisma bridge is PostgreSQL only');
  process.exit(1);
}

const pool = new pg.Pool({ connectionString: url });
const store = postgresStore({ pool });
await store.migrate();
const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
// `prisma migrate` / `db push` would create it from the schema, but they run Prisma's schema engine
// (a download); plain SQL does the same here.
await prisma.$executeRawUnsafe('CREATE TABLE IF NOT EXISTS prisma_example_orders (key text PRIMARY KEY, tenant text NOT NULL, sku text NOT NULL, quantity integer NOT NULL)');

const placeOrder = withIdempotency(
  async (request, ctx) => {
    const { sku, quantity } = (await request.json()) as { sku: string; quantity: number };
    // ctx.tx is the generated client's transaction client: this insert commits with the record, or not at all.
    await ctx!.tx.order.create({ data: { key: ctx!.key, tenant: ctx!.scope, sku, quantity } });
    return Response.json({ order: ctx!.key, sku, quantity }, { status: 201 });
  },
  // timeout: how long a request's interactive transaction may stay open (Prisma's own default is 5 s).
  { store: prismaTransactions(store, prisma, { timeout: 60_000 }), transactional: true, required: true, scope: (request) => tenantOf(request.headers.get('authorization')) ?? '' },
);

const server = serve({ port, hostname: '127.0.0.1', fetch: async (request) => {
  const tenant = tenantOf(request.headers.get('authorization'));
  if (!tenant) return Response.json({ error: 'unauthorized' }, { status: 401 });
  const { pathname } = new URL(request.url);
  if (pathname === '/orders' && request.method === 'POST') return placeOrder(request);
  if (pathname === '/orders' && request.method === 'GET') {
    return Response.json(await prisma.order.findMany({ select: { key: true, sku: true, quantity: true }, where: { tenant } }));
  }
  return new Response('not found', { status: 404 });
} }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
// On SIGTERM: stop accepting, let requests finish, then end the connections (the adapter's pool is the store's).
process.on('SIGTERM', () => server.close(() => void prisma.$disconnect().then(() => pool.end())));
