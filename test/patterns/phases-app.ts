/**
 * The checkout of the recovery proof, shared by the server process and the test's completer:
 * create the order row → charge it at a foreign service → mark it charged → enqueue a job.
 * `crash` names the point where the process SIGKILLs itself (the server sets it; the completer never).
 */
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { IdempotencyStore } from '../../src/core/store.js';
import { definePhases } from '../../src/patterns/phases.js';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import type { MysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import type { PostgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';

export const SCOPE = 'proof';

/** Every crash point, in the order a request reaches them. */
export const CRASH_POINTS = [
  'order_created', // the order row is written, its phase not committed
  'charged', // the foreign charge returned, its result not recorded
  'order_charged', // the row is marked charged, not committed
  'finished', // the job is enqueued, not committed
  'after-phases', // every phase committed, the record not completed
] as const;
export type CrashPoint = (typeof CRASH_POINTS)[number];

export interface CheckoutInput {
  readonly amount: number;
}

export interface CheckoutBackend {
  readonly store: (SqliteStore | PostgresStore | MysqlStore) & IdempotencyStore;
  /** Outside any transaction: for counting. */
  readonly db: SqlExecutor;
  migrate(): Promise<void>;
  drop(): Promise<void>;
  close(): Promise<void>;
}

/** `sqlite:/file`, `postgres://…` or `mysql://…`; `name` suffixes every table. */
export async function openCheckoutBackend(url: string, name: string): Promise<CheckoutBackend> {
  if (url.startsWith('sqlite:')) {
    const database = new Database(url.slice('sqlite:'.length), { timeout: 5000 });
    const store = sqliteStore({ database, table: `idem_${name}` });
    const db = sqlExecutor(database);
    return {
      store,
      db,
      async migrate() {
        database.exec(`CREATE TABLE IF NOT EXISTS orders_${name} (key TEXT NOT NULL, amount INTEGER NOT NULL, charged INTEGER NOT NULL, charge_id TEXT);
                       CREATE TABLE IF NOT EXISTS jobs_${name} (key TEXT NOT NULL, charge_id TEXT NOT NULL)`);
      },
      async drop() {
        database.exec(`DROP TABLE IF EXISTS orders_${name}; DROP TABLE IF EXISTS jobs_${name}; DROP TABLE IF EXISTS idem_${name}`);
      },
      async close() {
        database.close();
      },
    };
  }
  if (url.startsWith('mysql://')) {
    const pool = mysql.createPool({ uri: url, connectionLimit: 5 });
    const store = mysqlStore({ pool, table: `idem_${name}` });
    return {
      store,
      db: sqlExecutor(pool as never),
      async migrate() {
        await store.migrate();
        await pool.query(`CREATE TABLE IF NOT EXISTS orders_${name} (\`key\` VARCHAR(64) NOT NULL, amount INT NOT NULL, charged INT NOT NULL, charge_id VARCHAR(64))`);
        await pool.query(`CREATE TABLE IF NOT EXISTS jobs_${name} (\`key\` VARCHAR(64) NOT NULL, charge_id VARCHAR(64) NOT NULL)`);
      },
      async drop() {
        for (const table of [`orders_${name}`, `jobs_${name}`, `idem_${name}`]) await pool.query(`DROP TABLE IF EXISTS ${table}`);
      },
      close: () => pool.end(),
    };
  }
  const pool = new pg.Pool({ connectionString: url, max: 5 });
  pool.on('error', () => {});
  const store = postgresStore({ pool, table: `idem_${name}` });
  const db = sqlExecutor(pool);
  return {
    store,
    db,
    async migrate() {
      await store.migrate();
      await pool.query(`CREATE TABLE IF NOT EXISTS orders_${name} (key text NOT NULL, amount integer NOT NULL, charged integer NOT NULL, charge_id text);
                        CREATE TABLE IF NOT EXISTS jobs_${name} (key text NOT NULL, charge_id text NOT NULL)`);
    },
    async drop() {
      await pool.query(`DROP TABLE IF EXISTS orders_${name}; DROP TABLE IF EXISTS jobs_${name}; DROP TABLE IF EXISTS idem_${name} CASCADE;
                        DROP FUNCTION IF EXISTS idem_${name}_claim CASCADE`);
    },
    close: () => pool.end(),
  };
}

/** The phases. No unique index on purpose: a phase that ran twice would show as a second row. */
export function checkoutPhases(options: { readonly name: string; readonly foreignUrl: string; readonly dialect: string; readonly crash?: CrashPoint }) {
  const { name, foreignUrl, crash } = options;
  const die = (point: CrashPoint) => {
    if (crash === point) process.kill(process.pid, 'SIGKILL');
  };
  const joined = (tx: unknown) => sqlExecutor(tx as never, { joined: true });
  // `key` is a reserved word in MySQL; quoted the same way (ANSI double quotes) elsewhere.
  const q = (column: string) => (options.dialect === 'mysql' ? `\`${column}\`` : `"${column}"`);
  return definePhases<CheckoutInput>('checkout')
    .phase('order_created', async ({ tx, key, input }) => {
      await joined(tx).query(`INSERT INTO orders_${name} (${q('key')}, amount, charged) VALUES (?, ?, 0)`, [key, input.amount]);
      die('order_created');
      return { order: key };
    })
    .foreign('charged', async ({ foreignKey, input }) => {
      const response = await fetch(`${foreignUrl}/charges`, {
        method: 'POST',
        headers: { 'idempotency-key': foreignKey, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: input.amount }),
      });
      if (!response.ok) throw new Error(`the foreign service answered ${response.status}`);
      const charge = (await response.json()) as { id: string };
      die('charged');
      return { chargeId: charge.id };
    })
    .phase('order_charged', async ({ tx, key, data }) => {
      await joined(tx).query(`UPDATE orders_${name} SET charged = charged + 1, charge_id = ? WHERE ${q('key')} = ?`, [data.charged.chargeId, key]);
      die('order_charged');
      return null;
    })
    .phase('finished', async ({ tx, key, data }) => {
      await joined(tx).query(`INSERT INTO jobs_${name} (${q('key')}, charge_id) VALUES (?, ?)`, [key, data.charged.chargeId]);
      die('finished');
      return { order: data.order_created.order, charge: data.charged.chargeId };
    });
}
