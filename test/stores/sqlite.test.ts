import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { InvalidOptionError, LeaseLostError, StoreSchemaMissingError } from '../../src/core/errors.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteStatements } from '../../src/stores/sqlite/sql.js';
import { describeStoreContract } from './contract.js';
import { manualClock } from './manual-clock.js';

function tempDb() {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-sqlite-'));
  const db = new Database(join(dir, 'store.db'));
  return { db, file: join(dir, 'store.db'), cleanup: () => { db.close(); rmSync(dir, { recursive: true, force: true }); } };
}

describeStoreContract('sqlite', () => {
  const { db, cleanup } = tempDb();
  const clock = manualClock();
  return { store: sqliteStore({ database: db, clock: clock.now, maxResponseBytes: 64 * 1024 }), advance: clock.advance, close: cleanup };
});

describe('sqliteStore', () => {
  const ref = { scope: 't', key: 'k' };
  const opts = { leaseMs: 1000, windowMs: 5000 };
  const ok = { status: 201, headers: [], body: new Uint8Array([1]), bodyOmitted: false };

  it('uses WAL mode', () => {
    const { db, cleanup } = tempDb();
    sqliteStore({ database: db });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    cleanup();
  });

  it('commits the completion with the business write, or neither', async () => {
    const { db, cleanup } = tempDb();
    const store = sqliteStore({ database: db });
    db.exec('CREATE TABLE effects (v TEXT)');
    const claim = await store.claim(ref, 'fp', opts);
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    const rolled = await store.beginTransaction();
    rolled.tx.prepare("INSERT INTO effects VALUES ('x')").run();
    await rolled.complete(ref, claim.token, ok);
    await rolled.rollback();
    expect(db.prepare('SELECT count(*) AS n FROM effects').get()).toEqual({ n: 0 });
    expect((await store.get(ref))?.state).toBe('in_flight');
    const committed = await store.beginTransaction();
    committed.tx.prepare("INSERT INTO effects VALUES ('x')").run();
    await committed.complete(ref, claim.token, ok);
    await committed.commit();
    expect(db.prepare('SELECT count(*) AS n FROM effects').get()).toEqual({ n: 1 });
    expect((await store.get(ref))?.state).toBe('completed');
    cleanup();
  });

  it('fences the completion inside the transaction: a stale token rolls the business write back', async () => {
    const { db, cleanup } = tempDb();
    const clock = manualClock();
    const store = sqliteStore({ database: db, clock: clock.now });
    db.exec('CREATE TABLE effects (v TEXT)');
    const first = await store.claim(ref, 'fp', opts);
    if (first.kind !== 'acquired') throw new Error(first.kind);
    await clock.advance(1500);
    const second = await store.claim(ref, 'fp', opts);
    expect(second).toMatchObject({ kind: 'acquired', takeover: true });
    const late = await store.beginTransaction();
    late.tx.prepare("INSERT INTO effects VALUES ('late')").run();
    await expect(late.complete(ref, first.token, ok)).rejects.toBeInstanceOf(LeaseLostError);
    await late.rollback();
    expect(db.prepare('SELECT count(*) AS n FROM effects').get()).toEqual({ n: 0 });
    cleanup();
  });

  it('queues other work behind an open transaction so it cannot join it', async () => {
    const { db, cleanup } = tempDb();
    const store = sqliteStore({ database: db });
    const tx = await store.beginTransaction();
    let claimed = false;
    const pending = store.claim({ scope: 't', key: 'other' }, 'fp', opts).then(() => (claimed = true));
    await new Promise((r) => setImmediate(r));
    expect(claimed).toBe(false);
    await tx.rollback();
    await pending;
    expect((await store.get({ scope: 't', key: 'other' }))?.state).toBe('in_flight');
    cleanup();
  });

  it('validates its options eagerly, naming the option', () => {
    expect(() => sqliteStore({} as never)).toThrow(InvalidOptionError);
    const { db, cleanup } = tempDb();
    expect(() => sqliteStore({ database: db, table: 'x; DROP TABLE y' })).toThrow(/`table`/);
    expect(() => sqliteStore({ database: db, maxResponseBytes: -1 })).toThrow(/maxResponseBytes/);
    cleanup();
  });

  it('verify() passes on its table, and names a missing table or column with store.migrate() as the fix', async () => {
    const { db, cleanup } = tempDb();
    const store = sqliteStore({ database: db, table: 'verified_records' });
    await expect(store.verify()).resolves.toBeUndefined();
    db.exec('DROP TABLE verified_records');
    const missing = await store.verify().catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(StoreSchemaMissingError);
    expect(missing).toMatchObject({ code: 'ERR_IDEMKIT_STORE_SCHEMA_MISSING', missing: ['table verified_records'] });
    expect((missing as Error).message).toBe('sqlite store: missing table verified_records; run `store.migrate()`');
    store.migrate();
    await expect(store.verify()).resolves.toBeUndefined();
    db.exec('DROP TABLE verified_records; CREATE TABLE verified_records (scope TEXT, key TEXT, fingerprint TEXT, state TEXT, token TEXT, attempt INTEGER, lease_until INTEGER, expires_at INTEGER, status INTEGER, headers TEXT, body BLOB, body_omitted INTEGER)');
    await expect(store.verify()).rejects.toMatchObject({
      missing: ['column verified_records.recovery_point', 'column verified_records.recovery_data', 'column verified_records.created_at', 'column verified_records.updated_at'],
    });
    cleanup();
  });

  it('migrate() upgrades a table of the previous schema in place: old rows stay readable, with unknown times; new ones are stamped', async () => {
    const { db, cleanup } = tempDb();
    const clock = manualClock();
    // The schema before createdAt/updatedAt, as the previous release's migrate created it.
    db.exec(`CREATE TABLE upgraded (
      scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')), token TEXT NOT NULL, attempt INTEGER NOT NULL,
      lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL, recovery_point TEXT, recovery_data TEXT,
      status INTEGER, headers TEXT, body BLOB, body_omitted INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
    CREATE INDEX upgraded_expires_at ON upgraded (expires_at);`);
    const t = clock.now();
    db.prepare(
      `INSERT INTO upgraded (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body, body_omitted)
       VALUES ('t', 'old-done', 'fp', 'completed', '', 1, ?, ?, 201, '[]', X'7b7d', 0),
              ('t', 'old-running', 'fp', 'in_flight', ?, 1, ?, ?, NULL, NULL, NULL, 0)`,
    ).run(t - 1000, t + 60_000, 'a'.repeat(32), t + 1000, t + 60_000);
    // The factory migrates; then migrate() again finds nothing to add.
    const store = sqliteStore({ database: db, table: 'upgraded', clock: clock.now });
    const columns = (db.prepare(`SELECT name FROM pragma_table_info('upgraded')`).all() as Array<{ name: string }>).map((c) => c.name);
    expect(columns).toEqual(expect.arrayContaining(['created_at', 'updated_at']));
    expect(store.migrate()).toEqual([]);
    await expect(store.verify()).resolves.toBeUndefined();
    // The old rows: replayed as before, and shown with unknown times (null), not 1970.
    expect(await store.claim({ scope: 't', key: 'old-done' }, 'fp', opts)).toMatchObject({ kind: 'completed', response: { status: 201 } });
    expect(await store.admin.inspect({ scope: 't', key: 'old-done' })).toMatchObject({ state: 'completed', createdAt: null, updatedAt: null });
    // get() leaves them undefined (never 0, never 1970).
    const oldDone = await store.get({ scope: 't', key: 'old-done' });
    expect(oldDone).toMatchObject({ state: 'completed' });
    expect(oldDone!.createdAt).toBeUndefined();
    expect(oldDone!.updatedAt).toBeUndefined();
    // Its in-flight answer cannot say how long ago old-running's owner last wrote.
    const unknownAge = await store.claim({ scope: 't', key: 'old-running' }, 'fp', opts);
    expect(unknownAge).toMatchObject({ kind: 'in_flight', retryAfterMs: 1000 });
    expect(unknownAge.kind === 'in_flight' && unknownAge.renewedMsAgo).toBeUndefined();
    // --older-than falls back to the lease for them: old-done's lease ended, old-running's ends in 1 s.
    expect((await store.admin.list({ scope: 't', olderThanMs: 0 })).map((r) => r.key)).toEqual(['old-done']);
    await clock.advance(1000);
    // Abandoned now, and listed so, with unknown times.
    const abandoned = (await store.listAbandoned()).find((r) => r.key === 'old-running');
    expect(abandoned).toMatchObject({ state: 'in_flight', createdAt: undefined, updatedAt: undefined });
    // A take-over of an old row is a change (updatedAt), but its creation stays unknown.
    const taken = await store.claim({ scope: 't', key: 'old-running' }, 'fp', opts);
    expect(taken).toMatchObject({ kind: 'acquired', takeover: true });
    expect(await store.admin.inspect({ scope: 't', key: 'old-running' })).toMatchObject({ createdAt: null, updatedAt: clock.now() });
    const taken2 = await store.get({ scope: 't', key: 'old-running' });
    expect(taken2!.createdAt).toBeUndefined();
    expect(taken2!.updatedAt).toBe(clock.now());
    // New records get both.
    const fresh = await store.claim({ scope: 't', key: 'new' }, 'fp', opts);
    if (fresh.kind !== 'acquired') throw new Error(fresh.kind);
    expect(await store.admin.inspect({ scope: 't', key: 'new' })).toMatchObject({ createdAt: clock.now(), updatedAt: clock.now() });
    expect(await store.get({ scope: 't', key: 'new' })).toMatchObject({ createdAt: clock.now(), updatedAt: clock.now() });
    cleanup();
  });

  it('migrate() adds each missing column once, reports it, and is safe to run twice', () => {
    const { db, cleanup } = tempDb();
    const store = sqliteStore({ database: db, table: 'twice' });
    expect(store.migrate()).toEqual([]);
    db.exec('ALTER TABLE twice DROP COLUMN updated_at');
    expect(store.migrate()).toEqual(['column twice.updated_at']);
    expect(store.migrate()).toEqual([]);
    cleanup();
  });

  describe('the in-flight index (listAbandoned, endLeasesOf)', () => {
    const indexes = (db: InstanceType<typeof Database>, table: string) =>
      (db.prepare(`SELECT name FROM pragma_index_list('${table}') ORDER BY name`).all() as Array<{ name: string }>).map((r) => r.name);
    const warnings = () => {
      const lines: string[] = [];
      return { lines, logger: { warn: (message: string) => lines.push(message), error: (message: string) => lines.push(`error: ${message}`) } };
    };

    it('is created with the table, added to a table of the previous schema (reported once), and its absence is a warning from verify(), not a refusal', async () => {
      const { db, cleanup } = tempDb();
      try {
        const { lines, logger } = warnings();
        sqliteStore({ database: db, table: 'fresh', logger });
        expect(indexes(db, 'fresh')).toContain('fresh_in_flight');
        // The previous release's table: its expiry index, no in-flight index.
        db.exec(`CREATE TABLE older (
          scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
          state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')), token TEXT NOT NULL, attempt INTEGER NOT NULL,
          lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL, recovery_point TEXT, recovery_data TEXT,
          status INTEGER, headers TEXT, body BLOB, body_omitted INTEGER NOT NULL DEFAULT 0, created_at INTEGER, updated_at INTEGER,
          PRIMARY KEY (scope, key)
        ) WITHOUT ROWID;
        CREATE INDEX older_expires_at ON older (expires_at);`);
        const store = sqliteStore({ database: db, table: 'older', logger });
        expect(indexes(db, 'older')).toContain('older_in_flight');
        expect(store.migrate()).toEqual([]);
        await expect(store.verify()).resolves.toBeUndefined();
        expect(lines).toEqual([]);
        // Dropped by hand: verify() resolves, and says so once per call; migrate() puts it back and reports it.
        db.exec('DROP INDEX older_in_flight');
        await expect(store.verify()).resolves.toBeUndefined();
        expect(lines).toEqual([
          'idemkit: sqlite store: index older_in_flight is missing: listAbandoned (the completer) and endLeasesOf (startInstance) read the whole table without it; `store.migrate()` creates it (docs/stores/sqlite.md)',
        ]);
        // Without it the statements still answer: a matter of speed, not of correctness.
        expect(await store.listAbandoned()).toEqual([]);
        expect(store.migrate()).toEqual(['index older_in_flight']);
        expect(store.migrate()).toEqual([]);
        await store.verify();
        expect(lines).toHaveLength(1);
        // The partial index it is: the in-flight records by lease end.
        const sql = (db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'older_in_flight'`).get() as { sql: string }).sql;
        expect(sql).toMatch(/ON older \(lease_until\) WHERE state = 'in_flight'$/);
      } finally {
        cleanup();
      }
    });

    it("the store's listAbandoned and endLeasesOf statements read it, with and without ANALYZE statistics, on a table of completed records", () => {
      const { db, cleanup } = tempDb();
      try {
        sqliteStore({ database: db, table: 'planned' });
        const now = 1_700_000_000_000;
        // Every record's window ends at one instant (imported at once, or a clock that stood
        // still): with statistics, that made the planner take the expiry index for
        // `expires_at > @now` and sort, had the statement not kept it off that index.
        db.prepare(
          `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
           INSERT INTO planned (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, status, headers, body, body_omitted)
           SELECT 's', 'c' || i, 'fp', CASE WHEN i % 200 = 0 THEN 'in_flight' ELSE 'completed' END, '', 1,
                  @now - 3600000 + i * 100, @now + 86400000, 201, '[]', NULL, 0 FROM n`,
        ).run({ now });
        const sql = sqliteStatements(db, 'planned');
        const plan = (statement: object, params: object) =>
          (db.prepare(`EXPLAIN QUERY PLAN ${(statement as { source: string }).source}`).all(params) as Array<{ detail: string }>).map((r) => r.detail);
        const check = () => {
          expect(plan(sql.abandoned, { now, limit: 100 })).toEqual(['SEARCH planned USING INDEX planned_in_flight (lease_until<?)']);
          expect(plan(sql.endLeasesOf, { now, incarnation: 'a'.repeat(16) })).toEqual(['SEARCH planned USING INDEX planned_in_flight (lease_until>?)']);
          // …and list what they should: the 100 in flight whose lease is over, oldest first.
          const listed = sql.abandoned.all({ now, limit: 1000 }) as Array<{ key: string }>;
          expect(listed).toHaveLength(100);
          expect(listed[0]!.key).toBe('c200');
        };
        check();
        db.exec('ANALYZE');
        check();
      } finally {
        cleanup();
      }
    });
  });

  it('runs transactions on a connection of its own: a write through `database` cannot join one, and fails at once instead of waiting for the lock', async () => {
    const { db, cleanup } = tempDb();
    const store = sqliteStore({ database: db });
    db.exec('CREATE TABLE effects (v TEXT)');
    const tx = await store.beginTransaction();
    expect(tx.tx).not.toBe(db);
    expect(tx.tx).toBeInstanceOf(Database);
    expect(db.inTransaction).toBe(false);
    tx.tx.prepare("INSERT INTO effects VALUES ('in tx')").run();
    // This thread holds the lock the write would wait for: busy timeout 0 while the transaction is open.
    expect(db.pragma('busy_timeout', { simple: true })).toBe(0);
    expect(() => db.prepare("INSERT INTO effects VALUES ('direct')").run()).toThrow(expect.objectContaining({ code: 'SQLITE_BUSY' }));
    // Reads go on (WAL) and see only what is committed.
    expect(db.prepare('SELECT count(*) AS n FROM effects').get()).toEqual({ n: 0 });
    const written: string[] = [];
    const outside = store.exclusive((database) => {
      database.prepare("INSERT INTO effects VALUES ('outside')").run();
      written.push('outside');
      return 'done';
    });
    await new Promise((r) => setImmediate(r));
    expect(written).toEqual([]);
    await tx.rollback();
    expect(db.pragma('busy_timeout', { simple: true })).toBe(5000);
    await expect(outside).resolves.toBe('done');
    expect(db.prepare('SELECT v FROM effects').all()).toEqual([{ v: 'outside' }]);
    store.close();
    cleanup();
  });

  it('opens its transaction connection with `open`, once, and refuses `database` itself', async () => {
    const { db, file, cleanup } = tempDb();
    let opened = 0;
    const store = sqliteStore({ database: db, open: () => (opened++, new Database(file)) });
    expect(opened).toBe(0); // not before the first transaction
    await (await store.beginTransaction()).rollback();
    await (await store.beginTransaction()).commit();
    expect(opened).toBe(1);
    store.close();
    const same = sqliteStore({ database: db, open: () => db });
    await expect(same.beginTransaction()).rejects.toThrow(/Invalid option `open`: .*not `database` itself/);
    expect(() => sqliteStore({ database: db, open: 'store.db' as never })).toThrow(/`open`/);
    cleanup();
  });

  it('a COMMIT that fails rolls the transaction back, so the file is not left locked', async () => {
    const { db, file, cleanup } = tempDb();
    db.exec('CREATE TABLE parent (id INTEGER PRIMARY KEY); CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)');
    const store = sqliteStore({
      database: db,
      open: () => {
        const conn = new Database(file);
        conn.pragma('foreign_keys = ON');
        return conn;
      },
    });
    const tx = await store.beginTransaction();
    tx.tx.prepare('INSERT INTO child VALUES (42)').run(); // checked at COMMIT: no parent 42
    await expect(tx.commit()).rejects.toMatchObject({ code: 'SQLITE_CONSTRAINT_FOREIGNKEY' });
    expect(tx.tx.inTransaction).toBe(false);
    expect(db.pragma('busy_timeout', { simple: true })).toBe(5000);
    db.prepare('INSERT INTO parent VALUES (1)').run(); // the file is free again
    expect(db.prepare('SELECT count(*) AS n FROM child').get()).toEqual({ n: 0 });
    await (await store.beginTransaction()).rollback(); // and the store's connection takes a new one
    store.close();
    cleanup();
  });

  it('refuses transactional mode on an in-memory database when it is mounted, naming the fix; without transactions it is fine', async () => {
    const db = new Database(':memory:');
    const store = sqliteStore({ database: db });
    expect(() => new IdempotencyEngine({ store, transactional: true })).toThrow(/Invalid option `database`: .*open the Database on a file/);
    await expect(store.beginTransaction()).rejects.toBeInstanceOf(InvalidOptionError);
    expect(() => new IdempotencyEngine({ store })).not.toThrow();
    expect((await store.claim(ref, 'fp', opts)).kind).toBe('acquired');
    db.close();
  });
});
