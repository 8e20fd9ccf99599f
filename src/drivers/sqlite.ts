/**
 * How idemkit talks to better-sqlite3. Only the shapes are declared: the Database is the user's,
 * and nothing here imports `better-sqlite3`.
 */

/** A better-sqlite3 prepared statement. */
export interface SqliteStatement {
  /** True for statements that return rows (SELECT, … RETURNING). */
  readonly reader: boolean;
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/** A better-sqlite3 `Database`. */
export interface SqliteDatabase {
  prepare(sql: string): SqliteStatement;
  exec(sql: string): unknown;
  /** Only the sqlite store's `configure` option uses it. */
  pragma(source: string, options?: { simple?: boolean }): unknown;
  readonly inTransaction: boolean;
}

/** better-sqlite3 binds numbers, bigints, strings, buffers and null; booleans are refused, so they go as 1/0. */
export function sqliteValue(value: unknown): unknown {
  if (value === true) return 1;
  if (value === false) return 0;
  return value;
}


/**
 * How idemkit opens a transaction on SQLite: IMMEDIATE takes the file's write lock now, so a
 * later write in it cannot fail on lock upgrade (SQLITE_BUSY mid-transaction).
 */
export const BEGIN = 'BEGIN IMMEDIATE';
