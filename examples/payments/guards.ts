/**
 * LOCAL SHIM — the data-layer guards of `idemkit/patterns` (insert-once, state transition,
 * versioned update), written against the planned signatures while that module is being built.
 * Delete this file and import from 'idemkit/patterns' once it exports them.
 */
import type { SqlExecutor } from 'idemkit/patterns';

type Values = Readonly<Record<string, unknown>>;

function whereClause(where: Values): { sql: string; params: unknown[] } {
  const keys = Object.keys(where);
  return { sql: keys.map((k) => `${k} = ?`).join(' AND '), params: keys.map((k) => where[k]) };
}

/**
 * INSERT … ON CONFLICT DO NOTHING on a unique key, then the row that holds the key: the first
 * writer inserts, every later one gets the original row back (seed 2, 方案一: a duplicate is
 * "already done", not an error).
 */
export async function insertOnce<Row = Record<string, unknown>>(
  db: SqlExecutor,
  o: { table: string; values: Values; conflict: readonly string[] },
): Promise<{ inserted: boolean; row: Row }> {
  const cols = Object.keys(o.values);
  const inserted = await db.query<Row>(
    `INSERT INTO ${o.table} (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})
     ON CONFLICT (${o.conflict.join(', ')}) DO NOTHING RETURNING *`,
    cols.map((c) => o.values[c]),
  );
  if (inserted.rows[0]) return { inserted: true, row: inserted.rows[0] };
  const w = whereClause(Object.fromEntries(o.conflict.map((c) => [c, o.values[c]])));
  const existing = await db.query<Row>(`SELECT * FROM ${o.table} WHERE ${w.sql}`, w.params);
  return { inserted: false, row: existing.rows[0]! };
}

/** UPDATE … SET status = to WHERE … AND status = from: the state machine's only door (seed 2, 方案四). */
export async function transition(
  db: SqlExecutor,
  o: { table: string; where: Values; column?: string; from: string | readonly string[]; to: string; set?: Values },
): Promise<{ changed: true } | { changed: false; current: string | undefined }> {
  const column = o.column ?? 'status';
  const from = typeof o.from === 'string' ? [o.from] : [...o.from];
  const set = { [column]: o.to, ...o.set };
  const setKeys = Object.keys(set);
  const w = whereClause(o.where);
  const result = await db.query(
    `UPDATE ${o.table} SET ${setKeys.map((k) => `${k} = ?`).join(', ')}
      WHERE ${w.sql} AND ${column} IN (${from.map(() => '?').join(', ')})`,
    [...setKeys.map((k) => set[k]), ...w.params, ...from],
  );
  if (result.affected === 1) return { changed: true };
  const current = await db.query<Record<string, string>>(`SELECT ${column} AS c FROM ${o.table} WHERE ${w.sql}`, w.params);
  return { changed: false, current: current.rows[0]?.c };
}

export class VersionConflictError extends Error {
  readonly code = 'VERSION_CONFLICT';
}

/** UPDATE … SET …, version = version + 1 WHERE … AND version = expected (seed 2, 方案五). */
export async function versionedUpdate(
  db: SqlExecutor,
  o: { table: string; where: Values; versionColumn?: string; expected: number; set: Values },
): Promise<{ updated: boolean; version: number }> {
  const v = o.versionColumn ?? 'version';
  const setKeys = Object.keys(o.set);
  const w = whereClause(o.where);
  const result = await db.query(
    `UPDATE ${o.table} SET ${setKeys.map((k) => `${k} = ?`).join(', ')}, ${v} = ${v} + 1 WHERE ${w.sql} AND ${v} = ?`,
    [...setKeys.map((k) => o.set[k]), ...w.params, o.expected],
  );
  return { updated: result.affected === 1, version: o.expected + 1 };
}

/** Re-reads and retries a versioned update that lost a race; gives up with VersionConflictError. */
export async function retryOnVersionConflict<T>(fn: () => Promise<T>, o: { retries: number }): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (!(error instanceof VersionConflictError) || attempt >= o.retries) throw error;
    }
  }
}
