/**
 * Transactional mode on the SQL servers when a client hangs up mid-handler (issue 14, item 2): the
 * write through `ctx.tx` and the record commit once, together, and the retry replays them. The
 * adapters on a Node response (Express, Fastify, Koa) run against PostgreSQL and MariaDB.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import express from 'express';
import Fastify from 'fastify';
import Koa from 'koa';
import type { Pool as MysqlPromisePool } from 'mysql2/promise';
import { createPool } from 'mysql2/promise';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyContext } from '../../src/core/engine.js';
import type { TransactionalStore } from '../../src/core/store.js';
import { idempotency as expressIdempotency } from '../../src/http/express.js';
import { idempotency as fastifyIdempotency } from '../../src/http/fastify.js';
import { idempotency as koaIdempotency } from '../../src/http/koa.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { dropTable, newPool, uniqueTable } from '../stores/postgres-support.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import { until } from '../support/until.js';
import { listenServer } from './apps/listen.js';

interface Database {
  readonly name: string;
  store: TransactionalStore & { get: TransactionalStore['get'] };
  /** Inserts `key` into the effects table through the handler's transaction. */
  write(tx: unknown, key: string): Promise<unknown>;
  effects(key: string): Promise<number>;
  close(): Promise<void>;
}

const LEASE_MS = 300;

async function postgres(): Promise<Database> {
  const pool: pg.Pool = newPool({ max: 8 });
  const table = uniqueTable();
  const effects = `${table}_effects`;
  const store = postgresStore({ pool, table });
  await store.migrate();
  await pool.query(`CREATE TABLE "${effects}" (key text NOT NULL)`);
  return {
    name: 'PostgreSQL',
    store,
    write: (tx, key) => (tx as pg.PoolClient).query(`INSERT INTO "${effects}" (key) VALUES ($1)`, [key]),
    effects: async (key) => Number((await pool.query(`SELECT count(*) AS n FROM "${effects}" WHERE key = $1`, [key])).rows[0].n),
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS "${effects}"`);
      await dropTable(pool, table);
      await pool.end();
    },
  };
}

async function mariadb(): Promise<Database> {
  const pool: MysqlPromisePool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 8 });
  const table = `idem_disc_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const effects = `${table}_effects`;
  const store = mysqlStore({ pool, table });
  await store.migrate();
  await pool.query(`CREATE TABLE ${effects} (k VARCHAR(255) NOT NULL)`);
  return {
    name: 'MariaDB',
    store,
    write: (tx, key) => (tx as MysqlPromisePool).query(`INSERT INTO ${effects} (k) VALUES (?)`, [key]),
    effects: async (key) => {
      const [rows] = await pool.query(`SELECT count(*) AS n FROM ${effects} WHERE k = ?`, [key]);
      return Number((rows as Array<{ n: number }>)[0]!.n);
    },
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS ${effects}`);
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    },
  };
}

/** A handler the test lets go by hand: "still running" is a fact, not a timing guess. */
function gate() {
  let open!: () => void;
  let started!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const running = new Promise<void>((resolve) => (started = resolve));
  return { opened, running, open: () => open(), started: () => started() };
}

interface Served {
  readonly url: string;
  close(): Promise<void>;
}

type Handler = (ctx: IdempotencyContext) => Promise<void>;

async function expressApp(db: Database, handler: Handler): Promise<Served> {
  const app = express();
  app.set('env', 'test');
  app.use(expressIdempotency({ store: db.store, transactional: true, leaseMs: LEASE_MS }));
  app.post('/pay', (req, res, next) => {
    handler(req.idempotency!)
      .then(() => res.status(201).json({ paid: true }))
      .catch(next);
  });
  return listenServer(createServer(app));
}

async function fastifyApp(db: Database, handler: Handler): Promise<Served> {
  const app = Fastify();
  await app.register(fastifyIdempotency, { store: db.store, transactional: true, leaseMs: LEASE_MS });
  app.post('/pay', async (request, reply) => {
    await handler(request.idempotency!);
    return reply.code(201).send({ paid: true });
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return { url, close: () => app.close() };
}

async function koaApp(db: Database, handler: Handler): Promise<Served> {
  const app = new Koa();
  app.silent = true;
  const protect = koaIdempotency({ store: db.store, transactional: true, leaseMs: LEASE_MS });
  app.use(protect);
  app.use(async (ctx) => {
    await handler(protect.context(ctx)!);
    ctx.status = 201;
    ctx.body = { paid: true };
  });
  const handle = app.callback();
  return listenServer(createServer((req, res) => void handle(req, res)));
}

const adapters = [
  ['Express', expressApp],
  ['Fastify', fastifyApp],
  ['Koa', koaApp],
] as const;

const pay = (url: string, key: string, signal?: AbortSignal) =>
  fetch(`${url}/pay`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":100}', signal });

const servers = [
  ['PostgreSQL', POSTGRES, postgres],
  ['MariaDB', MARIADB, mariadb],
] as const;

for (const [name, service, open] of servers) {
  const up = await requireService(service);
  describe.skipIf(!up)(`transactional mode on ${name}: a client that hangs up changes nothing`, () => {
    let db: Database;
    beforeAll(async () => {
      db = await open();
    });
    afterAll(async () => {
      await db?.close();
    });

    for (const [adapter, serve] of adapters) {
      it(`${adapter}: the claim is renewed while the handler runs; its write and the record commit once; ctx.tx refuses a late write`, async () => {
        const key = randomUUID();
        const handler = gate();
        let executions = 0;
        let kept: unknown;
        const app = await serve(db, async (ctx) => {
          executions++;
          kept = ctx.tx;
          handler.started();
          await handler.opened;
          await db.write(ctx.tx, ctx.key);
        });
        try {
          const controller = new AbortController();
          const gone = pay(app.url, key, controller.signal).then(
            () => 'answered',
            () => 'aborted',
          );
          await handler.running;
          controller.abort();
          expect(await gone).toBe('aborted');
          // Three more leases of renewal with the client gone (before, renewal stopped one lease
          // after the disconnect was noticed, and a retry took the key over).
          const firstLease = (await db.store.get({ scope: '', key }))!.leaseUntil;
          await until(async () => (await db.store.get({ scope: '', key }))!.leaseUntil > firstLease + 3 * LEASE_MS, 'the lease to be renewed');
          expect((await pay(app.url, key)).status).toBe(409);
          handler.open();
          await until(async () => (await db.store.get({ scope: '', key }))?.state === 'completed', 'the handler to commit');
          const retry = await pay(app.url, key);
          expect(retry.status).toBe(201);
          expect(retry.headers.get('idempotent-replayed')).toBe('true');
          expect(await retry.json()).toEqual({ paid: true });
          expect(await db.effects(key)).toBe(1);
          expect(executions).toBe(1);
          // The connection went back to the pool: a write through the kept handle is refused.
          await expect(Promise.resolve().then(() => db.write(kept, key))).rejects.toThrow(/ctx\.tx was used after its request ended/);
          expect(await db.effects(key)).toBe(1);
        } finally {
          handler.open();
          await app.close();
        }
      });
    }
  });
}
