/**
 * How idemkit talks to node-postgres (`pg`). Only the shapes are declared: the pool or client is
 * the user's, and nothing here imports `pg`.
 */
import { StoreUnavailableError } from '../core/errors.js';

/** What a query answers; node-postgres' `QueryResult` fits. */
export interface PostgresQueryResult {
  readonly rows: readonly unknown[];
  readonly rowCount: number | null;
  /** The command tag; a COMMIT of a failed transaction answers `ROLLBACK`. */
  readonly command?: string;
}

/** Anything that runs a statement: a `pg.Pool`, a `pg.Client`, a checked-out `pg.PoolClient`. */
export interface PostgresQueryable {
  query(text: string, values?: unknown[]): Promise<PostgresQueryResult>;
}

/** A client checked out of a pool (a `pg.PoolClient` fits). */
export interface PostgresClient extends PostgresQueryable {
  /** Returns the client to its pool; with an error, the pool discards it instead. */
  release(error?: Error | boolean): void;
  /**
   * A pg client emits 'error' when its connection dies; with no listener that would crash the
   * process, so idemkit listens while it holds the client.
   */
  on?(event: 'error', listener: (error: Error) => void): unknown;
  removeListener?(event: 'error', listener: (error: Error) => void): unknown;
}

/** A node-postgres `Pool`. `Client` is the client type it hands out. */
export interface PostgresPool<Client extends PostgresClient = PostgresClient> extends PostgresQueryable {
  connect(): Promise<Client>;
}

/**
 * PostgreSQL answers a COMMIT of a transaction in which a statement failed with the command tag
 * ROLLBACK, not with an error: the caller would otherwise believe its writes landed.
 */
export function commitRolledBack(result: PostgresQueryResult): boolean {
  return result.command === 'ROLLBACK';
}

/**
 * The one error for a COMMIT answered with ROLLBACK. Nothing was written, so calling again is
 * safe; `context` names who committed (a store, an executor).
 */
export function rolledBackCommitError(context: string): StoreUnavailableError {
  return new StoreUnavailableError(`${context}: the transaction had failed, so COMMIT rolled it back`);
}

/** COMMIT on `client`; throws `rolledBackCommitError(context)` when PostgreSQL rolled it back instead. */
export async function commit(client: PostgresQueryable, context: string): Promise<void> {
  if (commitRolledBack(await client.query('COMMIT'))) throw rolledBackCommitError(context);
}

/** The SQLSTATE of a driver error (`error.code`), if it has one. */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** 42P01 undefined table, 42883 undefined function: the schema was never applied. */
export function isMissingSchema(error: unknown): boolean {
  const code = sqlState(error);
  return code === '42P01' || code === '42883';
}

/** A checked-out client, held: its connection errors cannot crash the process, and it is released once. */
export interface HeldClient {
  readonly released: boolean;
  /** Back to the pool; with an error (or after the connection reported one) the pool discards it. */
  release(error?: unknown): void;
}

/** Keeps a checked-out client's connection errors from crashing the process, and releases it once. */
export function holdClient(client: PostgresClient): HeldClient {
  let broken: Error | undefined;
  let released = false;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on?.('error', onError);
  return {
    get released() {
      return released;
    },
    release(error?: unknown) {
      if (released) return;
      released = true;
      client.removeListener?.('error', onError);
      const reason = error ?? broken;
      client.release(reason === undefined ? undefined : reason instanceof Error ? reason : new Error(String(reason)));
    },
  };
}

/**
 * `?` → `$1, $2, …`, leaving `?` alone inside string literals, quoted identifiers, dollar-quoted
 * strings and comments.
 */
export function toPgPlaceholders(sql: string): string {
  let out = '';
  let n = 0;
  for (let i = 0; i < sql.length; ) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      const end = closingQuote(sql, i, c);
      out += sql.slice(i, end);
      i = end;
    } else if (c === '-' && sql[i + 1] === '-') {
      const nl = sql.indexOf('\n', i);
      const end = nl === -1 ? sql.length : nl;
      out += sql.slice(i, end);
      i = end;
    } else if (c === '/' && sql[i + 1] === '*') {
      const close = sql.indexOf('*/', i + 2);
      const end = close === -1 ? sql.length : close + 2;
      out += sql.slice(i, end);
      i = end;
    } else if (c === '$' && /^\$[A-Za-z_0-9]*\$/.test(sql.slice(i)) && !/[A-Za-z0-9_]/.test(sql[i - 1] ?? '')) {
      const tag = /^\$[A-Za-z_0-9]*\$/.exec(sql.slice(i))![0];
      if (/^\$\d+\$$/.test(tag) === false) {
        const close = sql.indexOf(tag, i + tag.length);
        const end = close === -1 ? sql.length : close + tag.length;
        out += sql.slice(i, end);
        i = end;
      } else {
        out += c;
        i++;
      }
    } else if (c === '?') {
      out += `$${++n}`;
      i++;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

function closingQuote(sql: string, start: number, quote: string): number {
  for (let i = start + 1; i < sql.length; i++) {
    if (sql[i] === quote) {
      if (sql[i + 1] === quote) i++;
      else return i + 1;
    }
  }
  return sql.length;
}
