/**
 * The data-layer guards, the same cases on every SQL dialect (like test/stores/contract.ts does
 * for stores). Concurrency cases fire many real statements at once through the dialect's pool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import { IllegalTransitionError, UnknownStateError, VersionConflictError } from '../../src/patterns/errors.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { stateMachine, transition } from '../../src/patterns/state-machine.js';
import { retryOnVersionConflict, versionedUpdate } from '../../src/patterns/versioned.js';
import type { TestDatabase } from '../support/databases.js';

const RACERS = 60;

const orders = stateMachine({
  PENDING: ['PAID', 'CANCELLED'],
  PAID: ['REFUNDED'],
  CANCELLED: [],
  REFUNDED: [],
});

export function describeGuards(name: string, available: boolean, open: () => TestDatabase): void {
  describe.skipIf(!available)(`guards on ${name}`, () => {
    let t: TestDatabase;
    beforeAll(() => {
      t = open();
    });
    afterAll(async () => {
      await t?.close();
    });

    const paymentsTable = async (tag: string) => {
      const table = t.table(tag);
      await t.db.query(`CREATE TABLE ${table} (
        id ${t.serial},
        out_trade_no VARCHAR(64) NOT NULL UNIQUE,
        provider_ref VARCHAR(64) UNIQUE,
        amount INT NOT NULL,
        status VARCHAR(16) NOT NULL DEFAULT 'PENDING',
        paid_at VARCHAR(32)
      )`);
      return table;
    };

    describe('insertOnce', () => {
      it('inserts once; a repeat answers the stored row with inserted: false', async () => {
        const table = await paymentsTable('ins');
        const first = await insertOnce<{ id: number; out_trade_no: string; amount: number }>(t.db, {
          table,
          values: { out_trade_no: 'SO-1', amount: 100 },
          conflict: ['out_trade_no'],
        });
        expect(first.inserted).toBe(true);
        expect(first.row.out_trade_no).toBe('SO-1');
        // The repeat carries a different amount: the first row stands and is what comes back.
        const again = await insertOnce<{ id: number; amount: number }>(t.db, { table, values: { out_trade_no: 'SO-1', amount: 999 }, conflict: ['out_trade_no'] });
        expect(again).toEqual({ inserted: false, row: first.row });
        expect(Number(again.row.amount)).toBe(100);
      });

      it(`${RACERS} concurrent inserts of one key: exactly one inserts, all get the same row`, async () => {
        const table = await paymentsTable('race');
        for (let round = 0; round < 3; round++) {
          const key = `SO-race-${round}`;
          const results = await Promise.all(
            Array.from({ length: RACERS }, (_, i) =>
              insertOnce<{ id: number; amount: number }>(t.db, { table, values: { out_trade_no: key, amount: i }, conflict: ['out_trade_no'] }),
            ),
          );
          expect(results.filter((r) => r.inserted)).toHaveLength(1);
          const winner = results.find((r) => r.inserted)!;
          for (const r of results) expect(r.row).toEqual(winner.row);
          const { rows } = await t.db.query(`SELECT COUNT(*) AS n FROM ${table} WHERE out_trade_no = ?`, [key]);
          expect(Number(rows[0]!.n)).toBe(1);
        }
      });

      it('does not swallow a duplicate on another unique key, nor other errors', async () => {
        const table = await paymentsTable('other');
        await insertOnce(t.db, { table, values: { out_trade_no: 'SO-a', provider_ref: 'P-1', amount: 1 }, conflict: ['out_trade_no'] });
        // A new business key whose provider_ref is taken: not "the same payment", so it must fail.
        await expect(
          insertOnce(t.db, { table, values: { out_trade_no: 'SO-b', provider_ref: 'P-1', amount: 1 }, conflict: ['out_trade_no'] }),
        ).rejects.toThrow();
        // NOT NULL violated: a real error, reported.
        await expect(insertOnce(t.db, { table, values: { out_trade_no: 'SO-c', amount: null }, conflict: ['out_trade_no'] })).rejects.toThrow();
        const { rows } = await t.db.query(`SELECT out_trade_no FROM ${table} ORDER BY out_trade_no`);
        expect(rows.map((r) => r.out_trade_no)).toEqual(['SO-a']);
      });

      it('joins a transaction: rolled back, the row is gone', async () => {
        const table = await paymentsTable('tx');
        await expect(
          t.db.transaction(async (tx) => {
            expect((await insertOnce(tx, { table, values: { out_trade_no: 'SO-tx', amount: 1 }, conflict: ['out_trade_no'] })).inserted).toBe(true);
            throw new Error('business write failed');
          }),
        ).rejects.toThrow('business write failed');
        const again = await insertOnce(t.db, { table, values: { out_trade_no: 'SO-tx', amount: 2 }, conflict: ['out_trade_no'] });
        expect(again.inserted).toBe(true);
      });

      it('inside a transaction whose snapshot predates the other row, still answers that row', async (ctx) => {
        // SQLite has one connection per Database: the "other connection" below would queue behind the transaction.
        if (t.db.dialect === 'sqlite') return ctx.skip();
        const table = await paymentsTable('snap');
        const got = await t.db.transaction(async (tx) => {
          await tx.query(`SELECT COUNT(*) AS n FROM ${table}`); // takes the snapshot (REPEATABLE READ on MySQL)
          await t.db.query(`INSERT INTO ${table} (out_trade_no, amount) VALUES (?, ?)`, ['SO-s', 7]); // another connection, committed
          return insertOnce<{ amount: number }>(tx, { table, values: { out_trade_no: 'SO-s', amount: 8 }, conflict: ['out_trade_no'] });
        });
        expect(got.inserted).toBe(false);
        expect(Number(got.row.amount)).toBe(7);
      });

      it('refuses bad identifiers and options, naming the field, before any SQL', async () => {
        const table = 'no_such_table_at_all';
        const bad = async (options: object, field: string) => {
          const error = await insertOnce(t.db, options as never).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(InvalidOptionError);
          expect((error as InvalidOptionError).option).toBe(field);
        };
        await bad({ table: 'x; DROP TABLE y', values: { a: 1 }, conflict: ['a'] }, 'table');
        await bad({ table: 'a.b.c', values: { a: 1 }, conflict: ['a'] }, 'table');
        await bad({ table, values: { 'a"b': 1 }, conflict: ['a"b'] }, 'values.a"b');
        await bad({ table, values: { a: undefined }, conflict: ['a'] }, 'values.a');
        await bad({ table, values: {}, conflict: ['a'] }, 'values');
        await bad({ table, values: { a: 1 }, conflict: [] }, 'conflict');
        await bad({ table, values: { a: 1 }, conflict: ['b'] }, 'conflict');
        await bad({ table, values: { a: 1 }, conflict: ['1a'] }, 'conflict[0]');
        await bad({ table, values: { a: null }, conflict: ['a'] }, 'conflict');
        await bad({ table, values: { a: 1 }, conflict: ['a'], onConflict: 'ignore' }, 'onConflict');
      });
    });

    describe('transition', () => {
      it('moves PENDING -> PAID once; the repeat reports the current state', async () => {
        const table = await paymentsTable('tr');
        await t.db.query(`INSERT INTO ${table} (out_trade_no, amount) VALUES (?, ?)`, ['SO-1', 5]);
        const pay = () => transition(t.db, { table, where: { out_trade_no: 'SO-1' }, from: 'PENDING', to: 'PAID', set: { paid_at: '2026-11-29' }, machine: orders });
        expect(await pay()).toEqual({ changed: true });
        expect(await pay()).toEqual({ changed: false, current: 'PAID' });
        const { rows } = await t.db.query(`SELECT status, paid_at FROM ${table} WHERE out_trade_no = ?`, ['SO-1']);
        expect(rows[0]).toEqual({ status: 'PAID', paid_at: '2026-11-29' });
        // from left out: every state the machine allows into REFUNDED (here PAID).
        expect(await transition(t.db, { table, where: { out_trade_no: 'SO-1' }, to: 'REFUNDED', machine: orders })).toEqual({ changed: true });
        expect(await transition(t.db, { table, where: { out_trade_no: 'SO-missing' }, from: 'PENDING', to: 'PAID' })).toEqual({ changed: false, current: undefined });
      });

      it(`${RACERS} concurrent transitions of one row: exactly one changes it`, async () => {
        const table = await paymentsTable('trrace');
        await t.db.query(`INSERT INTO ${table} (out_trade_no, amount) VALUES (?, ?)`, ['SO-r', 5]);
        const results = await Promise.all(
          Array.from({ length: RACERS }, (_, i) =>
            transition(t.db, { table, where: { out_trade_no: 'SO-r' }, from: 'PENDING', to: i % 2 ? 'PAID' : 'CANCELLED', machine: orders }),
          ),
        );
        expect(results.filter((r) => r.changed)).toHaveLength(1);
        const { rows } = await t.db.query(`SELECT status FROM ${table} WHERE out_trade_no = ?`, ['SO-r']);
        for (const r of results) if (!r.changed) expect(r.current).toBe(rows[0]!.status);
      });

      it('checks the machine before any SQL: illegal transitions and unknown states are refused', async () => {
        // The table does not exist: had any SQL run, the driver would have thrown instead.
        const table = 'no_such_table_at_all';
        const where = { id: 1 };
        const illegal = await transition(t.db, { table, where, from: 'CANCELLED', to: 'PAID', machine: orders }).catch((e: unknown) => e);
        expect(illegal).toBeInstanceOf(IllegalTransitionError);
        expect((illegal as IllegalTransitionError).code).toBe('ILLEGAL_TRANSITION');
        expect((illegal as Error).message).toContain('"CANCELLED" -> "PAID"');
        const unknownTo = await transition(t.db, { table, where, from: 'PENDING', to: 'SHIPPED' as never, machine: orders }).catch((e: unknown) => e);
        expect(unknownTo).toBeInstanceOf(UnknownStateError);
        expect((unknownTo as UnknownStateError).code).toBe('UNKNOWN_STATE');
        expect((unknownTo as UnknownStateError).field).toBe('to');
        const unknownFrom = await transition(t.db, { table, where, from: ['PENDING', 'NEW' as never], to: 'PAID', machine: orders }).catch((e: unknown) => e);
        expect((unknownFrom as UnknownStateError).state).toBe('NEW');
        // PENDING is initial: nothing may move into it.
        await expect(transition(t.db, { table, where, to: 'PENDING', machine: orders })).rejects.toThrow(IllegalTransitionError);
      });

      it('refuses bad options, naming the field', async () => {
        const table = 'no_such_table_at_all';
        const bad = async (options: object, field: string) => {
          const error = await transition(t.db, options as never).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(InvalidOptionError);
          expect((error as InvalidOptionError).option).toBe(field);
        };
        await bad({ table, where: {}, from: 'A', to: 'B' }, 'where');
        await bad({ table, where: { id: 1 }, to: 'B' }, 'from');
        await bad({ table, where: { id: 1 }, from: [], to: 'B' }, 'from');
        await bad({ table, where: { id: 1 }, from: 'A', to: 'B', column: 'st-ate' }, 'column');
        await bad({ table, where: { id: 1 }, from: 'A', to: 'B', set: { status: 'C' } }, 'set');
        await bad({ table, where: { id: 1 }, from: 'A' }, 'to');
        await bad({ table, where: { id: 1 }, from: 'A', to: 'B', sets: { a: 1 } }, 'sets');
      });
    });

    describe('versionedUpdate', () => {
      const stockTable = async (tag: string, stock: number) => {
        const table = t.table(tag);
        await t.db.query(`CREATE TABLE ${table} (sku VARCHAR(32) PRIMARY KEY, stock INT NOT NULL, version INT NOT NULL)`);
        await t.db.query(`INSERT INTO ${table} (sku, stock, version) VALUES (?, ?, ?)`, ['A', stock, 0]);
        return table;
      };
      const read = async (table: string) => {
        const { rows } = await t.db.query(`SELECT stock, version FROM ${table} WHERE sku = ?`, ['A']);
        return { stock: Number(rows[0]!.stock), version: Number(rows[0]!.version) };
      };

      it('lands with the expected version and refuses a stale one, reporting the current version', async () => {
        const table = await stockTable('ver', 10);
        expect(await versionedUpdate(t.db, { table, where: { sku: 'A' }, expected: 0, set: { stock: 9 } })).toEqual({ updated: true, version: 1 });
        expect(await versionedUpdate(t.db, { table, where: { sku: 'A' }, expected: 0, set: { stock: 8 } })).toEqual({ updated: false, version: 1 });
        expect(await read(table)).toEqual({ stock: 9, version: 1 });
        expect(await versionedUpdate(t.db, { table, where: { sku: 'B' }, expected: 0, set: { stock: 8 } })).toEqual({ updated: false, version: undefined });
      });

      it('concurrent decrements with retries lose none', async () => {
        const n = 40;
        const table = await stockTable('dec', 100);
        const decrement = () =>
          // Each conflict means another decrement landed, so n - 1 retries always suffice.
          retryOnVersionConflict(
            async () => {
              const row = await read(table);
              return versionedUpdate(t.db, { table, where: { sku: 'A' }, expected: row.version, set: { stock: row.stock - 1 } });
            },
            { retries: n - 1 },
          );
        const results = await Promise.all(Array.from({ length: n }, decrement));
        expect(results.every((r) => r.updated)).toBe(true);
        expect(new Set(results.map((r) => r.version)).size).toBe(n);
        expect(await read(table)).toEqual({ stock: 100 - n, version: n });
      });

      it('a conflict that outlives its retries throws VersionConflictError', async () => {
        const table = await stockTable('stale', 5);
        let attempts = 0;
        const error = await retryOnVersionConflict(
          async () => {
            attempts++;
            return versionedUpdate(t.db, { table, where: { sku: 'A' }, expected: 42, set: { stock: 0 } });
          },
          { retries: 2, maxBackoffMs: 0 },
        ).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(VersionConflictError);
        expect((error as VersionConflictError).code).toBe('VERSION_CONFLICT');
        expect(attempts).toBe(3);
        expect(await read(table)).toEqual({ stock: 5, version: 0 });
      });

      it('refuses bad options, naming the field', async () => {
        const table = 'no_such_table_at_all';
        const bad = async (options: object, field: string) => {
          const error = await versionedUpdate(t.db, options as never).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(InvalidOptionError);
          expect((error as InvalidOptionError).option).toBe(field);
        };
        await bad({ table, where: { id: 1 }, expected: 1.5, set: {} }, 'expected');
        await bad({ table, where: { id: 1 }, expected: '1', set: {} }, 'expected');
        await bad({ table, where: { id: 1 }, expected: 1, set: { version: 3 } }, 'set');
        await bad({ table, where: { id: 1 }, expected: 1, set: { a: 1 }, versionColumn: 'v v' }, 'versionColumn');
        await bad({ table, where: { id: 1 }, expected: 1 }, 'set');
        await bad({ table, where: { id: 1 }, expected: 1, set: {}, version: 'v' }, 'version');
        await expect(retryOnVersionConflict(async () => 1, { retries: 1, retry: 3 } as never)).rejects.toThrow(/`retry`/);
        await expect(retryOnVersionConflict(async () => 1, { retries: -1 })).rejects.toThrow(/`retries`/);
        await expect(retryOnVersionConflict(async () => 1, {} as never)).rejects.toThrow(/`retries`/);
      });
    });
  });
}
