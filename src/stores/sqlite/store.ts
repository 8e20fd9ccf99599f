import { EXPLAIN_LATE } from '../../core/deadlines.js';
import { CorruptRecordError, StoreUnavailableError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import type { AbandonedRecords, AdministrableStore, Claim, ClaimOptions, Clock, IncarnationLeases, RecordRef, TransactionalStore } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, systemClock } from '../../core/store.js';
import { checkIncarnation, newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import type { SqliteDatabase } from '../../drivers/sqlite.js';
import { sqliteDriver } from '../../drivers/sqlite.js';
import type { JoinableStore } from '../shared/joined-transaction.js';
import { TRANSACTION_JOIN, joinedWrite } from '../shared/joined-transaction.js';
import { sqliteAdmin } from './admin.js';
import { isExpired, readRow, recovery, toRecord, toResponse } from './record.js';
import type { SqliteStatements } from './sql.js';
import { IDENTIFIER, checkpointParams, completeParams, fenced, migrateTable, sqliteStatements } from './sql.js';
import { SqliteTransactions } from './transaction.js';
import { verifySqlite } from './verify.js';
import { SqliteWriter } from './writer.js';

export interface SqliteStoreOptions<DB extends SqliteDatabase = SqliteDatabase> {
  /**
   * The Database, opened by the caller: better-sqlite3's, `node:sqlite`'s `DatabaseSync` (Node
   * 22.5+) or `bun:sqlite`'s (Bun). Required.
   */
  readonly database: DB;
  /**
   * Table for the records; created if missing, with its indexes `<table>_expires_at` and
   * `<table>_in_flight`.
   * @default 'idempotency_records'
   */
  readonly table?: string;
  /**
   * Set WAL mode, `synchronous = NORMAL` and a busy timeout, so several processes can share the file.
   * @default true
   */
  readonly configure?: boolean;
  /**
   * How long a statement waits for another process's write lock, in ms (only with `configure`).
   * @default 5_000
   */
  readonly busyTimeoutMs?: number;
  /** @default 1_048_576 */
  readonly maxResponseBytes?: number;
  /**
   * The store's clock. Every process on one file shares the host clock, so Date.now is the store clock.
   * @default Date.now
   */
  readonly clock?: Clock;
  /**
   * Opens the connection of the store's own that transactions run on (transactional mode's
   * `ctx.tx`, `ctx.beginTransaction()`), so no statement sent through `database` can join one.
   * Called once, on the first transaction; `store.close()` closes what it returned.
   * @default the file of `database`, opened again with the same constructor and `busyTimeoutMs`
   */
  readonly open?: () => DB;
  /**
   * Where `verify()` warns that the in-flight index is missing (`{ warn, error }`: console, pino, …).
   * @default console
   */
  readonly logger?: IdempotencyLogger;
}

/** `DB` is the caller's database type, so the handler's `ctx.tx` keeps the driver's full API. */
export interface SqliteStore<DB extends SqliteDatabase = SqliteDatabase> extends TransactionalStore<DB>, JoinableStore, AbandonedRecords, IncarnationLeases, AdministrableStore {
  /**
   * Creates the table and its indexes if missing, and adds what a table made by an earlier
   * idemkit lacks: the columns `created_at`, `updated_at` (its rows keep them empty: unknown) and
   * the in-flight index. Run by the factory too. Returns what it added to an existing table, as
   * `column <table>.<name>` and `index <table>_in_flight`.
   */
  migrate(): string[];
  /**
   * Checks that the table is there with every column the store uses; throws
   * `StoreSchemaMissingError` naming what is missing and `store.migrate()` as the fix. A missing
   * in-flight index is one warning to `logger`, not a refusal (only the completer's listing slows).
   */
  verify(): Promise<void>;
  /**
   * Runs `fn(database)` once no transaction of this process is open on the file (the store's, or
   * an `idemkit/patterns` executor's over `database`): the way to write through `database` outside
   * a request while transactional requests run. A synchronous better-sqlite3 call made directly
   * instead, while a transaction is open, fails at once with SQLITE_BUSY (the file has one writer)
   * and never joins the transaction. Only the synchronous part of `fn` is covered.
   */
  exclusive<T>(fn: (database: DB) => T): Promise<T>;
  /** Throws when transactions cannot be opened as configured (an in-memory `database` without `open`). */
  checkTransactions(): void;
  /** Closes the store's own transaction connection, if it was opened. `database` stays the caller's to close. */
  close(): void;
}

/**
 * The embedded store on SQLite (better-sqlite3, node:sqlite, bun:sqlite). Each claim decision is one atomic upsert; a replay is one
 * indexed read. Transactions run on a connection of the store's own (`open`), never on `database`:
 * a statement sent on a connection inside a transaction joins it, so the app's writes through
 * `database` could otherwise commit or roll back with a request's. The file has one writer at a
 * time, so in-process work through `database` (the store's own statements, idemkit executors,
 * `exclusive`) is queued behind an open transaction instead of waiting on the file lock, which
 * better-sqlite3 does synchronously, stalling the event loop that would end the transaction.
 */
export function sqliteStore<DB extends SqliteDatabase>(options: SqliteStoreOptions<DB>): SqliteStore<DB> {
  const read = optionReader('sqliteStore()', options);
  const db = read.driver('database', ['prepare', 'exec'], 'a SQLite Database (better-sqlite3, node:sqlite DatabaseSync, bun:sqlite Database)');
  const table = read.value('table') ?? 'idempotency_records';
  if (!IDENTIFIER.test(table)) read.fail('table', 'expected a plain SQL identifier');
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  const busyTimeoutMs = read.integer('busyTimeoutMs', { default: 5_000 });
  const now = read.function('clock', { default: systemClock, expected: 'a function returning epoch ms' });
  const configure = read.boolean('configure', { default: true });
  const open = read.function('open', { expected: 'a function returning a new Database on the same file' });
  const logger = read.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger;
  read.done();
  const driver = sqliteDriver(db);
  if (configure) {
    driver.exec('PRAGMA journal_mode = WAL');
    driver.exec('PRAGMA synchronous = NORMAL');
    driver.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
  }
  const migrate = () => migrateTable(db, table);
  migrate();
  const sql = sqliteStatements(db, table);
  const writer = new SqliteWriter(db, now, busyTimeoutMs, configure);
  const transactions = new SqliteTransactions({ db, open, configure, busyTimeoutMs, maxResponseBytes, now, sql, writer });

  /** Runs `fn` through the gate once `ref` is known to be storable: a refused ref rejects, never throws. */
  const gated = <T>(ref: RecordRef, operation: string, fn: () => T): Promise<T> =>
    writer.run(() => {
      checkRecordRef(ref);
      try {
        return fn();
      } catch (error) {
        throw writer.busyElsewhere(operation, error);
      }
    });
  const claimNow = (ref: RecordRef, fp: string, o: ClaimOptions) => claimRecord(sql, table, now, ref, fp, o);

  const store: SqliteStore<DB> = {
    name: 'sqlite',
    maxResponseBytes,
    [TRANSACTION_JOIN]: {
      dialect: 'sqlite',
      complete: async (runner, ref, token, response) => {
        checkRecordRef(ref);
        const p = completeParams(ref, token, response, maxResponseBytes, now());
        await joinedWrite(runner, 'sqlite', table, 'complete', sql.completePositional, [p.status, p.headers, p.body, p.omitted, p.now, p.scope, p.key, p.token]);
      },
      checkpoint: async (runner, ref, token, point, data) => {
        checkRecordRef(ref);
        const p = checkpointParams(ref, token, point, data, now());
        await joinedWrite(runner, 'sqlite', table, 'checkpoint', sql.checkpointPositional, [p.point, p.data, p.now, p.scope, p.key, p.token]);
      },
      enter: () => transactions.enterJoined(),
    },
    migrate,
    verify: () => verifySqlite(writer, sql, table, logger),
    exclusive: (fn) => writer.run(() => fn(db)),
    checkTransactions: () => transactions.check(),
    close: () => transactions.close(),
    claim: (ref, fp, o) => gated(ref, 'claim', () => claimNow(ref, fp, o)),
    renew: (ref, token, leaseMs) => gated(ref, 'renew', () => sql.renew.run({ scope: ref.scope, key: ref.key, token, now: now(), lease: leaseMs }).changes === 1),
    checkpoint: (ref, token, point, data) => gated(ref, 'checkpoint', () => fenced(sql.checkpoint, checkpointParams(ref, token, point, data, now()))),
    complete: (ref, token, response) => gated(ref, 'complete', () => fenced(sql.complete, completeParams(ref, token, response, maxResponseBytes, now()))),
    release: (ref, token) => gated(ref, 'release', () => fenced(sql.release, { scope: ref.scope, key: ref.key, token })),
    get: (ref) => gated(ref, 'get', () => toRecord(ref, table, readRow(ref, table, sql.selectRecord.get(ref)))),
    reap: (limit = 1000) => writer.run(() => sql.reap.run({ now: now(), limit }).changes),
    admin: sqliteAdmin(db, table, now),
    async endLeasesOf(incarnation) {
      checkIncarnation(incarnation);
      return writer.run(() => sql.endLeasesOf.run({ now: now(), incarnation }).changes);
    },
    async listAbandoned(limit = 100) {
      const max = checkInteger('limit', limit, { default: 100, min: 1 });
      const rows = await writer.run(() => sql.abandoned.all({ now: now(), limit: max }) as Array<Record<string, unknown>>);
      return rows.map((raw) => {
        const { scope, key } = raw;
        if (typeof scope !== 'string' || typeof key !== 'string') throw new CorruptRecordError(`sqlite store: a record in ${table} has a scope or key that is not text`);
        const ref = { scope, key };
        return toRecord(ref, table, readRow(ref, table, raw))!;
      });
    },
    beginTransaction: () => transactions.begin(),
  };
  // Kept off the documented type: the engine finds it by its symbol (deadlines.ts).
  return Object.assign(store, { [EXPLAIN_LATE]: (operation: string, limitMs: number) => writer.explainLate(operation, limitMs) });
}

/** One claim decision: read, then the upsert, classified again when another process won the race. */
function claimRecord(sql: SqliteStatements, table: string, now: () => number, ref: RecordRef, fp: string, o: ClaimOptions): Claim {
  for (let attempt = 0; attempt < 3; attempt++) {
    const time = now();
    const row = readRow(ref, table, sql.select.get(ref));
    if (row && !isExpired(row, time)) {
      if (row.fingerprint !== fp) return { kind: 'mismatch' };
      if (row.state === 'completed') return { kind: 'completed', response: toResponse(ref, table, row) };
      if (row.lease_until > time) {
        return { kind: 'in_flight', retryAfterMs: row.lease_until - time, renewedMsAgo: row.updated_at === null ? undefined : Math.max(0, time - row.updated_at) };
      }
    }
    const token = newOwnerToken(o.incarnation);
    const won = sql.upsert.get({ scope: ref.scope, key: ref.key, fp, token, now: time, lease: o.leaseMs, window: o.windowMs }) as
      | { attempt: unknown; recovery_point: unknown; recovery_data: unknown }
      | undefined;
    if (won) {
      const { resumeFrom, recoveryData } = recovery(ref, table, won);
      return { kind: 'acquired', token, takeover: Number(won.attempt) > 1, resumeFrom, recoveryData };
    }
    // Another process changed the record between the read and the upsert: classify again.
  }
  throw new StoreUnavailableError('sqlite store: claim kept racing with other writers');
}
