/**
 * What every ORM bridge shares: a SQL store whose transactions are the ORM's own. An ORM opens a
 * transaction for the span of a callback (`db.transaction(async (tx) => …)`); transactional mode
 * needs one that stays open from `beginTransaction()` until the engine commits or rolls back. So
 * the callback is entered and held: it resolves on commit (the ORM commits), and rejects with a
 * private sentinel on rollback (the ORM rolls back).
 */
import { TransactionEndedError } from '../core/errors.js';
import type { IdempotencyStore, RecordRef, StoreTransaction, StoredResponse, TransactionalStore } from '../core/store.js';
import { outerWrapperOf } from '../core/store-wrapper.js';
import type { JoinDialect, StatementRunner, TransactionJoin } from '../stores/shared/joined-transaction.js';
import { joinOf } from '../stores/shared/joined-transaction.js';

export type { JoinDialect, StatementRunner } from '../stores/shared/joined-transaction.js';

/**
 * The store, with `beginTransaction()` opening the ORM's transaction and handing out the ORM's
 * transaction object as `tx` (so `ctx.tx` is typed as the ORM's). Every other operation is the
 * store's own.
 */
export type OrmTransactionalStore<Store extends IdempotencyStore, Tx> = Omit<Store, 'beginTransaction' | 'checkTransactions'> & TransactionalStore<Tx>;

/** How a bridge opens its ORM's transaction and carries the store's statements over it. */
export interface OrmTransactions<Tx> {
  /** The ORM's name, for messages (`kysely`). */
  readonly orm: string;
  /** Calls the ORM's callback-scoped transaction with `body`; settles when the ORM has committed or rolled back. */
  open(body: (tx: Tx) => Promise<void>): Promise<unknown>;
  /** Runs one statement of the store (in `dialect`'s placeholders) on the transaction; resolves the rows changed. */
  runner(tx: Tx, dialect: JoinDialect): StatementRunner;
}

/**
 * Thrown inside the ORM's callback to make it roll back; never seen outside this module. An Error,
 * as ORMs expect of what a callback throws (they log it, read its message).
 */
class RollbackRequested extends Error {
  constructor() {
    super('idemkit rolled the transaction back');
  }
}

/** The store, with its transactions opened by the ORM. */
export function ormTransactions<Store extends IdempotencyStore, Tx>(store: Store, orm: OrmTransactions<Tx>, caller: string): OrmTransactionalStore<Store, Tx> {
  // An instrumented store (`instrumentStore`) stays outermost: the bridge goes beneath it, so its
  // transactions are traced as with `instrumentStore(knexTransactions(store, knex))`.
  const outer = outerWrapperOf(store);
  if (outer !== undefined) return outer.rewrap(ormTransactions(outer.inner, orm, caller)) as unknown as OrmTransactionalStore<Store, Tx>;
  const join = joinOf(store, 'store', caller);
  const beginTransaction = () => begin(join, orm);
  // A proxy, not a copy: getters (the admin), symbols and everything added to the store later stay the store's.
  return new Proxy(store, {
    get(target, property) {
      if (property === 'beginTransaction') return beginTransaction;
      // The store's own check is about its own transaction connection, which the ORM replaces.
      if (property === 'checkTransactions') return undefined;
      return Reflect.get(target, property, target) as unknown;
    },
    has(target, property) {
      return property === 'beginTransaction' || (property !== 'checkTransactions' && Reflect.has(target, property));
    },
  }) as unknown as OrmTransactionalStore<Store, Tx>;
}

async function begin<Tx>(join: TransactionJoin, orm: OrmTransactions<Tx>): Promise<StoreTransaction<Tx>> {
  const leave = await join.enter();
  let decide!: (commit: boolean) => void;
  const decided = new Promise<boolean>((resolve) => (decide = resolve));
  let opened!: (tx: Tx) => void;
  const entered = new Promise<Tx>((resolve) => (opened = resolve));
  let finished: Promise<void>;
  try {
    finished = Promise.resolve(
      orm.open(async (tx) => {
        opened(tx);
        if (!(await decided)) throw new RollbackRequested();
      }),
    ).then(
      () => leave(),
      (error: unknown) => {
        leave();
        if (!(error instanceof RollbackRequested)) throw error;
      },
    );
  } catch (error) {
    leave();
    throw error;
  }
  // The ORM may fail before it calls back (BEGIN refused, no connection): that is the answer then.
  const endedFirst = finished.then(() => Promise.reject(notOpened(orm.orm)));
  endedFirst.catch(() => {});
  const tx = await Promise.race([entered, endedFirst]);
  const run = orm.runner(tx, join.dialect);
  let ended: 'committed' | 'rolled back' | undefined;
  const open = (what: string) => {
    if (ended !== undefined) throw new TransactionEndedError(`${orm.orm} transaction: ${what} after it ${ended}`);
  };
  const end = async (commit: boolean) => {
    // Only the first of commit/rollback decides: the engine rolls back after a failed commit.
    if (ended !== undefined) {
      await finished.catch(() => {});
      return;
    }
    ended = commit ? 'committed' : 'rolled back';
    decide(commit);
    await finished;
  };
  return {
    tx,
    complete: async (ref: RecordRef, token: string, response: StoredResponse) => {
      open('complete');
      await join.complete(run, ref, token, response);
    },
    checkpoint: async (ref: RecordRef, token: string, point: string, data?: unknown) => {
      open('checkpoint');
      await join.checkpoint(run, ref, token, point, data);
    },
    commit: () => end(true),
    rollback: () => end(false),
  };
}

function notOpened(orm: string): TransactionEndedError {
  return new TransactionEndedError(`${orm} transaction: the ORM ended it before handing it out`);
}
