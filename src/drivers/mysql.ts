/**
 * How idemkit talks to mysql2/promise (MySQL and MariaDB). Only the shapes are declared: the pool
 * or connection is the user's, and nothing here imports `mysql2`.
 */

/** A value mysql2 binds, in the forms idemkit sends. */
export type MysqlValue = string | number | bigint | boolean | Date | Buffer | Uint8Array | null;

/** Anything that runs a statement: a mysql2/promise `Pool`, or one of its connections. */
export interface MysqlQueryable {
  execute(options: { sql: string; rowsAsArray?: boolean }, values?: MysqlValue[]): Promise<[unknown, unknown]>;
  query(sql: string): Promise<unknown>;
}

/** A mysql2/promise connection (`createConnection`, or one from `pool.getConnection()`). */
export interface MysqlConnection extends MysqlQueryable {
  beginTransaction(): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/** A connection checked out of a pool (a mysql2/promise `PoolConnection`). */
export interface MysqlPoolConnection extends MysqlConnection {
  /** Back to the pool. */
  release(): void;
  /** Closed instead: the server rolls back whatever it still held. */
  destroy(): void;
}

/** A mysql2/promise `Pool` (`createPool`). `Conn` is the connection type it hands out. */
export interface MysqlPool<Conn extends MysqlPoolConnection = MysqlPoolConnection> {
  getConnection(): Promise<Conn>;
}

/**
 * One statement with bound values, rows as objects whatever the pool's `rowsAsArray` says. Prepared
 * (server-side binding); statements without values can go through `query`, which also accepts
 * what the prepared protocol refuses (SAVEPOINT, some DDL).
 */
export function execute(db: MysqlQueryable, sql: string, values: MysqlValue[]): Promise<[unknown, unknown]> {
  return db.execute({ sql, rowsAsArray: false }, values);
}

/** mysql2's execute refuses undefined; booleans bind as 1/0 like everywhere else. */
export function mysqlValue(value: unknown): MysqlValue {
  if (value === undefined) return null;
  if (value === true) return 1;
  if (value === false) return 0;
  return value as MysqlValue;
}

const ER_DUP_ENTRY = 1062;
const ER_LOCK_DEADLOCK = 1213;
const ER_BAD_FIELD_ERROR = 1054;
const ER_NO_SUCH_TABLE = 1146;

/** The server's error number (`error.errno`), if the error came from the server. */
export function errno(error: unknown): number | undefined {
  const n = (error as { errno?: unknown } | null)?.errno;
  return typeof n === 'number' ? n : undefined;
}

/** ER_DUP_ENTRY: a unique key refused the insert. */
export function isDuplicateKey(error: unknown): boolean {
  return errno(error) === ER_DUP_ENTRY || (error as { code?: unknown } | null)?.code === 'ER_DUP_ENTRY';
}

/** ER_LOCK_DEADLOCK: this statement's transaction was the deadlock victim and was rolled back whole. */
export function isDeadlock(error: unknown): boolean {
  return errno(error) === ER_LOCK_DEADLOCK;
}

/** ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR: the statement names a table or column that is not there (never migrated, or migrated by an earlier release). */
export function isMissingSchema(error: unknown): boolean {
  const n = errno(error);
  return n === ER_NO_SUCH_TABLE || n === ER_BAD_FIELD_ERROR;
}

/** mysql2 marks errors that broke the connection (lost, reset, closed) as fatal. */
export function isFatal(error: unknown): boolean {
  return (error as { fatal?: unknown } | null)?.fatal === true;
}

/** The SERVER_STATUS_IN_TRANS bit of a write's OK packet; undefined for row sets. */
export function inTransaction(result: unknown): boolean | undefined {
  const status = (result as { serverStatus?: unknown } | null)?.serverStatus;
  return typeof status === 'number' ? (status & 1) === 1 : undefined;
}
