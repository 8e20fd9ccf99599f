import { CorruptRecordError, InvalidRecordRefError, LeaseLostError, StoreSchemaMissingError, StoreUnavailableError } from '../../core/errors.js';
import type {
  AbandonedRecords,
  AdministrableStore,
  Claim,
  ClaimOptions,
  IdempotencyRecord,
  RecordRef,
  StoreTransaction,
  StoredResponse,
  TransactionalStore,
} from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse } from '../../core/store.js';
import { newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import type { MysqlPool, MysqlPoolConnection, MysqlValue } from '../../drivers/mysql.js';
import { isDuplicateKey, isMissingSchema } from '../../drivers/mysql.js';
import type { JoinableStore, StatementRunner } from '../shared/joined-transaction.js';
import { TRANSACTION_JOIN } from '../shared/joined-transaction.js';
import { mysqlAdmin } from './admin.js';
import { Connections } from './connections.js';
import { ADDED_COLUMNS, COLUMNS_PRESENT, MAX_FINGERPRINT_BYTES, MAX_KEY_BYTES, MAX_SCOPE_BYTES, checkTable, mysqlSchema, statements } from './sql.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';

/** The pooled connection the store uses (release, destroy): the name it had before `MysqlPoolConnection`. */
export type MysqlConnection = MysqlPoolConnection;

export interface MysqlStoreOptions<P extends MysqlPool = MysqlPool> {
  /** A mysql2/promise pool, created by the caller (set `connectTimeout` on it). Required. */
  readonly pool: P;
  /**
   * Table for the records: a plain identifier. Create it with `migrate()` or `sql/mysql.sql`.
   * @default 'idempotency_records'
   */
  readonly table?: string;
  /** @default 1_048_576 */
  readonly maxResponseBytes?: number;
  /**
   * How long one statement (or the wait for a pooled connection) may take, in ms. A connection
   * that does not answer in time is destroyed rather than returned to the pool, so a frozen
   * network path cannot hold the pool's connections forever.
   * @default 10_000
   */
  readonly statementTimeoutMs?: number;
  /**
   * A second, small mysql2/promise pool (created by the caller, e.g. `connectionLimit: 2`) that
   * only lease renewals use. In transactional mode each request holds one of `pool`'s connections
   * while its handler runs, so with as many requests as connections a renewal waits for a
   * connection until the lease runs out and another instance takes the key over; renewals through
   * a pool of their own never queue behind those transactions. Only renewals: every other statement
   * (claim, release, checkpoint, complete) either starts a request or ends it, and a late one costs
   * time, not a lease.
   * @default `pool`
   */
  readonly leasePool?: MysqlPool;
}

type ConnectionOf<P extends MysqlPool> = Awaited<ReturnType<P['getConnection']>>;

/** `Conn` is the pool's connection type, so the handler's `ctx.tx` keeps mysql2's full API. */
export interface MysqlStore<Conn = MysqlConnection> extends TransactionalStore<Conn>, JoinableStore, AbandonedRecords, AdministrableStore {
  /**
   * Creates the table and its expiry index if missing, and adds the columns a table of an earlier
   * idemkit lacks (`created_at`, `updated_at`; its rows keep them NULL: unknown). Idempotent, and
   * safe to run concurrently. Resolves to what it added, as `column <table>.<name>`.
   */
  migrate(): Promise<string[]>;
  /**
   * Resolves when the table exists in the connection's database with every column this version
   * writes; otherwise rejects with `StoreSchemaMissingError` naming what is missing and
   * `await store.migrate()` (or `idemkit migrate`) as the fix. One round trip: call it at start-up
   * so a missing migration fails the deploy, not every request. (Without it, each request answers
   * 500 `store-schema-missing`, and the logger prints the same line once a minute.)
   */
  verify(): Promise<void>;
}

/** The fix a `StoreSchemaMissingError` names. */
const MIGRATE_FIX = '`await store.migrate()` or `idemkit migrate` (or apply sql/mysql.sql for the default name)';
// The `what` of the look at the schema after a failure: its own failure is not explained again.
const SCHEMA_LOOK = 'schema look';

// A lost race (duplicate insert, changed revision) costs one more round; a claim that keeps
// losing for this many rounds reports the store as unavailable instead of spinning.
const CLAIM_ROUNDS = 5;
// No statement can carry more than the server's max_allowed_packet, which is at most 1 GiB.
const MAX_PACKET = 1024 * 1024 * 1024;
// setTimeout fires at once for longer delays.

/**
 * The store on MySQL 5.7+/8 or MariaDB 10.3+ through a mysql2/promise pool. Leases and windows
 * are decided on the server's clock. A replay costs one read; a new key a read and an insert.
 */
export function mysqlStore<P extends MysqlPool>(options: MysqlStoreOptions<P>): MysqlStore<ConnectionOf<P>> {
  const opts = optionReader('mysqlStore()', options);
  const pool = opts.driver('pool', ['getConnection'], 'a mysql2/promise Pool (createPool)', { refuse: notAMysqlPool });
  const table = opts.value('table') ?? 'idempotency_records';
  checkTable(table);
  const maxResponseBytes = opts.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  if (maxResponseBytes > MAX_PACKET) opts.fail('maxResponseBytes', `expected at most ${MAX_PACKET} (the largest max_allowed_packet)`);
  const timeoutMs = opts.duration('statementTimeoutMs', { default: 10_000, min: 1 });
  const leasePool = opts.driver('leasePool', ['getConnection'], 'a second mysql2/promise Pool (createPool)', { optional: true, refuse: notAMysqlPool });
  if (leasePool === pool) opts.fail('leasePool', 'expected a pool of its own: the same pool as `pool` would queue renewals behind the handlers\' transactions again');
  opts.done();
  const sql = statements(table);
  const db = new Connections(pool, timeoutMs, (what, error) => failure(what, error));
  const leaseDb = leasePool === undefined ? db : new Connections(leasePool, timeoutMs, (what, error) => failure(what, error));

  /** The names of the table's columns in the connection's database; empty when there is no table. */
  async function columns(what: string): Promise<Set<string>> {
    const { result } = await db.run(what, COLUMNS_PRESENT, [table]);
    return new Set((result as Array<{ name?: unknown }>).map((row) => text(row.name) ?? ''));
  }

  /** What `verify()` names: the table, or the columns a table of an earlier idemkit lacks. */
  async function missingParts(what: string): Promise<string[]> {
    const present = await columns(what);
    return present.size === 0
      ? [`table ${table} (in the connection's database)`]
      : ADDED_COLUMNS.filter(([column]) => !present.has(column)).map(([column]) => `column ${table}.${column}`);
  }

  // One look at the schema at a time, shared by every request that failed meanwhile.
  let looking: Promise<string[]> | undefined;
  /**
   * The error to throw for a statement that failed. A table or column that does not exist
   * (ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR) is not an outage but a store nobody migrated: a retry
   * cannot help, so the answer is `StoreSchemaMissingError` (500, no Retry-After), naming what one
   * look at `information_schema` finds missing, with the same message every time (the logger then
   * prints it once a minute, not once a request). Nothing found missing is the driver's error, as
   * before. The look runs only on this failure: a migrated store pays nothing for it.
   */
  async function failure(what: string, error: unknown): Promise<unknown> {
    if (!isMissingSchema(error) || what === SCHEMA_LOOK) return error;
    looking ??= missingParts(SCHEMA_LOOK).finally(() => {
      looking = undefined;
    });
    let missing: string[];
    try {
      missing = await looking;
    } catch {
      return error;
    }
    return missing.length > 0 ? new StoreSchemaMissingError('mysql', missing, MIGRATE_FIX, { cause: error }) : error;
  }

  async function read(ref: RecordRef, id: Buffer[]): Promise<Row | undefined> {
    const { result } = await db.run('read', sql.read, id);
    const rows = result as Array<Record<string, unknown>>;
    return rows.length === 0 ? undefined : parseRow(ref, table, rows[0]!);
  }

  /** True when the conditional write won; false when another claim got there first. */
  async function write(what: string, statement: string, values: MysqlValue[]): Promise<boolean> {
    try {
      return affectedRows((await db.run(what, statement, values)).result) === 1;
    } catch (error) {
      if (isDuplicateKey(error)) return false;
      throw error;
    }
  }

  async function claim(ref: RecordRef, fp: string, o: ClaimOptions): Promise<Claim> {
    const id = refParams(ref);
    const fpBytes = fingerprintParam(fp);
    const token = newOwnerToken();
    for (let round = 0; round < CLAIM_ROUNDS; round++) {
      const row = await read(ref, id);
      // Our write landed although its answer was lost with the connection: it is ours.
      if (row?.token === token) return acquired(ref, table, token, row);
      if (!row) {
        if (await write('claim', sql.insert, [...id, fpBytes, token, o.leaseMs, o.windowMs])) {
          return { kind: 'acquired', token, takeover: false };
        }
      } else if (row.expired) {
        if (await write('claim', sql.replace, [fpBytes, token, o.leaseMs, o.windowMs, ...id, row.revision])) {
          return { kind: 'acquired', token, takeover: false };
        }
      } else if (row.fingerprint !== fp) {
        return { kind: 'mismatch' };
      } else if (row.state === 'completed') {
        return { kind: 'completed', response: parseResponse(ref, table, row.raw) };
      } else if (row.leaseUntil > row.now) {
        return { kind: 'in_flight', retryAfterMs: row.leaseUntil - row.now };
      } else if (await write('claim', sql.takeover, [token, o.leaseMs, ...id, row.revision, fpBytes])) {
        // The revision matched, so the record is exactly the one read: its recovery point is current.
        return acquired(ref, table, token, Object.assign({}, row, { attempt: row.attempt + 1 }));
      }
    }
    throw new StoreUnavailableError(`mysql store: claim kept racing with other writers for ${CLAIM_ROUNDS} rounds`);
  }

  /**
   * A fenced statement outside a transaction. When the first try's connection died mid-statement
   * and the retry matches nothing, `applied` tells whether the first try had in fact landed.
   */
  async function fenced(what: string, statement: string, values: MysqlValue[], applied?: () => Promise<boolean>) {
    const { result, ambiguous } = await db.run(what, statement, values);
    if (affectedRows(result) === 1) return;
    if (ambiguous && applied && (await applied())) return;
    throw new LeaseLostError();
  }

  const completeParams = (response: StoredResponse): MysqlValue[] => {
    const fitted = fitResponse(response, maxResponseBytes);
    const body = fitted.body === null ? null : Buffer.from(fitted.body.buffer, fitted.body.byteOffset, fitted.body.byteLength);
    return [fitted.status, JSON.stringify(fitted.headers), body, fitted.bodyOmitted ? 1 : 0];
  };
  const checkpointParams = (point: string, data: unknown): MysqlValue[] => [point, data === undefined ? null : JSON.stringify(data)];

  /** A fenced statement inside an ORM's transaction (idemkit/kysely, …). */
  async function joined(runner: StatementRunner, what: string, statement: string, values: MysqlValue[]) {
    let changed: number;
    try {
      changed = await runner(statement, values);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new StoreUnavailableError(`mysql store: ${what} on \`${table}\` failed: ${message}`, { cause: error });
    }
    if (changed !== 1) throw new LeaseLostError();
  }

  return {
    name: 'mysql',
    maxResponseBytes,
    [TRANSACTION_JOIN]: {
      dialect: 'mysql',
      complete: async (runner, ref, token, response) =>
        joined(runner, 'complete', sql.complete, [...completeParams(response), ...refParams(ref), token]),
      checkpoint: async (runner, ref, token, point, data) =>
        joined(runner, 'checkpoint', sql.checkpoint, [...checkpointParams(point, data), ...refParams(ref), token]),
      enter: async () => () => {},
    },
    async migrate() {
      await db.run('migrate', mysqlSchema(table), [], 'query');
      const added: string[] = [];
      for (const [column, definition] of ADDED_COLUMNS) {
        if ((await columns('migrate')).has(column)) continue;
        try {
          // Nullable at the end of the row: an instant change on MySQL 8 and MariaDB 10.3+.
          await db.run('migrate', `ALTER TABLE \`${table}\` ADD COLUMN ${column} ${definition}`, [], 'query');
          added.push(`column ${table}.${column}`);
        } catch (error) {
          // Another instance added it between the look and the ALTER (ER_DUP_FIELDNAME).
          if (!(await columns('migrate')).has(column)) throw error;
        }
      }
      return added;
    },
    async verify() {
      const missing = await missingParts('verify');
      if (missing.length > 0) throw new StoreSchemaMissingError('mysql', missing, MIGRATE_FIX);
    },
    claim,
    async renew(ref, token, leaseMs) {
      const { result } = await leaseDb.run('renew', sql.renew, [leaseMs, ...refParams(ref), token]);
      return affectedRows(result) === 1;
    },
    async checkpoint(ref, token, point, data) {
      await fenced('checkpoint', sql.checkpoint, [...checkpointParams(point, data), ...refParams(ref), token]);
    },
    async complete(ref, token, response) {
      const id = refParams(ref);
      await fenced('complete', sql.complete, [...completeParams(response), ...id, token], async () => {
        const row = await read(ref, id);
        return row?.state === 'completed' && row.token === token;
      });
    },
    async release(ref, token) {
      const id = refParams(ref);
      await fenced('release', sql.release, [...id, token], async () => (await read(ref, id)) === undefined);
    },
    async get(ref) {
      const row = await read(ref, refParams(ref));
      return row && toRecord(ref, table, row);
    },
    async reap(limit = 1000) {
      const n = checkInteger('limit', limit, { default: 1000, min: 1 });
      return affectedRows((await db.run('reap', sql.reap(n), [])).result);
    },
    async listAbandoned(limit = 100) {
      const n = checkInteger('limit', limit, { default: 100, min: 1 });
      const { result } = await db.run('listAbandoned', sql.listAbandoned(n), []);
      return (result as Array<Record<string, unknown>>).map((raw) => {
        const scope = text(raw.scope);
        const key = text(raw.idem_key);
        if (scope === undefined || key === undefined) throw new CorruptRecordError(`mysql store: a record in \`${table}\` has no scope or key`);
        const ref = { scope, key };
        return toRecord(ref, table, parseRow(ref, table, raw));
      });
    },
    admin: mysqlAdmin(db, table),
    async beginTransaction(): Promise<StoreTransaction<ConnectionOf<P>>> {
      const tx = await db.begin();
      const inTx = async (what: string, statement: string, values: MysqlValue[]) => {
        if (affectedRows(await tx.execute(what, statement, values)) !== 1) throw new LeaseLostError();
      };
      return {
        tx: tx.connection as ConnectionOf<P>,
        // Async, so that a refused ref rejects rather than throws.
        complete: async (ref, token, response) => inTx('complete', sql.complete, [...completeParams(response), ...refParams(ref), token]),
        checkpoint: async (ref, token, point, data) => inTx('checkpoint', sql.checkpoint, [...checkpointParams(point, data), ...refParams(ref), token]),
        commit: () => tx.end('commit'),
        rollback: () => tx.end('rollback'),
      };
    },
  };
}

// ---- rows ------------------------------------------------------------------------------------

interface Row {
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
function refParams(ref: RecordRef): Buffer[] {
  checkRecordRef(ref);
  return [bounded('scope', ref.scope, MAX_SCOPE_BYTES), bounded('key', ref.key, MAX_KEY_BYTES)];
}

/** The fingerprint's bytes; it is the engine's hex digest, so only a custom caller can trip these. */
function fingerprintParam(fingerprint: string): Buffer {
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

function parseRow(ref: RecordRef, table: string, raw: Record<string, unknown>): Row {
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

function text(value: unknown): string | undefined {
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

function parseResponse(ref: RecordRef, table: string, raw: Record<string, unknown>): StoredResponse {
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

function acquired(ref: RecordRef, table: string, token: string, row: Row): Claim {
  return { kind: 'acquired', token, takeover: row.attempt > 1, ...recovery(ref, table, row) };
}

function toRecord(ref: RecordRef, table: string, row: Row): IdempotencyRecord {
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

function affectedRows(result: unknown): number {
  const n = (result as { affectedRows?: unknown } | null)?.affectedRows;
  if (typeof n !== 'number') throw new StoreUnavailableError('mysql store: the driver answered without affectedRows');
  return n;
}

/**
 * The look-alikes mysql2 hands out: a single connection (which has `query` but no
 * `getConnection`) and the callback API's pool (whose methods take callbacks; it has `promise()`).
 */
function notAMysqlPool(value: object): string | undefined {
  const candidate = value as { getConnection?: unknown; query?: unknown; promise?: unknown };
  if (typeof candidate.getConnection !== 'function' && typeof candidate.query === 'function') {
    return 'this looks like a single Connection (createConnection); pass a Pool (createPool from mysql2/promise), which the store borrows connections from';
  }
  if (typeof candidate.getConnection === 'function' && typeof candidate.promise === 'function') {
    return "this is mysql2's callback API; pass `pool.promise()` or a Pool from createPool in mysql2/promise";
  }
  return undefined;
}
