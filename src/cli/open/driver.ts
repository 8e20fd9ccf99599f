// What every store opener shares: importing its driver package (an optional peer dependency,
// named with the command that installs it when missing), what an opened store offers the
// commands, and how a store that does not answer, or a flag it refuses, is reported.
import type { IdempotencyLogger } from '../../core/logger.js';
import { CliUsageError } from '../../check/errors.js';
import { InvalidOptionError, StoreSchemaMissingError } from '../../core/errors.js';
import type { AdministrableStore, IdempotencyStore } from '../../core/store.js';
import type { StoreKind, StoreNames, StoreUrl } from '../store-url.js';
import { scrub } from '../store-url.js';

const PACKAGES: Record<StoreKind, string> = { sqlite: 'better-sqlite3', postgres: 'pg', mysql: 'mysql2', redis: 'ioredis', dynamodb: '@aws-sdk/client-dynamodb' };

/** Imports a driver package, or says which one to install. `load` is replaceable for tests. */
export async function importDriver<T>(kind: StoreKind, load: (name: string) => Promise<unknown> = (name) => import(name)): Promise<T> {
  const name = PACKAGES[kind];
  try {
    return (await load(name)) as T;
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      throw new CliUsageError(`${kind} store URLs need the ${name} package, which is not installed: npm install ${name}`);
    }
    throw new CliUsageError(`the ${name} package could not be loaded: ${(error as Error).message}`);
  }
}

export interface OpenedStore {
  readonly url: StoreUrl;
  readonly store: IdempotencyStore & AdministrableStore;
  /** Where the records are, for messages: `table public.idempotency_records`, `prefix idemkit`, `DynamoDB table idempotency_records`. */
  readonly where: string;
  /**
   * Creates what is missing; says what it created, what was there, and what it added to a table
   * an earlier idemkit created (`column <table>.created_at`, …).
   */
  migrate(): Promise<{ created: string[]; present: string[]; added: string[] }>;
  /** Throws `StoreSchemaMissingError` when the table (or claim function) is missing. */
  verify(): Promise<void>;
  close(): Promise<void>;
}

/** A store that could not be reached: the message names the URL (without its password) and the cause. */
export class Unreachable {
  constructor(readonly message: string) {}
}

/**
 * What `verify()` finds missing, [] when nothing: `named` reads a `StoreSchemaMissingError`; any
 * other failure (unreachable, refused) is thrown.
 */
export async function missingParts(store: { verify(): Promise<void> }, named: (error: StoreSchemaMissingError) => string[]): Promise<string[]> {
  try {
    await store.verify();
    return [];
  } catch (error) {
    if (error instanceof StoreSchemaMissingError) return named(error);
    throw error;
  }
}

export const CONNECT_TIMEOUT_MS = 5_000;

/** Refuses the flags that do not name anything in a store of this kind. */
export function refuseNames(url: StoreUrl, names: StoreNames, allowed: ReadonlyArray<keyof StoreNames>): void {
  for (const name of ['table', 'schema', 'prefix'] as const) {
    if (names[name] !== undefined && !allowed.includes(name)) throw new CliUsageError(`--${name} does not apply to a ${url.kind} store`);
  }
}

/** A store factory's refusal of a name the user gave as a flag: that flag, in the CLI's words. */
export function flagError(error: unknown): unknown {
  if (error instanceof InvalidOptionError) return new CliUsageError(`--${error.option}: ${error.message.replace(/^Invalid option `\w+`: /, '')}`);
  return error;
}

/**
 * Makes a SQL store over `pool` and proves the server answers: a bad table or schema name is the
 * user's flag (`CliUsageError` naming it), a server that does not answer is `Unreachable`; the pool
 * is ended on either.
 */
export async function reachable<S>(
  url: StoreUrl,
  pool: { query(sql: string): Promise<unknown>; end(): Promise<void> },
  make: () => S,
  reason: (error: unknown) => string,
): Promise<S> {
  let store: S;
  try {
    store = make();
  } catch (error) {
    await pool.end();
    throw flagError(error);
  }
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end().catch(() => {});
    throw new Unreachable(`cannot reach the store at ${url.shown}: ${scrub(reason(error), url)}`);
  }
  return store;
}

/**
 * The logger a SQL store gets from the CLI: its warnings (an index missing, docs/stores/*.md) go
 * to stderr, except inside `quietly`, which `migrate` wraps around its look at what it is about
 * to add, so that it does not warn of what it then creates.
 */
export function storeLogger(): { readonly logger: IdempotencyLogger; quietly<T>(look: () => Promise<T>): Promise<T> } {
  let looking = 0;
  return {
    logger: {
      warn: (...args: unknown[]) => {
        if (looking === 0) console.warn(...args);
      },
      error: (...args: unknown[]) => console.error(...args),
    },
    async quietly(look) {
      looking++;
      try {
        return await look();
      } finally {
        looking--;
      }
    },
  };
}
