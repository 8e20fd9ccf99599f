// Compiled on its own by test/types/tx-types.test.ts: `declare module 'idemkit'` below changes the
// type of `req.idempotency` for the whole program, so it must not share one with other tests.
import express from 'express';
import Fastify from 'fastify';
import Koa from 'koa';
import pg from 'pg';
import type Database from 'better-sqlite3';
import { idempotency as expressIdempotency } from 'idemkit/express';
import { idempotency as fastifyIdempotency } from 'idemkit/fastify';
import { idempotency as koaIdempotency } from 'idemkit/koa';
import { idempotencyContext } from 'idemkit/nest';
import { postgresStore } from 'idemkit/stores/postgres';

const store = postgresStore({ pool: new pg.Pool() });

declare module 'idemkit' {
  interface Register {
    store: typeof store;
    transactional: true;
  }
}

const app = express();
app.use(expressIdempotency({ store, transactional: true }));
app.post('/pay', async (req, res) => {
  const client: pg.PoolClient = req.idempotency!.tx;
  // @ts-expect-error -- the registered store's transactions are pg clients, not SQLite databases.
  const wrong: Database.Database = req.idempotency!.tx;
  await client.query('SELECT 1');
  res.json({ wrong: String(wrong) });
});

const fastify = Fastify();
await fastify.register(fastifyIdempotency, { store, transactional: true });
fastify.post('/pay', async (request) => {
  const client: pg.PoolClient = request.idempotency!.tx;
  // @ts-expect-error -- the same on Fastify.
  const wrong: Database.Database = request.idempotency!.tx;
  await client.query('SELECT 1');
  return { wrong: String(wrong) };
});

// NestJS: `idempotencyContext(request)` (what `@IdempotencyCtx()` gives) is typed by the registration too.
const nestRequest = {};
const nestClient: pg.PoolClient | undefined = idempotencyContext(nestRequest)?.tx;
// @ts-expect-error -- and on NestJS.
const nestWrong: Database.Database | undefined = idempotencyContext(nestRequest)?.tx;
void [nestClient, nestWrong];

const koa = new Koa();
koa.use(koaIdempotency({ store, transactional: true }));
koa.use(async (ctx) => {
  const client: pg.PoolClient = ctx.state.idempotency!.tx;
  // @ts-expect-error -- and on Koa's ctx.state.
  const wrong: Database.Database = ctx.state.idempotency!.tx;
  await client.query('SELECT 1');
  ctx.body = { wrong: String(wrong) };
});
