/**
 * Issue 26 item 2, on the raw drivers (the SQL stores' own transactional mode): what a handler
 * kept of `ctx.tx` cannot write once its request has answered, even through a driver object a
 * property leads to (mysql2's `connection.connection`, pg's `client.connection`), which would
 * otherwise write in autocommit on a connection back in its pool. A query the handler started
 * (a native Promise) still resolves after the answer: it ran inside the transaction.
 */
import { randomUUID } from 'node:crypto';
import type Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { TransactionEndedError } from '../../src/core/errors.js';
import { withIdempotency } from '../../src/http/web.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import { sqliteFile } from '../support/sqlite-file.js';
import { testSqliteDriver } from '../support/sqlite-driver.js';

const suffix = randomUUID().slice(0, 8);
const post = (key: string) => new Request('http://x/pay', { method: 'POST', headers: { 'idempotency-key': key } });

describe.skipIf(!(await requireService(POSTGRES)))('pg: what a handler kept of ctx.tx', () => {
  const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:5432/test', max: 2 });
  pool.on('error', () => {});
  const table = `fence_idem_${suffix}`;
  const orders = `fence_orders_${suffix}`;
  const store = postgresStore({ pool, table });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
    await pool.end();
  });
  const count = async (key: string) => Number((await pool.query(`SELECT count(*) AS n FROM ${orders} WHERE key = $1`, [key])).rows[0].n);

  it('refuses its connection object after the answer; a query it started resolves', async () => {
    await store.migrate();
    await pool.query(`CREATE TABLE IF NOT EXISTS ${orders} (key text NOT NULL)`);
    let kept!: pg.PoolClient;
    let started!: Promise<pg.QueryResult>;
    const handler = withIdempotency(
      async (_request, ctx) => {
        kept = ctx!.tx;
        await ctx!.tx.query(`INSERT INTO ${orders} (key) VALUES ($1)`, [ctx!.key]);
        started = ctx!.tx.query('SELECT 1 AS one');
        return new Response('ok', { status: 201 });
      },
      { store, transactional: true, scope: () => 'fence' },
    );
    const key = randomUUID();
    expect((await handler(post(key))).status).toBe(201);
    expect((await started).rows).toEqual([{ one: 1 }]);
    const connection = (kept as unknown as { connection: { query(sql: string): void } }).connection;
    expect(() => connection.query(`INSERT INTO ${orders} (key) VALUES ('${key}')`)).toThrow(TransactionEndedError);
    await expect(async () => kept.query(`INSERT INTO ${orders} (key) VALUES ($1)`, [key])).rejects.toBeInstanceOf(TransactionEndedError);
    expect(await count(key)).toBe(1);
  });
});

describe.skipIf(!(await requireService(MARIADB)))('mysql2: what a handler kept of ctx.tx', () => {
  const pool = mysql.createPool({ uri: 'mysql://root@127.0.0.1:3306/test', connectionLimit: 2 });
  const table = `fence_idem_${suffix}`;
  const orders = `fence_orders_${suffix}`;
  const store = mysqlStore({ pool, table });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS ${orders}, ${table}`);
    await pool.end();
  });
  const count = async (key: string) => Number(((await pool.query(`SELECT count(*) AS n FROM ${orders} WHERE \`key\` = ?`, [key]))[0] as Array<{ n: number }>)[0]!.n);

  it('refuses ctx.tx.connection (the callback connection) after the answer; a query it started resolves', async () => {
    await store.migrate();
    await pool.query(`CREATE TABLE IF NOT EXISTS ${orders} (\`key\` VARCHAR(64) NOT NULL)`);
    let kept!: mysql.PoolConnection;
    let connection!: { query(sql: string, params: unknown[], done: (error: unknown) => void): void };
    let started!: Promise<unknown>;
    const handler = withIdempotency(
      async (_request, ctx) => {
        kept = ctx!.tx;
        connection = ctx!.tx.connection as unknown as typeof connection;
        await ctx!.tx.query(`INSERT INTO ${orders} (\`key\`) VALUES (?)`, [ctx!.key]);
        started = ctx!.tx.query('SELECT 1 AS one');
        return new Response('ok', { status: 201 });
      },
      { store, transactional: true, scope: () => 'fence' },
    );
    const key = randomUUID();
    expect((await handler(post(key))).status).toBe(201);
    expect(((await started) as [unknown[]])[0]).toEqual([{ one: 1 }]);
    // Kept inside the handler, or read from the kept handle afterwards: the same refusal.
    for (const late of [connection, kept.connection as unknown as typeof connection]) {
      expect(() => late.query(`INSERT INTO ${orders} (\`key\`) VALUES (?)`, [key], () => {})).toThrow(/ctx\.tx was used after its request ended/);
    }
    await expect(async () => kept.query(`INSERT INTO ${orders} (\`key\`) VALUES (?)`, [key])).rejects.toBeInstanceOf(TransactionEndedError);
    // Anything the refused calls had sent would be in by now: one more statement on the same pool.
    expect(await count(key)).toBe(1);
  });
});

// better-sqlite3's own API (transaction()): skipped where it does not load (test/support/sqlite-driver.ts).
describe.skipIf(testSqliteDriver !== 'better-sqlite3')('better-sqlite3: what a handler kept of ctx.tx', () => {
  it('refuses a statement and a transaction function it prepared, once it answered', async () => {
    const { db, cleanup } = sqliteFile();
    db.exec('CREATE TABLE orders (key TEXT NOT NULL)');
    const store = sqliteStore({ database: db });
    let insert!: Database.Statement;
    let insertTwice!: (key: string) => void;
    const handler = withIdempotency(
      async (_request, ctx) => {
        insert = ctx!.tx.prepare('INSERT INTO orders (key) VALUES (?)');
        insert.run(ctx!.key);
        insertTwice = ctx!.tx.transaction((key: string) => {
          insert.run(key);
          insert.run(key);
        });
        return new Response('ok', { status: 201 });
      },
      { store, transactional: true, scope: () => 'fence' },
    );
    try {
      const key = randomUUID();
      expect((await handler(post(key))).status).toBe(201);
      expect(() => insert.run(key)).toThrow(TransactionEndedError);
      expect(() => insertTwice(key)).toThrow(TransactionEndedError);
      expect((db.prepare('SELECT count(*) AS n FROM orders').get() as { n: number }).n).toBe(1);
    } finally {
      store.close();
      cleanup();
    }
  });
});
