/**
 * How a SQL store completes a record inside a transaction it did not open: an ORM's (idemkit/kysely,
 * idemkit/drizzle, idemkit/knex, idemkit/typeorm, idemkit/prisma). The store keeps its SQL and its
 * fencing; the bridge only carries statements over the ORM's transaction, so the business writes
 * and the completion commit or roll back together, on the ORM's own connection.
 */
import { InvalidOptionError, LeaseLostError, StoreUnavailableError } from '../../core/errors.js';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../core/store.js';

/** The database a store's statements are written for (its placeholders and its SQL). */
export type JoinDialect = 'postgres' | 'mysql' | 'sqlite';

/**
 * Runs one statement inside the outside transaction and resolves how many rows it changed.
 * Placeholders are the database's own: `$1`, `$2`… for PostgreSQL (possibly out of order, and
 * repeated), `?` for MySQL and SQLite. Values are strings, numbers, booleans (PostgreSQL only),
 * `null` and `Buffer`s (bytea, BLOB, VARBINARY).
 */
export type StatementRunner = (sql: string, params: readonly unknown[]) => Promise<number>;

/** A store's fenced writes, carried by someone else's transaction. */
export interface TransactionJoin {
  readonly dialect: JoinDialect;
  /** Fenced completion through `run`; rejects with `LeaseLostError` when `token` is no longer the owner's. */
  complete(run: StatementRunner, ref: RecordRef, token: string, response: StoredResponse): Promise<void>;
  /** Fenced checkpoint through `run`: it commits, or rolls back, with the outside transaction. */
  checkpoint(run: StatementRunner, ref: RecordRef, token: string, point: string, data?: unknown): Promise<void>;
  /**
   * Called before the outside transaction opens; resolves to the function to call once it has
   * ended. SQLite has one writer per file: the store's own statements queue behind the
   * transaction instead of waiting on the file lock (which would stall the event loop).
   */
  enter(): Promise<() => void>;
}

/** Where a SQL store keeps its join; a symbol, so it stays out of the store's documented API. */
export const TRANSACTION_JOIN: unique symbol = Symbol.for('idemkit.transactionJoin') as never;

/** A store whose fenced writes can run inside an outside transaction: the PostgreSQL, MySQL and SQLite stores. */
export interface JoinableStore extends IdempotencyStore {
  readonly [TRANSACTION_JOIN]: TransactionJoin;
}

/** The store's join, or an `InvalidOptionError` naming `option` when the store has none. */
export function joinOf(store: IdempotencyStore, option: string, caller: string): TransactionJoin {
  const join = (store as Partial<JoinableStore> | null)?.[TRANSACTION_JOIN];
  if (join === undefined || typeof join.complete !== 'function') {
    const name = typeof store?.name === 'string' ? `the ${store.name} store` : String(store);
    throw new InvalidOptionError(option, `${caller} needs a SQL store of idemkit's (postgresStore, mysqlStore or sqliteStore) on the database the ORM talks to; got ${name}`);
  }
  return join;
}

/**
 * One fenced write of a store, run through the outside transaction: a statement that fails is the
 * store unavailable (`<store> store: <what> on <where> failed: …`), and anything but one row
 * changed means the owner's token no longer holds the record.
 */
export async function joinedWrite(runner: StatementRunner, store: string, where: string, what: string, statement: string, values: readonly unknown[]): Promise<void> {
  let changed: number;
  try {
    changed = await runner(statement, values);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new StoreUnavailableError(`${store} store: ${what} on ${where} failed: ${message}`, { cause: error });
  }
  if (changed !== 1) throw new LeaseLostError();
}

/** `$n` placeholders in order of appearance, as `?` with their values: for an API that binds `?` only (Knex). */
export function toQuestionMarks(sql: string, params: readonly unknown[]): { sql: string; params: unknown[] } {
  const ordered: unknown[] = [];
  const text = sql.replace(/\$(\d+)/g, (_match, n: string) => {
    ordered.push(params[Number(n) - 1]);
    return '?';
  });
  return { sql: text, params: ordered };
}
