import { InvalidOptionError } from '../core/errors.js';
import type { Clock } from '../core/store.js';
import { systemClock } from '../core/store.js';
import { checkInteger, optionReader } from '../core/option-reader.js';
import type { SqlDatabase, SqlDialect, SqlExecutor } from '../drivers/sql-executor.js';
import { sqlExecutor } from '../drivers/sql-executor.js';

/** Default table of processed-message records. */
export const DEFAULT_PROCESSED_TABLE = 'idemkit_processed_messages';

/**
 * Default retention of a processed-message record: 7 days. Longer than any broker's redelivery
 * horizon in normal operation (RabbitMQ requeues, JetStream `max_deliver` × `ack_wait`) and than a
 * typical webhook sender's retry schedule (Standard Webhooks senders retry for about 3 days).
 */
export const DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

// Lower-case so the name means the same unquoted in PostgreSQL, SQLite and MariaDB; 48 characters
// leave room for the `_expires_at` index suffix within PostgreSQL's 63.
const TABLE_NAME = /^[a-z_][a-z0-9_]{0,47}$/;

/** Validates a table option; the name is interpolated into SQL, so only a plain identifier passes. */
export function tableOption(value: unknown): string {
  if (value === undefined) return DEFAULT_PROCESSED_TABLE;
  if (typeof value !== 'string' || !TABLE_NAME.test(value)) {
    throw new InvalidOptionError('table', `expected a lower-case SQL identifier of at most 48 characters ([a-z_][a-z0-9_]*), got ${JSON.stringify(value)}`);
  }
  return value;
}

/** Validates a retention window in ms: an integer >= 1 (no upper cap; no timer is armed with it). */
export function retentionOption(value: unknown): number {
  return checkInteger('retentionMs', value, { default: DEFAULT_RETENTION_MS, min: 1 });
}

export function clockOption(value: unknown): Clock {
  if (value === undefined) return systemClock;
  if (typeof value !== 'function') throw new InvalidOptionError('clock', 'expected a function returning epoch ms');
  return value as Clock;
}

/** A SqlExecutor as given, or one made from a driver (pg Pool/client, better-sqlite3, mysql2/promise). */
export function executorOption(value: unknown): SqlExecutor {
  if (!value || typeof value !== 'object') {
    throw new InvalidOptionError('db', 'expected a SqlExecutor (sqlExecutor() from idemkit/patterns) or a pg Pool, better-sqlite3 Database or mysql2/promise Pool');
  }
  return sqlExecutor(value as SqlDatabase);
}

const varchar = (length: number) => `VARCHAR(${length})`;

/** The columns and key of the processed-message table, in a dialect's text and integer types. */
function processedColumns(text: (length: number) => string, integer: string): string {
  return `  consumer ${text(128)} NOT NULL,
  message_id ${text(255)} NOT NULL,
  processed_at ${integer} NOT NULL,
  expires_at ${integer} NOT NULL,
  PRIMARY KEY (consumer, message_id)`;
}

/**
 * The DDL of the processed-message table, one statement per entry. Times are epoch ms from the
 * consumer's clock. MariaDB/MySQL compare ids with a binary collation: `A1` and `a1` are different
 * messages.
 */
export function processedTableSql(dialect: SqlDialect, table: string = DEFAULT_PROCESSED_TABLE): string[] {
  const t = tableOption(table);
  switch (dialect) {
    case 'postgres':
      return [`CREATE TABLE IF NOT EXISTS ${t} (\n${processedColumns(varchar, 'BIGINT')}\n)`, `CREATE INDEX IF NOT EXISTS ${t}_expires_at ON ${t} (expires_at)`];
    case 'sqlite':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (\n${processedColumns(() => 'TEXT', 'INTEGER')}\n) WITHOUT ROWID`,
        `CREATE INDEX IF NOT EXISTS ${t}_expires_at ON ${t} (expires_at)`,
      ];
    case 'mysql':
      return [
        `CREATE TABLE IF NOT EXISTS ${t} (\n${processedColumns(varchar, 'BIGINT')},\n  KEY ${t}_expires_at (expires_at)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      ];
    default:
      throw new InvalidOptionError('dialect', `unknown SQL dialect ${JSON.stringify(dialect)}`);
  }
}

/**
 * Creates the processed-message table (and its expiry index) if missing. Idempotent; on
 * PostgreSQL an advisory lock serialises concurrent migrations, because two concurrent
 * `CREATE TABLE IF NOT EXISTS` can still collide on the catalog.
 */
export async function migrateProcessed(db: SqlExecutor | SqlDatabase, options: { readonly table?: string } = {}): Promise<void> {
  const exec = executorOption(db);
  const read = optionReader('migrateProcessed()', options);
  const statements = processedTableSql(exec.dialect, tableOption(read.value('table')));
  read.done();
  await exec.transaction(async (tx) => {
    if (tx.dialect === 'postgres') await tx.query("SELECT pg_advisory_xact_lock(hashtext('idemkit_processed_migrate'))");
    for (const statement of statements) await tx.query(statement);
  });
}

export interface ReapOptions {
  readonly table?: string;
  /** At most this many records per call, so one call never holds long locks. @default 1000 */
  readonly limit?: number;
  readonly clock?: Clock;
}

/**
 * Deletes processed-message records whose retention window has passed; returns how many. Run it
 * periodically (a timer, cron). A redelivery arriving after its record was reaped is processed
 * again: that is the retention trade-off (see docs/messaging.md).
 */
export async function reapProcessed(db: SqlExecutor | SqlDatabase, options: ReapOptions = {}): Promise<number> {
  const exec = executorOption(db);
  const read = optionReader('reapProcessed()', options);
  const t = tableOption(read.value('table'));
  const limit = read.integer('limit', { default: 1000, min: 1 });
  const now = clockOption(read.value('clock'))();
  read.done();
  // The limit is a validated integer, inlined: LIMIT placeholders are not portable across drivers.
  const sql =
    exec.dialect === 'mysql'
      ? `DELETE FROM ${t} WHERE expires_at <= ? ORDER BY expires_at LIMIT ${limit}`
      : `DELETE FROM ${t} WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM ${t} WHERE expires_at <= ? LIMIT ${limit})`;
  return (await exec.query(sql, [now])).affected;
}
