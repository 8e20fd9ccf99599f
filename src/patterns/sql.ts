/**
 * One small SQL interface over the drivers idemkit supports, so the data-layer guards (and the
 * messaging and recovery helpers) are written once. The drivers stay the user's: only their shapes
 * are declared here.
 */
import { InvalidOptionError } from '../core/errors.js';
import { booleanOption, rejectUnknown } from '../core/validate.js';
import { gateFor } from '../drivers/connection-gate.js';

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

// ---- Driver shapes -------------------------------------------------------------------------

/** What node-postgres answers (`QueryResult`). */
export interface PgQueryResult {
  readonly rows: unknown[];
  readonly rowCount: number | null;
  /** The command tag; a COMMIT of a failed transaction answers `ROLLBACK`. */
  readonly command?: string;
}

/** A node-postgres client (`pg.Client` or a checked-out `pg.PoolClient`). */
export interface PgClientLike {
  query(text: string, values?: unknown[]): Promise<PgQueryResult>;
}

/** A node-postgres `Pool`. */
export interface PgPoolLike extends PgClientLike {
  connect(): Promise<PgClientLike & { release(error?: Error | boolean): void }>;
  readonly totalCount: number;
}

/** A better-sqlite3 prepared statement. */
export interface SqliteStatementLike {
  /** True for statements that return rows (SELECT, … RETURNING). */
  readonly reader: boolean;
  all(...params: unknown[]): unknown[];
  run(...params: unknown[]): { changes: number };
}

/** A better-sqlite3 `Database`. */
export interface SqliteDatabaseLike {
  prepare(sql: string): SqliteStatementLike;
  exec(sql: string): unknown;
  readonly inTransaction: boolean;
}

/** A value mysql2 binds (what its `execute` accepts, in the forms the guards send). */
export type MysqlValue = string | number | bigint | boolean | Date | Buffer | Uint8Array | null;

/** A mysql2/promise connection (`createConnection`, or one from `pool.getConnection()`). */
export interface MysqlConnectionLike {
  execute(sql: string, values?: MysqlValue[]): Promise<[unknown, unknown]>;
  query(sql: string): Promise<[unknown, unknown]>;
  beginTransaction(): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/** A mysql2/promise `Pool` (`createPool`). */
export interface MysqlPoolLike {
  execute(sql: string, values?: MysqlValue[]): Promise<[unknown, unknown]>;
  query(sql: string): Promise<[unknown, unknown]>;
  getConnection(): Promise<MysqlConnectionLike & { release(): void; destroy?(): void }>;
}

export type SqlDatabase = PgPoolLike | PgClientLike | SqliteDatabaseLike | MysqlPoolLike | MysqlConnectionLike;

/** Accepts a pg Pool or client, a better-sqlite3 Database, a mysql2/promise Pool or connection. */
export function sqlExecutor(db: SqlDatabase | SqlExecutor, options?: SqlExecutorOptions): SqlExecutor {
  if (isExecutor(db)) return db;
  if (options !== undefined) rejectUnknown(options, ['joined'], '');
  const joined = booleanOption('joined', options?.joined, false);
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

/**
 * `?` → `$1, $2, …`, leaving `?` alone inside string literals, quoted identifiers, dollar-quoted
 * strings and comments.
 */
export function toPgPlaceholders(sql: string): string {
  let out = '';
  let n = 0;
  for (let i = 0; i < sql.length; ) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      const end = closingQuote(sql, i, c);
      out += sql.slice(i, end);
      i = end;
    } else if (c === '-' && sql[i + 1] === '-') {
      const nl = sql.indexOf('\n', i);
      const end = nl === -1 ? sql.length : nl;
      out += sql.slice(i, end);
      i = end;
    } else if (c === '/' && sql[i + 1] === '*') {
      const close = sql.indexOf('*/', i + 2);
      const end = close === -1 ? sql.length : close + 2;
      out += sql.slice(i, end);
      i = end;
    } else if (c === '$' && /^\$[A-Za-z_0-9]*\$/.test(sql.slice(i)) && !/[A-Za-z0-9_]/.test(sql[i - 1] ?? '')) {
      const tag = /^\$[A-Za-z_0-9]*\$/.exec(sql.slice(i))![0];
      if (/^\$\d+\$$/.test(tag) === false) {
        const close = sql.indexOf(tag, i + tag.length);
        const end = close === -1 ? sql.length : close + tag.length;
        out += sql.slice(i, end);
        i = end;
      } else {
        out += c;
        i++;
      }
    } else if (c === '?') {
      out += `$${++n}`;
      i++;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

function closingQuote(sql: string, start: number, quote: string): number {
  for (let i = start + 1; i < sql.length; i++) {
    if (sql[i] === quote) {
      if (sql[i + 1] === quote) i++;
      else return i + 1;
    }
  }
  return sql.length;
}

async function pgQuery<Row>(client: PgClientLike, sql: string, params?: readonly unknown[]): Promise<SqlResult<Row>> {
  const result = await client.query(toPgPlaceholders(sql), params ? [...params] : []);
  const rows = (result.rows ?? []) as Row[];
  return { rows, affected: result.rowCount ?? rows.length };
}

async function pgCommit(client: PgClientLike): Promise<void> {
  const result = await client.query('COMMIT');
  // PostgreSQL answers a COMMIT of an aborted transaction with ROLLBACK rather than an error.
  if (result.command === 'ROLLBACK') throw new Error('COMMIT was answered with ROLLBACK: the transaction had failed and was rolled back');
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
  return { begin: () => client.query('BEGIN'), commit: () => pgCommit(client), rollback: () => client.query('ROLLBACK') };
}

function pgPoolExecutor(pool: PgPoolLike): SqlExecutor {
  return brand({
    dialect: 'postgres',
    query: (sql, params) => pgQuery(pool, sql, params),
    async transaction(fn) {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        return await runTransaction(pgSteps(client), pgClientExecutor(client, true), fn, (error) => (broken = error));
      } finally {
        // A client whose ROLLBACK failed may still be inside the transaction: discard it.
        client.release(broken);
      }
    },
  });
}

// ---- SQLite --------------------------------------------------------------------------------

function sqliteValue(value: unknown): unknown {
  // better-sqlite3 binds numbers, bigints, strings, buffers and null; booleans are refused.
  if (value === true) return 1;
  if (value === false) return 0;
  return value;
}

// Prepared statements per Database, reused: the guards send the same few texts over and over.
const statementCaches = new WeakMap<SqliteDatabaseLike, Map<string, SqliteStatementLike>>();
const STATEMENT_CACHE_SIZE = 200;

function prepared(db: SqliteDatabaseLike, sql: string): SqliteStatementLike {
  let cache = statementCaches.get(db);
  if (!cache) statementCaches.set(db, (cache = new Map()));
  let stmt = cache.get(sql);
  if (stmt) {
    // Most recently used last, so the oldest is the first key.
    cache.delete(sql);
  } else {
    stmt = db.prepare(sql);
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
          // IMMEDIATE takes the file's write lock now, so a later write cannot fail on lock upgrade.
          begin: () => db.exec('BEGIN IMMEDIATE'),
          commit: () => db.exec('COMMIT'),
          rollback: () => db.inTransaction && db.exec('ROLLBACK'),
        },
        sqliteExecutor(db, true),
        fn,
      ),
  });
}

// ---- MySQL / MariaDB -----------------------------------------------------------------------

type MysqlRunner = Pick<MysqlConnectionLike, 'execute' | 'query'>;

async function mysqlQuery<Row>(conn: MysqlRunner, sql: string, params?: readonly unknown[]): Promise<SqlResult<Row>> {
  // Prepared statements (execute) bind values on the server; statements without values go
  // through query, which also accepts what the prepared protocol refuses (SAVEPOINT, some DDL).
  const [result] = params && params.length > 0 ? await conn.execute(sql, params.map(mysqlValue) as MysqlValue[]) : await conn.query(sql);
  if (Array.isArray(result)) return { rows: result as Row[], affected: result.length };
  const header = result as { affectedRows?: number };
  return { rows: [], affected: header.affectedRows ?? 0 };
}

function mysqlValue(value: unknown): unknown {
  // mysql2's execute refuses undefined; booleans bind as 1/0 like everywhere else.
  if (value === undefined) return null;
  if (value === true) return 1;
  if (value === false) return 0;
  return value;
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
  return brand({
    dialect: 'mysql',
    query: (sql, params) => mysqlQuery(pool, sql, params),
    async transaction(fn) {
      const conn = await pool.getConnection();
      let healthy = true;
      try {
        return await runTransaction(mysqlSteps(conn), mysqlConnectionExecutor(conn, true), fn, () => (healthy = false));
      } finally {
        // A connection whose ROLLBACK failed may still hold the transaction: close it, the server rolls back.
        if (healthy || typeof conn.destroy !== 'function') conn.release();
        else conn.destroy();
      }
    },
  });
}
