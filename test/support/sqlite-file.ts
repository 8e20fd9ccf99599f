/**
 * A SQLite Database on a temporary file (better-sqlite3, or the runtime's built-in driver: sqlite-driver.ts). Transactions of the sqlite store run on a second
 * connection it opens to the same file, which an in-memory database cannot give it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { openSqlite } from './sqlite-driver.js';

export interface SqliteFile {
  readonly db: Database.Database;
  readonly file: string;
  /** Closes `db` and deletes the directory (close the store first, for its own connection). */
  cleanup(): void;
}

export function sqliteFile(name = 'test.db'): SqliteFile {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-sqlite-'));
  const file = join(dir, name);
  const db = openSqlite(file);
  return {
    db,
    file,
    cleanup: () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
