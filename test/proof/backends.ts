/**
 * What the cross-process and crash proofs need from a backend: the idempotency store, and a
 * business table ("orders") written inside the handler, counted from outside.
 *
 * URLs: `sqlite:/file`, `postgres://…`, `mysql://…`, and `redis://…` (not transactional: its
 * orders live in the SQLite file named by `ordersFile`).
 */
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { IdempotencyStore } from '../../src/core/store.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';

export const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = 'mysql://root@127.0.0.1:3306/test';
export const REDIS_URL = 'redis://127.0.0.1:6379/0';

export interface ProofBackend {
  readonly store: IdempotencyStore;
  /** Inserts one order row inside the handler's transaction (or directly, without one). */
  insertOrder(tx: unknown, key: string): Promise<void>;
  countOrders(key?: string): Promise<number>;
  close(): Promise<void>;
  /** Removes every table, function and key this backend created. */
  drop(): Promise<void>;
}

export interface BackendOptions {
  /** A unique index on the order key, written insert-once: the data-layer guard. */
  readonly uniqueOrders?: boolean;
  /** For Redis: the SQLite file that holds the orders. */
  readonly ordersFile?: string;
  /**
   * The pool's connect timeout (pg's `connectionTimeoutMillis`, mysql2's `connectTimeout`), as
   * docs/stores recommend for a faulty network (test/faults): a connection attempt lost on the link
   * gives up and frees its slot rather than wait out TCP's SYN back-off. Unset elsewhere: pg counts
   * the wait for a free pooled client against it too, and the busy proof tests wait on purpose.
   */
  readonly connectTimeoutMs?: number;
}

/** `url` names the store; `name` keeps each test's tables apart. */
export async function openBackend(url: string, name: string, options: BackendOptions = {}): Promise<ProofBackend> {
  if (url.startsWith('sqlite:')) return sqliteBackend(url.slice('sqlite:'.length), name, options, true);
  if (url.startsWith('postgres://')) return postgresBackend(url, name, options);
  if (url.startsWith('mysql://')) return mysqlBackend(url, name, options);
  if (url.startsWith('redis://')) return redisBackend(url, name, options);
  throw new Error(`no proof backend for ${url}`);
}

function sqliteBackend(file: string, name: string, options: BackendOptions, withStore: boolean): ProofBackend {
  const db = new Database(file, { timeout: 5000 });
  db.pragma('journal_mode = WAL');
  const store = withStore ? sqliteStore({ database: db, table: `idem_${name}` }) : (undefined as never);
  db.exec(`CREATE TABLE IF NOT EXISTS orders_${name} (key TEXT NOT NULL ${options.uniqueOrders ? 'UNIQUE' : ''})`);
  return {
    store,
    async insertOrder(tx, key) {
      const insert = options.uniqueOrders ? 'INSERT OR IGNORE' : 'INSERT';
      ((tx ?? db) as Database.Database).prepare(`${insert} INTO orders_${name} (key) VALUES (?)`).run(key);
    },
    async countOrders(key) {
      const sql = `SELECT count(*) AS n FROM orders_${name}${key ? ' WHERE key = ?' : ''}`;
      return (db.prepare(sql).get(...(key ? [key] : [])) as { n: number }).n;
    },
    async close() {
      if (withStore) store.close();
      db.close();
    },
    async drop() {
      db.exec(`DROP TABLE IF EXISTS orders_${name}; DROP TABLE IF EXISTS idem_${name}`);
    },
  };
}

async function postgresBackend(url: string, name: string, options: BackendOptions): Promise<ProofBackend> {
  const pool = new pg.Pool({ connectionString: url, max: 5, connectionTimeoutMillis: options.connectTimeoutMs, keepAlive: true });
  pool.on('error', () => {}); // an idle connection of a killed test may drop; the next query reconnects
  const store = postgresStore({ pool, table: `idem_${name}` });
  await store.migrate();
  await pool.query(`CREATE TABLE IF NOT EXISTS orders_${name} (key text NOT NULL ${options.uniqueOrders ? 'UNIQUE' : ''})`);
  return {
    store,
    async insertOrder(tx, key) {
      const conflict = options.uniqueOrders ? ' ON CONFLICT DO NOTHING' : '';
      await ((tx ?? pool) as pg.Pool).query(`INSERT INTO orders_${name} (key) VALUES ($1)${conflict}`, [key]);
    },
    async countOrders(key) {
      const result = await pool.query(`SELECT count(*)::int AS n FROM orders_${name}${key ? ' WHERE key = $1' : ''}`, key ? [key] : []);
      return result.rows[0].n as number;
    },
    close: () => pool.end(),
    async drop() {
      await pool.query(`DROP TABLE IF EXISTS orders_${name}; DROP TABLE IF EXISTS idem_${name} CASCADE; DROP FUNCTION IF EXISTS idem_${name}_claim CASCADE`);
    },
  };
}

async function mysqlBackend(url: string, name: string, options: BackendOptions): Promise<ProofBackend> {
  const pool = mysql.createPool({ uri: url, connectionLimit: 5, connectTimeout: options.connectTimeoutMs });
  const store = mysqlStore({ pool, table: `idem_${name}` });
  await store.migrate();
  await pool.query(`CREATE TABLE IF NOT EXISTS orders_${name} (\`key\` VARCHAR(64) NOT NULL ${options.uniqueOrders ? 'UNIQUE' : ''})`);
  return {
    store,
    async insertOrder(tx, key) {
      const insert = options.uniqueOrders ? 'INSERT IGNORE' : 'INSERT';
      await ((tx ?? pool) as mysql.Pool).query(`${insert} INTO orders_${name} (\`key\`) VALUES (?)`, [key]);
    },
    async countOrders(key) {
      const [rows] = await pool.query(`SELECT count(*) AS n FROM orders_${name}${key ? ' WHERE `key` = ?' : ''}`, key ? [key] : []);
      return Number((rows as Array<{ n: number }>)[0]!.n);
    },
    close: () => pool.end(),
    async drop() {
      await pool.query(`DROP TABLE IF EXISTS orders_${name}`);
      await pool.query(`DROP TABLE IF EXISTS idem_${name}`);
    },
  };
}

async function redisBackend(url: string, name: string, options: BackendOptions): Promise<ProofBackend> {
  if (!options.ordersFile) throw new Error('a Redis proof backend needs `ordersFile` for its orders');
  // The settings docs/stores/redis.md recommends, so the proofs and the network-fault suite test
  // the configuration users are told to run: while Redis is unreachable a command fails at once
  // (the middleware answers 503) instead of waiting in the offline queue, and a command whose
  // connection dropped is not resent after the reconnect.
  const client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
  // Each reconnect failure is answered per command; unheard, ioredis would print every one.
  client.on('error', () => {});
  await client.connect();
  const prefix = `proof-${name}`;
  const orders = sqliteBackend(options.ordersFile, name, options, false);
  return {
    ...orders,
    store: redisStore({ client, prefix }),
    async close() {
      await orders.close();
      client.disconnect();
    },
    async drop() {
      await orders.drop();
      const keys = await client.keys(`${prefix}:*`);
      if (keys.length > 0) await client.del(...keys);
    },
  };
}
