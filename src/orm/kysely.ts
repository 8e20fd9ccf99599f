/**
 * `idemkit/kysely`: transactional mode inside Kysely's own transactions. The handler's `ctx.tx` is
 * the Kysely `Transaction<DB>`; the record's completion commits in it, with the business writes.
 */
import type { Kysely, QueryResult, Transaction } from 'kysely';
import { CompiledQuery, MysqlAdapter, PostgresAdapter, SqliteAdapter } from 'kysely';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyStore } from '../core/store.js';
import type { SqlDialect, SqlExecutor } from '../drivers/sql-executor.js';
import { joinedExecutor } from '../drivers/sql-executor.js';
import { joinOf } from '../stores/shared/joined-transaction.js';
import type { OrmTransactionalStore } from './bridge.js';
import { ormTransactions } from './bridge.js';


/**
 * The SQL store (postgresStore, mysqlStore, sqliteStore) with transactions opened by `db`
 * (`db.transaction().execute(…)`), held open while the handler runs. `db` must talk to the
 * database the store's table is in. Every other operation is the store's own.
 */
export function kyselyTransactions<Store extends IdempotencyStore, DB>(store: Store, db: Kysely<DB>): OrmTransactionalStore<Store, Transaction<DB>> {
  const caller = 'kyselyTransactions()';
  if (typeof (db as Partial<Kysely<DB>> | null)?.transaction !== 'function') throw new InvalidOptionError('db', `${caller} expected a Kysely instance`);
  const dialect = dialectOf(db);
  const join = joinOf(store, 'store', caller);
  if (dialect !== undefined && dialect !== join.dialect) {
    throw new InvalidOptionError('db', `${caller}: the Kysely instance talks to ${dialect}, the ${store.name} store to ${join.dialect}; the record must commit in the same database`);
  }
  return ormTransactions<Store, Transaction<DB>>(
    store,
    {
      orm: 'kysely',
      open: (body) => db.transaction().execute(body),
      runner: (trx) => async (sql, params) => Number((await raw(trx, sql, params)).numAffectedRows ?? 0n),
    },
    caller,
  );
}

/**
 * An executor for `idemkit/patterns` (insertOnce, transition, versionedUpdate) on a Kysely
 * transaction: its statements join the transaction, its `transaction()` is a SAVEPOINT in it.
 * The dialect is read from the Kysely instance; pass it for a dialect idemkit does not recognise.
 */
export function kyselyExecutor<DB>(trx: Kysely<DB>, dialect?: SqlDialect): SqlExecutor {
  const which = dialect ?? dialectOf(trx);
  if (which === undefined) throw new InvalidOptionError('dialect', "kyselyExecutor(): the Kysely dialect is not PostgreSQL, MySQL or SQLite's; pass 'postgres', 'mysql' or 'sqlite'");
  return joinedExecutor(which, async (sql, params) => {
    const result = await raw(trx, sql, params);
    return { rows: [...result.rows], affected: result.numAffectedRows === undefined ? result.rows.length : Number(result.numAffectedRows) };
  });
}

function raw<DB>(db: Kysely<DB>, sql: string, params: readonly unknown[]): Promise<QueryResult<Record<string, unknown>>> {
  return db.executeQuery(CompiledQuery.raw(sql, [...params]) as CompiledQuery<Record<string, unknown>>);
}

/** The database a Kysely instance talks to, by its dialect's adapter (undefined for a dialect of another kind). */
function dialectOf(db: { getExecutor?: () => { adapter?: unknown } }): SqlDialect | undefined {
  const adapter = typeof db.getExecutor === 'function' ? db.getExecutor().adapter : undefined;
  if (adapter instanceof PostgresAdapter) return 'postgres';
  if (adapter instanceof MysqlAdapter) return 'mysql';
  if (adapter instanceof SqliteAdapter) return 'sqlite';
  return undefined;
}
