/**
 * The SQLite store's SQL: the table and its migration, and the statements the operations run,
 * prepared once on `database`. The completion and the checkpoint are kept as text too: the
 * transaction connection prepares them again, and an ORM's transaction runs them positionally.
 */
import { LeaseLostError } from '../../core/errors.js';
import type { RecordRef, StoredResponse } from '../../core/store.js';
import { fitResponse } from '../../core/store.js';
import type { SqliteDatabase, SqliteDriverStatement } from '../../drivers/sqlite.js';
import { sqliteDriver } from '../../drivers/sqlite.js';

export const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
// A record is gone for every purpose once its window has passed and no live lease holds it.
const EXPIRED = (t: string) => `(${t}.expires_at <= @now AND (${t}.state = 'completed' OR ${t}.lease_until <= @now))`;

/** The columns the statements below read or write, for `verify()`. */
export const COLUMNS = [
  'scope', 'key', 'fingerprint', 'state', 'token', 'attempt', 'lease_until', 'expires_at',
  'recovery_point', 'recovery_data', 'status', 'headers', 'body', 'body_omitted', 'created_at', 'updated_at',
] as const;

/**
 * Columns added after the first schema, with their definitions: `migrate()` adds those a table
 * lacks. Nullable, so the rows already there stay valid (their time is unknown, never 1970).
 */
const ADDED_COLUMNS = [
  ['created_at', 'INTEGER'],
  ['updated_at', 'INTEGER'],
] as const;

/**
 * The index of in-flight records by lease end: what `listAbandoned` and `endLeasesOf` read instead
 * of the whole table. Partial, so a completed record leaves it. Added after the first schema.
 */
export const inFlightIndex = (table: string) => `${table}_in_flight`;

/** Whether `table` has the index `name` (what `pragma_index_list` lists). */
export const INDEX_PRESENT = (table: string) => `SELECT 1 FROM pragma_index_list('${table}') WHERE name = ?`;

/**
 * Creates the table and its indexes if missing and adds the columns it lacks; returns what it
 * added to an existing table (`column <table>.<name>`, `index <table>_in_flight`).
 */
export function migrateTable(database: SqliteDatabase, table: string): string[] {
  const db = sqliteDriver(database);
  const columnNames = () => new Set((db.prepare(`SELECT name FROM pragma_table_info('${table}')`).all() as Array<{ name: string }>).map((c) => c.name));
  const index = inFlightIndex(table);
  const existed = columnNames().size > 0;
  const hadIndex = existed && db.prepare(INDEX_PRESENT(table)).get(index) !== undefined;
  db.exec(`CREATE TABLE IF NOT EXISTS ${table} (
      scope TEXT NOT NULL,
      key TEXT NOT NULL,
      fingerprint TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
      token TEXT NOT NULL,
      attempt INTEGER NOT NULL,
      lease_until INTEGER NOT NULL,
      expires_at INTEGER NOT NULL,
      recovery_point TEXT,
      recovery_data TEXT,
      status INTEGER,
      headers TEXT,
      body BLOB,
      body_omitted INTEGER NOT NULL DEFAULT 0,
      created_at INTEGER,
      updated_at INTEGER,
      PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS ${table}_expires_at ON ${table} (expires_at);
    CREATE INDEX IF NOT EXISTS ${index} ON ${table} (lease_until) WHERE state = 'in_flight';`);
  const added: string[] = existed && !hadIndex ? [`index ${index}`] : [];
  for (const [column, type] of ADDED_COLUMNS) {
    if (columnNames().has(column)) continue;
    try {
      db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
      added.push(`column ${table}.${column}`);
    } catch (error) {
      // Another process added it between the look and the ALTER: nothing left to do.
      if (!columnNames().has(column)) throw error;
    }
  }
  return added;
}

/** The statements of the store, prepared on `db` (after the migration: they name its columns). */
export function sqliteStatements(database: SqliteDatabase, t: string) {
  const db = sqliteDriver(database);
  const checkpointSql = `UPDATE ${t} SET recovery_point = @point, recovery_data = @data, updated_at = @now
      WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`;
  const completeSql = `UPDATE ${t} SET state = 'completed', status = @status, headers = @headers, body = @body, body_omitted = @omitted,
      updated_at = @now
      WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`;
  return {
    checkpointSql,
    completeSql,
    // The same two writes with positional parameters, for an ORM's transaction (idemkit/kysely, …).
    checkpointPositional: `UPDATE ${t} SET recovery_point = ?, recovery_data = ?, updated_at = ?
      WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'`,
    completePositional: `UPDATE ${t} SET state = 'completed', status = ?, headers = ?, body = ?, body_omitted = ?, updated_at = ?
      WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'`,
    // The claim's read; updated_at says how long ago an in-flight owner last renewed.
    select: db.prepare(
      `SELECT state, fingerprint, lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted,
            updated_at
       FROM ${t} WHERE scope = @scope AND key = @key`,
    ),
    // The same read with the record's creation time too, for `get`.
    selectRecord: db.prepare(
      `SELECT state, fingerprint, lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted,
            created_at, updated_at
       FROM ${t} WHERE scope = @scope AND key = @key`,
    ),
    // The claim decision: insert, or take over an expired record / an expired lease of the same
    // request, all in one statement. RETURNING is empty when the existing record stands.
    upsert: db.prepare(
      `INSERT INTO ${t} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, created_at, updated_at)
     VALUES (@scope, @key, @fp, 'in_flight', @token, 1, @now + @lease, @now + @window, @now, @now)
     ON CONFLICT (scope, key) DO UPDATE SET
       token = excluded.token,
       lease_until = excluded.lease_until,
       updated_at = excluded.updated_at,
       -- A take-over keeps the request's creation time; past its window the record starts anew.
       created_at = CASE WHEN ${EXPIRED(t)} THEN excluded.created_at ELSE ${t}.created_at END,
       attempt = CASE WHEN ${EXPIRED(t)} THEN 1 ELSE ${t}.attempt + 1 END,
       recovery_point = CASE WHEN ${EXPIRED(t)} THEN NULL ELSE ${t}.recovery_point END,
       recovery_data = CASE WHEN ${EXPIRED(t)} THEN NULL ELSE ${t}.recovery_data END,
       expires_at = CASE WHEN ${EXPIRED(t)} THEN excluded.expires_at ELSE ${t}.expires_at END,
       fingerprint = excluded.fingerprint,
       state = 'in_flight', status = NULL, headers = NULL, body = NULL, body_omitted = 0
     WHERE ${EXPIRED(t)}
        OR (${t}.state = 'in_flight' AND ${t}.lease_until <= @now AND ${t}.fingerprint = excluded.fingerprint)
     RETURNING attempt, recovery_point, recovery_data`,
    ),
    renew: db.prepare(
      `UPDATE ${t} SET lease_until = @now + @lease, updated_at = @now
      WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`,
    ),
    checkpoint: db.prepare(checkpointSql),
    complete: db.prepare(completeSql),
    release: db.prepare(`DELETE FROM ${t} WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`),
    reap: db.prepare(`DELETE FROM ${t} WHERE (scope, key) IN (SELECT scope, key FROM ${t} WHERE ${EXPIRED(t)} LIMIT @limit)`),
    // For a completer: owners gone, windows still open, oldest lease first: a range of the
    // in-flight index, in its order, so the LIMIT stops the walk. The unary + keeps the planner
    // off the expiry index: with ANALYZE statistics (PRAGMA optimize runs ANALYZE) on a table whose
    // records share few expiry times, it chose that one for `expires_at > @now`, which spans every
    // record, and sorted (test/stores/sqlite.test.ts).
    abandoned: db.prepare(
      `SELECT scope, key, state, fingerprint, lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted,
            created_at, updated_at
       FROM ${t} WHERE state = 'in_flight' AND lease_until <= @now AND +expires_at > @now ORDER BY lease_until LIMIT @limit`,
    ),
    // A dead incarnation's live leases end now, as renew(…, 0) would; through the in-flight index.
    endLeasesOf: db.prepare(
      `UPDATE ${t} SET lease_until = @now, updated_at = @now
       WHERE state = 'in_flight' AND lease_until > @now AND substr(token, 1, 16) = @incarnation`,
    ),
    columns: db.prepare(`SELECT name FROM pragma_table_info('${t}')`),
    inFlightIndex: db.prepare(INDEX_PRESENT(t)),
  };
}

export type SqliteStatements = ReturnType<typeof sqliteStatements>;

/** The completion's named parameters. */
export function completeParams(ref: RecordRef, token: string, response: StoredResponse, maxResponseBytes: number, now: number) {
  const fitted = fitResponse(response, maxResponseBytes);
  // Each parameter by name: `{ ...ref, more }` costs microseconds on Node 20 (docs/performance.md).
  return {
    scope: ref.scope,
    key: ref.key,
    token,
    status: fitted.status,
    headers: JSON.stringify(fitted.headers),
    body: fitted.body === null ? null : Buffer.from(fitted.body.buffer, fitted.body.byteOffset, fitted.body.byteLength),
    omitted: fitted.bodyOmitted ? 1 : 0,
    now,
  };
}

/** The checkpoint's named parameters. */
export function checkpointParams(ref: RecordRef, token: string, point: string, data: unknown, now: number) {
  return {
    scope: ref.scope,
    key: ref.key,
    token,
    point,
    data: data === undefined ? null : JSON.stringify(data),
    now,
  };
}

/** Runs a write fenced by the owner's token: no row changed means the lease was lost. */
export function fenced(statement: SqliteDriverStatement, params: object): void {
  if (statement.run(params).changes !== 1) throw new LeaseLostError();
}
