/**
 * The SQL of the PostgreSQL store, generated from one place: `sql/postgres.sql` is
 * `postgresSchemaSql()` written out (a test checks they agree), and `migrate()` runs the same text.
 */

import { InvalidOptionError, InvalidRecordRefError } from '../../core/errors.js';
import type { RecordRef } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';

/** Lower-case plain identifiers only: no quoting surprises, and never SQL injected through a name. */
const IDENTIFIER = /^[a-z_][a-z0-9_]*$/;
/**
 * PostgreSQL cuts names at 63 bytes; the table leaves room for the longest derived name, the
 * `_expires_at` index (`_in_flight` and `_claim` are shorter).
 */
const MAX_TABLE_LENGTH = 63 - '_expires_at'.length;

/** The SQLSTATE (data_corrupted) the claim function raises for a record it cannot decide on. */
export const DATA_CORRUPTED = 'XX001';
/** What its message starts with; the rest says what is wrong. */
export const CORRUPT_PREFIX = 'idemkit corrupt record: ';

/** 'idemkit' in ASCII as a bigint: every idemkit migration on a database runs one at a time. */
const MIGRATION_LOCK = '29665259344849268';

const NUL_REASON = 'postgres store: PostgreSQL text cannot hold NUL (U+0000); the server refuses the statement';

/**
 * `checkRecordRef`, and NUL: PostgreSQL text cannot hold U+0000, so the server would refuse the
 * statement, and the store would report itself down (a 503, or the handler run unprotected under
 * `failOpen`) for what is the request's problem. Refused here instead, as the other refs a store
 * cannot keep are: `InvalidRecordRefError` naming the field. (Keys never hold NUL when they come
 * through `parseIdempotencyKey`; a scope is whatever the application makes of the request.)
 */
export function checkPostgresRef(ref: RecordRef): void {
  checkRecordRef(ref);
  if (ref.scope.includes('\u0000')) throw new InvalidRecordRefError('scope', NUL_REASON);
  if (ref.key.includes('\u0000')) throw new InvalidRecordRefError('key', NUL_REASON);
}

export interface PostgresNames {
  readonly schema: string;
  readonly table: string;
}

/** The names with their defaults; refuses anything but a plain identifier, naming the option. */
export function resolveNames(names: { readonly schema?: unknown; readonly table?: unknown } = {}): PostgresNames {
  return {
    schema: identifier('schema', names.schema, 'public', 63),
    table: identifier('table', names.table, 'idempotency_records', MAX_TABLE_LENGTH),
  };
}

function identifier(option: string, value: unknown, fallback: string, maxLength: number): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !IDENTIFIER.test(value) || value.length > maxLength) {
    throw new InvalidOptionError(option, `expected a plain lower-case SQL identifier ([a-z_][a-z0-9_]*, at most ${maxLength} characters)`);
  }
  return value;
}

/**
 * Columns added after the first schema. `migrate()` adds those a table lacks; nullable, so the
 * rows already there stay valid, with an unknown time (never 1970).
 */
export const ADDED_COLUMNS = ['created_at', 'updated_at'] as const;

/**
 * The claim function's last result column, added after its first version: `migrate()` replaces a
 * function without it, and `verify()` names it when missing.
 */
export const CLAIM_ADDED_COLUMN = 'renewed_ms_ago';

/**
 * The index of in-flight records by lease end, added after the first schema: what `listAbandoned`
 * and `endLeasesOf` read instead of the whole table. `migrate()` creates it; `verify()` warns
 * when it is missing (a slow listing, not a failing statement).
 */
export const inFlightIndex = (table: string) => `${table}_in_flight`;

/** The claim function's arguments, which name it among overloads (`DROP FUNCTION`, `to_regprocedure`). */
const CLAIM_ARGUMENTS = '(text, text, text, text, bigint, bigint)';

/** Every statement the store runs, for one schema and table. */
export interface PostgresStatements {
  readonly migrate: string;
  readonly claim: string;
  readonly get: string;
  readonly renew: string;
  readonly checkpoint: string;
  readonly complete: string;
  readonly release: string;
  readonly reap: string;
  readonly listAbandoned: string;
  readonly endLeasesOf: string;
}

/** A record is gone for every purpose once its window has passed and no live lease holds it. */
const expired = (row: string, now: string) =>
  `(${row}.expires_at <= ${now} AND (${row}.state = 'completed' OR ${row}.lease_until <= ${now}))`;

/**
 * The schema: the table, its expiry index and the claim function. Idempotent, and safe to run
 * from several processes at once (the advisory lock queues them) when run as one transaction.
 */
export function postgresSchemaSql(names?: { readonly schema?: string; readonly table?: string }): string {
  const { schema, table } = resolveNames(names);
  const t = `"${schema}"."${table}"`;
  return tableSql(schema, table, t) + upgradeSql(schema, table, t) + claimFunctionSql(schema, table, t);
}

/** The lock, the table and its indexes. */
function tableSql(schema: string, table: string, t: string): string {
  const index = `${table}_expires_at`;
  const inFlight = inFlightIndex(table);
  return `-- idemkit: the idempotency records of the PostgreSQL store (schema "${schema}", table "${table}").
-- Generated by postgresSchemaSql() in src/stores/postgres/sql.ts; store.migrate() runs this same text.
-- Apply it as ONE transaction (psql --single-transaction -f …): the advisory lock then queues
-- concurrent runs, and every statement is a no-op when its object already exists.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(${MIGRATION_LOCK});

CREATE TABLE IF NOT EXISTS ${t} (
  scope          text        NOT NULL,
  key            text        NOT NULL,
  fingerprint    text        NOT NULL,
  state          text        NOT NULL CHECK (state IN ('in_flight', 'completed')),
  token          text        NOT NULL,
  attempt        integer     NOT NULL,
  lease_until    timestamptz NOT NULL,
  expires_at     timestamptz NOT NULL,
  recovery_point text,
  -- Checkpoint data as JSON text, kept verbatim (jsonb would refuse \\u0000 in strings).
  recovery_data  text,
  status         integer,
  headers        jsonb,
  body           bytea,
  body_omitted   boolean     NOT NULL DEFAULT false,
  -- When the record was claimed (a take-over keeps it) and last changed, on the server's clock.
  -- NULL in rows written before idemkit kept them: their times are unknown.
  created_at     timestamptz,
  updated_at     timestamptz,
  PRIMARY KEY (scope, key),
  CHECK (state = 'in_flight' OR (status IS NOT NULL AND headers IS NOT NULL))
);

-- The reaper walks this index. CREATE INDEX IF NOT EXISTS would take a SHARE lock on the table
-- even when the index exists, stalling claims behind any long transaction; hence the lookup.
DO $$
BEGIN
  IF to_regclass('"${schema}"."${index}"') IS NULL THEN
    CREATE INDEX "${index}" ON ${t} (expires_at);
  END IF;
END
$$;

-- The completer's listing (listAbandoned) and an instance restart (endLeasesOf) walk this one: the
-- in-flight records by lease end, so their cost follows the records in flight, not the completed
-- ones. Partial, so a completed record leaves it. Created with the same lookup; on a large table
-- of an earlier idemkit, create it beforehand with CREATE INDEX CONCURRENTLY under this name
-- (docs/stores/postgres.md), and this finds it.
DO $$
BEGIN
  IF to_regclass('"${schema}"."${inFlight}"') IS NULL THEN
    CREATE INDEX "${inFlight}" ON ${t} (lease_until) WHERE state = 'in_flight';
  END IF;
END
$$;

`;
}

/** What a table and a claim function of an earlier idemkit need. */
function upgradeSql(schema: string, table: string, t: string): string {
  return `-- A table of an earlier idemkit lacks the columns added since: add them, nullable, so the rows
-- there stay valid. ADD COLUMN IF NOT EXISTS would take an ACCESS EXCLUSIVE lock even when they
-- exist; a nullable column without a default is added without rewriting the table.
DO $$
BEGIN
${ADDED_COLUMNS.map(
  (column) => `  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '${t}'::regclass AND attname = '${column}' AND NOT attisdropped) THEN
    ALTER TABLE ${t} ADD COLUMN ${column} timestamptz;
  END IF;`,
).join('\n')}
END
$$;

-- The claim function of an earlier idemkit returns a column fewer (no ${CLAIM_ADDED_COLUMN}), and
-- CREATE OR REPLACE cannot change a function's result: it is dropped first. In this transaction,
-- so a concurrent claim finds the earlier function or this one, never none; the earlier idemkit's
-- statement reads its columns by name, so it works with this one too.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('"${schema}"."${table}_claim"${CLAIM_ARGUMENTS}')
                   AND '${CLAIM_ADDED_COLUMN}' = ANY (proargnames)) THEN
    DROP FUNCTION IF EXISTS "${schema}"."${table}_claim"${CLAIM_ARGUMENTS};
  END IF;
END
$$;

`;
}

/** The claim function. */
function claimFunctionSql(schema: string, table: string, t: string): string {
  return `-- The claim: one call, one round trip, the outcome classified on the server's clock.
-- It must stay VOLATILE: then each statement takes a fresh snapshot at READ COMMITTED, so the
-- re-read after a lost upsert sees the claim that beat it (a single CTE statement would not).
CREATE OR REPLACE FUNCTION "${schema}"."${table}_claim"(
  p_scope text, p_key text, p_fingerprint text, p_token text, p_lease_ms bigint, p_window_ms bigint)
RETURNS TABLE (outcome text, retry_after_ms bigint, attempt integer, recovery_point text,
               recovery_data text, status integer, headers text, body bytea, body_omitted boolean,
               ${CLAIM_ADDED_COLUMN} bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $claim$
DECLARE
  cur ${t}%ROWTYPE;
  t_now timestamptz;
BEGIN
  FOR i IN 1..3 LOOP
    t_now := clock_timestamp();
    -- A replay, an in-flight answer or a mismatch costs this read and no write.
    SELECT * INTO cur FROM ${t} r WHERE r.scope = p_scope AND r.key = p_key;
    -- A record this function cannot decide on (an unknown state, an infinite time: a hand edit,
    -- a damaged restore) would loop to the racing error below or stop the retry-after arithmetic:
    -- the client reports it as corrupt instead.
    IF FOUND AND cur.state NOT IN ('in_flight', 'completed') THEN
      RAISE EXCEPTION '${CORRUPT_PREFIX}state is %', to_json(cur.state) USING ERRCODE = '${DATA_CORRUPTED}';
    ELSIF FOUND AND NOT (isfinite(cur.lease_until) AND isfinite(cur.expires_at)) THEN
      RAISE EXCEPTION '${CORRUPT_PREFIX}lease_until or expires_at is not a finite time' USING ERRCODE = '${DATA_CORRUPTED}';
    END IF;
    IF FOUND AND NOT ${expired('cur', 't_now')} THEN
      IF cur.fingerprint <> p_fingerprint THEN
        outcome := 'mismatch';
        RETURN NEXT;
        RETURN;
      ELSIF cur.state = 'completed' THEN
        outcome := 'completed';
        status := cur.status;
        headers := cur.headers::text;
        body := cur.body;
        body_omitted := cur.body_omitted;
        RETURN NEXT;
        RETURN;
      ELSIF cur.lease_until > t_now THEN
        outcome := 'in_flight';
        retry_after_ms := ceil(extract(epoch FROM cur.lease_until - t_now) * 1000);
        -- How long ago the owner last wrote (claim, renewal, checkpoint); NULL when unknown (a row
        -- an earlier idemkit wrote). Never negative: a renewal may commit after t_now was read.
        IF cur.updated_at IS NOT NULL THEN
          ${CLAIM_ADDED_COLUMN} := greatest(0, floor(extract(epoch FROM t_now - cur.updated_at) * 1000));
        END IF;
        RETURN NEXT;
        RETURN;
      END IF;
    END IF;
    -- The key looked free, past its window, or held by an expired lease of the same request.
    -- ON CONFLICT locks the latest row version and re-checks the WHERE on it, so of concurrent
    -- claims exactly one can take the record; the others update nothing and classify again.
    INSERT INTO ${t} AS r (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, created_at, updated_at)
    VALUES (p_scope, p_key, p_fingerprint, 'in_flight', p_token, 1,
            t_now + p_lease_ms * interval '1 millisecond', t_now + p_window_ms * interval '1 millisecond', t_now, t_now)
    ON CONFLICT (scope, key) DO UPDATE SET
      token = excluded.token,
      updated_at = excluded.updated_at,
      -- Read the clock again: this runs after any wait for the row lock, which must not eat
      -- into the new owner's lease. (Deciding on the earlier t_now is safe: whatever had
      -- expired at t_now has expired now.)
      lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
      -- Past its window the record is replaced fresh; a take-over keeps the window and the
      -- recovery point, and counts the attempt.
      attempt = CASE WHEN ${expired('r', 't_now')} THEN 1 ELSE r.attempt + 1 END,
      recovery_point = CASE WHEN ${expired('r', 't_now')} THEN NULL ELSE r.recovery_point END,
      recovery_data = CASE WHEN ${expired('r', 't_now')} THEN NULL ELSE r.recovery_data END,
      expires_at = CASE WHEN ${expired('r', 't_now')} THEN excluded.expires_at ELSE r.expires_at END,
      -- A take-over keeps the request's creation time (unknown stays unknown).
      created_at = CASE WHEN ${expired('r', 't_now')} THEN excluded.created_at ELSE r.created_at END,
      fingerprint = excluded.fingerprint,
      state = 'in_flight', status = NULL, headers = NULL, body = NULL, body_omitted = false
    WHERE ${expired('r', 't_now')}
       OR (r.state = 'in_flight' AND r.lease_until <= t_now AND r.fingerprint = excluded.fingerprint)
    RETURNING r.attempt, r.recovery_point, r.recovery_data INTO attempt, recovery_point, recovery_data;
    IF FOUND THEN
      outcome := 'acquired';
      RETURN NEXT;
      RETURN;
    END IF;
    -- Another claim changed the record between our read and our upsert: classify again.
  END LOOP;
  RAISE EXCEPTION 'idemkit: the claim of key % kept racing with concurrent writers', p_key
    USING ERRCODE = 'serialization_failure';
END
$claim$;
`;
}

/** The statements of the store for one schema and table. */
export function postgresStatements(names: PostgresNames): PostgresStatements {
  // Statements interpolate the names: only ever build them from validated ones.
  resolveNames(names);
  const t = `"${names.schema}"."${names.table}"`;
  const owned = `scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'`;
  const epochMs = (column: string) => `floor(extract(epoch FROM ${column}) * 1000)::float8 AS ${column}`;
  return {
    migrate: postgresSchemaSql(names),
    claim: `SELECT outcome, retry_after_ms, attempt, recovery_point, recovery_data, status, headers, body, body_omitted,
                   ${CLAIM_ADDED_COLUMN}
              FROM "${names.schema}"."${names.table}_claim"($1, $2, $3, $4, $5, $6)`,
    // Cast to text and float8 so the pool's own type parsers (jsonb, timestamptz) cannot change what we read.
    get: `SELECT state, fingerprint, ${epochMs('lease_until')}, ${epochMs('expires_at')}, recovery_point, recovery_data,
                 status, headers::text AS headers, body, body_omitted, ${epochMs('created_at')}, ${epochMs('updated_at')}
            FROM ${t} WHERE scope = $1 AND key = $2`,
    // clock_timestamp(), not now(): in a transaction now() is when the transaction began.
    renew: `UPDATE ${t} SET lease_until = clock_timestamp() + $4 * interval '1 millisecond', updated_at = clock_timestamp() WHERE ${owned}`,
    checkpoint: `UPDATE ${t} SET recovery_point = $4, recovery_data = $5, updated_at = clock_timestamp() WHERE ${owned}`,
    complete: `UPDATE ${t} SET state = 'completed', status = $4, headers = $5::jsonb, body = $6, body_omitted = $7,
                      updated_at = clock_timestamp() WHERE ${owned}`,
    release: `DELETE FROM ${t} WHERE ${owned}`,
    // A bounded batch through the expiry index. SKIP LOCKED lets several reapers share the work
    // without waiting, and leaves alone a row a claim is taking over right now. now() is the
    // statement's start here (autocommit), and being STABLE it can drive the index scan.
    reap: `DELETE FROM ${t} AS r USING (
             SELECT scope, key FROM ${t} AS e WHERE ${expired('e', 'now()')}
              ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS doomed
            WHERE r.scope = doomed.scope AND r.key = doomed.key`,
    // For a completer: owners gone, windows still open, oldest lease first, through the in-flight
    // index: a range of it up to now, in its order, so the LIMIT stops the walk. now(), not
    // clock_timestamp(): a volatile condition cannot drive an index scan. In autocommit now() is
    // when this statement began, a moment earlier than the rows are read; a listing is a read,
    // and each record it lists is then claimed on the clock of that claim. ORDER BY the column
    // (r.), not the epoch-ms output of the same name, which no index holds.
    listAbandoned: `SELECT scope, key, state, fingerprint, ${epochMs('lease_until')}, ${epochMs('expires_at')}, recovery_point,
                           recovery_data, status, headers::text AS headers, body, body_omitted,
                           ${epochMs('created_at')}, ${epochMs('updated_at')}
                      FROM ${t} AS r WHERE r.state = 'in_flight' AND r.lease_until <= now() AND r.expires_at > now()
                     ORDER BY r.lease_until LIMIT $1`,
    // A dead incarnation's live leases end now, as renew(…, 0) would. now(), not clock_timestamp(),
    // so that the lease condition walks the in-flight index (the token's prefix is checked on the
    // rows it finds).
    endLeasesOf: `UPDATE ${t} SET lease_until = now(), updated_at = now()
                   WHERE state = 'in_flight' AND lease_until > now() AND left(token, 16) = $1`,
  };
}
