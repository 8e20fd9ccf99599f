/**
 * A transaction of the PostgreSQL store (transactional mode's `ctx.tx`): one client of the pool,
 * held from BEGIN to COMMIT or ROLLBACK, the completion and checkpoint fenced on it.
 */
import { TransactionEndedError } from '../../core/errors.js';
import type { RecordRef, StoreTransaction, StoredResponse } from '../../core/store.js';
import type { PostgresClient, PostgresPool, PostgresQueryResult } from '../../drivers/postgres.js';
import { commitRolledBack, holdClient, rolledBackCommitError } from '../../drivers/postgres.js';
import { unavailable } from './verify.js';

type Queryable = Pick<PostgresClient, 'query'>;

/** The store's fenced writes, on the client they are given. */
export interface FencedWrites {
  complete(db: Queryable, ref: RecordRef, token: string, response: StoredResponse): Promise<void>;
  checkpoint(db: Queryable, ref: RecordRef, token: string, point: string, data: unknown): Promise<void>;
}

export async function beginTransaction<Client extends PostgresClient>(pool: PostgresPool, where: string, writes: FencedWrites): Promise<StoreTransaction<Client>> {
  let client: Client;
  try {
    client = (await pool.connect()) as Client;
  } catch (error) {
    throw unavailable('beginTransaction', where, error);
  }
  const held = holdClient(client);
  try {
    await client.query('BEGIN');
  } catch (error) {
    held.release(error);
    throw unavailable('beginTransaction', where, error);
  }
  let ended = false;
  const end = async (command: 'COMMIT' | 'ROLLBACK') => {
    // Only the first of commit/rollback runs: the engine may roll back after a failed commit.
    if (ended) return;
    ended = true;
    let result: PostgresQueryResult;
    try {
      result = await client.query(command);
    } catch (error) {
      // The connection's state is unknown: the pool must not hand it out again.
      held.release(error);
      throw unavailable(command.toLowerCase(), where, error);
    }
    held.release();
    if (command === 'COMMIT' && commitRolledBack(result)) throw rolledBackCommitError(`postgres store: commit on ${where}`);
  };
  // After commit or rollback the client is back in the pool, maybe inside another request's
  // transaction: a late statement must never run on it.
  const open = () => {
    if (ended) throw new TransactionEndedError(`postgres store: the transaction on ${where} has ended`);
    return client;
  };
  return {
    tx: client,
    complete: async (ref, token, response) => writes.complete(open(), ref, token, response),
    checkpoint: async (ref, token, point, data) => writes.checkpoint(open(), ref, token, point, data),
    commit: () => end('COMMIT'),
    rollback: () => end('ROLLBACK'),
  };
}
