/**
 * The guards on a store transaction's `tx` (what transactional mode hands the handler): joined,
 * they commit with the stored response or roll back with it.
 */
import { randomBytes } from 'node:crypto';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { TransactionalStore } from '../../src/core/store.js';
import { insertOnce } from '../../src/patterns/insert-once.js';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqlDatabase } from '../../src/patterns/sql.js';
import { transition } from '../../src/patterns/state-machine.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';

const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
const response = { status: 201, headers: [] as Array<[string, string]>, body: new Uint8Array([1]), bodyOmitted: false };

async function roundTrip(store: TransactionalStore, plain: ReturnType<typeof sqlExecutor>, table: string) {
  await plain.query(`CREATE TABLE ${table} (k VARCHAR(32) PRIMARY KEY, status VARCHAR(16) NOT NULL)`);
  for (const outcome of ['rollback', 'commit'] as const) {
    const ref = { scope: 's', key: `k-${outcome}` };
    const claim = await store.claim(ref, 'fp', { leaseMs: 60_000, windowMs: 600_000 });
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    const st = await store.beginTransaction();
    const tx = sqlExecutor(st.tx as SqlDatabase, { joined: true });
    expect((await insertOnce(tx, { table, values: { k: outcome, status: 'NEW' }, conflict: ['k'] })).inserted).toBe(true);
    expect(await transition(tx, { table, where: { k: outcome }, from: 'NEW', to: 'DONE' })).toEqual({ changed: true });
    // A savepoint inside the store's transaction: its failure undoes only its own writes.
    await expect(
      tx.transaction(async (inner) => {
        await inner.query(`UPDATE ${table} SET status = ? WHERE k = ?`, ['BROKEN', outcome]);
        throw new Error('inner');
      }),
    ).rejects.toThrow('inner');
    await st.complete(ref, claim.token, response);
    if (outcome === 'commit') await st.commit();
    else await st.rollback();
  }
  const { rows } = await plain.query(`SELECT k, status FROM ${table} ORDER BY k`);
  expect(rows).toEqual([{ k: 'commit', status: 'DONE' }]);
  expect((await store.get({ scope: 's', key: 'k-commit' }))?.state).toBe('completed');
  expect((await store.get({ scope: 's', key: 'k-rollback' }))?.state).toBe('in_flight');
}

describe.skipIf(!(await requireService(POSTGRES)))('guards joined to a postgresStore transaction', () => {
  it('commit keeps the guarded writes with the completion; rollback drops both', async () => {
    const pool = new pg.Pool({ host: POSTGRES.host, port: POSTGRES.port, user: process.env.PGUSER ?? 'postgres', database: 'test', max: 4 });
    pool.on('error', () => {});
    const storeTable = `idem_pat_st_${suffix}`;
    const table = `idem_pat_stb_${suffix}`;
    try {
      const store = postgresStore({ pool, table: storeTable });
      await store.migrate();
      await roundTrip(store, sqlExecutor(pool), table);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${table}; DROP FUNCTION IF EXISTS "public"."${storeTable}_claim"; DROP TABLE IF EXISTS "public"."${storeTable}"`);
      await pool.end();
    }
  });
});

describe.skipIf(!(await requireService(MARIADB)))('guards joined to a mysqlStore transaction', () => {
  it('commit keeps the guarded writes with the completion; rollback drops both', async () => {
    const pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 4 });
    const storeTable = `idem_pat_st_${suffix}`;
    const table = `idem_pat_stb_${suffix}`;
    try {
      const store = mysqlStore({ pool, table: storeTable });
      await store.migrate();
      await roundTrip(store, sqlExecutor(pool), table);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.query(`DROP TABLE IF EXISTS ${storeTable}`);
      await pool.end();
    }
  });
});
