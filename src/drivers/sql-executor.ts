/**
 * One small SQL interface over the drivers idemkit supports, so the data-layer guards (and the
 * messaging and recovery helpers) are written once. The drivers stay the user's: their shapes are
 * declared in postgres.ts, sqlite.ts and mysql.ts next to this file.
 */
import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import { gateFor } from './connection-gate.js';
import type { MysqlConnection, MysqlPool, MysqlQueryable, MysqlValue } from './mysql.js';
import { execute, mysqlValue } from './mysql.js';
import type { PostgresPool, PostgresQueryable, PostgresQueryResult } from './postgres.js';
import { commit as pgCommit, holdClient, toPgPlaceholders } from './postgres.js';

export { toPgPlaceholders };
import type { SqliteDatabase, SqliteDriverStatement, SqliteStatement } from './sqlite.js';
import { BEGIN as SQLITE_BEGIN, sqliteDriver, sqliteValue } from './sqlite.js';

export type SqlDialect = 'postgres' | 'sqlite' | 'mysql';

export interface SqlResult<Row> {
  readonly rows: Row[];
  /** Rows inserted, updated or deleted (for a statement that returns rows: the number returned). */
  readonly affected: number;
}

export interface SqlExecutor {
  readonly dialect: SqlDialect;
  /** One statement; placeholders are always `?` (rewritten to $1.. for PostgreSQL). */
  query<Row = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<SqlResult<Row>>;
  /** Runs fn in a transaction: BEGIN/COMMIT (ROLLBACK on throw); on a joined executor a SAVEPOINT. */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T>;
}

export interface SqlExecutorOptions {
  /**
   * The connection is already inside a transaction someone else owns (transactional mode's
   * `ctx.tx`, a StoreTransaction's `tx`, your own BEGIN): statements join it and `transaction()`
   * uses a SAVEPOINT. Not possible for a pool.
   * @default false
   */
  readonly joined?: boolean;
}

// ---- Driver shapes, under the names the executor has always exported ------------------------

/** What node-postgres answers (`QueryResult`). */
export type PgQueryResult = PostgresQueryResult;

/** A node-postgres client (`pg.Client` or a checked-out `pg.PoolClient`). */
export type PgClientLike = PostgresQueryable;

/** A node-postgres `Pool` (`totalCount` tells it from a client). */
export type PgPoolLike = PostgresPool & { readonly totalCount: number };

/** A better-sqlite3, node:sqlite or bun:sqlite prepared statement. */
export type SqliteStatementLike = SqliteStatement;

/** A better-sqlite3 `Database`, a node:sqlite `DatabaseSync` or a bun:sqlite `Database`. */
export type SqliteDatabaseLike = SqliteDatabase;

export type { MysqlValue };

/** A mysql2/promise connection (`createConnection`, or one from `pool.getConnection()`). */
export type MysqlConnectionLike = MysqlConnection;

/** A mysql2/promise `Pool` (`createPool`). */
export type MysqlPoolLike = MysqlPool & MysqlQueryable;

export type SqlDatabase = PgPoolLike | PgClientLike | SqliteDatabaseLike | MysqlPoolLike | MysqlConnectionLike;

/** Accepts a pg Pool or client, a better-sqlite3 Database, a mysql2/promise Pool or connection. */
export function sqlExecutor(db: SqlDatabase | SqlExecutor, options?: SqlExecutorOptions): SqlExecutor {
  if (isExecutor(db)) return db;
  const read = optionReader('sqlExecutor()', options ?? {});
  const joined = read.boolean('joined', { default: false });
  read.done();
  const d = db as unknown as Record<string, unknown>;
  if (!d || typeof d !== 'object') throw new InvalidOptionError('db', 'expected a pg Pool or client, a better-sqlite3 Database or a mysql2/promise Pool or connection');
  if (typeof d.prepare === 'function' && typeof d.exec === 'function') return sqliteExecutor(db as SqliteDatabaseLike, joined);
  if (typeof d.execute === 'function' && typeof d.query === 'function') {
    if (typeof d.getConnection === 'function') {
      if (joined) throw new InvalidOptionError('joined', 'a pool cannot be inside a transaction; pass the connection that is');
      return mysqlPoolExecutor(db as MysqlPoolLike);
    }
    return mysqlConnectionExecutor(db as MysqlConnectionLike, joined);
  }
  if (typeof d.query === 'function') {
    // pg.Pool has connect() and pool counters; a pg.Client also has connect() (to open it), a PoolClient release().
    if (typeof d.connect === 'function' && typeof d.release !== 'function' && typeof d.totalCount === 'number') {
      if (joined) throw new InvalidOptionError('joined', 'a pool cannot be inside a transaction; pass the client that is');
      return pgPoolExecutor(db as PgPoolLike);
    }
    return pgClientExecutor(db as PgClientLike, joined);
  }
  throw new InvalidOptionError('db', 'expected a pg Pool or client, a better-sqlite3 Database or a mysql2/promise Pool or connection');
}

const EXECUTOR = Symbol.for('idemkit.sqlExecutor');
const DIALECTS: readonly unknown[] = ['postgres', 'sqlite', 'mysql'];

/** Ours (branded), or anyone's object with the SqlExecutor shape (a wrapper, a test double). */
function isExecutor(db: unknown): db is SqlExecutor {
  if (typeof db !== 'object' || db === null) return false;
  if ((db as Record<symbol, unknown>)[EXECUTOR] === true) return true;
  const x = db as Partial<SqlExecutor>;
  return DIALECTS.includes(x.dialect) && typeof x.query === 'function' && typeof x.transaction === 'function';
}

function brand(executor: SqlExecutor): SqlExecutor {
  Object.defineProperty(executor, EXECUTOR, { value: true });
  return executor;
}

/**
 * An executor over a transaction someone else opened and will end (an ORM's: idemkit/kysely,
 * idemkit/drizzle, …): statements join it, `transaction()` uses a SAVEPOINT. `run` gets the
 * database's own placeholders (`$1`… for PostgreSQL, `?` otherwise) and values it can bind
 * (booleans as 1/0 for SQLite and MySQL).
 */
export function joinedExecutor(dialect: SqlDialect, run: (sql: string, params: unknown[]) => Promise<SqlResult<unknown>>): SqlExecutor {
  const value = dialect === 'sqlite' ? sqliteValue : dialect === 'mysql' ? mysqlValue : (v: unknown) => v;
  const executor: SqlExecutor = {
    dialect,
    query: async <Row>(sql: string, params?: readonly unknown[]) => {
      const text = dialect === 'postgres' ? toPgPlaceholders(sql) : sql;
      return (await run(text, (params ?? []).map(value))) as SqlResult<Row>;
    },
    transaction: savepointRunner((sql) => run(sql, []), () => joinedExecutor(dialect, run)),
  };
  return brand(executor);
}

// Savepoint names only need to be unique among the savepoints open on one connection.
let savepoints = 0;

/** How one connection begins, commits and rolls back; the rollback reports failure by throwing. */
interface TransactionSteps {
  begin(): unknown;
  commit(): unknown;
  rollback(): unknown;
}

/**
 * BEGIN, fn, COMMIT; on a throw ROLLBACK and rethrow. A failed rollback goes to `onRollbackFailure`,
 * so the caller can discard a connection that may still be inside the transaction.
 */
async function runTransaction<T>(
  steps: TransactionSteps,
  inner: SqlExecutor,
  fn: (tx: SqlExecutor) => Promise<T>,
  onRollbackFailure?: (error: Error) => void,
): Promise<T> {
  await steps.begin();
  let result: T;
  try {
    result = await fn(inner);
  } catch (error) {
    try {
      await steps.rollback();
    } catch (rollbackError) {
      onRollbackFailure?.(rollbackError as Error);
    }
    throw error;
  }
  await steps.commit();
  return result;
}

/** A connection checked out of a pool for one transaction. */
interface CheckedOut {
  readonly steps: TransactionSteps;
  /** The executor joined to the transaction, handed to fn. */
  readonly inner: SqlExecutor;
  /**
   * Back to the pool. `broken` is the error of a failed ROLLBACK: such a connection may still be
   * inside the transaction, and must be discarded rather than handed to the next caller.
   */
  giveBack(broken: Error | undefined): void;
}

/** An executor on a pool: statements on the pool, each transaction on a connection of its own. */
function poolExecutor(dialect: SqlDialect, query: SqlExecutor['query'], checkout: () => Promise<CheckedOut>): SqlExecutor {
  return brand({
    dialect,
    query,
    async transaction(fn) {
      const { steps, inner, giveBack } = await checkout();
      let broken: Error | undefined;
      try {
        return await runTransaction(steps, inner, fn, (error) => (broken = error));
      } finally {
        giveBack(broken);
      }
    },
  });
}

/** A transaction on a single connection, behind its gate: our other statements on it wait. */
async function gatedTransaction<T>(gate: ReturnType<typeof gateFor>, steps: TransactionSteps, inner: SqlExecutor, fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
  const unlock = await gate.lock();
  try {
    return await runTransaction(steps, inner, fn);
  } finally {
    unlock();
  }
}

/**
 * A savepoint per call, one at a time per executor: two savepoints interleaved on one connection
 * would release or roll back each other.
 */
function savepointRunner(run: (sql: string) => Promise<unknown>, child: () => SqlExecutor) {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> => {
    const next = tail.then(async () => {
      const name = `idemkit_sp_${++savepoints}`;
      await run(`SAVEPOINT ${name}`);
      let result: T;
      try {
        result = await fn(child());
      } catch (error) {
        await run(`ROLLBACK TO SAVEPOINT ${name}`);
        await run(`RELEASE SAVEPOINT ${name}`);
        throw error;
      }
      await run(`RELEASE SAVEPOINT ${name}`);
      return result;
    });
    tail = next.catch(() => undefined);
    return next;
  };
}

// ---- PostgreSQL ----------------------------------------------------------------------------

async function pgQuery<Row>(client: PgClientLike, sql: string, params?: readonly unknown[]): Promise<SqlResult<Row>> {
  const result = await client.query(toPgPlaceholders(sql), params ? [...params] : []);
  const rows = (result.rows ?? []) as Row[];
  return { rows, affected: result.rowCount ?? rows.length };
}

function pgClientExecutor(client: PgClientLike, joined: boolean): SqlExecutor {
  if (joined) {
    const executor: SqlExecutor = {
      dialect: 'postgres',
      query: (sql, params) => pgQuery(client, sql, params),
      transaction: savepointRunner((sql) => client.query(sql), () => pgClientExecutor(client, true)),
    };
    return brand(executor);
  }
  // One connection: statements wait while a transaction of ours is open on it.
  const gate = gateFor(client);
  return brand({
    dialect: 'postgres',
    query: (sql, params) => gate.run(() => pgQuery(client, sql, params)),
    transaction: (fn) =>
      gatedTransaction(gate, pgSteps(client), pgClientExecutor(client, true), fn),
  });
}

function pgSteps(client: PgClientLike): TransactionSteps {
  return { begin: () => client.query('BEGIN'), commit: () => pgCommit(client, 'sqlExecutor'), rollback: () => client.query('ROLLBACK') };
}

function pgPoolExecutor(pool: PgPoolLike): SqlExecutor {
  return poolExecutor('postgres', (sql, params) => pgQuery(pool, sql, params), async () => {
    const client = await pool.connect();
    const held = holdClient(client);
    return { steps: pgSteps(client), inner: pgClientExecutor(client, true), giveBack: (broken) => held.release(broken) };
  });
}

// ---- SQLite --------------------------------------------------------------------------------

// Prepared statements per Database, reused: the guards send the same few texts over and over.
const statementCaches = new WeakMap<SqliteDatabaseLike, Map<string, SqliteDriverStatement>>();
const STATEMENT_CACHE_SIZE = 200;

function prepared(db: SqliteDatabaseLike, sql: string): SqliteDriverStatement {
  let cache = statementCaches.get(db);
  if (!cache) statementCaches.set(db, (cache = new Map()));
  let stmt = cache.get(sql);
  if (stmt) {
    // Most recently used last, so the oldest is the first key.
    cache.delete(sql);
  } else {
    stmt = sqliteDriver(db).prepare(sql);
    if (cache.size >= STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
  }
  cache.set(sql, stmt);
  return stmt;
}

function sqliteRun<Row>(db: SqliteDatabaseLike, sql: string, params?: readonly unknown[]): SqlResult<Row> {
  const stmt = prepared(db, sql);
  const values = (params ?? []).map(sqliteValue);
  if (stmt.reader) {
    const rows = stmt.all(...values) as Row[];
    return { rows, affected: rows.length };
  }
  return { rows: [], affected: stmt.run(...values).changes };
}

function sqliteExecutor(db: SqliteDatabaseLike, joined: boolean): SqlExecutor {
  if (joined) {
    return brand({
      dialect: 'sqlite',
      query: async (sql, params) => sqliteRun(db, sql, params),
      transaction: savepointRunner(async (sql) => db.exec(sql), () => sqliteExecutor(db, true)),
    });
  }
  // The gate the sqlite store uses too: a store and executors on one Database queue behind each
  // other's transactions instead of joining them.
  const gate = gateFor(db);
  return brand({
    dialect: 'sqlite',
    query: (sql, params) => gate.run(() => sqliteRun(db, sql, params)),
    transaction: (fn) =>
      gatedTransaction(
        gate,
        {
          begin: () => db.exec(SQLITE_BEGIN),
          commit: () => db.exec('COMMIT'),
          rollback: () => sqliteDriver(db).inTransaction() && db.exec('ROLLBACK'),
        },
        sqliteExecutor(db, true),
        fn,
      ),
  });
}

// ---- MySQL / MariaDB -----------------------------------------------------------------------

async function mysqlQuery<Row>(conn: MysqlQueryable, sql: string, params?: readonly unknown[]): Promise<SqlResult<Row>> {
  // Prepared statements (execute) bind values on the server; statements without values go
  // through query, which also accepts what the prepared protocol refuses (SAVEPOINT, some DDL).
  const [result] = params && params.length > 0 ? await execute(conn, sql, params.map(mysqlValue)) : ((await conn.query(sql)) as [unknown, unknown]);
  if (Array.isArray(result)) return { rows: result as Row[], affected: result.length };
  const header = result as { affectedRows?: number };
  return { rows: [], affected: header.affectedRows ?? 0 };
}

function mysqlConnectionExecutor(conn: MysqlConnectionLike, joined: boolean): SqlExecutor {
  if (joined) {
    return brand({
      dialect: 'mysql',
      query: (sql, params) => mysqlQuery(conn, sql, params),
      transaction: savepointRunner((sql) => conn.query(sql), () => mysqlConnectionExecutor(conn, true)),
    });
  }
  const gate = gateFor(conn);
  return brand({
    dialect: 'mysql',
    query: (sql, params) => gate.run(() => mysqlQuery(conn, sql, params)),
    transaction: (fn) => gatedTransaction(gate, mysqlSteps(conn), mysqlConnectionExecutor(conn, true), fn),
  });
}

function mysqlSteps(conn: MysqlConnectionLike): TransactionSteps {
  return { begin: () => conn.beginTransaction(), commit: () => conn.commit(), rollback: () => conn.rollback() };
}

function mysqlPoolExecutor(pool: MysqlPoolLike): SqlExecutor {
  return poolExecutor('mysql', (sql, params) => mysqlQuery(pool, sql, params), async () => {
    const conn = await pool.getConnection();
    return {
      steps: mysqlSteps(conn),
      inner: mysqlConnectionExecutor(conn, true),
      // Closed rather than released when broken: the server rolls back what it still holds.
      giveBack: (broken) => (broken === undefined || typeof conn.destroy !== 'function' ? conn.release() : conn.destroy()),
    };
  });
}
