/**
 * How idemkit talks to SQLite: better-sqlite3's `Database`, Node's built-in `node:sqlite`
 * `DatabaseSync` (Node 22.5+) or Bun's `bun:sqlite` `Database`. Only the shapes are declared: the
 * Database is the user's, and nothing here imports a driver (`node:sqlite` does not exist on
 * Node 20, `bun:sqlite` only on Bun). The three agree on `prepare`, `exec` and a statement's
 * `run`/`get`/`all` with `@name` parameters given as `{ name }`; `sqliteDriver` evens out where
 * they differ (pragmas, whether a transaction is open, `get` without a row, opening the file again).
 */

/** A prepared statement of any of the three drivers. */
export interface SqliteStatement {
  run(...params: unknown[]): { changes: number | bigint };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}

/** A better-sqlite3 `Database`, a `node:sqlite` `DatabaseSync` or a `bun:sqlite` `Database`. */
export interface SqliteDatabase {
  prepare(sql: string): SqliteStatement;
  exec(sql: string): unknown;
}

/** A statement as idemkit uses it: `get` is undefined without a row, `changes` a number. */
export interface SqliteDriverStatement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  /** True for statements that return rows (SELECT, … RETURNING). */
  readonly reader: boolean;
}

/** One Database, as the store and the executors use it whatever its driver. */
export interface SqliteDriver {
  readonly flavour: 'better-sqlite3' | 'node:sqlite' | 'bun:sqlite';
  prepare(sql: string): SqliteDriverStatement;
  exec(sql: string): void;
  /** `PRAGMA <name>`'s first value (`busy_timeout` → 5000). */
  pragmaValue(name: string): unknown;
  /** `PRAGMA <name>`'s rows (`database_list`). */
  pragmaRows(name: string): unknown[];
  inTransaction(): boolean;
  /** The same file, opened again with the Database's own constructor. */
  openAgain(file: string, busyTimeoutMs: number): SqliteDatabase;
}

/** The parts of each driver that only some of them have. */
interface Loose {
  readonly pragma?: unknown;
  readonly inTransaction?: boolean;
  readonly isTransaction?: boolean;
  readonly query?: unknown;
}

interface LooseStatement {
  readonly reader?: boolean;
  columns?(): unknown[];
  readonly columnNames?: readonly string[];
  setAllowUnknownNamedParameters?(enabled: boolean): void;
}

const drivers = new WeakMap<SqliteDatabase, SqliteDriver>();

/** The driver view of `db`, made once per Database. */
export function sqliteDriver(db: SqliteDatabase): SqliteDriver {
  let driver = drivers.get(db);
  if (driver === undefined) drivers.set(db, (driver = makeDriver(db)));
  return driver;
}

function makeDriver(db: SqliteDatabase): SqliteDriver {
  const loose = db as SqliteDatabase & Loose;
  // better-sqlite3 alone has pragma(); Bun's Database alone has query(); the rest is node:sqlite's shape.
  const flavour = typeof loose.pragma === 'function' ? 'better-sqlite3' : typeof loose.query === 'function' ? 'bun:sqlite' : 'node:sqlite';
  const prepare =
    flavour === 'better-sqlite3'
      ? // Its statements already answer as idemkit expects: no wrapper on the hot path.
        (sql: string) => db.prepare(sql) as unknown as SqliteDriverStatement
      : (sql: string) => evened(db.prepare(sql));
  return {
    flavour,
    prepare,
    exec: (sql) => void db.exec(sql),
    pragmaValue(name) {
      const row = db.prepare(`PRAGMA ${name}`).get() as Record<string, unknown> | null | undefined;
      return row == null ? undefined : Object.values(row)[0];
    },
    pragmaRows: (name) => db.prepare(`PRAGMA ${name}`).all(),
    // node:sqlite names it isTransaction; better-sqlite3 and Bun inTransaction.
    inTransaction: () => Boolean(loose.inTransaction ?? loose.isTransaction),
    openAgain(file, busyTimeoutMs) {
      const Open = db.constructor as new (file: string, options: object) => SqliteDatabase;
      // better-sqlite3 and node:sqlite take `timeout`; Bun does not, so the pragma says it for all.
      const opened = new Open(file, { timeout: busyTimeoutMs });
      opened.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
      return opened;
    },
  };
}

/** A node:sqlite or bun:sqlite statement made to answer as better-sqlite3's does. */
function evened(statement: SqliteStatement): SqliteDriverStatement {
  const loose = statement as SqliteStatement & LooseStatement;
  // node:sqlite refuses a named parameter the statement lacks; better-sqlite3 and Bun ignore it.
  loose.setAllowUnknownNamedParameters?.(true);
  const reader = typeof loose.columns === 'function' ? loose.columns().length > 0 : (loose.columnNames?.length ?? 0) > 0;
  return {
    reader,
    run: (...params) => ({ changes: Number(statement.run(...params).changes) }),
    // Bun answers null when there is no row.
    get: (...params) => statement.get(...params) ?? undefined,
    all: (...params) => statement.all(...params),
  };
}

/**
 * Whether `error` is SQLITE_BUSY (or one of its extended codes): better-sqlite3 and Bun say
 * `code: 'SQLITE_BUSY…'`, node:sqlite `errcode: 5` (extended codes keep 5 in their low byte).
 */
export function isSqliteBusy(error: unknown): boolean {
  const { code, errcode } = (error ?? {}) as { code?: unknown; errcode?: unknown };
  if (typeof code === 'string' && code.startsWith('SQLITE_BUSY')) return true;
  return typeof errcode === 'number' && (errcode & 0xff) === 5;
}

/** SQLite binds numbers, bigints, strings, buffers and null; booleans are refused, so they go as 1/0. */
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
