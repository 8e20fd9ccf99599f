import { createConnection } from 'mysql2/promise';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { IllegalTransitionError } from '../../src/patterns/errors.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { stateMachine, transition } from '../../src/patterns/state-machine.js';
import { sqlExecutor, toPgPlaceholders } from '../../src/patterns/sql.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import type { TestDatabase } from '../support/databases.js';
import { mysqlDatabase, postgresDatabase, sqliteDatabase, sqliteWalFile } from '../support/databases.js';

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
    const { db, cleanup } = sqliteWalFile();
    expect(() => sqlExecutor(db, { joined: 'yes' as never })).toThrow(/`joined`/);
    expect(() => sqlExecutor(db, { join: true } as never)).toThrow(/`join`/);
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

const pgUp = await requireService(POSTGRES);
const mariaUp = await requireService(MARIADB);
describeExecutor('a PostgreSQL pool', pgUp, postgresDatabase);
describeExecutor('a MariaDB pool', mariaUp, mysqlDatabase);
describeExecutor('SQLite', true, sqliteDatabase);

// Single connections: the executor runs transactions on them itself and queues its other statements behind.
describeExecutor('a PostgreSQL client', pgUp, () => {
  const client = new pg.Client({ host: POSTGRES.host, port: POSTGRES.port, user: process.env.PGUSER ?? 'postgres', database: 'test' });
  const connected = client.connect();
  const tables: string[] = [];
  const db = sqlExecutor(client);
  const waiting: SqlExecutor = {
    dialect: 'postgres',
    query: async (sql, params) => (await connected, db.query(sql, params)),
    transaction: async (fn) => (await connected, db.transaction(fn)),
  };
  return {
    db: waiting,
    serial: 'SERIAL PRIMARY KEY',
    table: (tag) => {
      tables.push(`idem_pat_c${tag}_${process.pid}`);
      return tables.at(-1)!;
    },
    close: async () => {
      for (const t of tables) await client.query(`DROP TABLE IF EXISTS ${t}`);
      await client.end();
    },
  };
});
describeExecutor('a MariaDB connection', mariaUp, () => {
  const conn = createConnection({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test' });
  const tables: string[] = [];
  const db = conn.then((c) => sqlExecutor(c));
  return {
    db: { dialect: 'mysql', query: async (sql, params) => (await db).query(sql, params), transaction: async (fn) => (await db).transaction(fn) },
    serial: 'INT AUTO_INCREMENT PRIMARY KEY',
    table: (tag) => {
      tables.push(`idem_pat_c${tag}_${process.pid}`);
      return tables.at(-1)!;
    },
    close: async () => {
      const c = await conn;
      for (const t of tables) await c.query(`DROP TABLE IF EXISTS ${t}`);
      await c.end();
    },
  };
});

describe.skipIf(!pgUp)('a PostgreSQL client: statements wait for the transaction instead of joining it', () => {
  it('a statement sent while a transaction is open is not rolled back with it', async () => {
    const client = new pg.Client({ host: POSTGRES.host, port: POSTGRES.port, user: process.env.PGUSER ?? 'postgres', database: 'test' });
    await client.connect();
    const table = `idem_pat_gate_${process.pid}`;
    try {
      const a = sqlExecutor(client);
      await a.query(`CREATE TABLE ${table} (id INT PRIMARY KEY)`);
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let inside!: () => void;
      const entered = new Promise<void>((resolve) => (inside = resolve));
      const tx = a
        .transaction(async (t) => {
          await t.query(`INSERT INTO ${table} (id) VALUES (?)`, [1]);
          inside();
          await held;
          throw new Error('roll back');
        })
        .catch(() => 'rolled back');
      await entered;
      const write = sqlExecutor(client).query(`INSERT INTO ${table} (id) VALUES (?)`, [2]);
      release();
      expect(await tx).toBe('rolled back');
      await write;
      expect((await a.query(`SELECT id FROM ${table}`)).rows).toEqual([{ id: 2 }]);
    } finally {
      await client.query(`DROP TABLE IF EXISTS ${table}`);
      await client.end();
    }
  });
});

describe('any SqlExecutor-shaped object is used as it is', () => {
  it('a counting wrapper sees every statement a guard sends, and none for a refused transition', async () => {
    const { db, cleanup } = sqliteWalFile();
    try {
      const inner = sqlExecutor(db);
      const sent: string[] = [];
      const counting: SqlExecutor = {
        dialect: inner.dialect,
        query: (sql, params) => (sent.push(sql), inner.query(sql, params)),
        transaction: (fn) => inner.transaction(fn),
      };
      await inner.query("CREATE TABLE o (id INT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'NEW')");
      expect((await insertOnce(counting, { table: 'o', values: { id: 1 }, conflict: ['id'] })).inserted).toBe(true);
      expect(sent).toHaveLength(1);
      const machine = stateMachine({ NEW: ['DONE'], DONE: [] });
      await expect(transition(counting, { table: 'o', where: { id: 1 }, from: 'DONE', to: 'NEW', machine })).rejects.toThrow(IllegalTransitionError);
      expect(sent).toHaveLength(1);
      expect(await transition(counting, { table: 'o', where: { id: 1 }, to: 'DONE', machine })).toEqual({ changed: true });
      expect(sent).toHaveLength(2);
    } finally {
      cleanup();
    }
  });
});

describe('joined to a store transaction (transactional mode)', () => {
  it("SQLite: a guard on the store transaction's tx commits and rolls back with the completion", async () => {
    const { db, cleanup } = sqliteWalFile();
    try {
      const store = sqliteStore({ database: db });
      db.exec('CREATE TABLE p (k TEXT PRIMARY KEY, v INT)');
      const ref = { scope: 's', key: 'k' };
      const claim = await store.claim(ref, 'fp', { leaseMs: 60_000, windowMs: 600_000 });
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      const st = await store.beginTransaction();
      const tx = sqlExecutor(st.tx, { joined: true });
      expect((await insertOnce(tx, { table: 'p', values: { k: 'a', v: 1 }, conflict: ['k'] })).inserted).toBe(true);
      // A non-joined executor's statement waits for the store's transaction to end.
      const outside = sqlExecutor(db).query('SELECT count(*) AS n FROM p');
      await st.rollback();
      expect((await outside).rows).toEqual([{ n: 0 }]);
      expect(await store.get(ref)).toMatchObject({ state: 'in_flight' });
    } finally {
      cleanup();
    }
  });
});

describe('SQLite: the store and executors share one gate per Database', () => {
  it('a statement from another executor waits for an open transaction instead of joining it', async () => {
    const { db, cleanup } = sqliteWalFile();
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
    const { db, cleanup } = sqliteWalFile();
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
      // A direct write cannot join it either (the store's transaction is on its own connection): it fails at once.
      expect(() => db.prepare('INSERT INTO w (id) VALUES (3)').run()).toThrow(expect.objectContaining({ code: 'SQLITE_BUSY' }));
      storeTx.tx.prepare('INSERT INTO w (id) VALUES (4)').run();
      await storeTx.rollback();
      await write;
      expect((await exec.query('SELECT id FROM w ORDER BY id')).rows).toEqual([{ id: 2 }]);
      store.close();
    } finally {
      cleanup();
    }
  });
});
