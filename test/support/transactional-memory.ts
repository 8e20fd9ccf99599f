/** The memory store with transactions, shared by the execution suites (lifecycle, states). */
import type { StoreTransaction, TransactionalStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';

/** What a handler writes through `ctx.tx` in the fake transactional store below. */
export interface FakeTx {
  write(row: string): void;
}

/**
 * The memory store with transactions, as the SQL stores behave: what a transaction completes or
 * checkpoints lands on the record only when it commits; a rollback leaves nothing. `rows` holds
 * what committed transactions wrote through their `tx`; `log` each transaction call in order;
 * `base` is the memory store underneath (its records are the committed ones). `overrides` replace
 * the transaction's own calls (a commit that fails, a rollback the test holds back).
 */
export function transactionalMemory(overrides: Partial<StoreTransaction<FakeTx>> = {}, options: { maxResponseBytes?: number } = {}) {
  const base = memoryStore({ sweepIntervalMs: 0, ...options });
  const log: string[] = [];
  const rows: string[] = [];
  const store: TransactionalStore<FakeTx> = {
    ...base,
    name: 'memory+tx',
    maxResponseBytes: base.maxResponseBytes,
    claim: base.claim.bind(base),
    renew: base.renew.bind(base),
    checkpoint: base.checkpoint.bind(base),
    complete: base.complete.bind(base),
    release: base.release.bind(base),
    get: base.get.bind(base),
    beginTransaction: () => {
      log.push('begin');
      const pending: Array<() => Promise<void>> = [];
      const written: string[] = [];
      const transaction: StoreTransaction<FakeTx> = {
        tx: { write: (row) => void written.push(row) },
        complete: async (ref, token, response) => {
          log.push('complete');
          pending.push(() => base.complete(ref, token, response));
        },
        checkpoint: async (ref, token, point, data) => {
          log.push('checkpoint');
          pending.push(() => base.checkpoint(ref, token, point, data));
        },
        commit: async () => {
          log.push('commit');
          for (const apply of pending) await apply();
          rows.push(...written);
        },
        rollback: async () => {
          log.push('rollback');
        },
        ...overrides,
      };
      return Promise.resolve(transaction);
    },
  };
  return { store, base, log, rows };
}
