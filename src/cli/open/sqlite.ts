// Opens a SQLite file for the store commands: it must exist unless the command is `migrate`,
// which alone may create it, or its table.
import { existsSync } from 'node:fs';
import { CliUsageError } from '../../check/errors.js';
import { StoreSchemaMissingError } from '../../core/errors.js';
import type { SqliteDatabase } from '../../drivers/sqlite.js';
import type { StoreNames, StoreUrl } from '../store-url.js';
import type { OpenedStore } from './driver.js';
import { CONNECT_TIMEOUT_MS, Unreachable, importDriver, refuseNames } from './driver.js';

// What the CLI uses of better-sqlite3, declared here so that nothing imports the driver's types.
interface SqliteModule {
  default: new (file: string, options?: object) => SqliteDatabase & { close(): void };
}

export async function openSqlite(url: StoreUrl, names: StoreNames, create: boolean): Promise<OpenedStore> {
  refuseNames(url, names, ['table']);
  const { default: Database } = await importDriver<SqliteModule>('sqlite');
  const { sqliteStore } = await import('../../stores/sqlite/index.js');
  const table = names.table ?? 'idempotency_records';
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table)) throw new CliUsageError(`--table: expected a plain SQL identifier, got ${JSON.stringify(table)}`);
  if (!create && !existsSync(url.target)) throw new Unreachable(`no SQLite database at ${url.target} (run \`idemkit migrate\` to create it)`);
  let db;
  try {
    db = new Database(url.target, { fileMustExist: !create, timeout: CONNECT_TIMEOUT_MS });
  } catch (error) {
    throw new Unreachable(`cannot open the SQLite database ${url.target}: ${(error as Error).message}`);
  }
  const hasTable = () => db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) !== undefined;
  const columnNames = () => new Set((db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as Array<{ name: string }>).map((c) => c.name));
  const where = `table ${table} in ${url.target}`;
  const make = () => sqliteStore({ database: db, table });
  let store: ReturnType<typeof make> | undefined;
  // The factory creates a missing table: only `migrate` may do that, so other commands check first.
  const existing = () => (store ??= make());
  try {
    hasTable();
  } catch (error) {
    db.close();
    throw new Unreachable(`cannot read the SQLite database ${url.target}: ${(error as Error).message}`);
  }
  return {
    url,
    where,
    get store() {
      return existing();
    },
    async migrate() {
      const present = hasTable();
      const columnsBefore = columnNames();
      // The factory migrates: creates the table, or adds the columns an earlier idemkit's lacks.
      existing();
      if (!present) return { created: [`table ${table}`], present: [], added: [] };
      const added = [...columnNames()].filter((column) => !columnsBefore.has(column)).map((column) => `column ${table}.${column}`);
      return { created: [], present: [`table ${table}`], added };
    },
    async verify() {
      if (!hasTable()) throw new StoreSchemaMissingError('sqlite', [where], '`idemkit migrate`');
    },
    async close() {
      db.close();
    },
  };
}
