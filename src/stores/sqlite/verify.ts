/**
 * `store.verify()` of the SQLite store: the table is there with every column the statements use,
 * and (a warning, not a refusal) the in-flight index.
 */
import { StoreSchemaMissingError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import type { SqliteDriverStatement } from '../../drivers/sqlite.js';
import { COLUMNS, inFlightIndex } from './sql.js';
import type { SqliteWriter } from './writer.js';

export interface SqliteSchemaLook {
  /** `pragma_table_info` of the table. */
  readonly columns: SqliteDriverStatement;
  /** Whether the table has an index of a given name. */
  readonly inFlightIndex: SqliteDriverStatement;
}

/**
 * Throws for what a statement needs (the table, its columns). A missing in-flight index is one
 * warning to `logger`: without it `listAbandoned` and `endLeasesOf` read the whole table, slowly
 * but correctly, and no request fails, so it does not fail a deploy either (the expiry index,
 * equally a matter of speed, is not checked at all). The factory creates it, so only a hand-made
 * table or a dropped index lacks it.
 */
export async function verifySqlite(writer: SqliteWriter, look: SqliteSchemaLook, table: string, logger: IdempotencyLogger): Promise<void> {
  const index = inFlightIndex(table);
  const { present, indexed } = await writer.run(() => ({
    present: new Set((look.columns.all() as Array<{ name: string }>).map((row) => row.name)),
    indexed: look.inFlightIndex.get(index) !== undefined,
  }));
  if (present.size === 0) throw new StoreSchemaMissingError('sqlite', [`table ${table}`], '`store.migrate()`');
  const missing = COLUMNS.filter((column) => !present.has(column));
  if (missing.length > 0) {
    throw new StoreSchemaMissingError('sqlite', missing.map((column) => `column ${table}.${column}`), `\`store.migrate()\` (it adds the columns a table of an earlier idemkit lacks), or a new table if ${table} is not idemkit's`);
  }
  if (indexed) return;
  try {
    logger.warn(`idemkit: sqlite store: index ${index} is missing: listAbandoned (the completer) and endLeasesOf (startInstance) read the whole table without it; \`store.migrate()\` creates it (docs/stores/sqlite.md)`);
  } catch {
    /* a logger that throws must not fail verify() */
  }
}
