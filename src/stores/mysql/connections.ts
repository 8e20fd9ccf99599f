/**
 * Pooled connections for the MySQL/MariaDB store, with a deadline on every statement.
 */
import { StoreUnavailableError, TransactionEndedError } from '../../core/errors.js';
import type { MysqlPool, MysqlPoolConnection, MysqlValue } from '../../drivers/mysql.js';
import { execute, inTransaction, isDeadlock, isFatal } from '../../drivers/mysql.js';

/**
 * Hands out pooled connections with a deadline on every statement. A connection that misses the
 * deadline, or fails at the protocol level, is destroyed: released, it would hand its frozen
 * socket to the next caller. mysql2's own per-query `timeout` does not do this.
 */
export class Connections {
  constructor(
    private readonly pool: MysqlPool,
    private readonly timeoutMs: number,
    /** Turns the error of a failed autocommit statement into the one to throw (the store names a missing schema). */
    private readonly explain: (what: string, error: unknown) => unknown = (_what, error) => error,
  ) {}

  /**
   * One autocommit statement. A deadlock victim (rolled back whole) is retried; so is, once, a
   * statement whose connection died under it; `ambiguous` then says the first try may have landed.
   */
  async run(what: string, sql: string, values: MysqlValue[], via: 'execute' | 'query' = 'execute') {
    for (let attempt = 1; ; attempt++) {
      const lease = await this.acquire(what);
      try {
        const [result] =
          via === 'execute'
            ? await lease.within(what, execute(lease.connection, sql, values))
            : ((await lease.within(what, lease.connection.query(sql))) as [unknown]);
        if (inTransaction(result)) {
          // Someone released this connection inside a transaction (or turned autocommit off): our
          // write would not commit. Closing the connection makes the server roll it back.
          lease.done(undefined, true);
          throw new StoreUnavailableError(`mysql store: ${what}: a pooled connection was inside a transaction; it was destroyed`);
        }
        lease.done();
        return { result, ambiguous: attempt > 1 };
      } catch (error) {
        lease.done(error);
        const retry = (isFatal(error) && attempt === 1) || (isDeadlock(error) && attempt < 3);
        if (!retry) throw await this.explain(what, error);
      }
    }
  }

  /** A connection inside START TRANSACTION, for transactional mode. */
  async begin() {
    const lease = await this.acquire('beginTransaction');
    try {
      await lease.within('beginTransaction', lease.connection.beginTransaction());
    } catch (error) {
      lease.done(error, true);
      throw new StoreUnavailableError('mysql store: could not begin a transaction', { cause: error });
    }
    let open = true;
    return {
      connection: lease.connection,
      execute: async (what: string, sql: string, values: MysqlValue[]) => {
        if (!open) throw new TransactionEndedError(`mysql store: ${what} after the transaction ended`);
        try {
          const [result] = await lease.within(what, execute(lease.connection, sql, values));
          if (inTransaction(result) === false) {
            // The transaction was already over (a deadlock rolls it back whole, and the handler went
            // on; or the handler committed on its own): this statement ran in autocommit.
            open = false;
            lease.done(undefined, true);
            throw new TransactionEndedError(
              `mysql store: ${what} ran after the transaction had ended (a swallowed deadlock, or a COMMIT in the handler)`,
            );
          }
          return result;
        } catch (error) {
          // A dead or timed-out connection has lost the transaction with it (the server rolls back).
          if (lease.destroyed || isFatal(error)) open = false;
          throw error;
        }
      },
      end: async (how: 'commit' | 'rollback') => {
        if (!open) return lease.done(undefined, true);
        open = false;
        try {
          await lease.within(how, lease.connection[how]());
          lease.done();
        } catch (error) {
          // The outcome is unknown: never return such a connection to the pool. Closing it makes
          // the server roll back whatever did not commit.
          lease.done(error, true);
          throw new StoreUnavailableError(`mysql store: ${how.toUpperCase()} failed`, { cause: error });
        }
      },
    };
  }

  private async acquire(what: string): Promise<Lease> {
    const pending = this.pool.getConnection();
    const connection = await deadline(pending, this.timeoutMs, () => {
      // A connection that arrives after we gave up goes straight back.
      pending.then((c) => c.release(), () => {});
      return new StoreUnavailableError(`mysql store: ${what}: no connection within ${this.timeoutMs} ms (option \`statementTimeoutMs\`)`);
    });
    return new Lease(connection, this.timeoutMs);
  }
}

/** One checked-out connection: released once, or destroyed once. */
class Lease {
  destroyed = false;
  private finished = false;

  constructor(
    readonly connection: MysqlPoolConnection,
    private readonly timeoutMs: number,
  ) {}

  within<T>(what: string, work: Promise<T>): Promise<T> {
    return deadline(work, this.timeoutMs, () => {
      this.done(undefined, true);
      return new StoreUnavailableError(
        `mysql store: ${what} did not answer within ${this.timeoutMs} ms (option \`statementTimeoutMs\`); its connection was destroyed`,
      );
    });
  }

  /** Returns the connection to the pool, unless it failed at the protocol level or `destroy` is set. */
  done(error?: unknown, destroy = false): void {
    if (this.finished) return;
    this.finished = true;
    if (destroy || isFatal(error)) {
      this.destroyed = true;
      this.connection.destroy();
    } else {
      this.connection.release();
    }
  }
}

/** Settles like `work`, or rejects with `onTimeout()`'s error after `ms`. */
function deadline<T>(work: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(onTimeout()), ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
