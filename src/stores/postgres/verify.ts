/**
 * The PostgreSQL store's schema: `migrate()`, `verify()`, and the look at the catalog that turns a
 * statement failing on a missing table, column or function into `StoreSchemaMissingError`.
 */
import { StoreSchemaMissingError, StoreUnavailableError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import type { PostgresPool } from '../../drivers/postgres.js';
import { isMissingSchema, sqlState } from '../../drivers/postgres.js';
import type { PostgresNames } from './sql.js';
import { ADDED_COLUMNS, CLAIM_ADDED_COLUMN, inFlightIndex } from './sql.js';

/** The fix a `StoreSchemaMissingError` names. */
const MIGRATE_FIX = '`await store.migrate()` or `idemkit migrate` (or apply sql/postgres.sql for the default names)';

const SCHEMA_SQL = `SELECT to_regclass($1) IS NOT NULL AS has_table,
  EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $2 AND p.proname = $3) AS has_claim,
  EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $2 AND p.proname = $3
            AND $5 = ANY (p.proargnames)) AS claim_current,
  array(SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = ANY($4::text[]) AND NOT attisdropped) AS columns,
  EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($6) AND indrelid = to_regclass($1)) AS has_in_flight,
  EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($6) AND indrelid = to_regclass($1) AND indisvalid) AS in_flight_valid`;

/** A driver error as the store reports it: the operation, the table, and a hint when the schema is missing. */
export function unavailable(operation: string, where: string, error: unknown): StoreUnavailableError {
  const hint = isMissingSchema(error) ? ' (run store.migrate() or sql/postgres.sql first)' : '';
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`postgres store: ${operation} on ${where} failed: ${message}${hint}`, { cause: error });
}

export class PostgresSchema {
  // One look at the catalog at a time, shared by every request that failed meanwhile.
  private looking: Promise<string[]> | undefined;

  constructor(
    private readonly pool: PostgresPool,
    private readonly names: PostgresNames,
    /** The table as messages name it: `"schema"."table"`. */
    private readonly where: string,
    /** Where `verify()` says that the in-flight index is missing. */
    private readonly logger: IdempotencyLogger,
  ) {}

  /** Runs the migration through `run`; resolves to the columns (and the index) an existing table lacked. */
  async migrate(run: () => Promise<unknown>): Promise<string[]> {
    // What an existing table lacks, to report. (Two migrations at once may both report it.)
    const before = await this.look('migrate');
    // One simple-protocol message: PostgreSQL runs its statements as one implicit transaction,
    // which holds the advisory lock to the end and rolls everything back on an error.
    await run();
    if (!before.hasTable) return [];
    return before.hasInFlightIndex ? before.missingColumns : [...before.missingColumns, `index ${this.indexName}`];
  }

  /**
   * Throws for what a statement needs (table, columns, claim function). The in-flight index is
   * only warned about: without it `listAbandoned` and `endLeasesOf` read the whole table, slowly
   * but correctly, and no request fails; so, as for the expiry index (which is not checked at all),
   * a deploy or an `idemkit` command is not refused for it.
   */
  async verify(): Promise<void> {
    const found = await this.look('verify');
    const missing = this.missingOf(found);
    if (missing.length > 0) throw new StoreSchemaMissingError('postgres', missing, MIGRATE_FIX);
    if (found.inFlightIndexValid) return;
    const state = found.hasInFlightIndex ? 'is not valid (a CREATE INDEX CONCURRENTLY that failed, or is still running; once none runs, drop it and migrate again)' : 'is missing';
    try {
      this.logger.warn(
        `idemkit: postgres store: index ${this.indexName} ${state}: listAbandoned (the completer) and endLeasesOf (startInstance) read the whole table without it; run \`await store.migrate()\` or \`idemkit migrate\`, or on a large table create it without blocking writes (docs/stores/postgres.md, "Setup")`,
      );
    } catch {
      /* a logger that throws must not fail verify() */
    }
  }

  private get indexName(): string {
    return `${this.names.schema}.${inFlightIndex(this.names.table)}`;
  }

  /**
   * The error for a statement that failed. A table, column or function that does not exist
   * (SQLSTATE 42P01, 42703, 42883) is not an outage but a store nobody migrated: a retry cannot
   * help, so the answer is `StoreSchemaMissingError` (500, no Retry-After), naming what one look
   * at the catalog finds missing, with the same message every time (the logger then prints it
   * once a minute, not once a request). Nothing found missing (migrated meanwhile, or another
   * function is absent) is the usual StoreUnavailableError. The look runs only on this failure:
   * a migrated store pays nothing for it.
   */
  async failure(operation: string, error: unknown): Promise<Error> {
    const { where } = this;
    if (!isMissingSchema(error) && sqlState(error) !== '42703') return unavailable(operation, where, error);
    this.looking ??= this.missingParts().finally(() => {
      this.looking = undefined;
    });
    let missing: string[];
    try {
      missing = await this.looking;
    } catch {
      return unavailable(operation, where, error);
    }
    return missing.length > 0 ? new StoreSchemaMissingError('postgres', missing, MIGRATE_FIX, { cause: error }) : unavailable(operation, where, error);
  }

  /** What of the schema is there: the table, the claim function, the columns added since the first schema. */
  private async look(operation: string) {
    const { names, where } = this;
    let rows: readonly unknown[];
    try {
      // Not through the store's `run`: its failure path looks here.
      ({ rows } = await this.pool.query(SCHEMA_SQL, [where, names.schema, `${names.table}_claim`, ADDED_COLUMNS, CLAIM_ADDED_COLUMN, `"${names.schema}"."${inFlightIndex(names.table)}"`]));
    } catch (error) {
      throw unavailable(operation, where, error);
    }
    const found = rows[0] as { has_table?: unknown; has_claim?: unknown; claim_current?: unknown; columns?: unknown; has_in_flight?: unknown; in_flight_valid?: unknown } | undefined;
    const hasTable = found?.has_table === true;
    const columns = new Set(Array.isArray(found?.columns) ? (found.columns as unknown[]) : []);
    return {
      hasTable,
      hasClaim: found?.has_claim === true,
      /** The claim function returns every column this version reads (an earlier idemkit's lacks the last). */
      claimCurrent: found?.claim_current === true,
      missingColumns: hasTable ? ADDED_COLUMNS.filter((column) => !columns.has(column)).map((column) => `column ${names.schema}.${names.table}.${column}`) : [],
      /** The in-flight index exists (perhaps still being built, or left invalid by a failed build). */
      hasInFlightIndex: found?.has_in_flight === true,
      /** …and queries can use it. */
      inFlightIndexValid: found?.in_flight_valid === true,
    };
  }

  /**
   * What `verify()` and the look after a failure name: the table, the columns a table of an
   * earlier idemkit lacks, the claim function, or the result column an earlier idemkit's claim
   * function lacks. (Not the indexes: no statement fails without them.)
   */
  private async missingParts(): Promise<string[]> {
    return this.missingOf(await this.look('verify'));
  }

  private missingOf(found: Awaited<ReturnType<PostgresSchema['look']>>): string[] {
    const { names } = this;
    const missing: string[] = [];
    if (!found.hasTable) missing.push(`table ${names.schema}.${names.table}`);
    missing.push(...found.missingColumns);
    if (!found.hasClaim) missing.push(`function ${names.schema}.${names.table}_claim`);
    else if (!found.claimCurrent) missing.push(`column ${CLAIM_ADDED_COLUMN} of function ${names.schema}.${names.table}_claim`);
    return missing;
  }
}
