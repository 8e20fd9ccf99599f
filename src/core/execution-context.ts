// What the handler gets (`ctx`): the context's types, the types adapters derive `ctx.tx` with, and
// the phase transactions `ctx.beginTransaction()` opens. `Execution` (execution.ts) builds the
// context itself: its closures write the execution's own fields.
import { NotTransactionalError } from './errors.js';
import type { Deadlines } from './deadlines.js';
import type { IdempotencyStore, RecordRef, TxOf } from './store.js';
import { isTransactionalStore } from './store.js';
import { fenceHandle } from './tx-fence.js';

/**
 * What the handler sees of its idempotency context. `Tx` is `ctx.tx`'s type (the store's
 * transaction object in transactional mode, `undefined` outside it); `StoreTx` is what
 * `beginTransaction` hands out. Adapters derive both from the store they are given (`ContextFor`).
 */
export interface IdempotencyContext<Tx = unknown, StoreTx = Tx> {
  readonly key: string;
  readonly scope: string;
  /** True when an earlier owner's lease ran out and this request took over. */
  readonly takeover: boolean;
  /** The last recovery point an earlier owner reached; resume from there. */
  readonly resumeFrom: string | undefined;
  readonly recoveryData: unknown;
  /**
   * The store transaction, in transactional mode: the driver's own object (a pg client, a mysql2
   * connection, a better-sqlite3 Database) behind a fence that refuses every call once the request
   * has ended (answered, rolled back, or past `maxExecutionMs`) with `TransactionEndedError`.
   */
  readonly tx: Tx;
  /** Records a recovery point (fenced by this request's owner token). */
  checkpoint(point: string, data?: unknown): Promise<void>;
  /**
   * Declares that nothing happened (validation failed inside the handler): the claim is released
   * and the response is not stored, so the key can be used again.
   */
  discard(): void;
  /**
   * Opens a store transaction of this request's own, for one recovery phase (idemkit/patterns
   * `definePhases`): its `checkpoint` is fenced by the owner token and commits with the writes.
   * Refused in transactional mode (the whole request is already one transaction, which a phase
   * commit would break) and on a store without transactions.
   */
  beginTransaction(): Promise<FencedTransaction<StoreTx>>;
  /**
   * Ends the request without a stored result but keeps its recovery points: the response is sent
   * and not stored, the record stays in flight and its lease is given up at once, so a retry (or a
   * completer) resumes from the last recovery point. Releasing instead would forget committed phases.
   */
  suspend(): void;
}

/**
 * `ctx.tx`'s type for a store and a `transactional` setting: the store's transaction object when
 * `transactional: true`, `undefined` when it is off (or left out), either when it is only known
 * to be a boolean.
 */
export type HandlerTx<Store, Transactional extends boolean> = [Transactional] extends [true]
  ? TxOf<Store>
  : [Transactional] extends [false]
    ? undefined
    : TxOf<Store> | undefined;

/** The idempotency context an adapter given `store` and `transactional` hands its handlers. */
export type ContextFor<Store, Transactional extends boolean> = IdempotencyContext<HandlerTx<Store, Transactional>, TxOf<Store>>;

/** A store transaction bound to one claimed record: `checkpoint` is fenced by its owner token. */
export interface FencedTransaction<Tx = unknown> {
  readonly tx: Tx;
  /** Records a recovery point inside the transaction; throws `LeaseLostError` when the token is stale. */
  checkpoint(point: string, data?: unknown): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/**
 * Opens one recovery phase's transaction on `store` for the record `ref` its request holds with
 * `token` (`ctx.beginTransaction()`, once the execution has checked that it may). `progressed` is
 * called when a phase that checkpointed commits: the record then holds committed progress.
 */
export async function beginPhaseTransaction(
  store: IdempotencyStore,
  deadlines: Deadlines,
  ref: RecordRef,
  token: string,
  progressed: () => void,
): Promise<FencedTransaction> {
  if (!isTransactionalStore(store)) {
    throw new NotTransactionalError(`ctx.beginTransaction() needs a store with transactions; the ${store.name} store has none`);
  }
  const begin = store.beginTransaction();
  begin.catch(() => {});
  const tx = await deadlines.bound(begin, 'beginTransaction', (late) => void late.rollback().catch(() => {}));
  // The phase's handle refuses use once the phase committed or rolled back: its connection is
  // back in the pool by then.
  const fence: { closedBecause: string | undefined } = { closedBecause: undefined };
  let checkpointed = false;
  return {
    tx: fenceHandle(tx.tx, fence, 'the phase transaction'),
    checkpoint: async (point, data) => {
      await tx.checkpoint(ref, token, point, data);
      checkpointed = true;
    },
    commit: async () => {
      fence.closedBecause ??= 'it committed';
      await tx.commit();
      if (checkpointed) progressed();
    },
    rollback: () => {
      fence.closedBecause ??= 'it rolled back';
      return tx.rollback();
    },
  };
}
