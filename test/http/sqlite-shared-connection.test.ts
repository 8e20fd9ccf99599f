/**
 * Issue 16 item 3: an app passes one better-sqlite3 Database to the store and to its routes. A
 * write outside `ctx.tx` must never join (and vanish with) an idempotent request's transaction.
 * Real HTTP through the Hono adapter, real better-sqlite3 on a file, ordering by latches.
 */
import type { Database } from 'better-sqlite3';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyVariables } from '../../src/http/hono.js';
import { idempotency } from '../../src/http/hono.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteFile } from '../support/sqlite-file.js';
import type { SqliteFile } from '../support/sqlite-file.js';
import { testSqliteDriver } from '../support/sqlite-driver.js';
import type { TestApp } from './harness.js';
import { listenFetch } from './apps/listen.js';

function latch(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** Lets every callback queued so far run (a few turns of the event loop), without a timer. */
async function turns(n = 10): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('SQLite transactional mode with the app writing through the same Database (Hono, real HTTP)', () => {
  let file: SqliteFile;
  let db: Database;
  let store: SqliteStore<Database>;
  let app: TestApp;
  let payWrote = latch();
  let payMayThrow = latch();
  let logWaiting = latch();
  const count = (table: string) => (db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

  beforeAll(async () => {
    file = sqliteFile('shared.db');
    db = file.db;
    store = sqliteStore({ database: db });
    db.exec('CREATE TABLE payments (key TEXT NOT NULL); CREATE TABLE audit (note TEXT NOT NULL)');
    const hono = new Hono<{ Variables: IdempotencyVariables<Database> }>();
    hono.onError((error, c) => c.text(`${(error as { code?: string }).code ?? 'error'}: ${error.message}`, 500));
    hono.use('/pay', idempotency({ store, transactional: true }));
    hono.post('/pay', async (c) => {
      const ctx = c.get('idempotency')!;
      ctx.tx.prepare('INSERT INTO payments (key) VALUES (?)').run(ctx.key);
      payWrote.open();
      await payMayThrow.promise;
      throw new Error('card declined');
    });
    // The documented way to write outside a request: it waits for the open transaction, then writes.
    hono.post('/log', async (c) => {
      const note = await c.req.text();
      logWaiting.open();
      await store.exclusive((database) => database.prepare('INSERT INTO audit (note) VALUES (?)').run(note));
      return c.text('logged', 201);
    });
    // The misuse: a direct write through the shared Database while a transaction is open.
    hono.post('/log-direct', async (c) => {
      db.prepare('INSERT INTO audit (note) VALUES (?)').run(await c.req.text());
      return c.text('logged', 201);
    });
    app = await listenFetch(hono.fetch);
  });
  afterAll(async () => {
    await app.close();
    store.close();
    file.cleanup();
  });

  const post = (path: string, body: string, key?: string) =>
    fetch(`${app.url}${path}`, { method: 'POST', body, headers: { 'content-type': 'text/plain', ...(key ? { 'idempotency-key': key } : {}) } });

  it('an audit row written by /log while /pay is inside its transaction survives /pay throwing; /pay\'s row does not, and its key is released', async () => {
    payWrote = latch();
    payMayThrow = latch();
    logWaiting = latch();
    const pay = post('/pay', 'amount=10', 'pay-1');
    await payWrote.promise; // /pay wrote through ctx.tx and is awaiting, inside BEGIN IMMEDIATE
    const log = post('/log', 'audit: user opened the payment page');
    await logWaiting.promise;
    await turns();
    // /log waits for the transaction instead of joining it (or blocking the event loop on the file lock).
    expect(count('audit')).toBe(0);
    payMayThrow.open();
    const paid = await pay;
    expect(paid.status).toBe(500);
    expect((await log).status).toBe(201);
    expect(db.prepare('SELECT note FROM audit').all()).toEqual([{ note: 'audit: user opened the payment page' }]);
    expect(count('payments')).toBe(0);
    expect(await store.get({ scope: '', key: 'pay-1' })).toBeUndefined();
  });

  it('a direct write through the shared Database while /pay\'s transaction is open fails loudly (SQLITE_BUSY) and joins nothing', async () => {
    payWrote = latch();
    payMayThrow = latch();
    const pay = post('/pay', 'amount=20', 'pay-2');
    await payWrote.promise;
    const direct = await post('/log-direct', 'audit: direct');
    expect(direct.status).toBe(500);
    // node:sqlite says SQLITE_BUSY as errcode 5 under its own code.
    expect(await direct.text()).toMatch(testSqliteDriver === 'node:sqlite' ? /^ERR_SQLITE_ERROR: database is locked/ : /^SQLITE_BUSY: /);
    payMayThrow.open();
    expect((await pay).status).toBe(500);
    expect(count('payments')).toBe(0);
    expect(db.prepare("SELECT count(*) AS n FROM audit WHERE note = 'audit: direct'").get()).toEqual({ n: 0 });
    // Once no transaction is open, the same direct write works: nothing was left locked.
    expect((await post('/log-direct', 'audit: direct, later')).status).toBe(201);
    expect(db.prepare("SELECT count(*) AS n FROM audit WHERE note = 'audit: direct, later'").get()).toEqual({ n: 1 });
    expect(await store.get({ scope: '', key: 'pay-2' })).toBeUndefined();
  });
});
