/**
 * The PostgreSQL store's rows, read back: the claim function's answer and a record, every column
 * checked, a stored response checked before it is replayed.
 */
import { CorruptRecordError } from '../../core/errors.js';
import type { Claim, IdempotencyRecord, RecordRef, StoredResponse } from '../../core/store.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';

export interface ClaimRow {
  outcome: unknown;
  retry_after_ms: unknown;
  attempt: unknown;
  recovery_point: unknown;
  recovery_data: unknown;
  status: unknown;
  headers: unknown;
  body: unknown;
  body_omitted: unknown;
  /** In flight: ms since the record last changed; NULL when unknown. */
  renewed_ms_ago?: unknown;
}

export interface RecordRow extends ClaimRow {
  state: unknown;
  fingerprint: unknown;
  lease_until: unknown;
  expires_at: unknown;
  /** NULL on a row an earlier idemkit wrote (its times are unknown). */
  created_at: unknown;
  updated_at: unknown;
}

export function toClaim(row: RowReader<ClaimRow>, token: string): Claim {
  const outcome = row.get('outcome');
  switch (outcome) {
    case 'acquired': {
      const attempt = row.integer('attempt');
      return {
        kind: 'acquired',
        token,
        takeover: attempt > 1,
        resumeFrom: row.optionalText('recovery_point'),
        recoveryData: row.json('recovery_data'),
      };
    }
    case 'completed':
      return { kind: 'completed', response: toResponse(row) };
    case 'in_flight':
      return { kind: 'in_flight', retryAfterMs: Math.max(1, row.integer('retry_after_ms')), renewedMsAgo: row.optionalInteger('renewed_ms_ago') };
    case 'mismatch':
      return { kind: 'mismatch' };
    default:
      throw row.corrupt(`the claim returned the outcome ${JSON.stringify(outcome)}`);
  }
}

function toResponse(row: RowReader<ClaimRow>): StoredResponse {
  const status = row.integer('status');
  const headers = row.json('headers');
  const problem = statusProblem(status) ?? headersProblem(headers);
  if (problem !== undefined) throw row.corrupt(problem);
  const omitted = row.get('body_omitted');
  if (typeof omitted !== 'boolean') throw row.corrupt('body_omitted is not a boolean');
  const body = row.get('body');
  if (body !== null && !(body instanceof Uint8Array)) throw row.corrupt('body is not bytea');
  return {
    status,
    headers: headers as Array<[string, string]>,
    // A plain Uint8Array view of the driver's Buffer: no copy, and no Buffer-only behaviour leaks out.
    body: omitted ? null : body === null ? new Uint8Array(0) : new Uint8Array(body.buffer, body.byteOffset, body.byteLength),
    bodyOmitted: omitted,
  };
}

export function toRecord(row: RowReader<RecordRow>): IdempotencyRecord {
  const state = row.get('state');
  if (state !== 'in_flight' && state !== 'completed') throw row.corrupt(`state is ${JSON.stringify(state)}`);
  const fingerprint = row.get('fingerprint');
  if (typeof fingerprint !== 'string') throw row.corrupt('fingerprint is not text');
  return {
    scope: row.ref.scope,
    key: row.ref.key,
    state,
    fingerprint,
    leaseUntil: row.integer('lease_until'),
    expiresAt: row.integer('expires_at'),
    recoveryPoint: row.optionalText('recovery_point'),
    recoveryData: row.json('recovery_data'),
    response: state === 'completed' ? toResponse(row) : undefined,
    createdAt: row.optionalInteger('created_at'),
    updatedAt: row.optionalInteger('updated_at'),
  };
}

/**
 * Reads the columns of one row, checking each; anything unexpected is an error naming the record,
 * never a TypeError deep in an adapter. Numbers may arrive as strings (int8, a pool's own parsers).
 */
export class RowReader<Row extends object> {
  constructor(
    readonly ref: RecordRef,
    private readonly where: string,
    private readonly row: Row | undefined,
  ) {}

  get(column: keyof Row & string): unknown {
    if (this.row === undefined) throw this.corrupt('the statement returned no row');
    return this.row[column];
  }

  integer(column: keyof Row & string): number {
    const value = this.get(column);
    const n = typeof value === 'string' || typeof value === 'bigint' ? Number(value) : value;
    if (typeof n !== 'number' || !Number.isSafeInteger(n)) throw this.corrupt(`${column} is not an integer`);
    return n;
  }

  /** An integer, or undefined for NULL. */
  optionalInteger(column: keyof Row & string): number | undefined {
    return this.get(column) === null ? undefined : this.integer(column);
  }

  optionalText(column: keyof Row & string): string | undefined {
    const value = this.get(column);
    if (value === null) return undefined;
    if (typeof value !== 'string') throw this.corrupt(`${column} is not text`);
    return value;
  }

  json(column: keyof Row & string): unknown {
    const text = this.optionalText(column);
    if (text === undefined) return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw this.corrupt(`${column} is not valid JSON`);
    }
  }

  corrupt(what: string): CorruptRecordError {
    const { scope, key } = this.ref;
    return new CorruptRecordError(
      `postgres store: the record for key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)} (${this.where}) is corrupt: ${what}`,
    );
  }
}
