/**
 * Issue 16 item 7: `ctx.tx` takes its type from the store an adapter is given, with no generic
 * written by hand and no cast. The `expectTypeOf` lines and every `@ts-expect-error` are checked
 * by `npm run typecheck` (CI), which fails when a type is wrong or an expected error disappears;
 * the tests below run one transactional request per adapter to show that the typed `tx` is the
 * store's object at run time too.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import express from 'express';
import { Hono } from 'hono';
import Router from '@koa/router';
import Koa from 'koa';
import knex from 'knex';
import type { Knex } from 'knex';
import type { Transaction } from 'kysely';
import { DataSource } from 'typeorm';
import type { EntityManager } from 'typeorm';
import { Kysely, PostgresDialect } from 'kysely';
import type { PoolConnection } from 'mysql2/promise';
import type { RunResult } from 'better-sqlite3';
import type { ExtractTablesWithRelations } from 'drizzle-orm';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import type { NodePgQueryResultHKT } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import type { PgTransaction } from 'drizzle-orm/pg-core';
import type { SQLiteTransaction } from 'drizzle-orm/sqlite-core';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { ITXClientDenyList } from '@prisma/client/runtime/client';
import { describe, expect, expectTypeOf, it, onTestFinished } from 'vitest';
import type { FencedTransaction } from '../../src/core/engine.js';
import type { TxOf } from '../../src/core/store.js';
import { idempotency as expressIdempotency } from '../../src/http/express.js';
import type { IdempotencyVariablesFor } from '../../src/http/hono.js';
import { idempotency as honoIdempotency } from '../../src/http/hono.js';
import { idempotency as koaIdempotency } from '../../src/http/koa.js';
import { withIdempotency } from '../../src/http/web.js';
import { amqpConsumeOnce, natsConsumeOnce, webhookHandler } from '../../src/messaging/index.js';
import type { AmqpChannel, AmqpMessage } from '../../src/messaging/amqp.js';
import type { NatsJsMessage } from '../../src/messaging/nats.js';
import { definePhases, sqlExecutor } from '../../src/patterns/index.js';
import type { SqlExecutor } from '../../src/patterns/index.js';
import { drizzleTransactions } from '../../src/orm/drizzle.js';
import { knexTransactions } from '../../src/orm/knex.js';
import { typeormTransactions } from '../../src/orm/typeorm.js';
import { prismaTransactions } from '../../src/orm/prisma.js';
import { kyselyTransactions } from '../../src/orm/kysely.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteFile } from '../support/sqlite-file.js';

// Stores are built lazily inside functions: nothing below connects to a server.
const sqlite = () => sqliteStore({ database: new Database(':memory:') });
const postgres = () => postgresStore({ pool: new pg.Pool({ max: 1 }) });
const mariadb = () => mysqlStore({ pool: mysql.createPool({ connectionLimit: 1 }) });

/** The shape `prisma generate` (generator prisma-client) gives a client with one model. */
declare class ShopPrisma {
  order: { create(args: { data: { sku: string } }): Promise<{ id: number; sku: string }> };
  $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number>;
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
  $disconnect(): Promise<void>;
  $transaction<P extends Promise<unknown>[]>(arg: [...P], options?: { maxWait?: number; timeout?: number }): Promise<unknown[]>;
  $transaction<R>(fn: (prisma: Omit<ShopPrisma, ITXClientDenyList>) => Promise<R>, options?: { maxWait?: number; timeout?: number }): Promise<R>;
}
declare const shopPrisma: ShopPrisma;

/** Compile-time only: never called. */
function typesFollowTheStore() {
  // The store's transaction type, derived.
  expectTypeOf<TxOf<ReturnType<typeof sqlite>>>().toEqualTypeOf<Database.Database>();
  expectTypeOf<TxOf<ReturnType<typeof postgres>>>().toEqualTypeOf<pg.PoolClient>();
  expectTypeOf<TxOf<ReturnType<typeof mariadb>>>().toEqualTypeOf<PoolConnection>();
  expectTypeOf<TxOf<ReturnType<typeof memoryStore>>>().toBeNever();

  // Hono: on the route that lists the middleware, and on an app that declares its variables.
  const hono = new Hono();
  hono.post('/pay', honoIdempotency({ store: postgres(), transactional: true }), (c) => {
    expectTypeOf(c.get('idempotency')!.tx).toEqualTypeOf<pg.PoolClient>();
    return c.text('ok');
  });
  hono.post('/plain', honoIdempotency({ store: postgres() }), (c) => {
    expectTypeOf(c.get('idempotency')!.tx).toEqualTypeOf<undefined>();
    // A phase transaction is still the store's.
    expectTypeOf(c.get('idempotency')!.beginTransaction).returns.resolves.toEqualTypeOf<FencedTransaction<pg.PoolClient>>();
    return c.text('ok');
  });
  const store = sqlite();
  const declared = new Hono<{ Variables: IdempotencyVariablesFor<typeof store, true> }>();
  declared.use('/orders/*', honoIdempotency({ store, transactional: true }));
  declared.post('/orders', (c) => {
    expectTypeOf(c.get('idempotency')!.tx).toEqualTypeOf<Database.Database>();
    return c.text('ok');
  });

  // The web adapter.
  withIdempotency(
    (_request, ctx) => {
      expectTypeOf(ctx!.tx).toEqualTypeOf<PoolConnection>();
      return new Response('ok');
    },
    { store: mariadb(), transactional: true },
  );
  const flag: boolean = Math.random() < 2;
  withIdempotency(
    (_request, ctx) => {
      expectTypeOf(ctx!.tx).toEqualTypeOf<pg.PoolClient | undefined>();
      return new Response('ok');
    },
    { store: postgres(), transactional: flag },
  );

  // Express: the middleware reads its own context, typed.
  const pay = expressIdempotency({ store: sqlite(), transactional: true });
  express().post('/pay', pay, (req, res) => {
    expectTypeOf(pay.context(req)!.tx).toEqualTypeOf<Database.Database>();
    res.end();
  });

  // Koa: the middleware reads its own context, typed, on the route that lists it and on a route
  // given its own options; `ctx.state.idempotency` is the registered (here: untyped) context.
  const koaPay = koaIdempotency({ store: sqlite(), transactional: true });
  new Router().post('/pay', koaPay, (ctx) => {
    expectTypeOf(koaPay.context(ctx)!.tx).toEqualTypeOf<Database.Database>();
    expectTypeOf(koaPay.route({ leaseMs: 60_000 }).context(ctx)!.tx).toEqualTypeOf<Database.Database>();
    expectTypeOf(ctx.state.idempotency!.tx).toEqualTypeOf<unknown>();
  });
  new Koa().use(koaIdempotency({ store: postgres() })).use((ctx) => {
    expectTypeOf(ctx.state.idempotency!.tx).toEqualTypeOf<unknown>();
  });
  // @ts-expect-error -- a route cannot change where records live.
  koaPay.route({ store: sqlite() });

  // Issue 18, item 3: a store bridged to an ORM hands out the ORM's transaction object.
  interface Shop { orders: { id: string } }
  const shop = () => kyselyTransactions(postgres(), new Kysely<Shop>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) }));
  expectTypeOf<TxOf<ReturnType<typeof shop>>>().toEqualTypeOf<Transaction<Shop>>();
  withIdempotency(
    async (_request, ctx) => {
      expectTypeOf(ctx!.tx).toEqualTypeOf<Transaction<Shop>>();
      await ctx!.tx.insertInto('orders').values({ id: ctx!.key }).execute();
      // @ts-expect-error -- not a pg client any more: the ORM's transaction is what the handler holds.
      await ctx!.tx.query('SELECT 1');
      return new Response('ok');
    },
    { store: shop(), transactional: true },
  );
  hono.post('/shop', honoIdempotency({ store: shop(), transactional: true }), (c) => {
    expectTypeOf(c.get('idempotency')!.tx).toEqualTypeOf<Transaction<Shop>>();
    return c.text('ok');
  });

  type NoSchema = Record<string, never>;
  const drizzledPg = () => drizzleTransactions(postgres(), drizzlePg(new pg.Pool()));
  expectTypeOf<TxOf<ReturnType<typeof drizzledPg>>>().toEqualTypeOf<PgTransaction<NodePgQueryResultHKT, NoSchema, ExtractTablesWithRelations<NoSchema>>>();
  const drizzledSqlite = () => drizzleTransactions(sqlite(), drizzleSqlite(new Database(':memory:')));
  expectTypeOf<TxOf<ReturnType<typeof drizzledSqlite>>>().toEqualTypeOf<SQLiteTransaction<'sync', RunResult, NoSchema, ExtractTablesWithRelations<NoSchema>>>();
  withIdempotency(
    (_request, ctx) => {
      expectTypeOf(ctx!.tx).toEqualTypeOf<PgTransaction<NodePgQueryResultHKT, NoSchema, ExtractTablesWithRelations<NoSchema>>>();
      return new Response('ok');
    },
    { store: drizzledPg(), transactional: true },
  );
  hono.post('/drizzle', honoIdempotency({ store: drizzledSqlite(), transactional: true }), (c) => {
    expectTypeOf(c.get('idempotency')!.tx).toEqualTypeOf<SQLiteTransaction<'sync', RunResult, NoSchema, ExtractTablesWithRelations<NoSchema>>>();
    return c.text('ok');
  });

  const knexed = () => knexTransactions(mariadb(), knex({ client: 'mysql2' }));
  expectTypeOf<TxOf<ReturnType<typeof knexed>>>().toEqualTypeOf<Knex.Transaction>();
  hono.post('/knex', honoIdempotency({ store: knexed(), transactional: true }), async (c) => {
    expectTypeOf(c.get('idempotency')!.tx).toEqualTypeOf<Knex.Transaction>();
    await c.get('idempotency')!.tx('orders').insert({ id: 1 });
    return c.text('ok');
  });

  const typeormed = () => typeormTransactions(postgres(), new DataSource({ type: 'postgres' }));
  expectTypeOf<TxOf<ReturnType<typeof typeormed>>>().toEqualTypeOf<EntityManager>();
  withIdempotency(
    async (_request, ctx) => {
      expectTypeOf(ctx!.tx).toEqualTypeOf<EntityManager>();
      await ctx!.tx.query('SELECT 1');
      return new Response('ok');
    },
    { store: typeormed(), transactional: true },
  );

  // Prisma: a client is generated per application, so here one of the generated client's shape
  // (the overloaded `$transaction`, its callback's tx the client minus Prisma's deny list).
  const prismaBridged = () => prismaTransactions(postgres(), shopPrisma);
  expectTypeOf<TxOf<ReturnType<typeof prismaBridged>>>().toEqualTypeOf<Omit<ShopPrisma, ITXClientDenyList>>();
  withIdempotency(
    async (_request, ctx) => {
      expectTypeOf(ctx!.tx).toEqualTypeOf<Omit<ShopPrisma, ITXClientDenyList>>();
      const order = await ctx!.tx.order.create({ data: { sku: 'sku-1' } });
      expectTypeOf(order).toEqualTypeOf<{ id: number; sku: string }>();
      // @ts-expect-error -- Prisma's transaction client cannot disconnect the client.
      void ctx!.tx.$disconnect;
      return new Response('ok');
    },
    { store: prismaBridged(), transactional: true },
  );

  // Wrong combinations do not compile.
  // @ts-expect-error -- a transaction type is not a store: the old `idempotency<pg.PoolClient>` form.
  honoIdempotency<pg.PoolClient>({ store: sqlite(), transactional: true });
  // @ts-expect-error -- a store without transactions cannot run in transactional mode.
  honoIdempotency({ store: memoryStore(), transactional: true });
  // @ts-expect-error -- the same on Express.
  expressIdempotency({ store: memoryStore(), transactional: true });
  // @ts-expect-error -- and on Koa.
  koaIdempotency({ store: memoryStore(), transactional: true });
  withIdempotency(
    (_request, ctx) => {
      // @ts-expect-error -- a SQLite store's transaction is a better-sqlite3 Database, not a pg client.
      const client: pg.PoolClient = ctx!.tx;
      return new Response(String(client));
    },
    { store: sqlite(), transactional: true },
  );

  // Phases written for one store's transaction cannot run on another store's context.
  const checkout = definePhases<{ amount: number }, pg.PoolClient>('checkout').phase('charge', ({ tx }) => tx.query('SELECT 1'));
  hono.post('/checkout', honoIdempotency({ store: postgres() }), async (c) => c.json(await checkout.run(c.get('idempotency')!, { amount: 1 })));
  hono.post('/wrong', honoIdempotency({ store: sqlite() }), async (c) => {
    // @ts-expect-error -- the phases want pg clients; this context's transactions are SQLite databases.
    return c.json(await checkout.run(c.get('idempotency')!, { amount: 1 }));
  });
  // A context whose transaction type is not known (Express without `Register`) is not refused.
  express().post('/unregistered', async (req, res) => {
    res.json(await checkout.run(req.idempotency!, { amount: 1 }));
  });

  // Messaging: `tx` is the SQL transaction with `db`, undefined with `store`.
  const db = sqlExecutor(new pg.Pool());
  const channel = null as unknown as AmqpChannel<AmqpMessage>;
  void amqpConsumeOnce(channel, 'q', { db, consumer: 'c' }, async (_message, tx) => expectTypeOf(tx).toEqualTypeOf<SqlExecutor>());
  void amqpConsumeOnce(channel, 'q', { store: memoryStore(), consumer: 'c' }, async (_message, tx) => expectTypeOf(tx).toEqualTypeOf<undefined>());
  const messages = null as unknown as AsyncIterable<NatsJsMessage>;
  natsConsumeOnce(messages, { db, consumer: 'c' }, async (_message, tx) => expectTypeOf(tx).toEqualTypeOf<SqlExecutor>());
  webhookHandler({ secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', db, consumer: 'c', onEvent: (_event, tx) => expectTypeOf(tx).toEqualTypeOf<SqlExecutor>() });
  webhookHandler({ secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', store: memoryStore(), consumer: 'c', onEvent: (_event, tx) => expectTypeOf(tx).toEqualTypeOf<undefined>() });
}
void typesFollowTheStore;

describe('ctx.tx at run time is the object its type names', () => {
  it('Express: middleware.context(req) is req.idempotency, and its tx is the store database', async () => {
    const file = sqliteFile();
    onTestFinished(() => file.cleanup());
    const store = sqliteStore({ database: file.db });
    onTestFinished(() => store.close());
    await store.migrate();
    const pay = expressIdempotency({ store, transactional: true });
    const app = express();
    let seen: unknown;
    app.post('/pay', pay, (req, res) => {
      const ctx = pay.context(req)!;
      expect(ctx).toBe(req.idempotency);
      seen = ctx.tx.prepare('SELECT 1 AS one').get();
      res.status(201).json({ ok: true });
    });
    const server = app.listen(0);
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const { port } = server.address() as { port: number };
    const response = await fetch(`http://127.0.0.1:${port}/pay`, { method: 'POST', headers: { 'idempotency-key': 'k1' } });
    server.close();
    expect(response.status).toBe(201);
    expect(seen).toEqual({ one: 1 });
  });

  it('Hono: the route-level middleware hands the store database as tx', async () => {
    const file = sqliteFile();
    onTestFinished(() => file.cleanup());
    const store = sqliteStore({ database: file.db });
    onTestFinished(() => store.close());
    await store.migrate();
    const app = new Hono();
    let seen: unknown;
    app.post('/pay', honoIdempotency({ store, transactional: true }), (c) => {
      seen = c.get('idempotency')!.tx.prepare('SELECT 2 AS two').get();
      return c.json({ ok: true }, 201);
    });
    const response = await app.request('/pay', { method: 'POST', headers: { 'idempotency-key': 'k1' } });
    expect(response.status).toBe(201);
    expect(seen).toEqual({ two: 2 });
  });

  it('Koa: middleware.context(ctx) is ctx.state.idempotency, and its tx is the store database', async () => {
    const file = sqliteFile();
    onTestFinished(() => file.cleanup());
    const store = sqliteStore({ database: file.db });
    onTestFinished(() => store.close());
    await store.migrate();
    const pay = koaIdempotency({ store, transactional: true });
    const router = new Router();
    let seen: unknown;
    router.post('/pay', pay, (ctx) => {
      const ctxOfPay = pay.context(ctx)!;
      expect(ctxOfPay).toBe(ctx.state.idempotency);
      seen = ctxOfPay.tx.prepare('SELECT 3 AS three').get();
      ctx.status = 201;
    });
    const server = new Koa().use(router.routes()).listen(0);
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const { port } = server.address() as { port: number };
    const response = await fetch(`http://127.0.0.1:${port}/pay`, { method: 'POST', headers: { 'idempotency-key': 'k1' } });
    server.close();
    expect(response.status).toBe(201);
    expect(seen).toEqual({ three: 3 });
  });

});

describe('Register: req.idempotency / request.idempotency typed by declaration merging', () => {
  it('compiles in a program of its own (merging is global to a program)', () => {
    // test/types/register-fixture registers a pg store in transactional mode and reads `tx` on
    // Express, Fastify and Koa as a pg client; its @ts-expect-error lines fail if the type did not arrive.
    const root = join(import.meta.dirname, '..', '..');
    const tsc = spawnSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(import.meta.dirname, 'register-fixture'), '--pretty', 'false'], {
      encoding: 'utf8',
    });
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
    // A whole tsc run over four frameworks' types: ~7 s of CPU, far longer on a shared machine.
  }, 120_000);
});
