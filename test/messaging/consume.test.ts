import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { consumeOnce, migrateProcessed, reapProcessed, MissingMessageIdError, InvalidMessageIdError } from '../../src/messaging/index.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import type { TestDatabase } from '../support/databases.js';
import { mysqlDatabase, postgresDatabase, sqliteDatabase } from '../support/databases.js';

const hasPg = await requireService(POSTGRES);
const hasMaria = await requireService(MARIADB);

const DAY = 24 * 60 * 60 * 1000;

function suite(label: string, available: boolean, make: () => TestDatabase) {
  describe.skipIf(!available)(`consumeOnce on ${label}`, () => {
    let t: TestDatabase;
    let table: string;
    let effects: string;
    let db: SqlExecutor;

    beforeAll(async () => {
      t = make();
      db = t.db;
      table = t.table('processed');
      effects = t.table('effects');
      await migrateProcessed(db, { table });
      await migrateProcessed(db, { table }); // idempotent
      await db.query(`CREATE TABLE ${effects} (message_id VARCHAR(255) NOT NULL, consumer VARCHAR(64) NOT NULL)`);
    });
    afterAll(async () => t?.close());

    const effect = (tx: SqlExecutor, id: string, consumer = 'c1') => tx.query(`INSERT INTO ${effects} (message_id, consumer) VALUES (?, ?)`, [id, consumer]);
    const countEffects = async (id: string) =>
      Number((await db.query<{ n: unknown }>(`SELECT COUNT(*) AS n FROM ${effects} WHERE message_id = ?`, [id])).rows[0]!.n);
    const countRecords = async (id: string) =>
      Number((await db.query<{ n: unknown }>(`SELECT COUNT(*) AS n FROM ${table} WHERE message_id = ?`, [id])).rows[0]!.n);

    it('processes a message once and reports the duplicate without running the handler', async () => {
      let runs = 0;
      const handler = async (tx: SqlExecutor) => {
        runs++;
        await effect(tx, 'm1');
        return 'done';
      };
      expect(await consumeOnce({ db, table, consumer: 'c1', messageId: 'm1' }, handler)).toEqual({ status: 'processed', value: 'done' });
      expect(await consumeOnce({ db, table, consumer: 'c1', messageId: 'm1' }, handler)).toEqual({ status: 'duplicate' });
      expect(runs).toBe(1);
      expect(await countEffects('m1')).toBe(1);
      // Another consumer processes the same id on its own.
      expect((await consumeOnce({ db, table, consumer: 'c2', messageId: 'm1' }, async () => 'x')).status).toBe('processed');
      // Ids are compared exactly (binary collation on MariaDB).
      expect((await consumeOnce({ db, table, consumer: 'c1', messageId: 'M1' }, async () => 'x')).status).toBe('processed');
    });

    it('leaves no record and no writes when the handler throws, so the redelivery runs it', async () => {
      await expect(
        consumeOnce({ db, table, consumer: 'c1', messageId: 'm2' }, async (tx) => {
          await effect(tx, 'm2');
          throw new Error('boom');
        }),
      ).rejects.toThrow('boom');
      expect(await countRecords('m2')).toBe(0);
      expect(await countEffects('m2')).toBe(0);
      const again = await consumeOnce({ db, table, consumer: 'c1', messageId: 'm2' }, async (tx) => effect(tx, 'm2'));
      expect(again.status).toBe('processed');
      expect(await countEffects('m2')).toBe(1);
    });

    it('runs one of many concurrent deliveries of one id; the others wait and answer duplicate', async () => {
      const n = 12;
      const results = await Promise.all(
        Array.from({ length: n }, () => consumeOnce({ db, table, consumer: 'c1', messageId: 'm3' }, async (tx) => effect(tx, 'm3'))),
      );
      expect(results.filter((r) => r.status === 'processed')).toHaveLength(1);
      expect(results.filter((r) => r.status === 'duplicate')).toHaveLength(n - 1);
      expect(await countEffects('m3')).toBe(1);
    });

    it('lets a waiting delivery proceed when the first concurrent one rolls back', async () => {
      const n = 8;
      let calls = 0;
      const settled = await Promise.allSettled(
        Array.from({ length: n }, () =>
          consumeOnce({ db, table, consumer: 'c1', messageId: 'm4' }, async (tx) => {
            const call = ++calls;
            await effect(tx, 'm4');
            if (call === 1) throw new Error('first attempt fails');
            return call;
          }),
        ),
      );
      const rejected = settled.filter((s) => s.status === 'rejected');
      const values = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
      expect(rejected.map((r) => String((r as PromiseRejectedResult).reason))).toEqual(['Error: first attempt fails']);
      expect(values.filter((r) => r.status === 'processed')).toHaveLength(1);
      expect(values.filter((r) => r.status === 'duplicate')).toHaveLength(n - 2);
      expect(await countEffects('m4')).toBe(1);
      expect(await countRecords('m4')).toBe(1);
    });

    it('processes 150 ids delivered 3 times each, all at once, exactly once each', async () => {
      const ids = Array.from({ length: 150 }, (_, i) => `bulk-${i}`);
      const deliveries = ids.flatMap((id) => [id, id, id]).sort(() => Math.random() - 0.5);
      const results = await Promise.all(deliveries.map((id) => consumeOnce({ db, table, consumer: 'bulk', messageId: id }, async (tx) => effect(tx, id, 'bulk'))));
      expect(results.filter((r) => r.status === 'processed')).toHaveLength(150);
      expect(results.filter((r) => r.status === 'duplicate')).toHaveLength(300);
      const { rows } = await db.query<{ n: unknown; d: unknown }>(`SELECT COUNT(*) AS n, COUNT(DISTINCT message_id) AS d FROM ${effects} WHERE consumer = 'bulk'`);
      expect(Number(rows[0]!.n)).toBe(150);
      expect(Number(rows[0]!.d)).toBe(150);
    });

    it('joins the caller’s open transaction through a savepoint (joined executor)', async () => {
      // Outer transaction rolls back: neither the record nor the effect stays.
      await expect(
        db.transaction(async (outer) => {
          expect((await consumeOnce({ db: outer, table, consumer: 'c1', messageId: 'j1' }, (tx) => effect(tx, 'j1'))).status).toBe('processed');
          // Inside the same transaction the record is already visible: a duplicate.
          expect((await consumeOnce({ db: outer, table, consumer: 'c1', messageId: 'j1' }, (tx) => effect(tx, 'j1'))).status).toBe('duplicate');
          throw new Error('outer rollback');
        }),
      ).rejects.toThrow('outer rollback');
      expect(await countRecords('j1')).toBe(0);
      expect(await countEffects('j1')).toBe(0);
      // A failing handler rolls back its savepoint only: the outer transaction's own writes commit.
      await db.transaction(async (outer) => {
        await effect(outer, 'j2-outer');
        await expect(
          consumeOnce({ db: outer, table, consumer: 'c1', messageId: 'j2' }, async (tx) => {
            await effect(tx, 'j2');
            throw new Error('inner');
          }),
        ).rejects.toThrow('inner');
      });
      expect(await countEffects('j2-outer')).toBe(1);
      expect(await countEffects('j2')).toBe(0);
      expect(await countRecords('j2')).toBe(0);
    });

    it('reaps records past their retention window, in batches of at most `limit`', async () => {
      const base = Date.now();
      const at = (ms: number) => () => base + ms;
      for (let i = 0; i < 5; i++) {
        await consumeOnce({ db, table, consumer: 'reap', messageId: `r${i}`, retentionMs: DAY, clock: at(0) }, async () => i);
      }
      await consumeOnce({ db, table, consumer: 'reap', messageId: 'keep', retentionMs: 90 * DAY, clock: at(0) }, async () => 0);
      expect(await reapProcessed(db, { table, clock: at(DAY - 1) })).toBe(0);
      expect(await reapProcessed(db, { table, clock: at(DAY), limit: 3 })).toBe(3);
      expect(await reapProcessed(db, { table, clock: at(DAY), limit: 3 })).toBe(2);
      expect(await reapProcessed(db, { table, clock: at(DAY) })).toBe(0);
      // Reaped: a late redelivery is processed again (the retention trade-off).
      expect((await consumeOnce({ db, table, consumer: 'reap', messageId: 'r0', clock: at(DAY) }, async () => 1)).status).toBe('processed');
      expect((await consumeOnce({ db, table, consumer: 'reap', messageId: 'keep', clock: at(DAY) }, async () => 1)).status).toBe('duplicate');
    });
  });
}

suite('PostgreSQL', hasPg, postgresDatabase);
suite('MariaDB', hasMaria, mysqlDatabase);
suite('SQLite', true, sqliteDatabase);

describe('consumeOnce input checks', () => {
  const t = sqliteDatabase();
  afterAll(() => t.close());
  const ok = async () => 1;

  it('refuses a missing message id, naming the problem', async () => {
    for (const messageId of [undefined, '', null]) {
      const error = await consumeOnce({ db: t.db, consumer: 'c', messageId: messageId as unknown as string }, ok).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MissingMessageIdError);
      expect((error as MissingMessageIdError).code).toBe('ERR_IDEMKIT_MESSAGE_ID_MISSING');
      expect((error as Error).message).toMatch(/messageId/);
    }
    await expect(consumeOnce({ db: t.db, consumer: 'c', messageId: 'x'.repeat(256) }, ok)).rejects.toBeInstanceOf(InvalidMessageIdError);
    await expect(consumeOnce({ db: t.db, consumer: 'c', messageId: 42 as unknown as string }, ok)).rejects.toBeInstanceOf(InvalidMessageIdError);
  });

  it('validates options eagerly and names them', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ db: t.db, consumer: '', messageId: 'a' }, 'consumer'],
      [{ db: t.db, consumer: 'c', messageId: 'a', table: 'Bad-Name' }, 'table'],
      [{ db: t.db, consumer: 'c', messageId: 'a', table: 'x; DROP TABLE y' }, 'table'],
      [{ db: t.db, consumer: 'c', messageId: 'a', retentionMs: 0 }, 'retentionMs'],
      [{ db: t.db, consumer: 'c', messageId: 'a', retentionMs: 1.5 }, 'retentionMs'],
      [{ db: t.db, consumer: 'c', messageId: 'a', windowMs: 5 }, 'windowMs'],
      [{ db: {}, consumer: 'c', messageId: 'a' }, 'db'],
      [{ consumer: 'c', messageId: 'a' }, 'db'],
    ];
    for (const [options, option] of cases) {
      const error = await consumeOnce(options as never, ok).catch((e: unknown) => e);
      expect(error, option).toBeInstanceOf(InvalidOptionError);
      expect((error as InvalidOptionError).option).toBe(option);
    }
    await expect(reapProcessed(t.db, { limit: 0 })).rejects.toThrow(/`limit`/);
  });
});
