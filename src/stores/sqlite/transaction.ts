/**
 * The SQLite store's transactions. They run on a connection of the store's own, opened on the
 * first one, never on `database`: a statement sent on a connection inside a transaction joins it,
 * so the app's writes through `database` could otherwise commit or roll back with a request's.
 * While one is open it holds the gate of `database` (see writer.ts), as does an ORM's
 * transaction that carries the store's completion (`enterJoined`).
 */
import { InvalidOptionError, StoreUnavailableError } from '../../core/errors.js';
import type { RecordRef, StoreTransaction } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';
import type { SqliteDatabase, SqliteDriver, SqliteDriverStatement } from '../../drivers/sqlite.js';
import { BEGIN, sqliteDriver } from '../../drivers/sqlite.js';
import type { SqliteStatements } from './sql.js';
import { checkpointParams, completeParams, fenced } from './sql.js';
import type { SqliteWriter } from './writer.js';

/** What the transactions need of the store. */
export interface TransactionSetup<DB extends SqliteDatabase> {
  readonly db: DB;
  readonly open: (() => DB) | undefined;
  readonly configure: boolean;
  readonly busyTimeoutMs: number;
  readonly maxResponseBytes: number;
  readonly now: () => number;
  readonly sql: SqliteStatements;
  readonly writer: SqliteWriter;
}

interface OwnConnection<DB> {
  readonly conn: DB;
  readonly driver: SqliteDriver;
  readonly complete: SqliteDriverStatement;
  readonly checkpoint: SqliteDriverStatement;
}

export class SqliteTransactions<DB extends SqliteDatabase> {
  // The store's own connection for transactions, opened on the first one.
  private own: OwnConnection<DB> | undefined;

  constructor(private readonly setup: TransactionSetup<DB>) {}

  /** Throws when transactions cannot be opened as configured (an in-memory `database` without `open`). */
  check(): void {
    if (this.setup.open === undefined && this.fileOf() === undefined) {
      throw new InvalidOptionError(
        'database',
        'transactions run on a second connection the sqlite store opens to the same file (so that no statement sent through `database` can join them), and an in-memory or temporary database cannot be opened twice; open the Database on a file (a temporary file in tests)',
      );
    }
  }

  /** Closes the store's own connection, if it was opened. */
  close(): void {
    const opened = this.own;
    this.own = undefined;
    if (opened) (opened.conn as DB & { close?: () => unknown }).close?.();
  }

  async begin(): Promise<StoreTransaction<DB>> {
    const { writer, now, maxResponseBytes } = this.setup;
    const connection = this.connection();
    const { conn, driver } = connection;
    const unlock = await writer.lock();
    let restore: () => void;
    try {
      restore = writer.failFastWhileOpen();
      // IMMEDIATE: the completion cannot fail on lock upgrade later.
      try {
        conn.exec(BEGIN);
      } catch (error) {
        restore();
        throw error;
      }
    } catch (error) {
      unlock();
      const busy = writer.busyElsewhere('beginTransaction', error);
      throw busy !== error ? busy : new StoreUnavailableError('sqlite store: could not begin a transaction', { cause: error });
    }
    writer.held("another request's transaction");
    let active = true;
    const end = (sql: string) => {
      if (!active) return;
      active = false;
      try {
        if (driver.inTransaction()) conn.exec(sql);
      } catch (error) {
        // A COMMIT that failed (a deferred constraint, SQLITE_BUSY) leaves the transaction open on
        // the store's connection, holding the file: end it, or every later write would fail.
        if (driver.inTransaction()) conn.exec('ROLLBACK');
        throw error;
      } finally {
        writer.released();
        restore();
        unlock();
      }
    };
    return {
      tx: conn,
      complete: async (ref: RecordRef, token, response) => {
        checkRecordRef(ref);
        fenced(connection.complete, completeParams(ref, token, response, maxResponseBytes, now()));
      },
      checkpoint: async (ref: RecordRef, token, point, data) => {
        checkRecordRef(ref);
        fenced(connection.checkpoint, checkpointParams(ref, token, point, data, now()));
      },
      commit: async () => end('COMMIT'),
      rollback: async () => end('ROLLBACK'),
    };
  }

  /**
   * The ORM's transaction holds the file's write lock: the store's statements through `database`
   * queue behind it (as behind the store's own transactions) instead of blocking the event loop
   * on the lock, and a direct write through `database` fails at once.
   */
  async enterJoined(): Promise<() => void> {
    const { writer } = this.setup;
    const unlock = await writer.lock();
    let restore: () => void;
    try {
      restore = writer.failFastWhileOpen();
    } catch (error) {
      unlock();
      throw new StoreUnavailableError('sqlite store: could not prepare for a transaction', { cause: error });
    }
    writer.held("another request's transaction (through an ORM bridge)");
    return () => {
      writer.released();
      restore();
      unlock();
    };
  }

  /** The file `database` is on; undefined for an in-memory or temporary database. */
  private fileOf(): string | undefined {
    const list = sqliteDriver(this.setup.db).pragmaRows('database_list') as Array<{ name: string; file: string }> | undefined;
    const main = Array.isArray(list) ? list.find((entry) => entry.name === 'main') : undefined;
    return main?.file ? main.file : undefined;
  }

  private connection(): OwnConnection<DB> {
    if (this.own) return this.own;
    this.check();
    const { db, open, configure, busyTimeoutMs, sql } = this.setup;
    let conn: DB;
    try {
      conn = open ? open() : (sqliteDriver(db).openAgain(this.fileOf()!, busyTimeoutMs) as DB);
    } catch (error) {
      throw new StoreUnavailableError('sqlite store: could not open its transaction connection (the `open` option opens it)', { cause: error });
    }
    if (conn === (db as unknown) || typeof conn?.prepare !== 'function') {
      throw new InvalidOptionError('open', 'expected a function returning a new Database (better-sqlite3, node:sqlite, bun:sqlite) on the same file, not `database` itself');
    }
    const driver = sqliteDriver(conn);
    if (configure) {
      driver.exec('PRAGMA synchronous = NORMAL');
      driver.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
    }
    this.own = { conn, driver, complete: driver.prepare(sql.completeSql), checkpoint: driver.prepare(sql.checkpointSql) };
    return this.own;
  }
}
