import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { sqlExecutor, toPgPlaceholders } from '../../src/patterns/sql.js';
import { sqliteStore } from '../../src/stores/sqlite.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import type { TestDatabase } from './databases.js';
import { mysqlDatabase, postgresDatabase, sqliteDatabase, sqliteFile } from './databases.js';

describe('toPgPlaceholders', () => {
  it('numbers ? outside literals, quoted names and comments', () => {
    expect(toPgPlaceholders(`SELECT ? , '?', "a?b", $$x?$$, $t$?$t$ -- ?\n, ? /* ? */ , 'it''s ?', ?`)).toBe(
      `SELECT $1 , '?', "a?b", $$x?$$, $t$?$t$ -- ?\n, $2 /* ? */ , 'it''s ?', $3`,
    );
  });
});

describe('sqlExecutor options', () => {
  it('refuses what is not a database, and a joined pool', () => {
    expect(() => sqlExecutor({} as never)).toThrow(InvalidOptionError);
    expect(() => sqlExecutor(null as never)).toThrow(/`db`/);
    const fakePgPool = { query: async () => ({ rows: [], rowCount: 0 }), connect: async () => ({}), totalCount: 0 };
    expect(() => sqlExecutor(fakePgPool as never, { joined: true })).toThrow(/`joined`/);
    const { db, cleanup } = sqliteFile();
    expect(() => sqlExecutor(db, { joined: 'yes' as never })).toThrow(/`joined`/);
    cleanup();
  });
});

function describeExecutor(name: string, available: boolean, open: () => TestDatabase) {
  describe.skipIf(!available)(`sqlExecutor on ${name}`, () => {
    it('runs statements with ? placeholders and reports affected rows', async () => {
      const t = open();
      try {
        const table = t.table('exec');
        await t.db.query(`CREATE TABLE ${table} (id INT PRIMARY KEY, note VARCHAR(20))`);
        expect((await t.db.query(`INSERT INTO ${table} (id, note) VALUES (?, ?), (?, ?)`, [1, 'a', 2, 'b'])).affected).toBe(2);
        expect((await t.db.query(`UPDATE ${table} SET note = ? WHERE id >= ?`, ['c', 1])).affected).toBe(2);
        const { rows } = await t.db.query<{ id: number; note: string }>(`SELECT id, note FROM ${table} WHERE note = ? ORDER BY id`, ['c']);
        expect(rows.map((r) => Number(r.id))).toEqual([1, 2]);
      } finally {
        await t.close();
      }
    });

    it('commits a transaction, rolls back on throw, and nests with savepoints', async () => {
      const t = open();
      try {
        const table = t.table('tx');
        await t.db.query(`CREATE TABLE ${table} (id INT PRIMARY KEY)`);
        await t.db.transaction(async (tx) => {
          await tx.query(`INSERT INTO ${table} (id) VALUES (?)`, [1]);
          await expect(
            tx.transaction(async (inner) => {
              await inner.query(`INSERT INTO ${table} (id) VALUES (?)`, [2]);
              throw new Error('inner fails');
            }),
          ).rejects.toThrow('inner fails');
          await tx.transaction(async (inner) => inner.query(`INSERT INTO ${table} (id) VALUES (?)`, [3]));
        });
        await expect(
          t.db.transaction(async (tx) => {
            await tx.query(`INSERT INTO ${table} (id) VALUES (?)`, [4]);
            throw new Error('outer fails');
          }),
        ).rejects.toThrow('outer fails');
        const { rows } = await t.db.query<{ id: number }>(`SELECT id FROM ${table} ORDER BY id`);
        expect(rows.map((r) => Number(r.id))).toEqual([1, 3]);
      } finally {
        await t.close();
      }
    });
  });
}

describeExecutor('PostgreSQL', await requireService(POSTGRES), postgresDatabase);
describeExecutor('MariaDB', await requireService(MARIADB), mysqlDatabase);
describeExecutor('SQLite', true, sqliteDatabase);

describe('SQLite: the store and executors share one gate per Database', () => {
  it('a statement from another executor waits for an open transaction instead of joining it', async () => {
    const { db, cleanup } = sqliteFile();
    try {
      const a = sqlExecutor(db);
      const b = sqlExecutor(db);
      await a.query('CREATE TABLE g (id INTEGER PRIMARY KEY)');
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let inside!: () => void;
      const entered = new Promise<void>((resolve) => (inside = resolve));
      const tx = a
        .transaction(async (t) => {
          await t.query('INSERT INTO g (id) VALUES (?)', [1]);
          inside();
          await held;
          throw new Error('roll back');
        })
        .catch(() => 'rolled back');
      await entered;
      // b's insert is queued behind a's transaction: had it joined, the rollback would take it too.
      const write = b.query('INSERT INTO g (id) VALUES (?)', [2]);
      release();
      expect(await tx).toBe('rolled back');
      await write;
      expect((await b.query<{ id: number }>('SELECT id FROM g')).rows).toEqual([{ id: 2 }]);
    } finally {
      cleanup();
    }
  });

  it("the store's claim waits for an executor's transaction, and an executor waits for the store's", async () => {
    const { db, cleanup } = sqliteFile();
    try {
      const store = sqliteStore({ database: db });
      const exec = sqlExecutor(db);
      await exec.query('CREATE TABLE w (id INTEGER PRIMARY KEY)');
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let inside!: () => void;
      const entered = new Promise<void>((resolve) => (inside = resolve));
      const tx = exec
        .transaction(async (t) => {
          await t.query('INSERT INTO w (id) VALUES (1)');
          inside();
          await held;
          throw new Error('roll back');
        })
        .catch(() => 'rolled back');
      await entered;
      const claim = store.claim({ scope: 's', key: 'k' }, 'fp', { leaseMs: 1000, windowMs: 5000 });
      release();
      await tx;
      expect((await claim).kind).toBe('acquired');
      expect(await store.get({ scope: 's', key: 'k' })).toBeDefined();

      // The other way round: the store's transaction holds the gate; the executor's write waits.
      const storeTx = await store.beginTransaction();
      const write = exec.query('INSERT INTO w (id) VALUES (2)');
      db.prepare('INSERT INTO w (id) VALUES (3)').run();
      await storeTx.rollback();
      await write;
      expect((await exec.query('SELECT id FROM w ORDER BY id')).rows).toEqual([{ id: 2 }]);
    } finally {
      cleanup();
    }
  });
});
