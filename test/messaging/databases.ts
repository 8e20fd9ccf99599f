/** The three SQL databases for the messaging suites, each with its own table names, dropped on close. */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqlDatabase, SqlExecutor } from '../../src/patterns/sql.js';
import { MARIADB, POSTGRES } from '../support/services.js';

export interface TestDatabase {
  readonly name: string;
  readonly db: SqlExecutor;
  /** A table name of its own, dropped by close(). */
  table(tag: string): string;
  close(): Promise<void>;
}

export const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;

function namer(drop: (t: string) => Promise<unknown>) {
  const tables: string[] = [];
  return {
    table: (tag: string) => {
      const name = `idem_msg_${tag}_${runId}`;
      tables.push(name);
      return name;
    },
    dropAll: async () => {
      for (const t of tables) await drop(t);
    },
  };
}

export function pgPool(max = 20): pg.Pool {
  const pool = new pg.Pool({ host: POSTGRES.host, port: POSTGRES.port, user: process.env.PGUSER ?? 'postgres', database: 'test', max });
  pool.on('error', () => {});
  return pool;
}

export function postgresDatabase(): TestDatabase {
  const pool = pgPool();
  const names = namer((t) => pool.query(`DROP TABLE IF EXISTS ${t}`));
  return {
    name: 'postgres',
    db: sqlExecutor(pool),
    table: names.table,
    close: async () => {
      await names.dropAll();
      await pool.end();
    },
  };
}

export function mysqlDatabase(): TestDatabase {
  const pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 20, connectTimeout: 2_000 });
  const names = namer((t) => pool.query(`DROP TABLE IF EXISTS ${t}`));
  return {
    name: 'mariadb',
    db: sqlExecutor(pool as unknown as SqlDatabase),
    table: names.table,
    close: async () => {
      await names.dropAll();
      await pool.end();
    },
  };
}

export function sqliteDatabase(): TestDatabase {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-messaging-'));
  const db = new Database(join(dir, 'messaging.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('busy_timeout = 5000');
  const names = namer(async () => undefined);
  return {
    name: 'sqlite',
    db: sqlExecutor(db),
    table: names.table,
    close: async () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
