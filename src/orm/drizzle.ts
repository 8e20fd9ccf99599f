/**
 * `idemkit/drizzle`: transactional mode inside Drizzle's own transactions. The handler's `ctx.tx`
 * is Drizzle's transaction object (`PgTransaction`, `SQLiteTransaction`); the record's completion
 * commits in it, with the business writes.
 */
import type { SQL } from 'drizzle-orm';
import { sql as drizzleSql } from 'drizzle-orm';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyStore } from '../core/store.js';
import type { SqlDialect, SqlExecutor } from '../drivers/sql-executor.js';
import { joinedExecutor, sqlExecutor } from '../drivers/sql-executor.js';
import type { SqliteDatabase as AnySqliteDatabase } from '../drivers/sqlite.js';
import { BEGIN as SQLITE_BEGIN } from '../drivers/sqlite.js';
import type { JoinDialect } from '../stores/shared/joined-transaction.js';
import { joinOf } from '../stores/shared/joined-transaction.js';
import type { OrmTransactionalStore } from './bridge.js';
import { ormTransactions } from './bridge.js';

/** Drizzle's better-sqlite3 client: it says whether a transaction is open. */
type SqliteDatabase = AnySqliteDatabase & { readonly inTransaction: boolean };

/** A Drizzle database: anything with Drizzle's `transaction(fn)`. */
interface DrizzleDatabase {
  readonly transaction: (...args: never[]) => unknown;
}

/** The transaction object a Drizzle database hands its `transaction` callback. */
type DrizzleTransactionOf<DB> = DB extends { transaction(fn: (tx: infer Tx) => unknown, ...rest: never[]): unknown } ? Tx : never;

/** What a Drizzle transaction can run raw SQL with: `execute` (PostgreSQL, MySQL) or `run` (SQLite). */
interface RawSql {
  execute?(query: SQL): Promise<unknown>;
  run?(query: SQL): unknown;
}

/**
 * The SQL store (postgresStore, mysqlStore, sqliteStore) with transactions opened by `db`
 * (`db.transaction(async (tx) => …)`), held open while the handler runs. `db` must talk to the
 * database the store's table is in. Every other operation is the store's own.
 *
 * better-sqlite3: Drizzle's transactions there are synchronous, and a request's is not; the bridge
 * opens it itself (`BEGIN IMMEDIATE`) on `db`'s connection and hands out Drizzle's transaction
 * object for it. Give the bridge a Drizzle instance on a connection of its own to the file
 * (`drizzle(new Database(file))`): a statement sent through the same connection from elsewhere
 * while a request's transaction is open would join it.
 */
export function drizzleTransactions<Store extends IdempotencyStore, DB extends DrizzleDatabase>(
  store: Store,
  db: DB,
): OrmTransactionalStore<Store, DrizzleTransactionOf<DB>> {
  const caller = 'drizzleTransactions()';
  type Tx = DrizzleTransactionOf<DB>;
  if (typeof (db as Partial<DrizzleDatabase> | null)?.transaction !== 'function') throw new InvalidOptionError('db', `${caller} expected a Drizzle database`);
  const client = betterSqliteClient(db);
  const join = joinOf(store, 'store', caller);
  if ((client !== undefined) !== (join.dialect === 'sqlite')) {
    throw new InvalidOptionError('db', `${caller}: the Drizzle database and the ${store.name} store are on different kinds of database; the record must commit in the same database`);
  }
  const open =
    client === undefined
      ? (body: (tx: Tx) => Promise<void>) => (db.transaction as unknown as (fn: (tx: Tx) => Promise<void>) => Promise<unknown>).call(db, body)
      : async (body: (tx: Tx) => Promise<void>) => {
          const tx = syncTransactionObject<Tx>(db);
          client.exec(SQLITE_BEGIN);
          try {
            await body(tx);
          } catch (error) {
            if (client.inTransaction) client.exec('ROLLBACK');
            throw error;
          }
          try {
            client.exec('COMMIT');
          } catch (error) {
            // A failed COMMIT leaves the transaction open on the connection: end it.
            if (client.inTransaction) client.exec('ROLLBACK');
            throw error;
          }
        };
  return ormTransactions<Store, Tx>(
    store,
    {
      orm: 'drizzle',
      open,
      runner: (tx, dialect) => async (text, params) => affected(await raw(tx as RawSql, dialect, text, params)),
    },
    caller,
  );
}

/**
 * An executor for `idemkit/patterns` (insertOnce, transition, versionedUpdate) on a Drizzle
 * transaction: its statements join the transaction, its `transaction()` is a SAVEPOINT in it.
 * `dialect` is the database `tx` talks to.
 */
export function drizzleExecutor(tx: object, dialect: SqlDialect): SqlExecutor {
  if (dialect === 'sqlite') {
    // Drizzle's SQLite `run` answers no rows and `all` refuses a statement without any: the
    // executor speaks to the transaction's better-sqlite3 connection (Drizzle's session's client).
    const client = (tx as { session?: { client?: SqliteDatabase } }).session?.client;
    if (typeof client?.prepare !== 'function') throw new InvalidOptionError('tx', 'drizzleExecutor(): expected a Drizzle transaction on better-sqlite3');
    return sqlExecutor(client, { joined: true });
  }
  return joinedExecutor(dialect, async (text, params) => {
    const result = await raw(tx as RawSql, dialect, text, params);
    const rows = rowsOf(result);
    return { rows, affected: rows.length > 0 ? rows.length : affected(result) };
  });
}

/** One statement of ours as Drizzle SQL: text, with each placeholder (`$n` or `?`) a bound parameter. */
function toDrizzle(dialect: JoinDialect, text: string, params: readonly unknown[]): SQL {
  const parts = dialect === 'postgres' ? text.split(/\$(\d+)/) : text.split('?').flatMap((part, i) => (i === 0 ? [part] : [String(i), part]));
  const chunks: SQL[] = [];
  for (let i = 0; i < parts.length; i++) {
    chunks.push(i % 2 === 0 ? drizzleSql.raw(parts[i]!) : drizzleSql`${params[Number(parts[i]) - 1]}`);
  }
  return drizzleSql.join(chunks);
}

async function raw(tx: RawSql, dialect: JoinDialect, text: string, params: readonly unknown[]): Promise<unknown> {
  const query = toDrizzle(dialect, text, params);
  if (dialect === 'sqlite' && typeof tx.run === 'function') return tx.run(query);
  if (typeof tx.execute === 'function') return tx.execute(query);
  throw new InvalidOptionError('db', 'drizzleTransactions(): the transaction has neither execute() nor run()');
}

/** Rows changed, from what a Drizzle driver answers: node-postgres, postgres.js, mysql2, better-sqlite3. */
function affected(result: unknown): number {
  const r = (Array.isArray(result) && !Array.isArray(result[0]) && typeof result[0] === 'object' ? result[0] : result) as {
    rowCount?: number | null;
    count?: number;
    affectedRows?: number;
    changes?: number;
  } | null;
  return Number(r?.rowCount ?? r?.affectedRows ?? r?.changes ?? r?.count ?? 0);
}

function rowsOf(result: unknown): Record<string, unknown>[] {
  if (Array.isArray(result)) return (Array.isArray(result[0]) ? result[0] : result) as Record<string, unknown>[];
  const rows = (result as { rows?: unknown } | null)?.rows;
  return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
}

const syncTransactionObjects = new WeakMap<object, unknown>();

/**
 * Drizzle's transaction object for a better-sqlite3 database. It holds no state of its own (the
 * connection is the database's session), so the one Drizzle hands an empty synchronous
 * transaction serves every transaction opened on that connection.
 */
function syncTransactionObject<Tx>(db: DrizzleDatabase): Tx {
  if (!syncTransactionObjects.has(db)) {
    let captured: unknown;
    (db.transaction as unknown as (fn: (tx: unknown) => void) => void).call(db, (tx) => {
      captured = tx;
    });
    syncTransactionObjects.set(db, captured);
  }
  return syncTransactionObjects.get(db) as Tx;
}

/** The better-sqlite3 Database under a Drizzle database, when it is one. */
function betterSqliteClient(db: object): SqliteDatabase | undefined {
  const client = (db as { $client?: Partial<SqliteDatabase> & { exec?: unknown } }).$client;
  return typeof client?.prepare === 'function' && typeof client.exec === 'function' && 'inTransaction' in client ? (client as SqliteDatabase) : undefined;
}
