/**
 * Optimistic locking on a version column: the write names the version it read, and lands only if
 * nobody wrote in between (`… WHERE <row> AND version = :expected`). A loser re-reads and tries
 * again, a bounded number of times.
 */
import { InvalidOptionError } from '../core/errors.js';
import { optionReader } from '../core/option-reader.js';
import { VersionConflictError } from './errors.js';
import { column, entries, table as tableName, whereClause } from './identifiers.js';
import { sqlExecutor } from '../drivers/sql-executor.js';
import type { SqlDatabase, SqlExecutor } from '../drivers/sql-executor.js';

export interface VersionedUpdateOptions {
  /** The table, optionally `schema.table`. */
  readonly table: string;
  /** Column → value identifying the row. */
  readonly where: Readonly<Record<string, unknown>>;
  /** The integer version column. @default 'version' */
  readonly versionColumn?: string;
  /** The version the caller read; the update lands only if the row still has it. */
  readonly expected: number;
  /** Column → new value (may be empty: then only the version moves). */
  readonly set: Readonly<Record<string, unknown>>;
}

export type VersionedUpdateResult =
  | { readonly updated: true; /** The row's new version (expected + 1). */ readonly version: number }
  /** Someone wrote first: `version` is the row's version now, undefined when there is no such row. */
  | { readonly updated: false; readonly version: number | undefined };

/** `UPDATE … SET …, version = version + 1 WHERE <where> AND version = :expected`. */
export async function versionedUpdate(db: SqlDatabase | SqlExecutor, options: VersionedUpdateOptions): Promise<VersionedUpdateResult> {
  const read = optionReader('versionedUpdate()', options);
  const x = sqlExecutor(db);
  const d = x.dialect;
  const table = tableName('table', read.value('table'), d);
  const version = column('versionColumn', read.value('versionColumn') ?? 'version', d);
  const where = whereClause('where', read.value('where'), d);
  const set = entries('set', read.value('set'), d, true);
  if (set.some(([c]) => c === version)) throw new InvalidOptionError('set', 'must not write the version column; it moves by itself');
  const expected = read.value('expected');
  if (typeof expected !== 'number' || !Number.isSafeInteger(expected)) {
    throw new InvalidOptionError('expected', `expected the integer version that was read, got ${String(expected)}`);
  }
  read.done();
  const assignments = [...set.map(([c]) => `${c} = ?`), `${version} = ${version} + 1`].join(', ');
  const { affected } = await x.query(`UPDATE ${table} SET ${assignments} WHERE ${where.sql} AND ${version} = ?`, [
    ...set.map(([, v]) => v),
    ...where.params,
    options.expected,
  ]);
  if (affected > 0) return { updated: true, version: options.expected + 1 };
  const { rows } = await x.query<Record<string, unknown>>(`SELECT ${version} AS v FROM ${table} WHERE ${where.sql}`, where.params);
  const current = rows[0]?.v;
  return { updated: false, version: current === undefined || current === null ? undefined : Number(current) };
}

export interface RetryOnVersionConflictOptions {
  /** Further attempts after the first. Each failed attempt means another writer succeeded. */
  readonly retries: number;
  /**
   * Upper bound of the random pause before retry n, in ms: min(maxBackoffMs, 2^n). The jitter
   * spreads writers that collided so they do not collide again in lockstep; 0 retries at once.
   * @default 50
   */
  readonly maxBackoffMs?: number;
}

/** What an attempt answers to ask for another: a `versionedUpdate` result with `updated: false`. */
function isConflict(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { updated?: unknown }).updated === false;
}

/**
 * Runs `attempt` (which reads the row and calls versionedUpdate with the version it read) until it
 * does not conflict. A conflict is an attempt that answers `{ updated: false }` or throws
 * VersionConflictError. After `retries` more conflicts, throws VersionConflictError.
 */
export async function retryOnVersionConflict<T>(
  attempt: (attemptNumber: number) => Promise<T>,
  options: RetryOnVersionConflictOptions,
): Promise<T> {
  if (typeof attempt !== 'function') throw new InvalidOptionError('attempt', 'expected a function');
  if (options === undefined || options.retries === undefined) throw new InvalidOptionError('retries', 'is required (how many times to re-read and re-apply)');
  const read = optionReader('retryOnVersionConflict()', options);
  const retries = read.integer('retries', { required: true });
  const maxBackoffMs = read.integer('maxBackoffMs', { default: 50 });
  read.done();
  let last: unknown;
  for (let n = 0; n <= retries; n++) {
    if (n > 0 && maxBackoffMs > 0) await pause(Math.random() * Math.min(maxBackoffMs, 2 ** n));
    try {
      const result = await attempt(n + 1);
      if (!isConflict(result)) return result;
      last = result;
    } catch (error) {
      if (!(error instanceof VersionConflictError)) throw error;
      last = error;
    }
  }
  throw new VersionConflictError(retries + 1, last instanceof VersionConflictError ? last.message : 'every attempt answered updated: false');
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
