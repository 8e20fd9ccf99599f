import { CorruptRecordError, LeaseLostError, StoreUnavailableError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import type { AbandonedRecords, AdministrableStore, Claim, ClaimOptions, IncarnationLeases, RecordRef, StoreTransaction, StoredResponse, TransactionalStore } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse } from '../../core/store.js';
import { checkIncarnation, newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import type { MysqlPool, MysqlPoolConnection, MysqlValue } from '../../drivers/mysql.js';
import { isDuplicateKey } from '../../drivers/mysql.js';
import type { JoinableStore } from '../shared/joined-transaction.js';
import { TRANSACTION_JOIN, joinedWrite } from '../shared/joined-transaction.js';
import { mysqlAdmin } from './admin.js';
import { Connections } from './connections.js';
import type { Row } from './record.js';
import { acquired, affectedRows, fingerprintParam, inFlight, parseResponse, parseRow, refParams, text, toRecord } from './record.js';
import { checkTable, statements } from './sql.js';
import { MysqlSchema } from './verify.js';

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
  /**
   * Where `verify()` warns that the in-flight index is missing (`{ warn, error }`: console, pino, …).
   * @default console
   */
  readonly logger?: IdempotencyLogger;
}

type ConnectionOf<P extends MysqlPool> = Awaited<ReturnType<P['getConnection']>>;

/** `Conn` is the pool's connection type, so the handler's `ctx.tx` keeps mysql2's full API. */
export interface MysqlStore<Conn = MysqlConnection> extends TransactionalStore<Conn>, JoinableStore, AbandonedRecords, IncarnationLeases, AdministrableStore {
  /**
   * Creates the table and its indexes if missing, and adds what a table of an earlier idemkit
   * lacks: the columns `created_at`, `updated_at` (its rows keep them NULL: unknown) and the
   * in-flight index (online: writes go on). Idempotent, and safe to run concurrently. Resolves to
   * what it added, as `column <table>.<name>` and `index <table>.in_flight`.
   */
  migrate(): Promise<string[]>;
  /**
   * Resolves when the table exists in the connection's database with every column this version
   * writes; otherwise rejects with `StoreSchemaMissingError` naming what is missing and
   * `await store.migrate()` (or `idemkit migrate`) as the fix. One round trip: call it at start-up
   * so a missing migration fails the deploy, not every request. (Without it, each request answers
   * 500 `store-schema-missing`, and the logger prints the same line once a minute.) A missing
   * in-flight index is one warning to `logger`, not a refusal: no statement fails without it,
   * only the completer's listing reads the whole table.
   */
  verify(): Promise<void>;
}

// A lost race (duplicate insert, changed revision) costs one more round; a claim that keeps
// losing for this many rounds reports the store as unavailable instead of spinning.
const CLAIM_ROUNDS = 5;
// No statement can carry more than the server's max_allowed_packet, which is at most 1 GiB.
const MAX_PACKET = 1024 * 1024 * 1024;

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
  const logger = opts.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger;
  opts.done();
  const sql = statements(table);
  const schema: MysqlSchema = new MysqlSchema((): Connections => db, table, logger);
  const db: Connections = new Connections(pool, timeoutMs, (what, error) => schema.failure(what, error));
  const leaseDb = leasePool === undefined ? db : new Connections(leasePool, timeoutMs, (what, error) => schema.failure(what, error));
  const s: MysqlState = { db, sql, table };

  const completeParams = (response: StoredResponse): MysqlValue[] => {
    const fitted = fitResponse(response, maxResponseBytes);
    const body = fitted.body === null ? null : Buffer.from(fitted.body.buffer, fitted.body.byteOffset, fitted.body.byteLength);
    return [fitted.status, JSON.stringify(fitted.headers), body, fitted.bodyOmitted ? 1 : 0];
  };
  const checkpointParams = (point: string, data: unknown): MysqlValue[] => [point, data === undefined ? null : JSON.stringify(data)];
  // Inside an ORM's transaction (idemkit/kysely, …).
  const where = `\`${table}\``;

  return {
    name: 'mysql',
    maxResponseBytes,
    [TRANSACTION_JOIN]: {
      dialect: 'mysql',
      complete: async (runner, ref, token, response) =>
        joinedWrite(runner, 'mysql', where, 'complete', sql.complete, [...completeParams(response), ...refParams(ref), token]),
      checkpoint: async (runner, ref, token, point, data) =>
        joinedWrite(runner, 'mysql', where, 'checkpoint', sql.checkpoint, [...checkpointParams(point, data), ...refParams(ref), token]),
      enter: async () => () => {},
    },
    migrate: () => schema.migrate(),
    verify: () => schema.verify(),
    claim: (ref, fp, o) => claimRecord(s, ref, fp, o),
    async renew(ref, token, leaseMs) {
      const { result } = await leaseDb.run('renew', sql.renew, [leaseMs, ...refParams(ref), token]);
      return affectedRows(result) === 1;
    },
    async checkpoint(ref, token, point, data) {
      await fenced(s, 'checkpoint', sql.checkpoint, [...checkpointParams(point, data), ...refParams(ref), token]);
    },
    async complete(ref, token, response) {
      const id = refParams(ref);
      await fenced(s, 'complete', sql.complete, [...completeParams(response), ...id, token], async () => {
        const row = await readRow(s, ref, id);
        return row?.state === 'completed' && row.token === token;
      });
    },
    async release(ref, token) {
      const id = refParams(ref);
      await fenced(s, 'release', sql.release, [...id, token], async () => (await readRow(s, ref, id)) === undefined);
    },
    async get(ref) {
      const row = await readRow(s, ref, refParams(ref));
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
    async endLeasesOf(incarnation) {
      checkIncarnation(incarnation);
      return affectedRows((await db.run('endLeasesOf', sql.endLeasesOf, [incarnation])).result);
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

/** What the operations below share. */
interface MysqlState {
  readonly db: Connections;
  readonly sql: ReturnType<typeof statements>;
  readonly table: string;
}

async function readRow(s: MysqlState, ref: RecordRef, id: Buffer[]): Promise<Row | undefined> {
  const { result } = await s.db.run('read', s.sql.read, id);
  const rows = result as Array<Record<string, unknown>>;
  return rows.length === 0 ? undefined : parseRow(ref, s.table, rows[0]!);
}

/** True when the conditional write won; false when another claim got there first. */
async function write(s: MysqlState, what: string, statement: string, values: MysqlValue[]): Promise<boolean> {
  try {
    return affectedRows((await s.db.run(what, statement, values)).result) === 1;
  } catch (error) {
    if (isDuplicateKey(error)) return false;
    throw error;
  }
}

async function claimRecord(s: MysqlState, ref: RecordRef, fp: string, o: ClaimOptions): Promise<Claim> {
  const { sql, table } = s;
  const id = refParams(ref);
  const fpBytes = fingerprintParam(fp);
  const token = newOwnerToken(o.incarnation);
  for (let round = 0; round < CLAIM_ROUNDS; round++) {
    const row = await readRow(s, ref, id);
    // Our write landed although its answer was lost with the connection: it is ours.
    if (row?.token === token) return acquired(ref, table, token, row);
    if (!row) {
      if (await write(s, 'claim', sql.insert, [...id, fpBytes, token, o.leaseMs, o.windowMs])) {
        return { kind: 'acquired', token, takeover: false };
      }
    } else if (row.expired) {
      if (await write(s, 'claim', sql.replace, [fpBytes, token, o.leaseMs, o.windowMs, ...id, row.revision])) {
        return { kind: 'acquired', token, takeover: false };
      }
    } else if (row.fingerprint !== fp) {
      return { kind: 'mismatch' };
    } else if (row.state === 'completed') {
      return { kind: 'completed', response: parseResponse(ref, table, row.raw) };
    } else if (row.leaseUntil > row.now) {
      return inFlight(ref, table, row);
    } else if (await write(s, 'claim', sql.takeover, [token, o.leaseMs, ...id, row.revision, fpBytes])) {
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
async function fenced(s: MysqlState, what: string, statement: string, values: MysqlValue[], applied?: () => Promise<boolean>) {
  const { result, ambiguous } = await s.db.run(what, statement, values);
  if (affectedRows(result) === 1) return;
  if (ambiguous && applied && (await applied())) return;
  throw new LeaseLostError();
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
