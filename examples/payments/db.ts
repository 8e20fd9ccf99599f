/**
 * Opens the service's database from a URL: `sqlite:/path/file.db` (the default: no server needed)
 * or `postgres://…`. Both give the same three things: a SQL executor for the business tables, the
 * idemkit store for the Idempotency-Key records (transactional, on the same database), and a way
 * to run statements inside the transaction the middleware opened (`ctx.tx`).
 */
import type { TransactionalStore } from 'idemkit';
import type { SqlExecutor } from 'idemkit/patterns';
import type { SqliteStoreOptions } from 'idemkit/stores/sqlite';
import { sqlExecutor } from 'idemkit/patterns';
import { migrateProcessed } from 'idemkit/messaging';
import type { Dialect, TableNames } from './schema.js';
import { CATALOGUE, dropSql, schemaSql, tableNames } from './schema.js';

export interface PaymentsDb {
  readonly dialect: Dialect;
  readonly url: string;
  readonly t: TableNames;
  /** Statements and transactions of their own (callbacks, consumer, completer, reports). */
  readonly sql: SqlExecutor;
  /** The Idempotency-Key store, on the same database, so records commit with the business writes. */
  readonly store: TransactionalStore<unknown>;
  /** An executor for the middleware's open transaction (`ctx.tx`). */
  joined(tx: unknown): SqlExecutor;
  /** Creates the tables and seeds the catalogue (insert-once: a restart never resets stock). */
  migrate(): Promise<void>;
  /** Drops every table of this prefix. */
  drop(): Promise<void>;
  close(): Promise<void>;
}

export async function openDb(url: string, prefix = ''): Promise<PaymentsDb> {
  const t = tableNames(prefix);
  if (url.startsWith('sqlite:')) {
    const { sqliteStore } = await import('idemkit/stores/sqlite');
    const database = await openSqlite(url.slice('sqlite:'.length));
    // WAL + a busy timeout: the demo reads the file from another process while the service writes.
    // The store's transactions (ctx.tx) run on a connection of its own; the executor over `database`
    // waits for them instead of joining them.
    const store = sqliteStore({ database, table: t.idempotency });
    return finish('sqlite', url, t, sqlExecutor(database), store as TransactionalStore<unknown>, async () => {
      store.close();
      database.close();
    });
  }
  if (/^postgres(ql)?:\/\//.test(url)) {
    const { default: pg } = await import('pg');
    const { postgresStore } = await import('idemkit/stores/postgres');
    const pool = new pg.Pool({ connectionString: url, max: 10, connectionTimeoutMillis: 5_000 });
    pool.on('error', () => {}); // an idle connection dropped by the server: the next query reconnects
    const store = postgresStore({ pool, table: t.idempotency });
    return finish('postgres', url, t, sqlExecutor(pool), store as TransactionalStore<unknown>, () => pool.end(), async () => {
      await store.migrate();
    });
  }
  throw new Error(`unsupported database URL ${url} (sqlite:/path/file.db or postgres://…)`);
}

/** What the demo uses of a SQLite Database, whichever driver opened it. */
type SqliteFile = SqliteStoreOptions['database'] & { close(): void };
type OpenSqlite = new (file: string, options: { timeout: number }) => SqliteFile;

/**
 * The file, opened with Bun's built-in `bun:sqlite` on Bun, better-sqlite3 where its binary loads
 * (the Node it was installed with), and Node's built-in `node:sqlite` otherwise (Node 22.5+): on
 * Bun and on Node 22 and 24 the demo needs no native addon.
 */
async function openSqlite(file: string): Promise<SqliteFile> {
  // A timeout: the demo reads the file from another process while the service writes.
  const options = { timeout: 10_000 };
  if ('Bun' in globalThis) {
    const { Database } = (await import('bun:sqlite' as string)) as { Database: OpenSqlite };
    const database = new Database(file, options);
    database.exec('PRAGMA busy_timeout = 10000');
    return database;
  }
  try {
    const { default: Database } = await import('better-sqlite3');
    return new Database(file, options);
  } catch (error) {
    const { DatabaseSync } = (await import('node:sqlite' as string).catch(() => {
      throw error; // Node 20: better-sqlite3's own error says what is wrong.
    })) as { DatabaseSync: OpenSqlite };
    return new DatabaseSync(file, options);
  }
}

function finish(
  dialect: Dialect,
  url: string,
  t: TableNames,
  sql: SqlExecutor,
  store: TransactionalStore<unknown>,
  close: () => Promise<void>,
  migrateStore: () => Promise<void> = async () => {},
): PaymentsDb {
  return {
    dialect,
    url,
    t,
    sql,
    store,
    joined: (tx) => sqlExecutor(tx as never, { joined: true }),
    async migrate() {
      await migrateStore();
      for (const statement of schemaSql(dialect, t)) await sql.query(statement);
      await migrateProcessed(sql, { table: t.processed });
      for (const item of CATALOGUE) {
        await sql.query(
          `INSERT INTO ${t.inventory} (sku, name, price, initial, available, reserved, sold, version)
           VALUES (?, ?, ?, ?, ?, 0, 0, 1) ON CONFLICT (sku) DO NOTHING`,
          [item.sku, item.name, item.price, item.stock, item.stock],
        );
      }
    },
    async drop() {
      for (const statement of dropSql(dialect, t)) await sql.query(statement);
    },
    close,
  };
}
