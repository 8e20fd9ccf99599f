/**
 * `store.admin` of the MySQL/MariaDB store: statements of its own on the store's table, through
 * the store's connections (with their deadline), on the server's clock.
 */
import { CorruptRecordError } from '../../core/errors.js';
import type { PurgeOutcome, RecordDetails, RecordStats, RecordSummary, StoreAdmin, StoredResponse, RecordRef } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';
import type { MysqlValue } from '../../drivers/mysql.js';
import { checkFilter, detailsOf, isExpiredAt, statsOf, tokenPrefix } from '../shared/admin.js';
import type { Connections } from './connections.js';
import { NOW_MS } from './sql.js';

const EXPIRED = `(expires_at <= ${NOW_MS} AND (state = 'completed' OR lease_until <= ${NOW_MS}))`;
const SUMMARY = `${NOW_MS} AS now_ms, scope, idem_key, state, fingerprint, attempt, lease_until, expires_at, created_at, updated_at,
  recovery_point, status,
  CASE WHEN body_omitted = 1 OR state = 'in_flight' THEN NULL ELSE COALESCE(LENGTH(body), 0) END AS body_bytes`;

/** `table` is the store's, already checked to be a plain identifier. */
export function mysqlAdmin(db: Connections, table: string): StoreAdmin {
  const t = `\`${table}\``;
  const id = 'scope = ? AND idem_key = ?';
  const rows = async (what: string, sql: string, values: MysqlValue[]) =>
    (await db.run(`admin ${what}`, sql, values)).result as Array<Record<string, unknown>>;

  return {
    async inspect(ref) {
      const [row] = await rows(
        'inspect',
        `SELECT ${SUMMARY}, token, recovery_data, headers, body, body_omitted FROM ${t} WHERE ${id}`,
        refParams(ref),
      );
      return row && toDetails(row, table);
    },
    async list(filter) {
      const f = checkFilter(filter);
      const where: string[] = [];
      const values: MysqlValue[] = [];
      const add = (condition: string, value: MysqlValue) => {
        where.push(condition);
        values.push(value);
      };
      if (f.state !== undefined) add('state = ?', f.state);
      if (f.scope !== undefined) add('scope = ?', Buffer.from(f.scope, 'utf8'));
      // By creation; a row of an earlier idemkit (no created_at) by the end of its lease.
      if (f.olderThanMs !== undefined) add(`COALESCE(created_at, lease_until) <= ${NOW_MS} - ?`, f.olderThanMs);
      // `limit` is a checked integer: a LIMIT placeholder is refused by some servers when bound as DOUBLE.
      const found = await rows(
        'list',
        `SELECT ${SUMMARY} FROM ${t} ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
          ORDER BY lease_until, scope, idem_key LIMIT ${f.limit}`,
        values,
      );
      return found.map((row) => toSummary(row, table));
    },
    async stats(): Promise<RecordStats> {
      const [c] = await rows(
        'stats',
        `SELECT ${NOW_MS} AS now_ms, COUNT(*) AS total,
            COALESCE(SUM(state = 'in_flight' AND NOT ${EXPIRED}), 0) AS in_flight,
            COALESCE(SUM(state = 'in_flight' AND NOT ${EXPIRED} AND lease_until <= ${NOW_MS}), 0) AS abandoned,
            COALESCE(SUM(state = 'completed' AND NOT ${EXPIRED}), 0) AS completed,
            COALESCE(SUM(CASE WHEN state = 'completed' AND body_omitted = 0 THEN LENGTH(body) END), 0) AS body_bytes
          FROM ${t}`,
        [],
      );
      const [oldest] = await rows(
        'stats',
        `SELECT scope, idem_key, lease_until FROM ${t} WHERE state = 'in_flight' AND NOT ${EXPIRED} ORDER BY lease_until, scope, idem_key LIMIT 1`,
        [],
      );
      const [size] = await rows(
        'stats',
        'SELECT data_length + index_length AS bytes FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
        [table],
      );
      if (!c) throw new CorruptRecordError(`mysql store: admin stats on \`${table}\` returned no row`);
      const counts = { now: Number(c.now_ms), total: Number(c.total), inFlight: Number(c.in_flight), abandoned: Number(c.abandoned), completed: Number(c.completed), bodyBytes: Number(c.body_bytes) };
      const oldestInFlight = oldest ? { scope: text(oldest.scope), key: text(oldest.idem_key), leaseUntil: Number(oldest.lease_until) } : null;
      // InnoDB's own estimate (information_schema), refreshed by the server now and then.
      return statsOf(counts, oldestInFlight, size && size.bytes !== null ? Number(size.bytes) : undefined);
    },
    async purge(ref, options = {}): Promise<PurgeOutcome> {
      const params = refParams(ref);
      const { result } = await db.run('admin purge', `DELETE FROM ${t} WHERE ${id} AND (state = 'completed' OR ? = 1)`, [
        ...params,
        options.force === true ? 1 : 0,
      ]);
      if ((result as { affectedRows?: unknown }).affectedRows === 1) return 'purged';
      const [row] = await rows('purge', `SELECT state FROM ${t} WHERE ${id}`, params);
      return row ? 'in_flight' : 'not_found';
    },
  };
}

function refParams(ref: RecordRef): Buffer[] {
  checkRecordRef(ref);
  return [Buffer.from(ref.scope, 'utf8'), Buffer.from(ref.key, 'utf8')];
}

/** A time that may be unknown (NULL in rows of an earlier idemkit). */
const orNull = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));

function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return String(value);
}

function toSummary(row: Record<string, unknown>, table: string): RecordSummary {
  const state = row.state;
  if (state !== 'in_flight' && state !== 'completed') {
    throw new CorruptRecordError(`mysql store: a record in \`${table}\` has the state ${JSON.stringify(state)}`);
  }
  const now = Number(row.now_ms);
  const leaseUntil = Number(row.lease_until);
  const expiresAt = Number(row.expires_at);
  return {
    scope: text(row.scope),
    key: text(row.idem_key),
    state,
    fingerprint: text(row.fingerprint),
    leaseUntil,
    expiresAt,
    expired: isExpiredAt({ state, leaseUntil, expiresAt }, now),
    attempt: Number(row.attempt),
    createdAt: orNull(row.created_at),
    updatedAt: orNull(row.updated_at),
    recoveryPoint: row.recovery_point === null || row.recovery_point === undefined ? undefined : text(row.recovery_point),
    status: state === 'completed' && row.status !== null ? Number(row.status) : undefined,
    bodyBytes: row.body_bytes === null ? null : Number(row.body_bytes),
  };
}

function toDetails(row: Record<string, unknown>, table: string): RecordDetails {
  const s = toSummary(row, table);
  const omitted = Number(row.body_omitted) === 1;
  const response: StoredResponse | undefined =
    s.state === 'completed'
      ? {
          status: s.status ?? 0,
          headers: JSON.parse(row.headers === null ? '[]' : text(row.headers)) as Array<[string, string]>,
          body: omitted ? null : new Uint8Array(Buffer.isBuffer(row.body) ? row.body : Buffer.alloc(0)),
          bodyOmitted: omitted,
        }
      : undefined;
  return detailsOf(s, {
    recoveryData: row.recovery_data === null || row.recovery_data === undefined ? undefined : (JSON.parse(text(row.recovery_data)) as unknown),
    response,
    tokenPrefix: tokenPrefix(text(row.token)),
    now: Number(row.now_ms),
  });
}
