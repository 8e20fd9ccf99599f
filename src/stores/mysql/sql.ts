/**
 * The MySQL/MariaDB store's SQL: the schema and every statement, built once per table name.
 */
import { InvalidOptionError } from '../../core/errors.js';

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
// Column sizes; the store refuses longer values up front, because a MySQL server without strict
// mode would silently truncate them, and two truncated scopes would share records.
export const MAX_SCOPE_BYTES = 1024;
export const MAX_KEY_BYTES = 255;
export const MAX_FINGERPRINT_BYTES = 255;

/**
 * The server's clock in epoch ms. UTC_TIMESTAMP is independent of the session time zone (so no
 * DST ambiguity, unlike UNIX_TIMESTAMP(NOW())), and, like NOW(), constant within one statement.
 */
export const NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(3)) DIV 1000)";
// A record is gone for every purpose once its window has passed and no live lease holds it.
const EXPIRED = `(expires_at <= ${NOW_MS} AND (state = 'completed' OR lease_until <= ${NOW_MS}))`;

/**
 * The schema; `sql/mysql.sql` holds the same statement for `idempotency_records` (a test keeps
 * them in step). One statement, so `IF NOT EXISTS` makes it idempotent and safe concurrently.
 *
 * Scope, key and fingerprint are VARBINARY: byte-exact comparisons. Every `_bin` collation of
 * MariaDB and MySQL 5.7 is PAD SPACE, so `'acct'` would equal `'acct '` and two tenants (or the
 * sf-string keys `"k"` and `"k "`) would share a record.
 */
export function mysqlSchema(table = 'idempotency_records'): string {
  checkTable(table);
  return `CREATE TABLE IF NOT EXISTS \`${table}\` (
  scope VARBINARY(${MAX_SCOPE_BYTES}) NOT NULL,
  idem_key VARBINARY(${MAX_KEY_BYTES}) NOT NULL,
  fingerprint VARBINARY(${MAX_FINGERPRINT_BYTES}) NOT NULL,
  state ENUM('in_flight', 'completed') NOT NULL,
  token VARBINARY(32) NOT NULL,
  revision BIGINT UNSIGNED NOT NULL,
  attempt INT UNSIGNED NOT NULL,
  lease_until BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  recovery_point MEDIUMTEXT NULL,
  recovery_data MEDIUMTEXT NULL,
  status SMALLINT UNSIGNED NULL,
  headers MEDIUMTEXT NULL,
  body LONGBLOB NULL,
  body_omitted TINYINT(1) NOT NULL DEFAULT 0,
  created_at BIGINT NULL,
  updated_at BIGINT NULL,
  PRIMARY KEY (scope, idem_key),
  KEY expires_at (expires_at),
  KEY ${IN_FLIGHT_INDEX} (state, lease_until)
) ENGINE = InnoDB ROW_FORMAT = DYNAMIC DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`;
}

/**
 * Columns added after the first schema, with their definitions: `migrate()` adds those a table
 * lacks. Nullable, so the rows already there stay valid, with an unknown time (never 1970).
 */
export const ADDED_COLUMNS = [
  ['created_at', 'BIGINT NULL'],
  ['updated_at', 'BIGINT NULL'],
] as const;

/**
 * The index of the records by state and lease end, added after the first schema: what
 * `listAbandoned` (`state = 'in_flight' AND lease_until <= now ORDER BY lease_until`) and
 * `endLeasesOf` read instead of the whole table. MySQL has no partial index; with `state` first,
 * the in-flight records are one range of it. `migrate()` adds it to a table that lacks it;
 * `verify()` warns when it is missing (a slow listing, not a failing statement).
 */
export const IN_FLIGHT_INDEX = 'in_flight';

/** Adds the index to an existing table without blocking its writes (or fails saying why it cannot). */
export const addInFlightIndex = (table: string) =>
  `ALTER TABLE \`${table}\` ADD INDEX ${IN_FLIGHT_INDEX} (state, lease_until), ALGORITHM = INPLACE, LOCK = NONE`;

/**
 * What the table has in the connection's database, in one round trip: its columns (none when
 * there is no table), and the in-flight index (a row per column of it).
 */
export const SCHEMA_PRESENT = `SELECT 'column' AS kind, column_name AS name FROM information_schema.columns
  WHERE table_schema = DATABASE() AND table_name = ?
  UNION ALL
  SELECT 'index', index_name FROM information_schema.statistics
  WHERE table_schema = DATABASE() AND table_name = ? AND index_name = '${IN_FLIGHT_INDEX}'`;

/**
 * The statements. Every write bumps `revision`, which gives two guarantees that do not depend on
 * the connection's CLIENT_FOUND_ROWS flag (mysql2 sets it, so `affectedRows` counts matched rows;
 * without it, changed rows): a fenced UPDATE that matches always changes the row, so
 * `affectedRows === 1` means "the token was current" either way; and a claim can compare-and-swap
 * on the revision it read.
 *
 * The claim is a read and, only when the read shows the key free or expired, ONE conditional
 * write that re-checks the whole decision on the server's clock at the instant it runs:
 * - absent: a plain INSERT. Two claims cannot both insert a primary key; the loser gets
 *   ER_DUP_ENTRY and classifies again.
 * - window passed: UPDATE … WHERE revision = <read> AND <expired now>: a fresh record.
 * - lease ran out, same fingerprint: UPDATE … WHERE revision = <read> AND in flight AND lease over
 *   AND window not over AND same fingerprint: a take-over keeping the recovery point.
 * An UPDATE's WHERE reads the latest committed row under its row lock, not a REPEATABLE READ
 * snapshot, so of two racing writes exactly one matches; the other sees a new revision, matches
 * nothing, and re-reads. Because each WHERE selects one case, the SET lists need no CASE
 * expressions (whose later assignments would see the earlier ones' new values in MySQL), and the
 * revision match proves the row is the one read, so its attempt and recovery point are exact.
 * No upsert: INSERT … ON DUPLICATE KEY UPDATE answers affectedRows 1 both for "inserted" and, under
 * CLIENT_FOUND_ROWS, for "left unchanged", so it cannot say who won.
 */
export function statements(table: string) {
  const t = `\`${table}\``;
  const id = 'scope = ? AND idem_key = ?';
  const owned = `${id} AND token = ? AND state = 'in_flight'`;
  return {
    read: `SELECT ${NOW_MS} AS now_ms, state, fingerprint, token, revision, attempt, lease_until, expires_at,
        recovery_point, recovery_data, status, headers, body, body_omitted, created_at, updated_at
      FROM ${t} WHERE ${id}`,
    insert: `INSERT INTO ${t} (scope, idem_key, fingerprint, state, token, revision, attempt, lease_until, expires_at, created_at, updated_at)
      VALUES (?, ?, ?, 'in_flight', ?, 1, 1, ${NOW_MS} + ?, ${NOW_MS} + ?, ${NOW_MS}, ${NOW_MS})`,
    replace: `UPDATE ${t} SET fingerprint = ?, state = 'in_flight', token = ?, revision = revision + 1, attempt = 1,
        lease_until = ${NOW_MS} + ?, expires_at = ${NOW_MS} + ?, recovery_point = NULL, recovery_data = NULL,
        status = NULL, headers = NULL, body = NULL, body_omitted = 0, created_at = ${NOW_MS}, updated_at = ${NOW_MS}
      WHERE ${id} AND revision = ? AND ${EXPIRED}`,
    // A take-over keeps the request's creation time (created_at).
    takeover: `UPDATE ${t} SET token = ?, revision = revision + 1, attempt = attempt + 1, lease_until = ${NOW_MS} + ?,
        updated_at = ${NOW_MS}
      WHERE ${id} AND revision = ? AND state = 'in_flight' AND fingerprint = ?
        AND lease_until <= ${NOW_MS} AND expires_at > ${NOW_MS}`,
    renew: `UPDATE ${t} SET lease_until = ${NOW_MS} + ?, revision = revision + 1, updated_at = ${NOW_MS} WHERE ${owned}`,
    checkpoint: `UPDATE ${t} SET recovery_point = ?, recovery_data = ?, revision = revision + 1, updated_at = ${NOW_MS} WHERE ${owned}`,
    complete: `UPDATE ${t} SET state = 'completed', status = ?, headers = ?, body = ?, body_omitted = ?,
        revision = revision + 1, updated_at = ${NOW_MS} WHERE ${owned}`,
    release: `DELETE FROM ${t} WHERE ${owned}`,
    // For a completer: owners gone, windows still open, oldest lease first: a range of the
    // in-flight index (state, lease_until), in its order, so the LIMIT stops the walk. `limit` is
    // a validated integer (a LIMIT placeholder is refused by some MySQL versions when mysql2
    // binds numbers as DOUBLE).
    listAbandoned: (limit: number) => `SELECT ${NOW_MS} AS now_ms, scope, idem_key, state, fingerprint, token, revision, attempt,
        lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted, created_at, updated_at
      FROM ${t} WHERE state = 'in_flight' AND lease_until <= ${NOW_MS} AND expires_at > ${NOW_MS}
      ORDER BY lease_until LIMIT ${limit}`,
    // Walks the expiry index in order; the lease condition keeps a live claim out even when its
    // window has passed. `limit` as above.
    reap: (limit: number) => `DELETE FROM ${t} WHERE ${EXPIRED} ORDER BY expires_at LIMIT ${limit}`,
    // A dead incarnation's live leases end now, as renew(…, 0) would; a range of the in-flight
    // index, so it reads (and locks) only the live leases, not every record.
    endLeasesOf: `UPDATE ${t} SET lease_until = ${NOW_MS}, revision = revision + 1, updated_at = ${NOW_MS}
      WHERE state = 'in_flight' AND lease_until > ${NOW_MS} AND LEFT(token, 16) = ?`,
  };
}

export function checkTable(table: string): void {
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
    throw new InvalidOptionError('table', 'expected a plain SQL identifier (letters, digits, underscores; at most 64)');
  }
}

