import { EXPLAIN_LATE } from '../../core/deadlines.js';
import { CorruptRecordError, InvalidOptionError, LeaseLostError, StoreBusyError, StoreSchemaMissingError, StoreUnavailableError } from '../../core/errors.js';
import type {
  AbandonedRecords,
  AdministrableStore,
  Claim,
  ClaimOptions,
  Clock,
  IdempotencyRecord,
  RecordRef,
  StoreTransaction,
  StoredResponse,
  TransactionalStore,
} from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse, systemClock } from '../../core/store.js';
import { newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import { gateFor } from '../../drivers/connection-gate.js';
import type { SqliteDatabase, SqliteStatement } from '../../drivers/sqlite.js';
import { BEGIN } from '../../drivers/sqlite.js';
import type { JoinableStore, StatementRunner } from '../shared/joined-transaction.js';
import { TRANSACTION_JOIN } from '../shared/joined-transaction.js';
import { sqliteAdmin } from './admin.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';

export interface SqliteStoreOptions<DB extends SqliteDatabase = SqliteDatabase> {
  /** A better-sqlite3 Database, opened by the caller. Required. */
  readonly database: DB;
  /**
   * Table for the records; created if missing.
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
}

/** `DB` is the caller's database type, so the handler's `ctx.tx` keeps the driver's full API. */
export interface SqliteStore<DB extends SqliteDatabase = SqliteDatabase> extends TransactionalStore<DB>, JoinableStore, AbandonedRecords, AdministrableStore {
  /**
   * Creates the table and its expiry index if missing, and adds the columns a table made by an
   * earlier idemkit lacks (`created_at`, `updated_at`; its rows keep them empty: unknown). Run by
   * the factory too. Returns what it added to an existing table, as `column <table>.<name>`.
   */
  migrate(): string[];
  /**
   * Checks that the table is there with every column the store uses; throws
   * `StoreSchemaMissingError` naming what is missing and `store.migrate()` as the fix.
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

interface Row {
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

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
// A record is gone for every purpose once its window has passed and no live lease holds it.
const EXPIRED = (t: string) => `(${t}.expires_at <= @now AND (${t}.state = 'completed' OR ${t}.lease_until <= @now))`;

/** The columns the statements below read or write, for `verify()`. */
const COLUMNS = [
  'scope', 'key', 'fingerprint', 'state', 'token', 'attempt', 'lease_until', 'expires_at',
  'recovery_point', 'recovery_data', 'status', 'headers', 'body', 'body_omitted', 'created_at', 'updated_at',
] as const;

/**
 * Columns added after the first schema, with their definitions: `migrate()` adds those a table
 * lacks. Nullable, so the rows already there stay valid (their time is unknown, never 1970).
 */
const ADDED_COLUMNS = [
  ['created_at', 'INTEGER'],
  ['updated_at', 'INTEGER'],
] as const;

/**
 * The embedded store on better-sqlite3. Each claim decision is one atomic upsert; a replay is one
 * indexed read. Transactions run on a connection of the store's own (`open`), never on `database`:
 * a statement sent on a connection inside a transaction joins it, so the app's writes through
 * `database` could otherwise commit or roll back with a request's. The file has one writer at a
 * time, so in-process work through `database` (the store's own statements, idemkit executors,
 * `exclusive`) is queued behind an open transaction instead of waiting on the file lock, which
 * better-sqlite3 does synchronously, stalling the event loop that would end the transaction.
 */
export function sqliteStore<DB extends SqliteDatabase>(options: SqliteStoreOptions<DB>): SqliteStore<DB> {
  const read = optionReader('sqliteStore()', options);
  const db = read.driver('database', ['prepare'], 'a better-sqlite3 Database');
  const table = read.value('table') ?? 'idempotency_records';
  if (!IDENTIFIER.test(table)) read.fail('table', 'expected a plain SQL identifier');
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  const busyTimeoutMs = read.integer('busyTimeoutMs', { default: 5_000 });
  const now = read.function('clock', { default: systemClock, expected: 'a function returning epoch ms' });
  const configure = read.boolean('configure', { default: true });
  const open = read.function('open', { expected: 'a function returning a new better-sqlite3 Database on the same file' });
  read.done();
  if (configure) {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  }

  const columnNames = () => new Set((db.prepare(`SELECT name FROM pragma_table_info('${table}')`).all() as Array<{ name: string }>).map((c) => c.name));
  const migrate = (): string[] => {
    db.exec(`CREATE TABLE IF NOT EXISTS ${table} (
      scope TEXT NOT NULL,
      key TEXT NOT NULL,
      fingerprint TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
      token TEXT NOT NULL,
      attempt INTEGER NOT NULL,
      lease_until INTEGER NOT NULL,
      expires_at INTEGER NOT NULL,
      recovery_point TEXT,
      recovery_data TEXT,
      status INTEGER,
      headers TEXT,
      body BLOB,
      body_omitted INTEGER NOT NULL DEFAULT 0,
      created_at INTEGER,
      updated_at INTEGER,
      PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS ${table}_expires_at ON ${table} (expires_at);`);
    const added: string[] = [];
    for (const [column, type] of ADDED_COLUMNS) {
      if (columnNames().has(column)) continue;
      try {
        db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
        added.push(`column ${table}.${column}`);
      } catch (error) {
        // Another process added it between the look and the ALTER: nothing left to do.
        if (!columnNames().has(column)) throw error;
      }
    }
    return added;
  };
  migrate();

  const t = table;
  const select = db.prepare(
    `SELECT state, fingerprint, lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted
       FROM ${t} WHERE scope = @scope AND key = @key`,
  );
  // The same read with the record's times, for `get` (a claim decides without them).
  const selectRecord = db.prepare(
    `SELECT state, fingerprint, lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted,
            created_at, updated_at
       FROM ${t} WHERE scope = @scope AND key = @key`,
  );
  // The claim decision: insert, or take over an expired record / an expired lease of the same
  // request, all in one statement. RETURNING is empty when the existing record stands.
  const upsert = db.prepare(
    `INSERT INTO ${t} (scope, key, fingerprint, state, token, attempt, lease_until, expires_at, created_at, updated_at)
     VALUES (@scope, @key, @fp, 'in_flight', @token, 1, @now + @lease, @now + @window, @now, @now)
     ON CONFLICT (scope, key) DO UPDATE SET
       token = excluded.token,
       lease_until = excluded.lease_until,
       updated_at = excluded.updated_at,
       -- A take-over keeps the request's creation time; past its window the record starts anew.
       created_at = CASE WHEN ${EXPIRED(t)} THEN excluded.created_at ELSE ${t}.created_at END,
       attempt = CASE WHEN ${EXPIRED(t)} THEN 1 ELSE ${t}.attempt + 1 END,
       recovery_point = CASE WHEN ${EXPIRED(t)} THEN NULL ELSE ${t}.recovery_point END,
       recovery_data = CASE WHEN ${EXPIRED(t)} THEN NULL ELSE ${t}.recovery_data END,
       expires_at = CASE WHEN ${EXPIRED(t)} THEN excluded.expires_at ELSE ${t}.expires_at END,
       fingerprint = excluded.fingerprint,
       state = 'in_flight', status = NULL, headers = NULL, body = NULL, body_omitted = 0
     WHERE ${EXPIRED(t)}
        OR (${t}.state = 'in_flight' AND ${t}.lease_until <= @now AND ${t}.fingerprint = excluded.fingerprint)
     RETURNING attempt, recovery_point, recovery_data`,
  );
  const renew = db.prepare(
    `UPDATE ${t} SET lease_until = @now + @lease, updated_at = @now
      WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`,
  );
  const checkpointSql = `UPDATE ${t} SET recovery_point = @point, recovery_data = @data, updated_at = @now
      WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`;
  const completeSql = `UPDATE ${t} SET state = 'completed', status = @status, headers = @headers, body = @body, body_omitted = @omitted,
      updated_at = @now
      WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`;
  // The same two writes with positional parameters, for an ORM's transaction (idemkit/kysely, …).
  const checkpointPositional = `UPDATE ${t} SET recovery_point = ?, recovery_data = ?, updated_at = ?
      WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'`;
  const completePositional = `UPDATE ${t} SET state = 'completed', status = ?, headers = ?, body = ?, body_omitted = ?, updated_at = ?
      WHERE scope = ? AND key = ? AND token = ? AND state = 'in_flight'`;
  const checkpoint = db.prepare(checkpointSql);
  const complete = db.prepare(completeSql);
  const release = db.prepare(`DELETE FROM ${t} WHERE scope = @scope AND key = @key AND token = @token AND state = 'in_flight'`);
  const reap = db.prepare(
    `DELETE FROM ${t} WHERE (scope, key) IN (SELECT scope, key FROM ${t} WHERE ${EXPIRED(t)} LIMIT @limit)`,
  );

  // Shared with every SQL executor on this Database (idemkit/patterns), so none joins another's transaction.
  // For a completer: owners gone, windows still open, oldest lease first (a scan of in-flight rows).
  const abandoned = db.prepare(
    `SELECT scope, key, state, fingerprint, lease_until, expires_at, recovery_point, recovery_data, status, headers, body, body_omitted,
            created_at, updated_at
       FROM ${t} WHERE state = 'in_flight' AND lease_until <= @now AND expires_at > @now ORDER BY lease_until LIMIT @limit`,
  );
  const columns = db.prepare(`SELECT name FROM pragma_table_info('${t}')`);
  const gate = gateFor(db);

  /**
   * The transaction of this store that holds the file's writer in this process, since when (store
   * clock), and what it is: for the `store-busy` answer to an operation queued behind it.
   */
  let writer: { since: number; what: string } | undefined;
  /** This store's operations waiting at the gate, behind an open transaction. */
  let waiting = 0;
  const queue = {
    run<T>(fn: () => T | PromiseLike<T>): Promise<T> {
      waiting++;
      return gate.run(() => {
        waiting--;
        return fn();
      });
    },
    async lock(): Promise<() => void> {
      waiting++;
      try {
        return await gate.lock();
      } finally {
        waiting--;
      }
    },
  };
  /**
   * An operation queued behind an open transaction missed the middleware's `storeTimeoutMs`: the
   * writer is busy. Retry-After is as long again as the holder has held the writer so far (nothing
   * else is known of how long it will run; at least 1 s). The message stays the same from one
   * request to the next, so the logger's once-a-minute limit holds.
   */
  const explainLate = (operation: string, limitMs: number): StoreBusyError | undefined => {
    if (waiting === 0) return undefined;
    const holder = writer === undefined ? "a transaction on the same Database that is not this store's (an idemkit/patterns executor's, or another sqlite store's)" : writer.what;
    const heldMs = writer === undefined ? limitMs : Math.max(0, now() - writer.since);
    return new StoreBusyError(
      `sqlite store: the SQLite writer is busy: ${operation} waited longer than \`storeTimeoutMs\` (${limitMs} ms) behind ${holder}, which holds the file's one write lock. Transactions on one SQLite file run one at a time: keep each one short, raise \`storeTimeoutMs\` above the longest wait, or use PostgreSQL or MySQL for long transactional handlers (docs/stores/sqlite.md, "The one-writer limit")`,
      Math.max(1_000, heldMs),
    );
  };
  /** SQLITE_BUSY: another connection (another process, or a Database of the app's own) held the write lock for the whole busy timeout. */
  const busyElsewhere = (operation: string, error: unknown): unknown => {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code !== 'string' || !code.startsWith('SQLITE_BUSY')) return error;
    return new StoreBusyError(
      `sqlite store: the SQLite writer is busy: ${operation} waited its busy timeout (\`busyTimeoutMs\`${configure ? `, ${busyTimeoutMs} ms` : ''}) for the file's write lock, held by another connection (another process on the file, or a Database of your own); keep transactions short in every process on the file, or raise \`busyTimeoutMs\` (the wait blocks the event loop)`,
      Math.max(1_000, busyTimeoutMs),
      { cause: error },
    );
  };

  /** The file `database` is on; undefined for an in-memory or temporary database. */
  const fileOf = (): string | undefined => {
    const list = db.pragma('database_list') as Array<{ name: string; file: string }> | undefined;
    const main = Array.isArray(list) ? list.find((entry) => entry.name === 'main') : undefined;
    return main?.file ? main.file : undefined;
  };
  const checkTransactions = () => {
    if (open === undefined && fileOf() === undefined) {
      throw new InvalidOptionError(
        'database',
        'transactions run on a second connection the sqlite store opens to the same file (so that no statement sent through `database` can join them), and an in-memory or temporary database cannot be opened twice; open the Database on a file (a temporary file in tests)',
      );
    }
  };
  // The store's own connection for transactions, opened on the first one.
  let own: { conn: DB; complete: SqliteStatement; checkpoint: SqliteStatement } | undefined;
  const ownConnection = () => {
    if (own) return own;
    checkTransactions();
    let conn: DB;
    try {
      conn = open ? open() : new (db.constructor as new (file: string, o: { timeout: number }) => DB)(fileOf()!, { timeout: busyTimeoutMs });
    } catch (error) {
      throw new StoreUnavailableError('sqlite store: could not open its transaction connection (the `open` option opens it)', { cause: error });
    }
    if (conn === (db as unknown) || typeof conn?.prepare !== 'function') {
      throw new InvalidOptionError('open', 'expected a function returning a new better-sqlite3 Database on the same file, not `database` itself');
    }
    if (configure) {
      conn.pragma('synchronous = NORMAL');
      conn.pragma(`busy_timeout = ${busyTimeoutMs}`);
    }
    own = { conn, complete: conn.prepare(completeSql), checkpoint: conn.prepare(checkpointSql) };
    return own;
  };
  /**
   * While a transaction holds the file, a write through `database` can only fail: this thread
   * holds the lock it would wait for. Its busy timeout goes to 0 meanwhile, so it fails at once
   * (SQLITE_BUSY) instead of blocking the event loop for the whole timeout first.
   */
  const failFastWhileOpen = (): (() => void) => {
    const before = db.pragma('busy_timeout', { simple: true });
    db.pragma('busy_timeout = 0');
    return () => {
      try {
        db.pragma(`busy_timeout = ${Number(before)}`);
      } catch {
        // `database` was closed meanwhile: nothing to restore.
      }
    };
  };

  const fenced = (stmt: SqliteStatement, params: object) => {
    if (stmt.run(params).changes !== 1) throw new LeaseLostError();
  };
  const completeParams = (ref: RecordRef, token: string, response: StoredResponse) => {
    const fitted = fitResponse(response, maxResponseBytes);
    // Each parameter by name: `{ ...ref, more }` costs microseconds on Node 20 (docs/performance.md).
    return {
      scope: ref.scope,
      key: ref.key,
      token,
      status: fitted.status,
      headers: JSON.stringify(fitted.headers),
      body: fitted.body === null ? null : Buffer.from(fitted.body.buffer, fitted.body.byteOffset, fitted.body.byteLength),
      omitted: fitted.bodyOmitted ? 1 : 0,
      now: now(),
    };
  };
  const checkpointParams = (ref: RecordRef, token: string, point: string, data: unknown) => ({
    scope: ref.scope,
    key: ref.key,
    token,
    point,
    data: data === undefined ? null : JSON.stringify(data),
    now: now(),
  });

  /** Runs `fn` through the gate once `ref` is known to be storable: a refused ref rejects, never throws. */
  const gated = <T>(ref: RecordRef, operation: string, fn: () => T): Promise<T> =>
    queue.run(() => {
      checkRecordRef(ref);
      try {
        return fn();
      } catch (error) {
        throw busyElsewhere(operation, error);
      }
    });

  function claimNow(ref: RecordRef, fp: string, o: ClaimOptions): Claim {
    for (let attempt = 0; attempt < 3; attempt++) {
      const time = now();
      const row = readRow(ref, table, select.get(ref));
      if (row && !isExpired(row, time)) {
        if (row.fingerprint !== fp) return { kind: 'mismatch' };
        if (row.state === 'completed') return { kind: 'completed', response: toResponse(ref, table, row) };
        if (row.lease_until > time) return { kind: 'in_flight', retryAfterMs: row.lease_until - time };
      }
      const token = newOwnerToken();
      const won = upsert.get({ scope: ref.scope, key: ref.key, fp, token, now: time, lease: o.leaseMs, window: o.windowMs }) as
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

  /** A fenced statement inside an ORM's transaction. */
  const joined = async (runner: StatementRunner, what: string, statement: string, values: unknown[]) => {
    let changed: number;
    try {
      changed = await runner(statement, values);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      throw new StoreUnavailableError(`sqlite store: ${what} on ${table} failed: ${message}`, { cause: error });
    }
    if (changed !== 1) throw new LeaseLostError();
  };

  const store: SqliteStore<DB> = {
    name: 'sqlite',
    maxResponseBytes,
    [TRANSACTION_JOIN]: {
      dialect: 'sqlite',
      complete: async (runner, ref, token, response) => {
        checkRecordRef(ref);
        const p = completeParams(ref, token, response);
        await joined(runner, 'complete', completePositional, [p.status, p.headers, p.body, p.omitted, p.now, p.scope, p.key, p.token]);
      },
      checkpoint: async (runner, ref, token, point, data) => {
        checkRecordRef(ref);
        const p = checkpointParams(ref, token, point, data);
        await joined(runner, 'checkpoint', checkpointPositional, [p.point, p.data, p.now, p.scope, p.key, p.token]);
      },
      // The ORM's transaction holds the file's write lock: the store's statements through
      // `database` queue behind it (as behind the store's own transactions) instead of blocking
      // the event loop on the lock, and a direct write through `database` fails at once.
      async enter() {
        const unlock = await queue.lock();
        let restore: () => void;
        try {
          restore = failFastWhileOpen();
        } catch (error) {
          unlock();
          throw new StoreUnavailableError('sqlite store: could not prepare for a transaction', { cause: error });
        }
        writer = { since: now(), what: "another request's transaction (through an ORM bridge)" };
        return () => {
          writer = undefined;
          restore();
          unlock();
        };
      },
    },
    migrate,
    async verify() {
      const present = new Set(((await queue.run(() => columns.all())) as Array<{ name: string }>).map((row) => row.name));
      if (present.size === 0) throw new StoreSchemaMissingError('sqlite', [`table ${table}`], '`store.migrate()`');
      const missing = COLUMNS.filter((column) => !present.has(column));
      if (missing.length > 0) {
        throw new StoreSchemaMissingError('sqlite', missing.map((column) => `column ${table}.${column}`), `\`store.migrate()\` (it adds the columns a table of an earlier idemkit lacks), or a new table if ${table} is not idemkit's`);
      }
    },
    exclusive: (fn) => queue.run(() => fn(db)),
    checkTransactions,
    close() {
      const opened = own;
      own = undefined;
      if (opened) (opened.conn as DB & { close?: () => unknown }).close?.();
    },
    claim: (ref, fp, o) => gated(ref, 'claim', () => claimNow(ref, fp, o)),
    renew: (ref, token, leaseMs) => gated(ref, 'renew', () => renew.run({ scope: ref.scope, key: ref.key, token, now: now(), lease: leaseMs }).changes === 1),
    checkpoint: (ref, token, point, data) => gated(ref, 'checkpoint', () => fenced(checkpoint, checkpointParams(ref, token, point, data))),
    complete: (ref, token, response) => gated(ref, 'complete', () => fenced(complete, completeParams(ref, token, response))),
    release: (ref, token) => gated(ref, 'release', () => fenced(release, { scope: ref.scope, key: ref.key, token })),
    get: (ref) => gated(ref, 'get', () => toRecord(ref, table, readRow(ref, table, selectRecord.get(ref)))),
    reap: (limit = 1000) => queue.run(() => reap.run({ now: now(), limit }).changes),
    admin: sqliteAdmin(db, table, now),
    async listAbandoned(limit = 100) {
      const max = checkInteger('limit', limit, { default: 100, min: 1 });
      const rows = await queue.run(() => abandoned.all({ now: now(), limit: max }) as Array<Record<string, unknown>>);
      return rows.map((raw) => {
        const { scope, key } = raw;
        if (typeof scope !== 'string' || typeof key !== 'string') throw new CorruptRecordError(`sqlite store: a record in ${table} has a scope or key that is not text`);
        const ref = { scope, key };
        return toRecord(ref, table, readRow(ref, table, raw))!;
      });
    },
    async beginTransaction(): Promise<StoreTransaction<DB>> {
      const connection = ownConnection();
      const { conn } = connection;
      const unlock = await queue.lock();
      let restore: () => void;
      try {
        restore = failFastWhileOpen();
        // IMMEDIATE: the completion cannot fail on lock upgrade later.
        try {
          conn.exec(BEGIN);
        } catch (error) {
          restore();
          throw error;
        }
      } catch (error) {
        unlock();
        const busy = busyElsewhere('beginTransaction', error);
        throw busy !== error ? busy : new StoreUnavailableError('sqlite store: could not begin a transaction', { cause: error });
      }
      writer = { since: now(), what: "another request's transaction" };
      let active = true;
      const end = (sql: string) => {
        if (!active) return;
        active = false;
        try {
          if (conn.inTransaction) conn.exec(sql);
        } catch (error) {
          // A COMMIT that failed (a deferred constraint, SQLITE_BUSY) leaves the transaction open on
          // the store's connection, holding the file: end it, or every later write would fail.
          if (conn.inTransaction) conn.exec('ROLLBACK');
          throw error;
        } finally {
          writer = undefined;
          restore();
          unlock();
        }
      };
      return {
        tx: conn,
        complete: async (ref, token, response) => {
          checkRecordRef(ref);
          fenced(connection.complete, completeParams(ref, token, response));
        },
        checkpoint: async (ref, token, point, data) => {
          checkRecordRef(ref);
          fenced(connection.checkpoint, checkpointParams(ref, token, point, data));
        },
        commit: async () => end('COMMIT'),
        rollback: async () => end('ROLLBACK'),
      };
    },
  };
  // Kept off the documented type: the engine finds it by its symbol (deadlines.ts).
  return Object.assign(store, { [EXPLAIN_LATE]: explainLate });
}

function isExpired(row: Row, time: number): boolean {
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
function readRow(ref: RecordRef, table: string, raw: unknown): Row | undefined {
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
    // did not read them (a claim's).
    created_at: row.created_at == null ? null : integer('created_at'),
    updated_at: row.updated_at == null ? null : integer('updated_at'),
  };
}

function recovery(ref: RecordRef, table: string, row: { recovery_point: unknown; recovery_data: unknown }): { resumeFrom?: string; recoveryData?: unknown } {
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

function toResponse(ref: RecordRef, table: string, row: Row): StoredResponse {
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

function toRecord(ref: RecordRef, table: string, row: Row | undefined): IdempotencyRecord | undefined {
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
