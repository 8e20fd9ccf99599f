/** `store.verify()` of the SQLite store: the table is there with every column the statements use. */
import { StoreSchemaMissingError } from '../../core/errors.js';
import type { SqliteStatement } from '../../drivers/sqlite.js';
import { COLUMNS } from './sql.js';
import type { SqliteWriter } from './writer.js';

export async function verifySqlite(writer: SqliteWriter, columns: SqliteStatement, table: string): Promise<void> {
  const present = new Set(((await writer.run(() => columns.all())) as Array<{ name: string }>).map((row) => row.name));
  if (present.size === 0) throw new StoreSchemaMissingError('sqlite', [`table ${table}`], '`store.migrate()`');
  const missing = COLUMNS.filter((column) => !present.has(column));
  if (missing.length > 0) {
    throw new StoreSchemaMissingError('sqlite', missing.map((column) => `column ${table}.${column}`), `\`store.migrate()\` (it adds the columns a table of an earlier idemkit lacks), or a new table if ${table} is not idemkit's`);
  }
}
