/**
 * The MySQL store's schema: `migrate()`, `verify()`, and the look at `information_schema` that
 * turns a statement failing on a missing table or column into `StoreSchemaMissingError`.
 */
import { StoreSchemaMissingError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { isMissingSchema } from '../../drivers/mysql.js';
import type { Connections } from './connections.js';
import { text } from './record.js';
import { ADDED_COLUMNS, IN_FLIGHT_INDEX, SCHEMA_PRESENT, addInFlightIndex, mysqlSchema } from './sql.js';

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
    /** Where `verify()` says that the in-flight index is missing. */
    private readonly logger: IdempotencyLogger,
  ) {}

  async migrate(): Promise<string[]> {
    const { table } = this;
    await this.db().run('migrate', mysqlSchema(table), [], 'query');
    const added: string[] = [];
    for (const [column, definition] of ADDED_COLUMNS) {
      if ((await this.look('migrate')).columns.has(column)) continue;
      try {
        // Nullable at the end of the row: an instant change on MySQL 8 and MariaDB 10.3+.
        await this.db().run('migrate', `ALTER TABLE \`${table}\` ADD COLUMN ${column} ${definition}`, [], 'query');
        added.push(`column ${table}.${column}`);
      } catch (error) {
        // Another instance added it between the look and the ALTER (ER_DUP_FIELDNAME).
        if (!(await this.look('migrate')).columns.has(column)) throw error;
      }
    }
    // A table of an earlier idemkit lacks the in-flight index (a new table has it from CREATE
    // TABLE). Built online: writes go on meanwhile; the ALTER waits only for the transactions
    // open on the table when it starts and ends (its metadata lock).
    if (!(await this.look('migrate')).inFlightIndex) {
      try {
        await this.db().run('migrate', addInFlightIndex(table), [], 'query');
        added.push(`index ${table}.${IN_FLIGHT_INDEX}`);
      } catch (error) {
        // Another instance added it meanwhile (ER_DUP_KEYNAME).
        if (!(await this.look('migrate')).inFlightIndex) throw error;
      }
    }
    return added;
  }

  /**
   * Throws for what a statement needs (the table, its columns). The in-flight index is only
   * warned about: without it `listAbandoned` and `endLeasesOf` read the whole table, slowly but
   * correctly, and no request fails; so, as for the expiry index (which is not checked at all), a
   * deploy or an `idemkit` command is not refused for it.
   */
  async verify(): Promise<void> {
    const found = await this.look('verify');
    const missing = this.missingOf(found.columns);
    if (missing.length > 0) throw new StoreSchemaMissingError('mysql', missing, MIGRATE_FIX);
    if (found.inFlightIndex) return;
    try {
      this.logger.warn(
        `idemkit: mysql store: index ${IN_FLIGHT_INDEX} of table ${this.table} is missing: listAbandoned (the completer) and endLeasesOf (startInstance) read the whole table without it; run \`await store.migrate()\` or \`idemkit migrate\` (it adds the index online)`,
      );
    } catch {
      /* a logger that throws must not fail verify() */
    }
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

  /** The table's columns in the connection's database (empty when there is no table), and whether it has the in-flight index. */
  private async look(what: string): Promise<{ columns: Set<string>; inFlightIndex: boolean }> {
    const { result } = await this.db().run(what, SCHEMA_PRESENT, [this.table, this.table]);
    const columns = new Set<string>();
    let inFlightIndex = false;
    for (const row of result as Array<{ kind?: unknown; name?: unknown }>) {
      if (text(row.kind) === 'index') inFlightIndex = true;
      else columns.add(text(row.name) ?? '');
    }
    return { columns, inFlightIndex };
  }

  /** What `verify()` and the look after a failure name: the table, or the columns a table of an earlier idemkit lacks. */
  private async missingParts(what: string): Promise<string[]> {
    return this.missingOf((await this.look(what)).columns);
  }

  private missingOf(present: Set<string>): string[] {
    const { table } = this;
    return present.size === 0
      ? [`table ${table} (in the connection's database)`]
      : ADDED_COLUMNS.filter(([column]) => !present.has(column)).map(([column]) => `column ${table}.${column}`);
  }
}
