/**
 * `idemkit/typeorm`: transactional mode inside TypeORM's own transactions. The handler's `ctx.tx`
 * is the transaction's `EntityManager`; the record's completion commits in it, with the business
 * writes.
 */
import type { DataSource, EntityManager, QueryResult, QueryRunner } from 'typeorm';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyStore } from '../core/store.js';
import type { SqlDialect, SqlExecutor } from '../drivers/sql-executor.js';
import { joinedExecutor } from '../drivers/sql-executor.js';
import { joinOf } from '../stores/shared/joined-transaction.js';
import type { OrmTransactionalStore } from './bridge.js';
import { ormTransactions } from './bridge.js';


/**
 * The SQL store (postgresStore, mysqlStore, sqliteStore) with transactions opened by `dataSource`
 * (`dataSource.transaction(async (manager) => …)`), held open while the handler runs. The data
 * source must talk to the database the store's table is in. Every other operation is the store's own.
 *
 * better-sqlite3: a DataSource is one connection, and TypeORM runs all of its queries there; give
 * the bridge a DataSource of its own (a query sent through it while a request's transaction is
 * open would run inside that transaction).
 */
export function typeormTransactions<Store extends IdempotencyStore>(store: Store, dataSource: DataSource): OrmTransactionalStore<Store, EntityManager> {
  const caller = 'typeormTransactions()';
  if (typeof (dataSource as Partial<DataSource> | null)?.transaction !== 'function') {
    throw new InvalidOptionError('dataSource', `${caller} expected a TypeORM DataSource`);
  }
  const dialect = dialectOf(dataSource);
  const join = joinOf(store, 'store', caller);
  if (dialect !== undefined && dialect !== join.dialect) {
    throw new InvalidOptionError('dataSource', `${caller}: the DataSource talks to ${dialect}, the ${store.name} store to ${join.dialect}; the record must commit in the same database`);
  }
  return ormTransactions<Store, EntityManager>(
    store,
    {
      orm: 'typeorm',
      open: (body) => dataSource.transaction(body),
      // TypeORM hands statements to the driver as written: the store's own placeholders fit.
      runner: (manager) => async (sql, params) => (await structured(manager, sql, params)).affected ?? 0,
    },
    caller,
  );
}

/**
 * An executor for `idemkit/patterns` (insertOnce, transition, versionedUpdate) on a TypeORM
 * transaction's `EntityManager`: its statements join the transaction, its `transaction()` is a
 * SAVEPOINT in it.
 */
export function typeormExecutor(manager: EntityManager, dialect?: SqlDialect): SqlExecutor {
  const which = dialect ?? dialectOf(manager.connection);
  if (which === undefined) throw new InvalidOptionError('dialect', "typeormExecutor(): the DataSource is not PostgreSQL, MySQL/MariaDB or SQLite; pass 'postgres', 'mysql' or 'sqlite'");
  return joinedExecutor(which, async (sql, params) => {
    const result = await structured(manager, sql, params);
    const rows = Array.isArray(result.records) ? (result.records as unknown[]) : [];
    return { rows, affected: result.affected ?? rows.length };
  });
}

/** One statement on the transaction's query runner, answered with rows and the rows changed. */
function structured(manager: EntityManager, sql: string, params: readonly unknown[]): Promise<QueryResult> {
  const runner: QueryRunner | undefined = manager.queryRunner;
  if (runner === undefined || !runner.isTransactionActive) {
    throw new InvalidOptionError('manager', "idemkit needs the EntityManager of a transaction (dataSource.transaction(async (manager) => …)'s manager)");
  }
  return runner.query(sql, [...params], true) as Promise<QueryResult>;
}

function dialectOf(dataSource: DataSource): SqlDialect | undefined {
  const type = dataSource.options?.type as string | undefined;
  if (type === 'postgres' || type === 'cockroachdb') return 'postgres';
  if (type === 'mysql' || type === 'mariadb') return 'mysql';
  if (type === 'better-sqlite3' || type === 'sqlite') return 'sqlite';
  return undefined;
}
