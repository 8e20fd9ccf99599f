/**
 * The file's one writer, as the SQLite store sees it from this process. In-process work through
 * `database` (the store's statements, idemkit executors, `exclusive`) queues at the Database's gate
 * behind an open transaction instead of waiting on the file lock, which better-sqlite3 does
 * synchronously, stalling the event loop that would end the transaction. What it knows of the
 * holder and of the waiters makes the `store-busy` answers.
 */
import { StoreBusyError } from '../../core/errors.js';
import { gateFor } from '../../drivers/connection-gate.js';
import type { TransactionGate } from '../../drivers/connection-gate.js';
import type { SqliteDatabase } from '../../drivers/sqlite.js';
import { isSqliteBusy, sqliteDriver } from '../../drivers/sqlite.js';

export class SqliteWriter {
  /**
   * The transaction of this store that holds the file's writer in this process, since when (store
   * clock), and what it is: for the `store-busy` answer to an operation queued behind it.
   */
  private holder: { since: number; what: string } | undefined;
  /** This store's operations waiting at the gate, behind an open transaction. */
  private waiting = 0;
  // Shared with every SQL executor on this Database (idemkit/patterns), so none joins another's transaction.
  private readonly gate: TransactionGate;

  constructor(
    private readonly db: SqliteDatabase,
    private readonly now: () => number,
    /** `busyTimeoutMs`, and whether the store set it (`configure`). */
    private readonly busyTimeoutMs: number,
    private readonly configured: boolean,
  ) {
    this.gate = gateFor(db);
  }

  /** Runs `fn` once no transaction of this process holds the file. */
  run<T>(fn: () => T | PromiseLike<T>): Promise<T> {
    this.waiting++;
    return this.gate.run(() => {
      this.waiting--;
      return fn();
    });
  }

  /** Waits for the gate and holds it until the returned function is called. */
  async lock(): Promise<() => void> {
    this.waiting++;
    try {
      return await this.gate.lock();
    } finally {
      this.waiting--;
    }
  }

  /** A transaction of this store now holds the writer; `what` names it in `store-busy` answers. */
  held(what: string): void {
    this.holder = { since: this.now(), what };
  }

  released(): void {
    this.holder = undefined;
  }

  /**
   * An operation queued behind an open transaction missed the middleware's `storeTimeoutMs`: the
   * writer is busy. Retry-After is as long again as the holder has held the writer so far (nothing
   * else is known of how long it will run; at least 1 s). The message stays the same from one
   * request to the next, so the logger's once-a-minute limit holds.
   */
  explainLate(operation: string, limitMs: number): StoreBusyError | undefined {
    if (this.waiting === 0) return undefined;
    const holder = this.holder;
    const what = holder === undefined ? "a transaction on the same Database that is not this store's (an idemkit/patterns executor's, or another sqlite store's)" : holder.what;
    const heldMs = holder === undefined ? limitMs : Math.max(0, this.now() - holder.since);
    return new StoreBusyError(
      `sqlite store: the SQLite writer is busy: ${operation} waited longer than \`storeTimeoutMs\` (${limitMs} ms) behind ${what}, which holds the file's one write lock. Transactions on one SQLite file run one at a time: keep each one short, raise \`storeTimeoutMs\` above the longest wait, or use PostgreSQL or MySQL for long transactional handlers (docs/stores/sqlite.md, "The one-writer limit")`,
      Math.max(1_000, heldMs),
    );
  }

  /** SQLITE_BUSY: another connection (another process, or a Database of the app's own) held the write lock for the whole busy timeout. */
  busyElsewhere(operation: string, error: unknown): unknown {
    if (!isSqliteBusy(error)) return error;
    return new StoreBusyError(
      `sqlite store: the SQLite writer is busy: ${operation} waited its busy timeout (\`busyTimeoutMs\`${this.configured ? `, ${this.busyTimeoutMs} ms` : ''}) for the file's write lock, held by another connection (another process on the file, or a Database of your own); keep transactions short in every process on the file, or raise \`busyTimeoutMs\` (the wait blocks the event loop)`,
      Math.max(1_000, this.busyTimeoutMs),
      { cause: error },
    );
  }

  /**
   * While a transaction holds the file, a write through `database` can only fail: this thread
   * holds the lock it would wait for. Its busy timeout goes to 0 meanwhile, so it fails at once
   * (SQLITE_BUSY) instead of blocking the event loop for the whole timeout first.
   */
  failFastWhileOpen(): () => void {
    const db = sqliteDriver(this.db);
    const before = db.pragmaValue('busy_timeout');
    db.exec('PRAGMA busy_timeout = 0');
    return () => {
      try {
        db.exec(`PRAGMA busy_timeout = ${Number(before)}`);
      } catch {
        // `database` was closed meanwhile: nothing to restore.
      }
    };
  }
}
