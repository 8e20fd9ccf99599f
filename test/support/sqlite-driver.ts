/**
 * The SQLite driver the tests open their Databases with, on whichever runtime runs them (issue 31):
 * better-sqlite3 where its binary loads (Node 20, the Node it is built for on install), Bun's
 * `bun:sqlite` on Bun, Node's built-in `node:sqlite` elsewhere (Node 22 and 24, whose ABI the
 * installed binary does not match, and Deno). IDEMKIT_TEST_SQLITE=node:sqlite picks node:sqlite
 * where both would do. The tests use what the three share (prepare, exec, run/get/all, close), so
 * the better-sqlite3 type they were written against is kept.
 */
import { createRequire } from 'node:module';
import Database from 'better-sqlite3';

export type TestSqliteDriver = 'better-sqlite3' | 'node:sqlite' | 'bun:sqlite';

const require = createRequire(import.meta.url);
const onBun = typeof (process.versions as Record<string, string | undefined>).bun === 'string';

function pick(): TestSqliteDriver {
  const forced = process.env.IDEMKIT_TEST_SQLITE;
  if (forced === 'better-sqlite3' || forced === 'node:sqlite' || forced === 'bun:sqlite') return forced;
  if (onBun) return 'bun:sqlite';
  try {
    new Database(':memory:').close();
    return 'better-sqlite3';
  } catch {
    return 'node:sqlite';
  }
}

export const testSqliteDriver: TestSqliteDriver = pick();

type Open = new (file: string) => Database.Database;

/** A Database on `file` (or ':memory:') with the driver of this runtime. */
export function openSqlite(file: string): Database.Database {
  if (testSqliteDriver === 'better-sqlite3') return new Database(file);
  if (testSqliteDriver === 'bun:sqlite') return new (require('bun:sqlite') as { Database: Open }).Database(file);
  return new (require('node:sqlite') as { DatabaseSync: Open }).DatabaseSync(file);
}

/**
 * Closes `db` so that its prepared statements fail too: Bun's `close()` leaves statements already
 * prepared working (it closes once they are finalized) unless given `true`; better-sqlite3 and
 * node:sqlite ignore the argument.
 */
export function closeSqlite(db: Database.Database): void {
  (db.close as (this: Database.Database, force?: boolean) => unknown).call(db, true);
}
