/**
 * The MySQL store's rows and parameters: scope, key and fingerprint as bounded UTF-8 bytes, and a
 * row read back with every column checked, its stored response checked before it is replayed.
 */
import { CorruptRecordError, InvalidRecordRefError, StoreUnavailableError } from '../../core/errors.js';
import type { Claim, IdempotencyRecord, RecordRef, StoredResponse } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';
import { MAX_FINGERPRINT_BYTES, MAX_KEY_BYTES, MAX_SCOPE_BYTES } from './sql.js';

export interface Row {
  /** The server's clock when the row was read. */
  readonly now: number;
  readonly state: 'in_flight' | 'completed';
  readonly fingerprint: string;
  readonly token: string;
  readonly revision: number;
  readonly attempt: number;
  readonly leaseUntil: number;
  readonly expiresAt: number;
  readonly expired: boolean;
  readonly raw: Record<string, unknown>;
}

/**
 * Scope and key as exact UTF-8 bytes: no connection charset can convert them. Well-formed first
 * (a lone surrogate would be encoded as U+FFFD, so two different strings could share one record),
 * then short enough for the columns (a server without strict mode would truncate silently).
 */
export function refParams(ref: RecordRef): Buffer[] {
  checkRecordRef(ref);
  return [bounded('scope', ref.scope, MAX_SCOPE_BYTES), bounded('key', ref.key, MAX_KEY_BYTES)];
}

/** The fingerprint's bytes; it is the engine's hex digest, so only a custom caller can trip these. */
export function fingerprintParam(fingerprint: string): Buffer {
  if (typeof fingerprint !== 'string' || !fingerprint.isWellFormed()) {
    throw new InvalidRecordRefError('fingerprint', 'mysql store: expected a well-formed string');
  }
  return bounded('fingerprint', fingerprint, MAX_FINGERPRINT_BYTES);
}

function bounded(field: 'scope' | 'key' | 'fingerprint', value: string, maxBytes: number): Buffer {
  const bytes = Buffer.from(value, 'utf8');
  if (bytes.byteLength > maxBytes) {
    throw new InvalidRecordRefError(field, `mysql store: it is ${bytes.byteLength} UTF-8 bytes; at most ${maxBytes} fit`);
  }
  return bytes;
}

function corrupt(ref: RecordRef, table: string, detail: string, cause?: unknown): CorruptRecordError {
  return new CorruptRecordError(
    `mysql store: the record for scope ${JSON.stringify(ref.scope)}, key ${JSON.stringify(ref.key)} in table \`${table}\` is corrupt: ${detail}`,
    { cause },
  );
}

export function parseRow(ref: RecordRef, table: string, raw: Record<string, unknown>): Row {
  const int = (column: string) => {
    const value = raw[column];
    const n = typeof value === 'number' || typeof value === 'bigint' || typeof value === 'string' ? Number(value) : NaN;
    if (!Number.isSafeInteger(n)) throw corrupt(ref, table, `${column} is not an integer`);
    return n;
  };
  const required = (column: string) => {
    const value = text(raw[column]);
    if (value === undefined) throw corrupt(ref, table, `${column} is missing`);
    return value;
  };
  const state = raw.state;
  if (state !== 'in_flight' && state !== 'completed') throw corrupt(ref, table, `unknown state ${JSON.stringify(state)}`);
  const now = int('now_ms');
  const leaseUntil = int('lease_until');
  const expiresAt = int('expires_at');
  return {
    now,
    state,
    fingerprint: required('fingerprint'),
    token: required('token'),
    revision: int('revision'),
    attempt: int('attempt'),
    leaseUntil,
    expiresAt,
    expired: expiresAt <= now && (state === 'completed' || leaseUntil <= now),
    raw,
  };
}

export function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return undefined;
}

function parseJson(ref: RecordRef, table: string, column: string, value: unknown): unknown {
  const source = text(value);
  if (source === undefined) throw corrupt(ref, table, `${column} is not text`);
  try {
    return JSON.parse(source);
  } catch (error) {
    throw corrupt(ref, table, `${column} is not valid JSON`, error);
  }
}

export function parseResponse(ref: RecordRef, table: string, raw: Record<string, unknown>): StoredResponse {
  const status = raw.status === null ? NaN : Number(raw.status);
  if (statusProblem(status) !== undefined) throw corrupt(ref, table, `status ${String(raw.status)} is not an HTTP status`);
  const headers = parseJson(ref, table, 'headers', raw.headers);
  const headerProblem = headersProblem(headers);
  if (headerProblem !== undefined) throw corrupt(ref, table, headerProblem);
  const omittedFlag = Number(raw.body_omitted);
  if (omittedFlag !== 0 && omittedFlag !== 1) throw corrupt(ref, table, `body_omitted ${String(raw.body_omitted)} is neither 0 nor 1`);
  const omitted = omittedFlag === 1;
  if (!omitted && !Buffer.isBuffer(raw.body)) throw corrupt(ref, table, 'the body is missing');
  return {
    status,
    headers: headers as Array<[string, string]>,
    // A copy: the driver's buffer may be a slice of a larger packet.
    body: omitted ? null : new Uint8Array(raw.body as Buffer),
    bodyOmitted: omitted,
  };
}

function recovery(ref: RecordRef, table: string, row: Row): { resumeFrom?: string; recoveryData?: unknown } {
  const point = row.raw.recovery_point;
  const data = row.raw.recovery_data;
  return {
    resumeFrom: point === null ? undefined : text(point),
    recoveryData: data === null ? undefined : parseJson(ref, table, 'recovery_data', data),
  };
}

export function acquired(ref: RecordRef, table: string, token: string, row: Row): Claim {
  return { kind: 'acquired', token, takeover: row.attempt > 1, ...recovery(ref, table, row) };
}

/** The answer to a claim that found `row` in flight under a live lease, durations on the server's clock. */
export function inFlight(ref: RecordRef, table: string, row: Row): Claim {
  const updatedAt = optionalInteger(ref, table, row.raw, 'updated_at');
  return { kind: 'in_flight', retryAfterMs: row.leaseUntil - row.now, renewedMsAgo: updatedAt === undefined ? undefined : Math.max(0, row.now - updatedAt) };
}

export function toRecord(ref: RecordRef, table: string, row: Row): IdempotencyRecord {
  const { resumeFrom, recoveryData } = recovery(ref, table, row);
  return {
    scope: ref.scope,
    key: ref.key,
    state: row.state,
    fingerprint: row.fingerprint,
    leaseUntil: row.leaseUntil,
    expiresAt: row.expiresAt,
    recoveryPoint: resumeFrom,
    recoveryData,
    response: row.state === 'completed' ? parseResponse(ref, table, row.raw) : undefined,
    createdAt: optionalInteger(ref, table, row.raw, 'created_at'),
    updatedAt: optionalInteger(ref, table, row.raw, 'updated_at'),
  };
}

/** A time column: undefined when NULL (a row an earlier idemkit wrote: its times are unknown). */
function optionalInteger(ref: RecordRef, table: string, raw: Record<string, unknown>, column: string): number | undefined {
  const value = raw[column];
  if (value === null || value === undefined) return undefined;
  const n = typeof value === 'number' || typeof value === 'bigint' || typeof value === 'string' ? Number(value) : NaN;
  if (!Number.isSafeInteger(n)) throw corrupt(ref, table, `${column} is not an integer`);
  return n;
}

export function affectedRows(result: unknown): number {
  const n = (result as { affectedRows?: unknown } | null)?.affectedRows;
  if (typeof n !== 'number') throw new StoreUnavailableError('mysql store: the driver answered without affectedRows');
  return n;
}
