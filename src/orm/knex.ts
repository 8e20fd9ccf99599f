/**
 * `idemkit/knex`: transactional mode inside Knex's own transactions. The handler's `ctx.tx` is the
 * `Knex.Transaction`; the record's completion commits in it, with the business writes.
 */
import type { Knex } from 'knex';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyStore } from '../core/store.js';
import type { SqlDialect, SqlExecutor } from '../drivers/sql-executor.js';
import { joinedExecutor } from '../drivers/sql-executor.js';
import { joinOf, toQuestionMarks } from '../stores/shared/joined-transaction.js';
import type { OrmTransactionalStore } from './bridge.js';
import { ormTransactions } from './bridge.js';


/**
 * The SQL store (postgresStore, mysqlStore, sqliteStore) with transactions opened by `knex`
 * (`knex.transaction(async (trx) => …)`), held open while the handler runs. `knex` must talk to
 * the database the store's table is in. Every other operation is the store's own.
 *
 * better-sqlite3: Knex's pool there is one connection, held by a request's transaction while it is
 * open; write through the handler's `ctx.tx`, since a `knex(…)` query would wait for it.
 */
export function knexTransactions<Store extends IdempotencyStore>(store: Store, knex: Knex): OrmTransactionalStore<Store, Knex.Transaction> {
  const caller = 'knexTransactions()';
  if (typeof knex !== 'function' || typeof (knex as Partial<Knex>).transaction !== 'function') throw new InvalidOptionError('knex', `${caller} expected a Knex instance`);
  const dialect = dialectOf(knex);
  const join = joinOf(store, 'store', caller);
  if (dialect !== undefined && dialect !== join.dialect) {
    throw new InvalidOptionError('knex', `${caller}: the Knex instance talks to ${dialect}, the ${store.name} store to ${join.dialect}; the record must commit in the same database`);
  }
  return ormTransactions<Store, Knex.Transaction>(
    store,
    {
      orm: 'knex',
      open: (body) => knex.transaction(body),
      runner: (trx, which) => async (sql, params) => affected(await raw(trx, which, sql, params)),
    },
    caller,
  );
}

/**
 * An executor for `idemkit/patterns` (insertOnce, transition, versionedUpdate) on a Knex
 * transaction: its statements join the transaction, its `transaction()` is a SAVEPOINT in it.
 */
export function knexExecutor(trx: Knex.Transaction | Knex | object, dialect?: SqlDialect): SqlExecutor {
  const which = dialect ?? dialectOf(trx);
  if (which === undefined) throw new InvalidOptionError('dialect', "knexExecutor(): the Knex client is not pg, mysql2 or better-sqlite3; pass 'postgres', 'mysql' or 'sqlite'");
  return joinedExecutor(which, async (sql, params) => {
    const result = await raw(trx, which, sql, params);
    const rows = rowsOf(result);
    return { rows, affected: rows.length > 0 ? rows.length : affected(result) };
  });
}

/** The part of a Knex instance or transaction the bridge uses, whatever its record types. */
interface KnexLike {
  raw(sql: string, bindings: readonly Knex.RawBinding[]): PromiseLike<unknown>;
  readonly client?: { readonly config?: { readonly client?: unknown }; readonly dialect?: unknown };
}

/** Knex binds `?` only: PostgreSQL's `$n` are rewritten, in order of appearance. */
function raw(trx: object, dialect: SqlDialect, sql: string, params: readonly unknown[]): Promise<unknown> {
  const statement = dialect === 'postgres' ? toQuestionMarks(sql, params) : { sql, params: [...params] };
  return Promise.resolve((trx as KnexLike).raw(statement.sql, statement.params as Knex.RawBinding[]));
}

/** Rows changed, from what Knex's raw answers: pg's result, mysql2's [header, fields], better-sqlite3's run result. */
function affected(result: unknown): number {
  const r = (Array.isArray(result) ? result[0] : result) as { rowCount?: number | null; affectedRows?: number; changes?: number } | null;
  return Number(r?.rowCount ?? r?.affectedRows ?? r?.changes ?? 0);
}

function rowsOf(result: unknown): Record<string, unknown>[] {
  if (Array.isArray(result)) return (Array.isArray(result[0]) ? result[0] : result.every((row) => typeof row === 'object') ? result : []) as Record<string, unknown>[];
  const rows = (result as { rows?: unknown } | null)?.rows;
  return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
}

/** The database a Knex instance talks to, by its client name. */
function dialectOf(knex: object): SqlDialect | undefined {
  const client = (knex as KnexLike).client;
  const name = String(client?.dialect ?? client?.config?.client ?? '');
  if (/^(pg|postgres|postgresql|pgnative|cockroachdb)$/.test(name)) return 'postgres';
  if (/^(mysql|mysql2)$/.test(name)) return 'mysql';
  if (/^(sqlite3|better-sqlite3)$/.test(name)) return 'sqlite';
  return undefined;
}
