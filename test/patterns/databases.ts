/**
 * The three SQL databases the guards run on, each as a factory the shared suites call: a fresh
 * executor, a unique-table namer, and a cleanup that drops what the suite created.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';
import { MARIADB, POSTGRES } from '../support/services.js';

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
      const name = `idem_pat_${tag}_${run}`;
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

export function sqliteFile(): { db: Database.Database; file: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-patterns-'));
  const file = join(dir, 'patterns.db');
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('busy_timeout = 5000');
  return { db, file, cleanup: () => { db.close(); rmSync(dir, { recursive: true, force: true }); } };
}

export function sqliteDatabase(): TestDatabase {
  const { db, cleanup } = sqliteFile();
  const names = namer(async () => undefined);
  return {
    db: sqlExecutor(db),
    table: names.table,
    serial: 'INTEGER PRIMARY KEY AUTOINCREMENT',
    close: async () => cleanup(),
  };
}
