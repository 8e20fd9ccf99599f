/**
 * `store.admin` of the PostgreSQL store: one statement per call, on the server's clock
 * (`clock_timestamp()`, as the claim decides), on the store's schema and table.
 */
import { CorruptRecordError, StoreUnavailableError } from '../../core/errors.js';
import type { PurgeOutcome, RecordDetails, RecordStats, RecordSummary, StoreAdmin, StoredResponse } from '../../core/store.js';
import type { PostgresQueryable } from '../../drivers/postgres.js';
import { isMissingSchema } from '../../drivers/postgres.js';
import { checkFilter, detailsOf, isExpiredAt, statsOf, tokenPrefix } from '../shared/admin.js';
import type { PostgresNames } from './sql.js';
import { checkPostgresRef, resolveNames } from './sql.js';

const ms = (column: string, as = column.replace(/^\w+\./, '')) => `floor(extract(epoch FROM ${column}) * 1000)::float8 AS ${as}`;
const expired = `(r.expires_at <= c.now AND (r.state = 'completed' OR r.lease_until <= c.now))`;

/** The admin statements for one schema and table (validated names only). */
export function postgresAdminStatements(names: PostgresNames) {
  resolveNames(names);
  const t = `"${names.schema}"."${names.table}"`;
  const clock = `WITH c AS (SELECT clock_timestamp() AS now)`;
  return {
    inspect: `${clock}
      SELECT r.scope, r.key, r.state, r.fingerprint, r.token, r.attempt, ${ms('r.lease_until')}, ${ms('r.expires_at')},
             ${ms('r.created_at')}, ${ms('r.updated_at')}, r.recovery_point, r.recovery_data, r.status, r.headers::text AS headers, r.body, r.body_omitted, ${ms('c.now', 'now_ms')}
        FROM ${t} r, c WHERE r.scope = $1 AND r.key = $2`,
    list: `${clock}
      SELECT r.scope, r.key, r.state, r.fingerprint, r.attempt, ${ms('r.lease_until')}, ${ms('r.expires_at')},
             ${ms('r.created_at')}, ${ms('r.updated_at')}, r.recovery_point, r.status,
             CASE WHEN r.body_omitted OR r.state = 'in_flight' THEN NULL ELSE coalesce(length(r.body), 0) END AS body_bytes,
             ${ms('c.now', 'now_ms')}
        FROM ${t} r, c
       WHERE ($1::text IS NULL OR r.state = $1) AND ($2::text IS NULL OR r.scope = $2)
         -- By creation; a row of an earlier idemkit (no created_at) by the end of its lease.
         AND ($3::bigint IS NULL OR coalesce(r.created_at, r.lease_until) <= c.now - $3::bigint * interval '1 millisecond')
       ORDER BY r.lease_until, r.scope, r.key LIMIT $4`,
    stats: `${clock},
      o AS (SELECT r.scope, r.key, r.lease_until FROM ${t} r, c WHERE r.state = 'in_flight' AND NOT ${expired}
             ORDER BY r.lease_until, r.scope, r.key LIMIT 1)
      SELECT ${ms('c.now', 'now_ms')},
             count(r.scope) AS total,
             count(r.scope) FILTER (WHERE r.state = 'in_flight' AND NOT ${expired}) AS in_flight,
             count(r.scope) FILTER (WHERE r.state = 'in_flight' AND NOT ${expired} AND r.lease_until <= c.now) AS abandoned,
             count(r.scope) FILTER (WHERE r.state = 'completed' AND NOT ${expired}) AS completed,
             coalesce(sum(length(r.body)) FILTER (WHERE r.state = 'completed' AND NOT r.body_omitted), 0) AS body_bytes,
             pg_total_relation_size(to_regclass('${t}')) AS storage_bytes,
             (SELECT scope FROM o) AS oldest_scope, (SELECT key FROM o) AS oldest_key,
             (SELECT floor(extract(epoch FROM lease_until) * 1000)::float8 FROM o) AS oldest_lease_until
        FROM c LEFT JOIN ${t} r ON true GROUP BY c.now`,
    // The DELETE decides (a record in flight stays unless forced); the outer SELECT reads the
    // snapshot from before it, so it tells "refused" from "not found" in the same statement.
    purge: `WITH d AS (DELETE FROM ${t} WHERE scope = $1 AND key = $2 AND (state = 'completed' OR $3::boolean) RETURNING 1)
      SELECT (SELECT count(*) FROM d) AS purged, (SELECT count(*) FROM ${t} WHERE scope = $1 AND key = $2) AS present`,
  };
}

export function postgresAdmin(pool: PostgresQueryable, names: PostgresNames): StoreAdmin {
  const sql = postgresAdminStatements(names);
  const where = `"${names.schema}"."${names.table}"`;
  const run = async (operation: string, text: string, values: unknown[] = []) => {
    try {
      return (await pool.query(text, values)).rows as Array<Record<string, unknown>>;
    } catch (error) {
      const hint = isMissingSchema(error) ? ' (run store.migrate(), or `idemkit migrate`)' : '';
      const message = error instanceof Error ? error.message : String(error);
      throw new StoreUnavailableError(`postgres store: admin ${operation} on ${where} failed: ${message}${hint}`, { cause: error });
    }
  };
  return {
    async inspect(ref) {
      checkPostgresRef(ref);
      const [row] = await run('inspect', sql.inspect, [ref.scope, ref.key]);
      return row && toDetails(row, where);
    },
    async list(filter) {
      const f = checkFilter(filter);
      const rows = await run('list', sql.list, [f.state ?? null, f.scope ?? null, f.olderThanMs ?? null, f.limit]);
      return rows.map((row) => toSummary(row, num(row.now_ms)));
    },
    async stats(): Promise<RecordStats> {
      const [row] = await run('stats', sql.stats);
      if (!row) throw new CorruptRecordError(`postgres store: admin stats on ${where} returned no row`);
      const counts = { now: num(row.now_ms), total: num(row.total), inFlight: num(row.in_flight), abandoned: num(row.abandoned), completed: num(row.completed), bodyBytes: num(row.body_bytes) };
      const oldestInFlight =
        typeof row.oldest_scope === 'string' && typeof row.oldest_key === 'string'
          ? { scope: row.oldest_scope, key: row.oldest_key, leaseUntil: num(row.oldest_lease_until) }
          : null;
      return statsOf(counts, oldestInFlight, num(row.storage_bytes));
    },
    async purge(ref, options = {}): Promise<PurgeOutcome> {
      checkPostgresRef(ref);
      const [row] = await run('purge', sql.purge, [ref.scope, ref.key, options.force === true]);
      if (num(row?.purged) === 1) return 'purged';
      return num(row?.present) === 1 ? 'in_flight' : 'not_found';
    },
  };
}

/** int8 and numeric arrive as strings; float8 as numbers. */
const num = (value: unknown): number => (value === null || value === undefined ? 0 : Number(value));
/** A time that may be unknown (NULL in rows of an earlier idemkit). */
const orNull = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));

function state(row: Record<string, unknown>, where: string): 'in_flight' | 'completed' {
  if (row.state !== 'in_flight' && row.state !== 'completed') {
    throw new CorruptRecordError(`postgres store: a record in ${where} has the state ${JSON.stringify(row.state)}`);
  }
  return row.state;
}

function toSummary(row: Record<string, unknown>, now: number): RecordSummary {
  const s = row.state as 'in_flight' | 'completed';
  const leaseUntil = num(row.lease_until);
  const expiresAt = num(row.expires_at);
  return {
    scope: String(row.scope),
    key: String(row.key),
    state: s,
    fingerprint: String(row.fingerprint),
    leaseUntil,
    expiresAt,
    expired: isExpiredAt({ state: s, leaseUntil, expiresAt }, now),
    attempt: num(row.attempt),
    createdAt: orNull(row.created_at),
    updatedAt: orNull(row.updated_at),
    recoveryPoint: typeof row.recovery_point === 'string' ? row.recovery_point : undefined,
    status: s === 'completed' && row.status !== null ? num(row.status) : undefined,
    bodyBytes: row.body_bytes === null ? null : num(row.body_bytes),
  };
}

function toDetails(row: Record<string, unknown>, where: string): RecordDetails {
  const s = state(row, where);
  const now = num(row.now_ms);
  const body = row.body as Uint8Array | null;
  const response: StoredResponse | undefined =
    s === 'completed'
      ? {
          status: num(row.status),
          headers: JSON.parse(typeof row.headers === 'string' ? row.headers : '[]') as Array<[string, string]>,
          body: row.body_omitted === true ? null : body === null ? new Uint8Array(0) : new Uint8Array(body.buffer, body.byteOffset, body.byteLength),
          bodyOmitted: row.body_omitted === true,
        }
      : undefined;
  const summary = toSummary(row, now);
  return detailsOf(summary, {
    recoveryData: typeof row.recovery_data === 'string' ? (JSON.parse(row.recovery_data) as unknown) : undefined,
    response,
    tokenPrefix: tokenPrefix(typeof row.token === 'string' ? row.token : ''),
    now,
  });
}
