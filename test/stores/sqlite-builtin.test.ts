/**
 * The SQLite store on the runtime's built-in SQLite (issue 31, item 2): `node:sqlite`'s
 * DatabaseSync on Node 22.5+ and Deno, `bun:sqlite`'s Database on Bun. The store contract and what
 * differs between the drivers: pragmas, the transaction connection opened with the Database's own
 * constructor, SQLITE_BUSY's shape, a statement that returns no row. Node 20 has neither, so the
 * suite is skipped there (`npm run test:runtimes` runs it on Node 22, 24, Bun and Deno).
 */
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { StoreBusyError } from '../../src/core/errors.js';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqliteDatabase } from '../../src/drivers/sqlite.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { describeStoreContract } from './contract.js';
import { manualClock } from './manual-clock.js';

type Builtin = SqliteDatabase & { close(): void };
type Open = new (file: string) => Builtin;

const require = createRequire(import.meta.url);
const onBun = typeof (process.versions as Record<string, string | undefined>).bun === 'string';

function builtin(): { name: string; Open: Open } | undefined {
  if (onBun) return { name: 'bun:sqlite', Open: (require('bun:sqlite') as { Database: Open }).Database };
  try {
    return { name: 'node:sqlite', Open: (require('node:sqlite') as { DatabaseSync: Open }).DatabaseSync };
  } catch {
    return undefined; // Node 20: no node:sqlite.
  }
}

const driver = builtin();

function tempDb(Open: Open) {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-builtin-'));
  const file = join(dir, 'store.db');
  const db = new Open(file);
  return { db, file, cleanup: () => { db.close(); rmSync(dir, { recursive: true, force: true }); } };
}

const count = (db: SqliteDatabase, sql: string) => Number((db.prepare(sql).get() as { n: number | bigint }).n);

if (driver === undefined) {
  describe.skip('sqlite store on a built-in SQLite (none on this runtime)', () => {
    it('needs node:sqlite or bun:sqlite', () => {});
  });
} else {
  const { name, Open } = driver;

  describeStoreContract(`sqlite on ${name}`, () => {
    const { db, cleanup } = tempDb(Open);
    const clock = manualClock();
    return { store: sqliteStore({ database: db, clock: clock.now, maxResponseBytes: 64 * 1024 }), advance: clock.advance, close: cleanup };
  });

  describe(`sqliteStore on ${name}`, () => {
    const ref = { scope: 't', key: 'k' };
    const opts = { leaseMs: 1000, windowMs: 5000 };
    const ok = { status: 201, headers: [['content-type', 'text/plain']] as Array<[string, string]>, body: new Uint8Array([1, 2, 3]), bodyOmitted: false };

    it('sets WAL mode, replays bytes as stored, and reads an unknown key as undefined', async () => {
      const { db, cleanup } = tempDb(Open);
      const store = sqliteStore({ database: db });
      expect((db.prepare('PRAGMA journal_mode').get() as { journal_mode: string }).journal_mode).toBe('wal');
      expect(await store.get({ scope: 't', key: 'none' })).toBeUndefined();
      const claim = await store.claim(ref, 'fp', opts);
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      await store.complete(ref, claim.token, ok);
      const again = await store.claim(ref, 'fp', opts);
      expect(again).toMatchObject({ kind: 'completed', response: { status: 201, headers: [['content-type', 'text/plain']], bodyOmitted: false } });
      expect(again.kind === 'completed' && [...again.response.body!]).toEqual([1, 2, 3]);
      await store.verify();
      cleanup();
    });

    it('commits the completion with the business write on a connection it opens with the same constructor, or neither', async () => {
      const { db, cleanup } = tempDb(Open);
      const store = sqliteStore({ database: db });
      db.exec('CREATE TABLE effects (v TEXT)');
      const claim = await store.claim(ref, 'fp', opts);
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      const rolled = await store.beginTransaction();
      expect(rolled.tx).toBeInstanceOf(Open);
      expect(rolled.tx).not.toBe(db);
      rolled.tx.prepare("INSERT INTO effects VALUES ('x')").run();
      await rolled.complete(ref, claim.token, ok);
      await rolled.rollback();
      expect(count(db, 'SELECT count(*) AS n FROM effects')).toBe(0);
      expect((await store.get(ref))?.state).toBe('in_flight');
      const committed = await store.beginTransaction();
      committed.tx.prepare("INSERT INTO effects VALUES ('x')").run();
      await committed.complete(ref, claim.token, ok);
      await committed.commit();
      expect(count(db, 'SELECT count(*) AS n FROM effects')).toBe(1);
      expect((await store.get(ref))?.state).toBe('completed');
      store.close();
      cleanup();
    });

    it('a write through `database` while a transaction is open fails at once with SQLITE_BUSY, which the store reports as store-busy from another connection', async () => {
      const { db, file, cleanup } = tempDb(Open);
      const store = sqliteStore({ database: db, busyTimeoutMs: 50 });
      db.exec('CREATE TABLE effects (v TEXT)');
      const tx = await store.beginTransaction();
      expect(() => db.prepare("INSERT INTO effects VALUES ('direct')").run()).toThrow(/locked|busy/i);
      await tx.rollback();
      // Another connection on the file holds the write lock: the store's claim waits its busy
      // timeout, then answers store-busy.
      const other = new Open(file);
      other.exec('BEGIN IMMEDIATE');
      await expect(store.claim({ scope: 't', key: 'busy' }, 'fp', opts)).rejects.toBeInstanceOf(StoreBusyError);
      other.exec('ROLLBACK');
      other.close();
      store.close();
      cleanup();
    });

    it('refuses transactional mode on an in-memory database, naming the fix; without transactions it is fine', async () => {
      const db = new Open(':memory:');
      const store = sqliteStore({ database: db });
      expect(() => new IdempotencyEngine({ store, transactional: true })).toThrow(/in-memory or temporary database cannot be opened twice/);
      const claim = await store.claim(ref, 'fp', opts);
      expect(claim.kind).toBe('acquired');
      db.close();
    });

    it('the SQL executor reads rows, counts writes and rolls a failed transaction back', async () => {
      const { db, cleanup } = tempDb(Open);
      const sql = sqlExecutor(db);
      await sql.query('CREATE TABLE t (id INTEGER PRIMARY KEY, flag INTEGER)');
      expect((await sql.query('INSERT INTO t (flag) VALUES (?), (?)', [true, false])).affected).toBe(2);
      expect((await sql.query<{ flag: number }>('SELECT flag FROM t ORDER BY id')).rows.map((r) => Number(r.flag))).toEqual([1, 0]);
      await expect(
        sql.transaction(async (tx) => {
          await tx.query('DELETE FROM t');
          throw new Error('no');
        }),
      ).rejects.toThrow('no');
      expect(count(db, 'SELECT count(*) AS n FROM t')).toBe(2);
      expect((await sql.query('UPDATE t SET flag = 2 WHERE id = ?', [1])).affected).toBe(1);
      cleanup();
    });
  });
}
