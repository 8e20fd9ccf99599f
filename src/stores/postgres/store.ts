import { CorruptRecordError, TransactionEndedError, LeaseLostError, StoreSchemaMissingError, StoreUnavailableError } from '../../core/errors.js';
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
import type { PostgresClient, PostgresPool, PostgresQueryResult } from '../../drivers/postgres.js';
import { commitRolledBack, holdClient, isMissingSchema, rolledBackCommitError, sqlState } from '../../drivers/postgres.js';
import type { JoinableStore, StatementRunner } from '../shared/joined-transaction.js';
import { TRANSACTION_JOIN } from '../shared/joined-transaction.js';
import { postgresAdmin } from './admin.js';
import { ADDED_COLUMNS, CORRUPT_PREFIX, DATA_CORRUPTED, checkPostgresRef, postgresStatements, resolveNames } from './sql.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';

/**
 * The client type a pool hands out, so `tx` keeps the driver's API (`pg.PoolClient` for a
 * `pg.Pool`). TypeScript infers only from the last overload, which for `pg.Pool#connect` is the
 * callback form; a pool with the single promise form is read from that.
 */
export type PoolClientOf<Pool> = [ClientFromCallback<Pool>] extends [never] ? ClientFromPromise<Pool> : ClientFromCallback<Pool>;
type ClientFromCallback<Pool> = Pool extends { connect(callback: (error: never, client: infer C, ...rest: never[]) => void): void }
  ? Extract<C, PostgresClient>
  : never;
type ClientFromPromise<Pool> = Pool extends { connect(): Promise<infer C extends PostgresClient> } ? C : PostgresClient;

export interface PostgresStoreOptions<Pool extends PostgresPool = PostgresPool> {
  /** A node-postgres Pool, created by the caller. Required. */
  readonly pool: Pool;
  /**
   * Table of the records: a plain lower-case identifier of at most 52 characters. The claim
   * function is `<table>_claim`, the expiry index `<table>_expires_at`.
   * @default 'idempotency_records'
   */
  readonly table?: string;
  /** Schema of the table and the claim function: a plain lower-case identifier. @default 'public' */
  readonly schema?: string;
  /** Larger response bodies are not stored (the record marks them omitted); at most 512 MiB. @default 1_048_576 */
  readonly maxResponseBytes?: number;
  /**
   * A second, small node-postgres Pool (created by the caller, e.g. `max: 2`) that only lease
   * renewals use. In transactional mode each request holds one of `pool`'s clients while its
   * handler runs, so with as many requests as clients a renewal waits for a client until the lease
   * runs out and another instance takes the key over; renewals through a pool of their own never
   * queue behind those transactions. Only renewals: every other statement (claim, release,
   * checkpoint, complete) either starts a request or ends it, and a late one costs time, not a lease.
   * @default `pool`
   */
  readonly leasePool?: PostgresPool;
}

/** `Client` is the pool's client type, so the handler's `ctx.tx` keeps the driver's full API. */
export interface PostgresStore<Client extends PostgresClient = PostgresClient> extends TransactionalStore<Client>, JoinableStore, AbandonedRecords, AdministrableStore {
  /**
   * Creates the table, its expiry index and the claim function if missing, adds the columns a
   * table of an earlier idemkit lacks (`created_at`, `updated_at`; its rows keep them NULL:
   * unknown), and replaces the claim function with this version's (the text of `sql/postgres.sql`
   * for the default names). Idempotent; safe from several processes at once. Resolves to the
   * columns it found missing from an existing table, as `column <schema>.<table>.<name>`.
   */
  migrate(): Promise<string[]>;
  /**
   * Resolves when the table (with every column this version writes) and its claim function
   * exist; otherwise rejects with `StoreSchemaMissingError` naming what is missing and
   * `await store.migrate()` (or `idemkit migrate`) as the fix. One round trip: call it at start-up
   * so a missing migration fails the deploy, not every request. (Without it, each request answers
   * 500 `store-schema-missing`, and the logger prints the same line once a minute.)
   */
  verify(): Promise<void>;
}

interface ClaimRow {
  outcome: unknown;
  retry_after_ms: unknown;
  attempt: unknown;
  recovery_point: unknown;
  recovery_data: unknown;
  status: unknown;
  headers: unknown;
  body: unknown;
  body_omitted: unknown;
}

interface RecordRow extends ClaimRow {
  state: unknown;
  fingerprint: unknown;
  lease_until: unknown;
  expires_at: unknown;
  /** NULL on a row an earlier idemkit wrote (its times are unknown). */
  created_at: unknown;
  updated_at: unknown;
}

const MAX_RESPONSE_BYTES = 512 * 1024 * 1024;

/**
 * The store on PostgreSQL through a node-postgres Pool. Each operation is one statement and one
 * round trip; claims decide on the server's clock, so app instances with skewed clocks agree.
 */
export function postgresStore<Pool extends PostgresPool>(options: PostgresStoreOptions<Pool>): PostgresStore<PoolClientOf<Pool>> {
  type Client = PoolClientOf<Pool>;
  const read = optionReader('postgresStore()', options);
  const pool = read.driver('pool', ['query', 'connect'], 'a node-postgres Pool (with query and connect)', { refuse: notAPgPool });
  const names = resolveNames({ schema: read.value('schema'), table: read.value('table') });
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  // A bytea value and a protocol message are limited to 1 GB: a larger limit could never be honoured.
  if (maxResponseBytes > MAX_RESPONSE_BYTES) read.fail('maxResponseBytes', `expected at most ${MAX_RESPONSE_BYTES} (512 MiB)`);
  const ownLeasePool = read.driver('leasePool', ['query', 'connect'], 'a second node-postgres Pool (with query and connect)', { optional: true, refuse: notAPgPool });
  if (ownLeasePool === pool) read.fail('leasePool', 'expected a pool of its own: the same pool as `pool` would queue renewals behind the handlers\' transactions again');
  const leasePool = ownLeasePool ?? pool;
  read.done();
  const sql = postgresStatements(names);
  const where = `"${names.schema}"."${names.table}"`;

  /**
   * Runs one statement; a driver error becomes StoreUnavailableError naming the operation, or
   * StoreSchemaMissingError when the schema is not there (see `failure`).
   */
  async function run(db: Pick<PostgresClient, 'query'>, operation: string, text: string, values?: unknown[]) {
    try {
      return await db.query(text, values);
    } catch (error) {
      throw await failure(operation, error);
    }
  }

  // One look at the catalog at a time, shared by every request that failed meanwhile.
  let looking: Promise<string[]> | undefined;
  /**
   * The error for a statement that failed. A table, column or function that does not exist
   * (SQLSTATE 42P01, 42703, 42883) is not an outage but a store nobody migrated: a retry cannot
   * help, so the answer is `StoreSchemaMissingError` (500, no Retry-After), naming what one look
   * at the catalog finds missing, with the same message every time (the logger then prints it
   * once a minute, not once a request). Nothing found missing (migrated meanwhile, or another
   * function is absent) is the usual StoreUnavailableError. The look runs only on this failure:
   * a migrated store pays nothing for it.
   */
  async function failure(operation: string, error: unknown): Promise<Error> {
    if (!isMissingSchema(error) && sqlState(error) !== '42703') return unavailable(operation, where, error);
    looking ??= missingParts().finally(() => {
      looking = undefined;
    });
    let missing: string[];
    try {
      missing = await looking;
    } catch {
      return unavailable(operation, where, error);
    }
    return missing.length > 0 ? new StoreSchemaMissingError('postgres', missing, MIGRATE_FIX, { cause: error }) : unavailable(operation, where, error);
  }
  async function fenced(db: Pick<PostgresClient, 'query'>, operation: string, text: string, values: unknown[]) {
    const result = await run(db, operation, text, values);
    if (result.rowCount !== 1) throw new LeaseLostError();
  }
  const completeValues = (ref: RecordRef, token: string, response: StoredResponse) => {
    const fitted = fitResponse(response, maxResponseBytes);
    const body = fitted.body && Buffer.from(fitted.body.buffer, fitted.body.byteOffset, fitted.body.byteLength);
    return [ref.scope, ref.key, token, fitted.status, JSON.stringify(fitted.headers), body, fitted.bodyOmitted];
  };
  const checkpointValues = (ref: RecordRef, token: string, point: string, data: unknown) => [
    ref.scope,
    ref.key,
    token,
    point,
    data === undefined ? null : JSON.stringify(data),
  ];
  // Every operation that takes a ref checks it first: `pg` would send a lone surrogate as U+FFFD,
  // so two different scopes would share one record, and the server refuses NUL. In an async
  // function, a refusal rejects.
  const complete = async (db: Pick<PostgresClient, 'query'>, ref: RecordRef, token: string, response: StoredResponse) => {
    checkPostgresRef(ref);
    await fenced(db, 'complete', sql.complete, completeValues(ref, token, response));
  };
  const checkpoint = async (db: Pick<PostgresClient, 'query'>, ref: RecordRef, token: string, point: string, data: unknown) => {
    checkPostgresRef(ref);
    await fenced(db, 'checkpoint', sql.checkpoint, checkpointValues(ref, token, point, data));
  };

  /** What of the schema is there: the table, the claim function, the columns added since the first schema. */
  const schema = async (operation: string) => {
    let rows: readonly unknown[];
    try {
      // Not through `run`: its failure path looks here.
      ({ rows } = await pool.query(SCHEMA_SQL, [where, names.schema, `${names.table}_claim`, ADDED_COLUMNS]));
    } catch (error) {
      throw unavailable(operation, where, error);
    }
    const found = rows[0] as { has_table?: unknown; has_claim?: unknown; columns?: unknown } | undefined;
    const hasTable = found?.has_table === true;
    const columns = new Set(Array.isArray(found?.columns) ? (found.columns as unknown[]) : []);
    return {
      hasTable,
      hasClaim: found?.has_claim === true,
      missingColumns: hasTable ? ADDED_COLUMNS.filter((column) => !columns.has(column)).map((column) => `column ${names.schema}.${names.table}.${column}`) : [],
    };
  };
  /** What `verify()` names: the table, the columns a table of an earlier idemkit lacks, the claim function. */
  async function missingParts(): Promise<string[]> {
    const found = await schema('verify');
    const missing: string[] = [];
    if (!found.hasTable) missing.push(`table ${names.schema}.${names.table}`);
    missing.push(...found.missingColumns);
    if (!found.hasClaim) missing.push(`function ${names.schema}.${names.table}_claim`);
    return missing;
  }
  // An ORM's transaction (idemkit/kysely, …) carries the same fenced statements as `run` would.
  const through = (runner: StatementRunner): Pick<PostgresClient, 'query'> => ({
    query: async (text: string, values?: unknown[]) => ({ rows: [], rowCount: await runner(text, values ?? []) }) as PostgresQueryResult,
  });

  return {
    name: 'postgres',
    maxResponseBytes,
    [TRANSACTION_JOIN]: {
      dialect: 'postgres',
      complete: async (runner, ref, token, response) => complete(through(runner), ref, token, response),
      checkpoint: async (runner, ref, token, point, data) => checkpoint(through(runner), ref, token, point, data),
      enter: async () => () => {},
    },
    async migrate() {
      // What an existing table lacks, to report. (Two migrations at once may both report it.)
      const before = await schema('migrate');
      // One simple-protocol message: PostgreSQL runs its statements as one implicit transaction,
      // which holds the advisory lock to the end and rolls everything back on an error.
      await run(pool, 'migrate', sql.migrate);
      return before.hasTable ? before.missingColumns : [];
    },
    async verify() {
      const missing = await missingParts();
      if (missing.length > 0) throw new StoreSchemaMissingError('postgres', missing, MIGRATE_FIX);
    },
    async claim(ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
      checkPostgresRef(ref);
      const token = newOwnerToken();
      let rows: readonly unknown[];
      try {
        ({ rows } = await pool.query(sql.claim, [ref.scope, ref.key, fingerprint, token, o.leaseMs, o.windowMs]));
      } catch (error) {
        if ((error as { code?: unknown } | null)?.code === DATA_CORRUPTED) {
          throw new RowReader(ref, where, undefined).corrupt(String((error as Error).message).replace(CORRUPT_PREFIX, ''));
        }
        throw await failure('claim', error);
      }
      return toClaim(new RowReader(ref, where, rows[0] as ClaimRow | undefined), token);
    },
    async renew(ref, token, leaseMs) {
      checkPostgresRef(ref);
      const result = await run(leasePool, 'renew', sql.renew, [ref.scope, ref.key, token, leaseMs]);
      return result.rowCount === 1;
    },
    checkpoint: (ref, token, point, data) => checkpoint(pool, ref, token, point, data),
    complete: (ref, token, response) => complete(pool, ref, token, response),
    async release(ref, token) {
      checkPostgresRef(ref);
      await fenced(pool, 'release', sql.release, [ref.scope, ref.key, token]);
    },
    async get(ref) {
      checkPostgresRef(ref);
      const { rows } = await run(pool, 'get', sql.get, [ref.scope, ref.key]);
      const row = rows[0] as RecordRow | undefined;
      return row && toRecord(new RowReader(ref, where, row));
    },
    async reap(limit = 1000) {
      const batch = checkInteger('limit', limit, { default: 1000 });
      return (await run(pool, 'reap', sql.reap, [batch])).rowCount ?? 0;
    },
    async listAbandoned(limit = 100) {
      const batch = checkInteger('limit', limit, { default: 100, min: 1 });
      const { rows } = await run(pool, 'listAbandoned', sql.listAbandoned, [batch]);
      return (rows as Array<RecordRow & { scope: unknown; key: unknown }>).map((row) => {
        if (typeof row.scope !== 'string' || typeof row.key !== 'string') {
          throw new CorruptRecordError(`postgres store: a record in ${where} has a scope or key that is not text`);
        }
        return toRecord(new RowReader({ scope: row.scope, key: row.key }, where, row));
      });
    },
    admin: postgresAdmin(pool, names),
    async beginTransaction(): Promise<StoreTransaction<Client>> {
      let client: Client;
      try {
        client = (await pool.connect()) as Client;
      } catch (error) {
        throw unavailable('beginTransaction', where, error);
      }
      const held = holdClient(client);
      try {
        await client.query('BEGIN');
      } catch (error) {
        held.release(error);
        throw unavailable('beginTransaction', where, error);
      }
      let ended = false;
      const end = async (command: 'COMMIT' | 'ROLLBACK') => {
        // Only the first of commit/rollback runs: the engine may roll back after a failed commit.
        if (ended) return;
        ended = true;
        let result: PostgresQueryResult;
        try {
          result = await client.query(command);
        } catch (error) {
          // The connection's state is unknown: the pool must not hand it out again.
          held.release(error);
          throw unavailable(command.toLowerCase(), where, error);
        }
        held.release();
        if (command === 'COMMIT' && commitRolledBack(result)) throw rolledBackCommitError(`postgres store: commit on ${where}`);
      };
      // After commit or rollback the client is back in the pool, maybe inside another request's
      // transaction: a late statement must never run on it.
      const open = () => {
        if (ended) throw new TransactionEndedError(`postgres store: the transaction on ${where} has ended`);
        return client;
      };
      return {
        tx: client,
        complete: async (ref, token, response) => complete(open(), ref, token, response),
        checkpoint: async (ref, token, point, data) => checkpoint(open(), ref, token, point, data),
        commit: () => end('COMMIT'),
        rollback: () => end('ROLLBACK'),
      };
    },
  };
}

/**
 * A pg `Client` has `query` and `connect` too, but its `connect()` opens its one connection and
 * resolves nothing, so every claim would fail. A Client (and a PoolClient) carries
 * `connectionParameters`; a Pool does not, and structural pools have no reason to.
 */
function notAPgPool(value: object): string | undefined {
  const candidate = value as { connectionParameters?: unknown; totalCount?: unknown };
  if (typeof candidate.connectionParameters === 'object' && typeof candidate.totalCount !== 'number') {
    return 'this is a pg.Client (one connection); pass a pg.Pool (new pg.Pool(config)), which the store borrows connections from';
  }
  return undefined;
}

/** The fix a `StoreSchemaMissingError` names. */
const MIGRATE_FIX = '`await store.migrate()` or `idemkit migrate` (or apply sql/postgres.sql for the default names)';

const SCHEMA_SQL = `SELECT to_regclass($1) IS NOT NULL AS has_table,
  EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $2 AND p.proname = $3) AS has_claim,
  array(SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = ANY($4::text[]) AND NOT attisdropped) AS columns`;

function unavailable(operation: string, where: string, error: unknown): StoreUnavailableError {
  const hint = isMissingSchema(error) ? ' (run store.migrate() or sql/postgres.sql first)' : '';
  const message = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(`postgres store: ${operation} on ${where} failed: ${message}${hint}`, { cause: error });
}

function toClaim(row: RowReader<ClaimRow>, token: string): Claim {
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
      return { kind: 'in_flight', retryAfterMs: Math.max(1, row.integer('retry_after_ms')) };
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

function toRecord(row: RowReader<RecordRow>): IdempotencyRecord {
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
class RowReader<Row extends object> {
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
