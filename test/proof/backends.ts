/**
 * What the cross-process and crash proofs need from a backend: the idempotency store, and a
 * business table ("orders") written inside the handler, counted from outside.
 */
import Database from 'better-sqlite3';
import type { IdempotencyStore } from '../../src/core/store.js';
import { sqliteStore } from '../../src/stores/sqlite.js';

export interface ProofBackend {
  readonly store: IdempotencyStore;
  /** Inserts one order row inside the handler's transaction (or directly, without one). */
  insertOrder(tx: unknown, key: string): Promise<void>;
  countOrders(key?: string): Promise<number>;
  close(): Promise<void>;
}

/** `url` names the store; `name` keeps each test's tables apart. */
export async function openBackend(url: string, name: string, options: { uniqueOrders?: boolean } = {}): Promise<ProofBackend> {
  if (url.startsWith('sqlite:')) {
    const db = new Database(url.slice('sqlite:'.length));
    const store = sqliteStore({ database: db, table: `idem_${name}` });
    db.exec(`CREATE TABLE IF NOT EXISTS orders_${name} (key TEXT NOT NULL ${options.uniqueOrders ? 'UNIQUE' : ''})`);
    return {
      store,
      async insertOrder(tx, key) {
        const target = (tx ?? db) as Database.Database;
        const insert = options.uniqueOrders ? 'INSERT OR IGNORE' : 'INSERT';
        target.prepare(`${insert} INTO orders_${name} (key) VALUES (?)`).run(key);
      },
      async countOrders(key) {
        const sql = `SELECT count(*) AS n FROM orders_${name}${key ? ' WHERE key = ?' : ''}`;
        return (db.prepare(sql).get(...(key ? [key] : [])) as { n: number }).n;
      },
      async close() {
        db.close();
      },
    };
  }
  throw new Error(`no proof backend for ${url}`);
}
