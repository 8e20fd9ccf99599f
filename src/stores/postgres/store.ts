import { CorruptRecordError, LeaseLostError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import type { AbandonedRecords, AdministrableStore, Claim, ClaimOptions, IncarnationLeases, RecordRef, StoreTransaction, StoredResponse, TransactionalStore } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse } from '../../core/store.js';
import { checkIncarnation, newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import type { PostgresClient, PostgresPool, PostgresQueryResult } from '../../drivers/postgres.js';
import type { JoinableStore, StatementRunner } from '../shared/joined-transaction.js';
import { TRANSACTION_JOIN } from '../shared/joined-transaction.js';
import { postgresAdmin } from './admin.js';
import type { ClaimRow, RecordRow } from './record.js';
import { RowReader, toClaim, toRecord } from './record.js';
import { CORRUPT_PREFIX, DATA_CORRUPTED, checkPostgresRef, postgresStatements, resolveNames } from './sql.js';
import { beginTransaction } from './transaction.js';
import { PostgresSchema } from './verify.js';

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
   * function is `<table>_claim`, the indexes `<table>_expires_at` and `<table>_in_flight`.
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
  /**
   * Where `verify()` warns that the in-flight index is missing (`{ warn, error }`: console, pino, …).
   * @default console
   */
  readonly logger?: IdempotencyLogger;
}

/** `Client` is the pool's client type, so the handler's `ctx.tx` keeps the driver's full API. */
export interface PostgresStore<Client extends PostgresClient = PostgresClient> extends TransactionalStore<Client>, JoinableStore, AbandonedRecords, IncarnationLeases, AdministrableStore {
  /**
   * Creates the table, its indexes and the claim function if missing, adds the columns a
   * table of an earlier idemkit lacks (`created_at`, `updated_at`; its rows keep them NULL:
   * unknown) and the in-flight index, and replaces the claim function with this version's (the
   * text of `sql/postgres.sql` for the default names). Idempotent; safe from several processes at
   * once. Resolves to what it found missing from an existing table, as
   * `column <schema>.<table>.<name>` and `index <schema>.<table>_in_flight`.
   */
  migrate(): Promise<string[]>;
  /**
   * Resolves when the table (with every column this version writes) and its claim function
   * exist; otherwise rejects with `StoreSchemaMissingError` naming what is missing and
   * `await store.migrate()` (or `idemkit migrate`) as the fix. One round trip: call it at start-up
   * so a missing migration fails the deploy, not every request. (Without it, each request answers
   * 500 `store-schema-missing`, and the logger prints the same line once a minute.) A missing or
   * invalid in-flight index is one warning to `logger`, not a refusal: no statement fails without
   * it, only the completer's listing reads the whole table.
   */
  verify(): Promise<void>;
}

const MAX_RESPONSE_BYTES = 512 * 1024 * 1024;

type Queryable = Pick<PostgresClient, 'query'>;

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
  const logger = read.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger;
  read.done();
  const sql = postgresStatements(names);
  const where = `"${names.schema}"."${names.table}"`;
  const schema = new PostgresSchema(pool, names, where, logger);

  /**
   * Runs one statement; a driver error becomes StoreUnavailableError naming the operation, or
   * StoreSchemaMissingError when the schema is not there (see `PostgresSchema.failure`).
   */
  async function run(db: Queryable, operation: string, text: string, values?: unknown[]) {
    try {
      return await db.query(text, values);
    } catch (error) {
      throw await schema.failure(operation, error);
    }
  }
  async function fenced(db: Queryable, operation: string, text: string, values: unknown[]) {
    const result = await run(db, operation, text, values);
    if (result.rowCount !== 1) throw new LeaseLostError();
  }
  // Every operation that takes a ref checks it first: `pg` would send a lone surrogate as U+FFFD,
  // so two different scopes would share one record, and the server refuses NUL. In an async
  // function, a refusal rejects.
  const writes = {
    async complete(db: Queryable, ref: RecordRef, token: string, response: StoredResponse) {
      checkPostgresRef(ref);
      const fitted = fitResponse(response, maxResponseBytes);
      const body = fitted.body && Buffer.from(fitted.body.buffer, fitted.body.byteOffset, fitted.body.byteLength);
      await fenced(db, 'complete', sql.complete, [ref.scope, ref.key, token, fitted.status, JSON.stringify(fitted.headers), body, fitted.bodyOmitted]);
    },
    async checkpoint(db: Queryable, ref: RecordRef, token: string, point: string, data: unknown) {
      checkPostgresRef(ref);
      await fenced(db, 'checkpoint', sql.checkpoint, [ref.scope, ref.key, token, point, data === undefined ? null : JSON.stringify(data)]);
    },
  };
  // An ORM's transaction (idemkit/kysely, …) carries the same fenced statements as `run` would.
  const through = (runner: StatementRunner): Queryable => ({
    query: async (text: string, values?: unknown[]) => ({ rows: [], rowCount: await runner(text, values ?? []) }) as PostgresQueryResult,
  });

  return {
    name: 'postgres',
    maxResponseBytes,
    [TRANSACTION_JOIN]: {
      dialect: 'postgres',
      complete: async (runner, ref, token, response) => writes.complete(through(runner), ref, token, response),
      checkpoint: async (runner, ref, token, point, data) => writes.checkpoint(through(runner), ref, token, point, data),
      enter: async () => () => {},
    },
    migrate: () => schema.migrate(() => run(pool, 'migrate', sql.migrate)),
    verify: () => schema.verify(),
    async claim(ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
      checkPostgresRef(ref);
      const token = newOwnerToken(o.incarnation);
      let rows: readonly unknown[];
      try {
        ({ rows } = await pool.query(sql.claim, [ref.scope, ref.key, fingerprint, token, o.leaseMs, o.windowMs]));
      } catch (error) {
        if ((error as { code?: unknown } | null)?.code === DATA_CORRUPTED) {
          throw new RowReader(ref, where, undefined).corrupt(String((error as Error).message).replace(CORRUPT_PREFIX, ''));
        }
        throw await schema.failure('claim', error);
      }
      return toClaim(new RowReader(ref, where, rows[0] as ClaimRow | undefined), token);
    },
    async renew(ref, token, leaseMs) {
      checkPostgresRef(ref);
      const result = await run(leasePool, 'renew', sql.renew, [ref.scope, ref.key, token, leaseMs]);
      return result.rowCount === 1;
    },
    checkpoint: (ref, token, point, data) => writes.checkpoint(pool, ref, token, point, data),
    complete: (ref, token, response) => writes.complete(pool, ref, token, response),
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
    async endLeasesOf(incarnation) {
      checkIncarnation(incarnation);
      return (await run(pool, 'endLeasesOf', sql.endLeasesOf, [incarnation])).rowCount ?? 0;
    },
    admin: postgresAdmin(pool, names),
    beginTransaction: (): Promise<StoreTransaction<Client>> => beginTransaction<Client>(pool, where, writes),
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
