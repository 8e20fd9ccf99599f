/**
 * `store.admin` of the SQLite store: statements of its own on the store's table, through the
 * Database's transaction gate (so none joins an open transaction), on the store's clock.
 */
import type { Clock, PurgeOutcome, RecordDetails, RecordStats, RecordSummary, StoreAdmin, StoredResponse } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';
import { gateFor } from '../../drivers/connection-gate.js';
import type { SqliteDatabase } from '../../drivers/sqlite.js';
import { sqliteDriver } from '../../drivers/sqlite.js';
import type { Row as RecordRow } from './record.js';
import { checkFilter, detailsOf, isExpiredAt, statsOf, tokenPrefix } from '../shared/admin.js';

/** A row as the admin reads it: the record's columns, and what only the admin shows. */
interface Row extends RecordRow {
  scope: string;
  key: string;
  token: string;
  attempt: number;
  body_bytes: number | null;
}

/** `table` is the store's, already checked to be a plain identifier. */
export function sqliteAdmin(db: SqliteDatabase, table: string, now: Clock): StoreAdmin {
  const t = table;
  const gate = gateFor(db);
  const driver = sqliteDriver(db);
  const summaryColumns = `scope, key, state, fingerprint, attempt, lease_until, expires_at, created_at, updated_at, recovery_point, status,
    CASE WHEN body_omitted = 1 OR state = 'in_flight' THEN NULL ELSE coalesce(length(body), 0) END AS body_bytes`;
  const inspect = driver.prepare(`SELECT *, NULL AS body_bytes FROM ${t} WHERE scope = @scope AND key = @key`);
  const list = driver.prepare(
    `SELECT ${summaryColumns} FROM ${t}
      WHERE (@state IS NULL OR state = @state) AND (@scope IS NULL OR scope = @scope) AND (@before IS NULL OR coalesce(created_at, lease_until) <= @before)
      ORDER BY lease_until, scope, key LIMIT @limit`,
  );
  const live = `NOT (expires_at <= @now AND (state = 'completed' OR lease_until <= @now))`;
  const counts = driver.prepare(
    `SELECT count(*) AS total,
            coalesce(sum(CASE WHEN ${live} AND state = 'in_flight' THEN 1 END), 0) AS in_flight,
            coalesce(sum(CASE WHEN ${live} AND state = 'in_flight' AND lease_until <= @now THEN 1 END), 0) AS abandoned,
            coalesce(sum(CASE WHEN ${live} AND state = 'completed' THEN 1 END), 0) AS completed,
            coalesce(sum(CASE WHEN state = 'completed' AND body_omitted = 0 THEN length(body) END), 0) AS body_bytes
       FROM ${t}`,
  );
  const oldest = driver.prepare(
    `SELECT scope, key, lease_until FROM ${t} WHERE state = 'in_flight' AND ${live} ORDER BY lease_until, scope, key LIMIT 1`,
  );
  const purge = driver.prepare(`DELETE FROM ${t} WHERE scope = @scope AND key = @key AND (state = 'completed' OR @force = 1)`);
  const exists = driver.prepare(`SELECT state FROM ${t} WHERE scope = @scope AND key = @key`);

  return {
    inspect: (ref) =>
      gate.run(() => {
        checkRecordRef(ref);
        const row = inspect.get(ref) as Row | undefined;
        return row && toDetails(row, now());
      }),
    async list(filter) {
      const f = checkFilter(filter);
      const time = now();
      const rows = await gate.run(
        () =>
          list.all({
            state: f.state ?? null,
            scope: f.scope ?? null,
            before: f.olderThanMs === undefined ? null : time - f.olderThanMs,
            limit: f.limit,
          }) as Row[],
      );
      return rows.map((row) => toSummary(row, time));
    },
    stats: () =>
      gate.run((): RecordStats => {
        const time = now();
        const c = counts.get({ now: time }) as Record<'total' | 'in_flight' | 'abandoned' | 'completed' | 'body_bytes', number>;
        const first = oldest.get({ now: time }) as { scope: string; key: string; lease_until: number } | undefined;
        const oldestInFlight = first ? { scope: first.scope, key: first.key, leaseUntil: Number(first.lease_until) } : null;
        const tally = { now: time, total: Number(c.total), inFlight: Number(c.in_flight), abandoned: Number(c.abandoned), completed: Number(c.completed), bodyBytes: Number(c.body_bytes) };
        return statsOf(tally, oldestInFlight);
      }),
    purge: (ref, options = {}) =>
      gate.run((): PurgeOutcome => {
        checkRecordRef(ref);
        if (purge.run({ ...ref, force: options.force === true ? 1 : 0 }).changes === 1) return 'purged';
        return exists.get(ref) === undefined ? 'not_found' : 'in_flight';
      }),
  };
}

function toSummary(row: Row, now: number): RecordSummary {
  const leaseUntil = Number(row.lease_until);
  const expiresAt = Number(row.expires_at);
  return {
    scope: row.scope,
    key: row.key,
    state: row.state,
    fingerprint: row.fingerprint,
    leaseUntil,
    expiresAt,
    expired: isExpiredAt({ state: row.state, leaseUntil, expiresAt }, now),
    attempt: Number(row.attempt),
    createdAt: row.created_at === null ? null : Number(row.created_at),
    updatedAt: row.updated_at === null ? null : Number(row.updated_at),
    recoveryPoint: row.recovery_point ?? undefined,
    status: row.state === 'completed' ? (row.status ?? undefined) : undefined,
    bodyBytes: row.body_bytes === null ? null : Number(row.body_bytes),
  };
}

function toDetails(row: Row, now: number): RecordDetails {
  const s = toSummary(row, now);
  const response: StoredResponse | undefined =
    s.state === 'completed'
      ? {
          status: s.status ?? 0,
          headers: JSON.parse(row.headers ?? '[]') as Array<[string, string]>,
          body: row.body_omitted ? null : new Uint8Array(row.body ?? new Uint8Array(0)),
          bodyOmitted: row.body_omitted === 1,
        }
      : undefined;
  return detailsOf(s, {
    recoveryData: row.recovery_data === null ? undefined : JSON.parse(row.recovery_data),
    response,
    tokenPrefix: tokenPrefix(row.token),
    now,
  });
}
