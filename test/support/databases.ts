/**
 * The three SQL databases the guard and messaging suites run on, each as a factory the shared suites
 * call: a fresh executor, a unique-table namer, and a cleanup that drops what the suite created.
 */
import { randomBytes } from 'node:crypto';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { MARIADB, POSTGRES } from './services.js';
import { sqliteFile } from './sqlite-file.js';
import type { SqliteFile } from './sqlite-file.js';

export interface TestDatabase {
  readonly db: SqlExecutor;
  /** A table name of its own, dropped by close(). */
  table(tag: string): string;
  /** Column type for an auto-increment primary key in this dialect. */
  readonly serial: string;
  close(): Promise<void>;
}

const run = `${process.pid}_${randomBytes(3).toString('hex')}`;

function namer(drop: (t: string) => Promise<unknown>) {
  const tables: string[] = [];
  return {
    table: (tag: string) => {
      const name = `idem_db_${tag}_${run}`;
      tables.push(name);
      return name;
    },
    dropAll: async () => {
      for (const t of tables) await drop(t);
    },
  };
}

export function postgresDatabase(): TestDatabase {
  const pool = new pg.Pool({ host: POSTGRES.host, port: POSTGRES.port, user: process.env.PGUSER ?? 'postgres', database: 'test', max: 20 });
  pool.on('error', () => {});
  const names = namer((t) => pool.query(`DROP TABLE IF EXISTS "${t}"`));
  return {
    db: sqlExecutor(pool),
    table: names.table,
    serial: 'SERIAL PRIMARY KEY',
    close: async () => {
      await names.dropAll();
      await pool.end();
    },
  };
}

export function mysqlDatabase(): TestDatabase {
  const pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 20, connectTimeout: 2_000 });
  const names = namer((t) => pool.query(`DROP TABLE IF EXISTS \`${t}\``));
  return {
    db: sqlExecutor(pool),
    table: names.table,
    serial: 'INT AUTO_INCREMENT PRIMARY KEY',
    close: async () => {
      await names.dropAll();
      await pool.end();
    },
  };
}

/** A SQLite file in WAL mode whose writers wait for each other rather than fail at once with SQLITE_BUSY. */
export function sqliteWalFile(): SqliteFile {
  const file = sqliteFile('databases.db');
  file.db.pragma('journal_mode = WAL');
  file.db.pragma('busy_timeout = 5000');
  return file;
}

export function sqliteDatabase(): TestDatabase {
  const { db, cleanup } = sqliteWalFile();
  // One file per database: close() deletes it, tables and all.
  const names = namer(async () => undefined);
  return {
    db: sqlExecutor(db),
    table: names.table,
    serial: 'INTEGER PRIMARY KEY AUTOINCREMENT',
    close: async () => cleanup(),
  };
}
