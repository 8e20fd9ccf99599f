import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError, LeaseLostError } from '../../src/core/errors.js';
import { sqliteStore } from '../../src/stores/sqlite.js';
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
});
