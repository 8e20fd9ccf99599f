/**
 * A better-sqlite3 Database on a temporary file. Transactions of the sqlite store run on a second
 * connection it opens to the same file, which an in-memory database cannot give it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';

export interface SqliteFile {
  readonly db: Database.Database;
  readonly file: string;
  /** Closes `db` and deletes the directory (close the store first, for its own connection). */
  cleanup(): void;
}

export function sqliteFile(name = 'test.db'): SqliteFile {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-sqlite-'));
  const file = join(dir, name);
  const db = new Database(file);
  return {
    db,
    file,
    cleanup: () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
