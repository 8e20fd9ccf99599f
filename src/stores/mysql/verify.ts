/**
 * The MySQL store's schema: `migrate()`, `verify()`, and the look at `information_schema` that
 * turns a statement failing on a missing table or column into `StoreSchemaMissingError`.
 */
import { StoreSchemaMissingError } from '../../core/errors.js';
import { isMissingSchema } from '../../drivers/mysql.js';
import type { Connections } from './connections.js';
import { text } from './record.js';
import { ADDED_COLUMNS, COLUMNS_PRESENT, mysqlSchema } from './sql.js';

/** The fix a `StoreSchemaMissingError` names. */
const MIGRATE_FIX = '`await store.migrate()` or `idemkit migrate` (or apply sql/mysql.sql for the default name)';
// The `what` of the look at the schema after a failure: its own failure is not explained again.
const SCHEMA_LOOK = 'schema look';

export class MysqlSchema {
  // One look at the schema at a time, shared by every request that failed meanwhile.
  private looking: Promise<string[]> | undefined;

  /** `db` is a function: the connections report their failures here, so they are made after this. */
  constructor(
    private readonly db: () => Connections,
    private readonly table: string,
  ) {}

  async migrate(): Promise<string[]> {
    const { table } = this;
    await this.db().run('migrate', mysqlSchema(table), [], 'query');
    const added: string[] = [];
    for (const [column, definition] of ADDED_COLUMNS) {
      if ((await this.columns('migrate')).has(column)) continue;
      try {
        // Nullable at the end of the row: an instant change on MySQL 8 and MariaDB 10.3+.
        await this.db().run('migrate', `ALTER TABLE \`${table}\` ADD COLUMN ${column} ${definition}`, [], 'query');
        added.push(`column ${table}.${column}`);
      } catch (error) {
        // Another instance added it between the look and the ALTER (ER_DUP_FIELDNAME).
        if (!(await this.columns('migrate')).has(column)) throw error;
      }
    }
    return added;
  }

  async verify(): Promise<void> {
    const missing = await this.missingParts('verify');
    if (missing.length > 0) throw new StoreSchemaMissingError('mysql', missing, MIGRATE_FIX);
  }

  /**
   * The error to throw for a statement that failed. A table or column that does not exist
   * (ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR) is not an outage but a store nobody migrated: a retry
   * cannot help, so the answer is `StoreSchemaMissingError` (500, no Retry-After), naming what one
   * look at `information_schema` finds missing, with the same message every time (the logger then
   * prints it once a minute, not once a request). Nothing found missing is the driver's error, as
   * before. The look runs only on this failure: a migrated store pays nothing for it.
   */
  async failure(what: string, error: unknown): Promise<unknown> {
    if (!isMissingSchema(error) || what === SCHEMA_LOOK) return error;
    this.looking ??= this.missingParts(SCHEMA_LOOK).finally(() => {
      this.looking = undefined;
    });
    let missing: string[];
    try {
      missing = await this.looking;
    } catch {
      return error;
    }
    return missing.length > 0 ? new StoreSchemaMissingError('mysql', missing, MIGRATE_FIX, { cause: error }) : error;
  }

  /** The names of the table's columns in the connection's database; empty when there is no table. */
  private async columns(what: string): Promise<Set<string>> {
    const { result } = await this.db().run(what, COLUMNS_PRESENT, [this.table]);
    return new Set((result as Array<{ name?: unknown }>).map((row) => text(row.name) ?? ''));
  }

  /** What `verify()` names: the table, or the columns a table of an earlier idemkit lacks. */
  private async missingParts(what: string): Promise<string[]> {
    const { table } = this;
    const present = await this.columns(what);
    return present.size === 0
      ? [`table ${table} (in the connection's database)`]
      : ADDED_COLUMNS.filter(([column]) => !present.has(column)).map(([column]) => `column ${table}.${column}`);
  }
}
