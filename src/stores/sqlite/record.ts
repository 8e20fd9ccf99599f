/**
 * The SQLite store's rows, read back: every column checked (a table that is not STRICT holds any
 * value in any column), a stored response checked before it is replayed.
 */
import { CorruptRecordError } from '../../core/errors.js';
import type { IdempotencyRecord, RecordRef, StoredResponse } from '../../core/store.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';

export interface Row {
  state: 'in_flight' | 'completed';
  fingerprint: string;
  lease_until: number;
  expires_at: number;
  recovery_point: string | null;
  recovery_data: string | null;
  status: number | null;
  headers: string | null;
  body: Uint8Array | null;
  body_omitted: number;
  created_at: number | null;
  updated_at: number | null;
}

export function isExpired(row: Row, time: number): boolean {
  return row.expires_at <= time && (row.state === 'completed' || row.lease_until <= time);
}

function corrupt(ref: RecordRef, table: string, what: string, cause?: unknown): CorruptRecordError {
  return new CorruptRecordError(
    `sqlite store: the record for key ${JSON.stringify(ref.key)} in scope ${JSON.stringify(ref.scope)} (table ${table}) is corrupt: ${what}`,
    { cause },
  );
}

/**
 * The row as the store wrote it, or a CorruptRecordError. SQLite stores any value in any column
 * (a table that is not STRICT), so every column is checked: a text in `body` or a real in `status`
 * must not become a replay.
 */
export function readRow(ref: RecordRef, table: string, raw: unknown): Row | undefined {
  if (raw === undefined) return undefined;
  const row = raw as Record<string, unknown>;
  const integer = (column: string): number => {
    const value = row[column];
    const n = typeof value === 'bigint' ? Number(value) : value;
    if (typeof n !== 'number' || !Number.isSafeInteger(n)) throw corrupt(ref, table, `${column} is not an integer`);
    return n;
  };
  const optionalText = (column: string): string | null => {
    const value = row[column];
    if (value !== null && typeof value !== 'string') throw corrupt(ref, table, `${column} is not text`);
    return value;
  };
  const { state, fingerprint, body } = row;
  if (state !== 'in_flight' && state !== 'completed') throw corrupt(ref, table, `state is ${JSON.stringify(state)}`);
  if (typeof fingerprint !== 'string') throw corrupt(ref, table, 'fingerprint is not text');
  const omitted = integer('body_omitted');
  if (omitted !== 0 && omitted !== 1) throw corrupt(ref, table, 'body_omitted is neither 0 nor 1');
  if (body !== null && !(body instanceof Uint8Array)) throw corrupt(ref, table, 'body is not a blob');
  return {
    state,
    fingerprint,
    lease_until: integer('lease_until'),
    expires_at: integer('expires_at'),
    recovery_point: optionalText('recovery_point'),
    recovery_data: optionalText('recovery_data'),
    status: row.status === null ? null : integer('status'),
    headers: optionalText('headers'),
    body,
    body_omitted: omitted,
    // Null on a row an earlier idemkit wrote (its times are unknown), and where the statement
    // did not read them (a claim's reads updated_at only).
    created_at: row.created_at == null ? null : integer('created_at'),
    updated_at: row.updated_at == null ? null : integer('updated_at'),
  };
}

export function recovery(ref: RecordRef, table: string, row: { recovery_point: unknown; recovery_data: unknown }): { resumeFrom?: string; recoveryData?: unknown } {
  const { recovery_point: point, recovery_data: data } = row;
  if (point !== null && typeof point !== 'string') throw corrupt(ref, table, 'recovery_point is not text');
  if (data !== null && typeof data !== 'string') throw corrupt(ref, table, 'recovery_data is not text');
  return { resumeFrom: point ?? undefined, recoveryData: data === null ? undefined : parseJson(ref, table, 'recovery_data', data) };
}

function parseJson(ref: RecordRef, table: string, column: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw corrupt(ref, table, `${column} is not valid JSON`, error);
  }
}

export function toResponse(ref: RecordRef, table: string, row: Row): StoredResponse {
  const problem = statusProblem(row.status) ?? (row.headers === null ? 'headers is missing' : undefined);
  if (problem !== undefined) throw corrupt(ref, table, problem);
  const headers = parseJson(ref, table, 'headers', row.headers!);
  const headerProblem = headersProblem(headers);
  if (headerProblem !== undefined) throw corrupt(ref, table, headerProblem);
  const omitted = row.body_omitted === 1;
  return {
    status: row.status!,
    headers: headers as Array<[string, string]>,
    // A copy: better-sqlite3's Buffer may be pooled.
    body: omitted ? null : new Uint8Array(row.body ?? new Uint8Array(0)),
    bodyOmitted: omitted,
  };
}

export function toRecord(ref: RecordRef, table: string, row: Row | undefined): IdempotencyRecord | undefined {
  if (!row) return undefined;
  const { resumeFrom, recoveryData } = recovery(ref, table, row);
  return {
    scope: ref.scope,
    key: ref.key,
    state: row.state,
    fingerprint: row.fingerprint,
    leaseUntil: row.lease_until,
    expiresAt: row.expires_at,
    recoveryPoint: resumeFrom,
    recoveryData,
    response: row.state === 'completed' ? toResponse(ref, table, row) : undefined,
    createdAt: row.created_at ?? undefined,
    updatedAt: row.updated_at ?? undefined,
  };
}
