/**
 * insertOnce: the unique business key (an order number, a provider's transaction id) as the last
 * line of defence. A duplicate is not an error: it answers the row that is already there.
 */
import { InvalidOptionError } from '../core/errors.js';
import { RowVanishedError } from './errors.js';
import { entries, table as tableName, column } from './identifiers.js';
import { optionReader } from '../core/option-reader.js';
import { sqlExecutor } from '../drivers/sql-executor.js';
import type { SqlDatabase, SqlExecutor } from '../drivers/sql-executor.js';
import { isDuplicateKey } from '../drivers/mysql.js';

export interface InsertOnceOptions {
  /** The table, optionally `schema.table`. */
  readonly table: string;
  /** Column → value of the new row (values are bound, never spliced). */
  readonly values: Readonly<Record<string, unknown>>;
  /**
   * The columns of the unique key that makes a row "the same" (a UNIQUE index or primary key on
   * exactly these columns must exist). Each must be in `values`.
   */
  readonly conflict: readonly string[];
}

export interface InsertOnceResult<Row> {
  /** True for the one call that inserted the row; false when it existed already. */
  readonly inserted: boolean;
  /** The row as stored: the new one, or the one that was there. */
  readonly row: Row;
}

// A conflicting row that vanishes between the insert and the read (deleted by someone) costs
// one more round; more than this is reported, not looped on.
const ROUNDS = 3;

/**
 * Inserts the row unless one with the same `conflict` key exists, and answers the stored row
 * either way. The duplicate-key error never reaches the caller; any other error does (a NOT NULL
 * violation, or a duplicate on a different unique key than `conflict`).
 */
export async function insertOnce<Row = Record<string, unknown>>(
  db: SqlDatabase | SqlExecutor,
  options: InsertOnceOptions,
): Promise<InsertOnceResult<Row>> {
  const x = sqlExecutor(db);
  const d = x.dialect;
  const read = optionReader('insertOnce()', options);
  const table = tableName('table', read.value('table'), d);
  const values = entries('values', read.value('values'), d);
  if (!Array.isArray(read.value('conflict')) || options.conflict.length === 0) {
    throw new InvalidOptionError('conflict', 'expected the non-empty list of columns of the unique key');
  }
  read.done();
  const keyColumns = options.conflict.map((name, i) => column(`conflict[${i}]`, name, d));
  const keyValues = options.conflict.map((name) => {
    if (!Object.hasOwn(options.values, name)) throw new InvalidOptionError('conflict', `column ${JSON.stringify(name)} has no value in \`values\``);
    return options.values[name];
  });
  if (keyValues.some((v) => v === null)) {
    // NULL never equals NULL in a unique index: such a row is never "the same" as another.
    throw new InvalidOptionError('conflict', 'a key column is null; a unique index never matches NULLs');
  }

  const columns = values.map(([c]) => c).join(', ');
  const marks = values.map(() => '?').join(', ');
  const params = values.map(([, v]) => v);
  const keyWhere = keyColumns.map((c) => `${c} = ?`).join(' AND ');

  for (let round = 0; round < ROUNDS; round++) {
    if (d === 'mysql') {
      // No ON CONFLICT target in MySQL, and INSERT IGNORE would also swallow other errors (and
      // turn bad values into warnings): insert plainly and catch exactly the duplicate-key error.
      let duplicate: unknown;
      try {
        await x.query(`INSERT INTO ${table} (${columns}) VALUES (${marks})`, params);
      } catch (error) {
        if (!isDuplicateKey(error)) throw error;
        duplicate = error;
      }
      // A locking read sees the latest committed row even inside a REPEATABLE READ transaction.
      const { rows } = await x.query<Row>(`SELECT * FROM ${table} WHERE ${keyWhere} LIMIT 1 LOCK IN SHARE MODE`, keyValues);
      if (rows[0] !== undefined) return { inserted: duplicate === undefined, row: rows[0] };
      // The duplicate was on another unique key than `conflict`: that is the caller's error.
      if (duplicate !== undefined) throw duplicate;
      continue;
    }
    // PostgreSQL and SQLite: the conflict is decided by the unique index, atomically; DO NOTHING
    // returns no row, so the existing one is read. PostgreSQL waits for a concurrent inserter of
    // the same key to commit or roll back before deciding.
    const inserted = await x.query<Row>(
      `INSERT INTO ${table} (${columns}) VALUES (${marks}) ON CONFLICT (${keyColumns.join(', ')}) DO NOTHING RETURNING *`,
      params,
    );
    if (inserted.rows[0] !== undefined) return { inserted: true, row: inserted.rows[0] };
    const { rows } = await x.query<Row>(`SELECT * FROM ${table} WHERE ${keyWhere} LIMIT 1`, keyValues);
    if (rows[0] !== undefined) return { inserted: false, row: rows[0] };
  }
  throw new RowVanishedError(options.table);
}
