/**
 * `idemkit/prisma`: transactional mode inside Prisma's interactive transactions
 * (`prisma.$transaction(async (tx) => …)`). The handler's `ctx.tx` is Prisma's transaction client;
 * the record's completion commits in it, with the business writes. PostgreSQL only
 * (`@prisma/adapter-pg`, or any adapter of a `postgresql` schema).
 *
 * Nothing here imports `@prisma/client`: the client is generated per application, so its types are
 * read from the instance passed in.
 */
import { InvalidOptionError } from '../core/errors.js';
import { MAX_TIMER_MS, optionReader } from '../core/option-reader.js';
import type { IdempotencyStore } from '../core/store.js';
import type { SqlExecutor } from '../drivers/sql-executor.js';
import { joinedExecutor } from '../drivers/sql-executor.js';
import { joinOf } from '../stores/shared/joined-transaction.js';
import type { OrmTransactionalStore } from './bridge.js';
import { ormTransactions } from './bridge.js';


/** A Prisma client, as far as the bridge needs one: the callback form of `$transaction`. */
interface PrismaClientLike {
  // `any`: Prisma's own callback parameter is the generated transaction client.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  $transaction(fn: (tx: any) => Promise<unknown>, options?: { maxWait?: number; timeout?: number }): Promise<unknown>;
}

/** The transaction client a Prisma client hands its `$transaction` callback (`Prisma.TransactionClient`). */
type PrismaTransactionOf<P extends PrismaClientLike> = Parameters<Parameters<P['$transaction']>[0]>[0];

/** What the bridge calls on a transaction client: Prisma's raw-SQL API. */
interface RawSql {
  $executeRawUnsafe(sql: string, ...values: unknown[]): PromiseLike<number>;
  $queryRawUnsafe(sql: string, ...values: unknown[]): PromiseLike<unknown>;
}

export interface PrismaTransactionsOptions {
  /**
   * How long Prisma lets one interactive transaction stay open before it rolls it back, in
   * milliseconds. The transaction is held for the whole handler (its lease is renewed meanwhile),
   * so Prisma's own 5 s default would roll back any handler slower than that. A handler still
   * running at `timeout` cannot commit: its request fails and the retry executes again.
   * @default 300000 (5 minutes)
   */
  readonly timeout?: number;
  /**
   * How long `$transaction` may wait for a connection of the adapter's pool, in milliseconds.
   * @default 10000
   */
  readonly maxWait?: number;
}

/**
 * The PostgreSQL store (postgresStore) with transactions opened by `prisma`
 * (`prisma.$transaction(async (tx) => …, { timeout, maxWait })`), held open while the handler
 * runs. `prisma` must talk to the database the store's table is in. Every other operation is the
 * store's own.
 */
export function prismaTransactions<Store extends IdempotencyStore, P extends PrismaClientLike>(
  store: Store,
  prisma: P,
  options: PrismaTransactionsOptions = {},
): OrmTransactionalStore<Store, PrismaTransactionOf<P>> {
  const caller = 'prismaTransactions()';
  if (typeof (prisma as Partial<PrismaClientLike> | null)?.$transaction !== 'function') throw new InvalidOptionError('prisma', `${caller} expected a PrismaClient`);
  const read = optionReader(caller, options);
  const timeout = read.integer('timeout', { default: 300_000, min: 1, max: MAX_TIMER_MS });
  const maxWait = read.integer('maxWait', { default: 10_000, min: 1, max: MAX_TIMER_MS });
  read.done();
  const join = joinOf(store, 'store', caller);
  if (join.dialect !== 'postgres') {
    throw new InvalidOptionError('store', `${caller} bridges PostgreSQL only (postgresStore with @prisma/adapter-pg); the ${store.name} store is ${join.dialect}`);
  }
  const provider = (prisma as { _activeProvider?: unknown })._activeProvider;
  if (typeof provider === 'string' && provider !== 'postgresql' && provider !== 'cockroachdb') {
    throw new InvalidOptionError('prisma', `${caller}: the PrismaClient talks to ${provider}, the ${store.name} store to postgres; the record must commit in the same database`);
  }
  return ormTransactions<Store, PrismaTransactionOf<P>>(
    store,
    {
      orm: 'prisma',
      open: (body) => prisma.$transaction(body, { timeout, maxWait }),
      // Prisma sends a raw statement to PostgreSQL as written: the store's `$n` placeholders fit.
      runner: (tx) => async (sql, params) => await rawOf(tx).$executeRawUnsafe(sql, ...params),
    },
    caller,
  );
}

/**
 * An executor for `idemkit/patterns` (insertOnce, transition, versionedUpdate) on a Prisma
 * transaction client: its statements join the transaction, its `transaction()` is a SAVEPOINT in it.
 */
export function prismaExecutor(tx: object): SqlExecutor {
  const raw = rawOf(tx);
  return joinedExecutor('postgres', async (sql, params) => {
    // Prisma answers either rows ($queryRaw) or the rows changed ($executeRaw), not both.
    if (returnsRows(sql)) {
      const rows = (await raw.$queryRawUnsafe(sql, ...params)) as unknown[];
      return { rows, affected: rows.length };
    }
    return { rows: [], affected: await raw.$executeRawUnsafe(sql, ...params) };
  });
}

function rawOf(tx: unknown): RawSql {
  const raw = tx as Partial<RawSql> | null;
  if (typeof raw?.$executeRawUnsafe !== 'function' || typeof raw.$queryRawUnsafe !== 'function') {
    throw new InvalidOptionError('tx', "idemkit needs a Prisma transaction client (prisma.$transaction(async (tx) => …)'s tx)");
  }
  return raw as RawSql;
}

function returnsRows(sql: string): boolean {
  return /^\s*(SELECT|WITH|VALUES|SHOW|TABLE)\b/i.test(sql) || /\bRETURNING\b/i.test(sql);
}
