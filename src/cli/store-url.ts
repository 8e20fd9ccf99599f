/**
 * Opens a built-in store from a URL, for the `idemkit` store commands. The driver a URL needs is
 * imported only then (they are optional peer dependencies), and a missing one is named with the
 * command that installs it.
 */
import { existsSync } from 'node:fs';
import { CliUsageError } from '../check/errors.js';
import { StoreSchemaMissingError } from '../core/errors.js';
import type { AdministrableStore, IdempotencyStore } from '../core/store.js';
import type { MysqlPool } from '../drivers/mysql.js';
import type { PostgresPool } from '../drivers/postgres.js';
import type { RedisBufferClient } from '../drivers/redis.js';
import type { SqliteDatabase } from '../drivers/sqlite.js';

// What the CLI uses of each driver package, declared here so that nothing imports a driver's types.
interface SqliteModule {
  default: new (file: string, options?: object) => SqliteDatabase & { close(): void };
}
interface PgModule {
  default: { Pool: new (config: object) => PostgresPool & { on(event: 'error', listener: () => void): unknown; end(): Promise<void> } };
}
interface Mysql2PromiseModule {
  createPool(config: object): MysqlPool & { query(sql: string): Promise<unknown>; end(): Promise<void> };
}
type IoredisClient = RedisBufferClient & { connect(): Promise<void>; disconnect(): void; on(event: 'error', listener: (error: Error) => void): unknown };
interface IoredisModule {
  Redis: new (url: string, options: object) => IoredisClient;
  Cluster: new (nodes: Array<{ host: string; port: number }>, options: object) => IoredisClient;
}

export type StoreKind = 'sqlite' | 'postgres' | 'mysql' | 'redis';

export interface StoreUrl {
  readonly kind: StoreKind;
  /** The URL as given, with any password replaced by `***`: what messages show. */
  readonly shown: string;
  /** sqlite: the file; others: the URL to connect to. */
  readonly target: string;
  /** Redis Cluster: the seed nodes of `redis+cluster://host:port,host:port`. */
  readonly clusterNodes?: ReadonlyArray<{ host: string; port: number }>;
  /** The password and credential parameters, as written and decoded: `scrub` takes them out of messages. */
  readonly secrets: readonly string[];
}

export interface StoreNames {
  /** SQL stores: the table (default idempotency_records). */
  readonly table?: string | undefined;
  /** PostgreSQL: the schema (default public). */
  readonly schema?: string | undefined;
  /** Redis: the key prefix (default idemkit). */
  readonly prefix?: string | undefined;
}

/** The flags that name a store, as every store command and `ui` take them (node:util parseArgs). */
export const STORE_FLAGS = {
  store: { type: 'string' },
  table: { type: 'string' },
  schema: { type: 'string' },
  prefix: { type: 'string' },
} as const;

export const URL_FORMS = 'sqlite:FILE, postgres://…, mysql://… (or mariadb://…), redis://… (rediss://…, redis+cluster://host:port,host:port)';

/** Parses a store URL; throws `CliUsageError` naming the forms it takes, never its password. */
export function parseStoreUrl(url: string): StoreUrl {
  const unsupported = (why: string) => new CliUsageError(`${why}; expected ${URL_FORMS}`);
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '');
    if (file === '' || file === ':memory:') throw unsupported(`the store URL "${url}" names no database file`);
    return { kind: 'sqlite', shown: url, target: file, secrets: [] };
  }
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'redis+cluster') {
    const nodes = url
      .slice('redis+cluster://'.length)
      .split(',')
      .map((hostPort) => {
        const match = /^([^:/,]+):(\d{1,5})\/?$/.exec(hostPort);
        // Only a node made of host characters is echoed: anything else may be a password.
        const shown = /^[\w.:[\]-]*$/.test(hostPort) ? ` "${hostPort}"` : '';
        if (!match) throw unsupported(`the store URL "redis+cluster://…" has a node${shown} that is not host:port (credentials and options do not go in this form)`);
        return { host: match[1]!, port: Number(match[2]) };
      });
    // Every node is host:port: nothing in it to hide.
    return { kind: 'redis', shown: url, target: url, clusterNodes: nodes, secrets: [] };
  }
  const kind: StoreKind | undefined =
    scheme === 'postgres' || scheme === 'postgresql'
      ? 'postgres'
      : scheme === 'mysql' || scheme === 'mariadb'
        ? 'mysql'
        : scheme === 'redis' || scheme === 'rediss'
          ? 'redis'
          : undefined;
  if (kind === undefined) throw unsupported(`unsupported store URL "${redact(url)}"`);
  const parsed = parseUrl(url);
  if (parsed === undefined) {
    throw unsupported(
      `the store URL "${redact(url)}" is not a valid URL (the rest is not shown: it may hold a password). Percent-encode @ : / ? # % in a user name or password (%40 %3A %2F %3F %23 %25)`,
    );
  }
  if (misplacedAt(url, parsed)) {
    throw unsupported(
      `the store URL "${redact(url)}" has an @ or # after its host (the rest is not shown: it may hold a password). Percent-encode @ : / ? # % in a user name or password (%40 %3A %2F %3F %23 %25)`,
    );
  }
  if (parsed.hostname === '') throw unsupported(`the store URL "${redact(url)}" names no host`);
  const secrets = secretsOf(parsed);
  if (kind === 'mysql') parsed.protocol = 'mysql:';
  return { kind, shown: redact(url), target: parsed.href, secrets };
}

function parseUrl(url: string): URL | undefined {
  try {
    return new URL(url);
  } catch {
    return undefined;
  }
}

/**
 * An `@` or `#` after the user info: `postgres://u:pa/ss@h/db` parses as host `u`, port none, path
 * `/ss@h/db`, and `u:1?x@h` as port 1 and a query; the drivers read them so too. Either way what
 * the user meant as a password would be shown as a path or a query: such a URL is refused.
 */
function misplacedAt(url: string, parsed: URL): boolean {
  // A `#` ends the URL for the drivers: what follows (a password's tail, often) is dropped.
  return parsed.pathname.includes('@') || parsed.search.includes('@') || url.includes('#');
}

/** Query parameters the drivers read credentials or key material from (pg, mysql2, ioredis take any option there). */
const SECRET_PARAM = /pass|pwd|secret|token|cred|auth|key|ssl|tls/i;
/** …of which these name a secret whatever their value; the others (ssl=true, sslmode=require) may show a plain setting. */
const ALWAYS_SECRET_PARAM = /pass|pwd|secret|token|cred/i;
const PLAIN_SETTING = /^(true|false|0|1|disable|allow|prefer|require|verify-ca|verify-full|no-verify|direct|postgres)$/i;

function secretParam(name: string, value: string): boolean {
  return SECRET_PARAM.test(name) && (ALWAYS_SECRET_PARAM.test(name) || !PLAIN_SETTING.test(value));
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function jsonStrings(text: string): string[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return [];
  }
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (typeof v === 'string') out.push(v);
    else if (v !== null && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk(value);
  return out;
}

/** The secret values in a URL, as written and decoded: what `scrub` takes out of messages. */
function secretsOf(parsed: URL): string[] {
  const found = new Set<string>();
  if (parsed.password !== '') found.add(parsed.password).add(decoded(parsed.password));
  for (const part of parsed.search.slice(1).split('&')) {
    const at = part.indexOf('=');
    if (at < 0) continue;
    const [name, value] = [decoded(part.slice(0, at).replace(/\+/g, ' ')), part.slice(at + 1)];
    const text = decoded(value.replace(/\+/g, ' '));
    if (value === '' || !secretParam(name, text)) continue;
    found.add(value).add(text);
    // mysql2 reads a JSON value (ssl={"key":"…","passphrase":"…"}): its strings too.
    for (const leaf of jsonStrings(text)) found.add(leaf);
  }
  // Longest first, so that a secret containing another is taken out whole.
  return [...found].filter((secret) => secret.length >= 3).sort((a, b) => b.length - a.length);
}

/**
 * The URL as messages show it: the user-info password and every credential query parameter
 * (`password=`, `sslpassword=`, `sslkey=`, mysql2's `ssl={…}`, …) as `***`, the fragment dropped.
 * A URL the parser rejects, or with an `@` after its host, shows only its scheme: where the
 * password ends cannot be known.
 */
export function redact(url: string): string {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1];
  if (scheme === undefined) return '(not a URL)';
  if (scheme.toLowerCase() === 'sqlite') return url;
  const parsed = parseUrl(url);
  if (parsed === undefined || misplacedAt(url, parsed)) return `${scheme}://…`;
  const userInfo = parsed.username === '' && parsed.password === '' ? '' : `${parsed.username}${parsed.password === '' ? '' : ':***'}@`;
  const host = parsed.port === '' ? parsed.hostname : `${parsed.hostname}:${parsed.port}`;
  const query = parsed.search
    .slice(1)
    .split('&')
    .map((part) => {
      const at = part.indexOf('=');
      if (at < 0) return part;
      const name = part.slice(0, at);
      return secretParam(decoded(name.replace(/\+/g, ' ')), decoded(part.slice(at + 1).replace(/\+/g, ' '))) ? `${name}=***` : part;
    })
    .join('&');
  return `${scheme}://${userInfo}${host}${parsed.pathname}${query === '' ? '' : `?${query}`}`;
}

/** `text` with the secrets of `url` replaced by `***`: for a driver's message that echoes one. */
export function scrub(text: string, url: StoreUrl | undefined): string {
  let out = text;
  for (const secret of url?.secrets ?? []) out = out.split(secret).join('***');
  return out;
}

const PACKAGES: Record<StoreKind, string> = { sqlite: 'better-sqlite3', postgres: 'pg', mysql: 'mysql2', redis: 'ioredis' };

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
  /** Where the records are, for messages: `table public.idempotency_records`, `prefix idemkit`. */
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

const CONNECT_TIMEOUT_MS = 5_000;

/** Opens the store of `url`, connecting to check it answers (a SQLite file must exist unless `create`). */
export async function openStore(url: StoreUrl, names: StoreNames, options: { create: boolean }): Promise<OpenedStore> {
  switch (url.kind) {
    case 'sqlite':
      return openSqlite(url, names, options.create);
    case 'postgres':
      return openPostgres(url, names);
    case 'mysql':
      return openMysql(url, names);
    case 'redis':
      return openRedis(url, names);
  }
}

function refuseNames(url: StoreUrl, names: StoreNames, allowed: ReadonlyArray<keyof StoreNames>): void {
  for (const name of ['table', 'schema', 'prefix'] as const) {
    if (names[name] !== undefined && !allowed.includes(name)) throw new CliUsageError(`--${name} does not apply to a ${url.kind} store`);
  }
}

async function openSqlite(url: StoreUrl, names: StoreNames, create: boolean): Promise<OpenedStore> {
  refuseNames(url, names, ['table']);
  const { default: Database } = await importDriver<SqliteModule>('sqlite');
  const { sqliteStore } = await import('../stores/sqlite/index.js');
  const table = names.table ?? 'idempotency_records';
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(table)) throw new CliUsageError(`--table: expected a plain SQL identifier, got ${JSON.stringify(table)}`);
  if (!create && !existsSync(url.target)) throw new Unreachable(`no SQLite database at ${url.target} (run \`idemkit migrate\` to create it)`);
  let db;
  try {
    db = new Database(url.target, { fileMustExist: !create, timeout: CONNECT_TIMEOUT_MS });
  } catch (error) {
    throw new Unreachable(`cannot open the SQLite database ${url.target}: ${(error as Error).message}`);
  }
  const hasTable = () => db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(table) !== undefined;
  const columnNames = () => new Set((db.prepare('SELECT name FROM pragma_table_info(?)').all(table) as Array<{ name: string }>).map((c) => c.name));
  const where = `table ${table} in ${url.target}`;
  const make = () => sqliteStore({ database: db, table });
  let store: ReturnType<typeof make> | undefined;
  // The factory creates a missing table: only `migrate` may do that, so other commands check first.
  const existing = () => (store ??= make());
  try {
    hasTable();
  } catch (error) {
    db.close();
    throw new Unreachable(`cannot read the SQLite database ${url.target}: ${(error as Error).message}`);
  }
  return {
    url,
    where,
    get store() {
      return existing();
    },
    async migrate() {
      const present = hasTable();
      const columnsBefore = columnNames();
      // The factory migrates: creates the table, or adds the columns an earlier idemkit's lacks.
      existing();
      if (!present) return { created: [`table ${table}`], present: [], added: [] };
      const added = [...columnNames()].filter((column) => !columnsBefore.has(column)).map((column) => `column ${table}.${column}`);
      return { created: [], present: [`table ${table}`], added };
    },
    async verify() {
      if (!hasTable()) throw new StoreSchemaMissingError('sqlite', [where], '`idemkit migrate`');
    },
    async close() {
      db.close();
    },
  };
}

/**
 * Makes a SQL store over `pool` and proves the server answers: a bad table or schema name is the
 * user's flag (`CliUsageError` naming it), a server that does not answer is `Unreachable`; the pool
 * is ended on either.
 */
async function reachable<S>(
  url: StoreUrl,
  pool: { query(sql: string): Promise<unknown>; end(): Promise<void> },
  make: () => S,
  reason: (error: unknown) => string,
): Promise<S> {
  const { InvalidOptionError } = await import('../core/errors.js');
  let store: S;
  try {
    store = make();
  } catch (error) {
    await pool.end();
    if (error instanceof InvalidOptionError) throw new CliUsageError(`--${error.option}: ${error.message.replace(/^Invalid option `\w+`: /, '')}`);
    throw error;
  }
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end().catch(() => {});
    throw new Unreachable(`cannot reach the store at ${url.shown}: ${scrub(reason(error), url)}`);
  }
  return store;
}

async function openPostgres(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['table', 'schema']);
  const { default: pg } = await importDriver<PgModule>('postgres');
  const { postgresStore } = await import('../stores/postgres/index.js');
  const pool = new pg.Pool({ connectionString: url.target, max: 2, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  pool.on('error', () => {});
  const store = await reachable(url, pool, () => postgresStore({ pool, table: names.table, schema: names.schema }), (error) => (error as Error).message || String(error));
  const schema = names.schema ?? 'public';
  const table = names.table ?? 'idempotency_records';
  const missing = async () => {
    try {
      await store.verify();
      return [];
    } catch (error) {
      if (error instanceof StoreSchemaMissingError) return [...error.missing];
      throw error;
    }
  };
  return {
    url,
    store,
    where: `table ${schema}.${table}`,
    async migrate() {
      const before = await missing();
      const added = await store.migrate();
      const all = [`table ${schema}.${table}`, `function ${schema}.${table}_claim`];
      return { created: all.filter((what) => before.includes(what)), present: all.filter((what) => !before.includes(what)), added };
    },
    verify: () => store.verify(),
    close: () => pool.end(),
  };
}

async function openMysql(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['table']);
  const mysql = await importDriver<Mysql2PromiseModule>('mysql', (name) => import(`${name}/promise`));
  const { mysqlStore } = await import('../stores/mysql/index.js');
  const pool = mysql.createPool({ uri: url.target, connectionLimit: 2, connectTimeout: CONNECT_TIMEOUT_MS });
  const store = await reachable(url, pool, () => mysqlStore({ pool, table: names.table }), (error) => (error as Error).message || String((error as { code?: unknown }).code ?? error));
  const table = names.table ?? 'idempotency_records';
  return {
    url,
    store,
    where: `table ${table}`,
    async migrate() {
      let present = true;
      try {
        await store.verify();
      } catch (error) {
        if (!(error instanceof StoreSchemaMissingError)) throw error;
        // Missing columns alone (a table of an earlier idemkit) are what migrate adds.
        present = !error.missing.some((what) => what.startsWith('table '));
      }
      const added = await store.migrate();
      return present ? { created: [], present: [`table ${table}`], added } : { created: [`table ${table}`], present: [], added: [] };
    },
    verify: () => store.verify(),
    close: () => pool.end(),
  };
}

async function openRedis(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['prefix']);
  const ioredis = await importDriver<IoredisModule>('redis');
  const { redisStore } = await import('../stores/redis/index.js');
  const { InvalidOptionError } = await import('../core/errors.js');
  // Fail fast: no offline queue, no retries; a command on a dead connection errors at once.
  const common = { enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: CONNECT_TIMEOUT_MS, lazyConnect: true } as const;
  const client = url.clusterNodes
    ? new ioredis.Cluster([...url.clusterNodes], { lazyConnect: true, enableOfflineQueue: false, clusterRetryStrategy: () => null, redisOptions: common })
    : new ioredis.Redis(url.target, { ...common, retryStrategy: () => null });
  // ioredis rejects connect() with "Connection is closed."; the reason came in an 'error' event.
  let reason: Error | undefined;
  client.on('error', (error: Error) => {
    reason ??= error;
  });
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw new Unreachable(`cannot reach the store at ${url.shown}: ${scrub((reason ?? (error as Error)).message || String(error), url)}`);
  }
  let store;
  try {
    store = redisStore({ client, prefix: names.prefix, coalesceWrites: false });
  } catch (error) {
    client.disconnect();
    if (error instanceof InvalidOptionError) throw new CliUsageError(`--${error.option}: ${error.message.replace(/^Invalid option `\w+`: /, '')}`);
    throw error;
  }
  const prefix = names.prefix ?? 'idemkit';
  return {
    url,
    store,
    where: `prefix ${prefix}`,
    async migrate() {
      return { created: [], present: [], added: [] };
    },
    async verify() {},
    async close() {
      client.disconnect();
    },
  };
}
