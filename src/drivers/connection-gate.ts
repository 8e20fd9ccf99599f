/**
 * One connection has one transaction at a time: a statement sent while a transaction is open on it
 * joins that transaction. better-sqlite3 has one connection per Database, and a pg Client or a
 * mysql2 connection is one too. Everything in this process that uses one such connection (the
 * sqlite store, the SQL executors) goes through the same gate, so nobody's statement lands in
 * someone else's transaction.
 */

/**
 * Lets statements run at once while no transaction is open, and queues them behind an open one
 * (and transactions behind each other).
 */
export class TransactionGate {
  private tail: Promise<void> | undefined;

  /** Runs `fn` once no transaction holds the gate. */
  async run<T>(fn: () => T | PromiseLike<T>): Promise<T> {
    while (this.tail) await this.tail;
    return fn();
  }

  /** Waits for the gate and holds it until the returned function is called. */
  async lock(): Promise<() => void> {
    while (this.tail) await this.tail;
    let unlock!: () => void;
    this.tail = new Promise<void>((resolve) => {
      unlock = () => {
        this.tail = undefined;
        resolve();
      };
    });
    return unlock;
  }
}

// Keyed weakly: a closed, dropped Database takes its gate with it.
const gates = new WeakMap<object, TransactionGate>();

/** The one gate of this connection (a better-sqlite3 Database, or any single connection). */
export function gateFor(db: object): TransactionGate {
  let gate = gates.get(db);
  if (!gate) {
    gate = new TransactionGate();
    gates.set(db, gate);
  }
  return gate;
}
