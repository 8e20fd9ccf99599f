/**
 * One ORM on one database, for the ORM bridge tests: the idemkit store bridged to the ORM's
 * transactions, and a business table ("orders") written through the ORM's transaction object,
 * counted from outside.
 */
import Database from 'better-sqlite3';
import { eq } from 'drizzle-orm';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { pgTable, text as pgText } from 'drizzle-orm/pg-core';
import { sqliteTable, text as sqliteText } from 'drizzle-orm/sqlite-core';
import knexFactory from 'knex';
import type { Knex } from 'knex';
import { DataSource, EntitySchema } from 'typeorm';
import type { EntityManager } from 'typeorm';
import { Kysely, MysqlDialect, PostgresDialect, SqliteDialect } from 'kysely';
import mysqlCallbacks from 'mysql2';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';
import { toPgPlaceholders } from '../../src/drivers/postgres.js';
import type { SqlExecutor } from '../../src/drivers/sql-executor.js';
import { drizzleExecutor, drizzleTransactions } from '../../src/orm/drizzle.js';
import { knexExecutor, knexTransactions } from '../../src/orm/knex.js';
import { kyselyExecutor, kyselyTransactions } from '../../src/orm/kysely.js';
import type { PrismaTransactionsOptions } from '../../src/orm/prisma.js';
import { prismaExecutor, prismaTransactions } from '../../src/orm/prisma.js';
import { typeormExecutor, typeormTransactions } from '../../src/orm/typeorm.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { TestPrismaTransaction } from './prisma-client.js';
import { prismaClient, removeGenerated } from './prisma-client.js';

export const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = 'mysql://root@127.0.0.1:3306/test';

export type Combo =
  | 'kysely-postgres'
  | 'kysely-mysql'
  | 'kysely-sqlite'
  | 'drizzle-postgres'
  | 'drizzle-sqlite'
  | 'knex-postgres'
  | 'knex-mysql'
  | 'knex-sqlite'
  | 'typeorm-postgres'
  | 'typeorm-mysql'
  | 'typeorm-sqlite'
  | 'prisma-postgres';
export type DatabaseKind = 'postgres' | 'mysql' | 'sqlite';

/** A write prepared in a handler, run later: `what` names it in a failure. */
export interface LateWrite {
  readonly what: string;
  run(): unknown;
  /** How the ORM itself refuses it, where idemkit's fence does not see it (a Prisma model delegate is a property, not a call). */
  readonly refusedBy?: RegExp;
}

export const databaseOf = (combo: Combo): DatabaseKind => combo.split('-')[1] as DatabaseKind;

export interface OrmBackend {
  /** The store as the adapter gets it: transactions are the ORM's. */
  readonly store: TransactionalStore;
  /** The SQL store underneath, for reading records. */
  readonly plain: IdempotencyStore;
  /** Inserts one order through the ORM's transaction object. */
  insertOrder(tx: unknown, key: string): Promise<void>;
  /**
   * Writes of one order each, prepared through `tx` without running: a lazy query the ORM starts
   * when it is awaited, or a driver object read through a property. The handler prepares them; the
   * test runs them after the answer (issue 26 item 2).
   */
  lateWrites(tx: unknown, key: string): LateWrite[];
  countOrders(key: string): Promise<number>;
  /** Runs `fn` in a transaction of the ORM opened directly (not by idemkit), with an executor for idemkit/patterns. */
  inOrmTransaction<T>(fn: (executor: SqlExecutor, tx: unknown) => Promise<T>): Promise<T>;
  /** A table `things_<name>` (id primary key, status) for insertOnce / transition. */
  readonly things: string;
  /** Prisma only: the store bridged with other options (a short interactive-transaction `timeout`). */
  readonly rebridge?: (options: PrismaTransactionsOptions) => TransactionalStore;
  /** Reads a thing's status outside any transaction. */
  statusOf(id: string): Promise<string | undefined>;
  close(): Promise<void>;
  drop(): Promise<void>;
}

/** `file` is the SQLite file (for the sqlite combos); `name` keeps each test's tables apart. */
export async function openOrm(combo: Combo, name: string, file: string): Promise<OrmBackend> {
  const orders = `orm_orders_${name}`;
  const things = `orm_things_${name}`;
  const table = `orm_idem_${name}`;
  switch (combo) {
    case 'kysely-postgres': {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 5 });
      pool.on('error', () => {});
      const plain = postgresStore({ pool, table });
      await plain.migrate();
      await pool.query(`CREATE TABLE IF NOT EXISTS ${orders} (key text NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id text PRIMARY KEY, status text NOT NULL)`);
      const db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
      return kysely(plain, db, orders, things, {
        count: async (sql, params) => Number((await pool.query(toPgPlaceholders(sql), params)).rows[0].n),
        close: () => db.destroy(),
        drop: async () => {
          await pool.query(`DROP TABLE IF EXISTS ${orders}, ${things}; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
        },
      });
    }
    case 'kysely-mysql': {
      const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: 5 });
      const plain = mysqlStore({ pool, table });
      await plain.migrate();
      await pool.query(`CREATE TABLE IF NOT EXISTS ${orders} (\`key\` VARCHAR(64) NOT NULL)`);
      await pool.query(`CREATE TABLE IF NOT EXISTS ${things} (id VARCHAR(64) PRIMARY KEY, status VARCHAR(32) NOT NULL)`);
      const db = new Kysely<Tables>({ dialect: new MysqlDialect({ pool: mysqlCallbacks.createPool({ uri: MYSQL_URL, connectionLimit: 5 }) }) });
      return kysely(plain, db, orders, things, {
        count: async (sql, params) => Number(((await pool.query(sql, params))[0] as Array<{ n: number }>)[0]!.n),
        close: async () => {
          await db.destroy();
          await pool.end();
        },
        drop: async () => {
          await pool.query(`DROP TABLE IF EXISTS ${orders}, ${things}, ${table}`);
        },
      });
    }
    case 'kysely-sqlite': {
      const database = new Database(file, { timeout: 5000 });
      const plain = sqliteStore({ database, table });
      database.exec(`CREATE TABLE IF NOT EXISTS ${orders} (key TEXT NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id TEXT PRIMARY KEY, status TEXT NOT NULL)`);
      // The ORM on a connection of its own to the file, as an application would have it.
      const db = new Kysely<Tables>({ dialect: new SqliteDialect({ database: new Database(file, { timeout: 5000 }) }) });
      return kysely(plain, db, orders, things, {
        count: async (sql, params) => (database.prepare(sql).get(...params) as { n: number }).n,
        close: async () => {
          await db.destroy();
          plain.close();
          database.close();
        },
        drop: async () => {
          database.exec(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${things}; DROP TABLE IF EXISTS ${table}`);
        },
      });
    }
    case 'drizzle-postgres': {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 5 });
      pool.on('error', () => {});
      const plain = postgresStore({ pool, table });
      await plain.migrate();
      await pool.query(`CREATE TABLE IF NOT EXISTS ${orders} (key text NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id text PRIMARY KEY, status text NOT NULL)`);
      const db = drizzlePg(pool);
      const orderTable = pgTable(orders, { key: pgText('key').notNull() });
      const thingTable = pgTable(things, { id: pgText('id').primaryKey(), status: pgText('status').notNull() });
      const store = drizzleTransactions(plain, db);
      return {
        store,
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as typeof db).insert(orderTable).values({ key })),
        lateWrites: (tx, key) => {
          const query = (tx as typeof db).insert(orderTable).values({ key });
          const client = (tx as unknown as { session: { client: pg.PoolClient } }).session.client;
          // Drizzle's internals object is plain; its session leads to the same connection.
          const internal = (tx as unknown as { _: { session: { client: pg.PoolClient } } })._.session.client;
          return [
            { what: 'await tx.insert(…).values(…)', run: () => query },
            { what: 'query.execute()', run: () => query.execute() },
            { what: 'tx.session.client.query(…)', run: () => client.query(`INSERT INTO ${orders} (key) VALUES ($1)`, [key]) },
            { what: 'tx._.session.client.query(…)', run: () => internal.query(`INSERT INTO ${orders} (key) VALUES ($1)`, [key]) },
          ];
        },
        countOrders: async (key) => Number((await pool.query(`SELECT count(*) AS n FROM ${orders} WHERE key = $1`, [key])).rows[0].n),
        inOrmTransaction: (fn) => db.transaction((tx) => fn(drizzleExecutor(tx, 'postgres'), tx)),
        statusOf: async (id) => (await db.select().from(thingTable).where(eq(thingTable.id, id)))[0]?.status,
        close: () => pool.end(),
        drop: async () => {
          await pool.query(`DROP TABLE IF EXISTS ${orders}, ${things}; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
        },
      };
    }
    case 'drizzle-sqlite': {
      const database = new Database(file, { timeout: 5000 });
      const plain = sqliteStore({ database, table });
      database.exec(`CREATE TABLE IF NOT EXISTS ${orders} (key TEXT NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id TEXT PRIMARY KEY, status TEXT NOT NULL)`);
      // The bridge's Drizzle on a connection of its own to the file, as docs/orm.md asks.
      const connection = new Database(file, { timeout: 5000 });
      const db = drizzleSqlite(connection);
      const orderTable = sqliteTable(orders, { key: sqliteText('key').notNull() });
      const thingTable = sqliteTable(things, { id: sqliteText('id').primaryKey(), status: sqliteText('status').notNull() });
      const store = drizzleTransactions(plain, db);
      return {
        store,
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as typeof db).insert(orderTable).values({ key })),
        lateWrites: (tx, key) => {
          const query = (tx as typeof db).insert(orderTable).values({ key });
          const client = (tx as unknown as { session: { client: Database.Database } }).session.client;
          return [
            { what: 'await tx.insert(…).values(…)', run: () => query },
            { what: 'query.run()', run: () => query.run() },
            { what: 'tx.session.client.prepare(…)', run: () => client.prepare(`INSERT INTO ${orders} (key) VALUES (?)`).run(key) },
          ];
        },
        countOrders: async (key) => (database.prepare(`SELECT count(*) AS n FROM ${orders} WHERE key = ?`).get(key) as { n: number }).n,
        // An ORM transaction opened directly, the way the bridge opens one (Drizzle's own are synchronous).
        inOrmTransaction: async (fn) => {
          const opened = await store.beginTransaction();
          try {
            const result = await fn(drizzleExecutor(opened.tx as object, 'sqlite'), opened.tx);
            await opened.commit();
            return result;
          } catch (error) {
            await opened.rollback();
            throw error;
          }
        },
        statusOf: async (id) => (await db.select().from(thingTable).where(eq(thingTable.id, id)))[0]?.status,
        close: async () => {
          connection.close();
          plain.close();
          database.close();
        },
        drop: async () => {
          database.exec(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${things}; DROP TABLE IF EXISTS ${table}`);
        },
      };
    }
    case 'knex-postgres':
    case 'knex-mysql': {
      const postgres = combo === 'knex-postgres';
      const knex = knexFactory(postgres ? { client: 'pg', connection: POSTGRES_URL, pool: { min: 0, max: 5 } } : { client: 'mysql2', connection: MYSQL_URL, pool: { min: 0, max: 5 } });
      const pgPool = postgres ? new pg.Pool({ connectionString: POSTGRES_URL, max: 5 }) : undefined;
      const mysqlPool = postgres ? undefined : mysql.createPool({ uri: MYSQL_URL, connectionLimit: 5 });
      pgPool?.on('error', () => {});
      const plain = pgPool ? postgresStore({ pool: pgPool, table }) : mysqlStore({ pool: mysqlPool!, table });
      await plain.migrate();
      await knex.raw(`CREATE TABLE IF NOT EXISTS ${orders} (${postgres ? 'key' : '`key`'} VARCHAR(64) NOT NULL)`);
      await knex.raw(`CREATE TABLE IF NOT EXISTS ${things} (id VARCHAR(64) PRIMARY KEY, status VARCHAR(32) NOT NULL)`);
      return {
        store: knexTransactions(plain, knex),
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as Knex.Transaction)(orders).insert({ key })),
        lateWrites: (tx, key) => knexLateWrites(tx as Knex.Transaction, orders, key),
        countOrders: async (key) => Number(((await knex(orders).where({ key }).count({ n: '*' })) as Array<{ n: number | string }>)[0]!.n),
        inOrmTransaction: (fn) => knex.transaction((trx) => fn(knexExecutor(trx), trx)),
        statusOf: async (id) => ((await knex(things).where({ id }).first()) as { status: string } | undefined)?.status,
        close: async () => {
          await knex.destroy();
          await pgPool?.end();
          await mysqlPool?.end();
        },
        drop: async () => {
          await knex.schema.dropTableIfExists(orders).dropTableIfExists(things).dropTableIfExists(table);
          if (postgres) await knex.raw(`DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
        },
      };
    }
    case 'knex-sqlite': {
      const database = new Database(file, { timeout: 5000 });
      const plain = sqliteStore({ database, table });
      database.exec(`CREATE TABLE IF NOT EXISTS ${orders} (key TEXT NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id TEXT PRIMARY KEY, status TEXT NOT NULL)`);
      // Knex's own connection to the file (its SQLite pool holds one: other queries wait for a transaction).
      const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true });
      return {
        store: knexTransactions(plain, knex),
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as Knex.Transaction)(orders).insert({ key })),
        lateWrites: (tx, key) => knexLateWrites(tx as Knex.Transaction, orders, key),
        countOrders: async (key) => (database.prepare(`SELECT count(*) AS n FROM ${orders} WHERE key = ?`).get(key) as { n: number }).n,
        inOrmTransaction: (fn) => knex.transaction((trx) => fn(knexExecutor(trx), trx)),
        statusOf: async (id) => ((await knex(things).where({ id }).first()) as { status: string } | undefined)?.status,
        close: async () => {
          await knex.destroy();
          plain.close();
          database.close();
        },
        drop: async () => {
          database.exec(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${things}; DROP TABLE IF EXISTS ${table}`);
        },
      };
    }
    case 'typeorm-sqlite': {
      const database = new Database(file, { timeout: 5000 });
      const plain = sqliteStore({ database, table });
      database.exec(`CREATE TABLE IF NOT EXISTS ${orders} (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id TEXT PRIMARY KEY, status TEXT NOT NULL)`);
      const Order = new EntitySchema<{ id: number; key: string }>({ name: orders, tableName: orders, columns: { id: { type: Number, primary: true, generated: true }, key: { type: String } } });
      const Thing = new EntitySchema<{ id: string; status: string }>({ name: things, tableName: things, columns: { id: { type: String, primary: true }, status: { type: String } } });
      // A DataSource on SQLite is one connection that all its queries share: it carries the
      // transactions only, and the counts and reads go through `database` (docs/orm.md).
      const dataSource = new DataSource({ type: 'better-sqlite3', database: file, entities: [Order, Thing], timeout: 5000 });
      await dataSource.initialize();
      return {
        store: typeormTransactions(plain, dataSource),
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as EntityManager).getRepository(Order).insert({ key })),
        lateWrites: (tx, key) => typeormLateWrites(tx as EntityManager, Order, key),
        countOrders: async (key) => (database.prepare(`SELECT count(*) AS n FROM ${orders} WHERE key = ?`).get(key) as { n: number }).n,
        inOrmTransaction: (fn) => dataSource.transaction((manager) => fn(typeormExecutor(manager), manager)),
        statusOf: async (id) => (database.prepare(`SELECT status FROM ${things} WHERE id = ?`).get(id) as { status: string } | undefined)?.status,
        close: async () => {
          await dataSource.destroy();
          plain.close();
          database.close();
        },
        drop: async () => {
          database.exec(`DROP TABLE IF EXISTS ${orders}; DROP TABLE IF EXISTS ${things}; DROP TABLE IF EXISTS ${table}`);
        },
      };
    }
    case 'typeorm-postgres':
    case 'typeorm-mysql': {
      const postgres = combo === 'typeorm-postgres';
      const Order = new EntitySchema<{ id: number; key: string }>({
        name: orders,
        tableName: orders,
        columns: { id: { type: Number, primary: true, generated: true }, key: { type: String, length: 64 } },
      });
      const Thing = new EntitySchema<{ id: string; status: string }>({
        name: things,
        tableName: things,
        columns: { id: { type: String, primary: true, length: 64 }, status: { type: String, length: 32 } },
      });
      const dataSource = new DataSource(
        postgres
          ? { type: 'postgres', url: POSTGRES_URL, entities: [Order, Thing], poolSize: 5 }
          : { type: 'mysql', url: MYSQL_URL, entities: [Order, Thing], poolSize: 5 },
      );
      await dataSource.initialize();
      const pgPool = postgres ? new pg.Pool({ connectionString: POSTGRES_URL, max: 5 }) : undefined;
      const mysqlPool = postgres ? undefined : mysql.createPool({ uri: MYSQL_URL, connectionLimit: 5 });
      pgPool?.on('error', () => {});
      const plain = pgPool ? postgresStore({ pool: pgPool, table }) : mysqlStore({ pool: mysqlPool!, table });
      await plain.migrate();
      const key = postgres ? 'key' : '`key`';
      await dataSource.query(`CREATE TABLE IF NOT EXISTS ${orders} (id ${postgres ? 'serial' : 'INT AUTO_INCREMENT'} PRIMARY KEY, ${key} VARCHAR(64) NOT NULL)`);
      await dataSource.query(`CREATE TABLE IF NOT EXISTS ${things} (id VARCHAR(64) PRIMARY KEY, status VARCHAR(32) NOT NULL)`);
      return {
        store: typeormTransactions(plain, dataSource),
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as EntityManager).getRepository(Order).insert({ key })),
        lateWrites: (tx, key) => typeormLateWrites(tx as EntityManager, Order, key),
        countOrders: (key) => dataSource.getRepository(Order).countBy({ key }),
        inOrmTransaction: (fn) => dataSource.transaction((manager) => fn(typeormExecutor(manager), manager)),
        statusOf: async (id) => (await dataSource.getRepository(Thing).findOneBy({ id }))?.status,
        close: async () => {
          await dataSource.destroy();
          await pgPool?.end();
          await mysqlPool?.end();
        },
        drop: async () => {
          await dataSource.query(`DROP TABLE IF EXISTS ${orders}`);
          await dataSource.query(`DROP TABLE IF EXISTS ${things}`);
          await dataSource.query(`DROP TABLE IF EXISTS ${table}${postgres ? ' CASCADE' : ''}`);
          if (postgres) await dataSource.query(`DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
        },
      };
    }
    case 'prisma-postgres': {
      const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 5 });
      pool.on('error', () => {});
      const plain = postgresStore({ pool, table });
      await plain.migrate();
      // Plain SQL, not `prisma migrate`: that needs Prisma's schema engine, a download.
      await pool.query(`CREATE TABLE IF NOT EXISTS ${orders} (id serial PRIMARY KEY, key text NOT NULL); CREATE TABLE IF NOT EXISTS ${things} (id text PRIMARY KEY, status text NOT NULL)`);
      const prisma = await prismaClient(name, orders, things, POSTGRES_URL);
      return {
        store: prismaTransactions(plain, prisma),
        rebridge: (options) => prismaTransactions(plain, prisma, options),
        plain,
        things,
        insertOrder: async (tx, key) => void (await (tx as TestPrismaTransaction).order.create({ data: { key } })),
        lateWrites: (tx, key) => {
          const create = (tx as TestPrismaTransaction).order.create({ data: { key } });
          const raw = (tx as TestPrismaTransaction).$executeRawUnsafe(`INSERT INTO ${orders} (key) VALUES ($1)`, key);
          return [
            { what: 'await tx.order.create(…)', run: () => create, refusedBy: /Transaction already closed/ },
            { what: 'await tx.$executeRawUnsafe(…)', run: () => raw },
          ];
        },
        countOrders: (key) => prisma.order.count({ where: { key } }),
        inOrmTransaction: (fn) => prisma.$transaction((tx) => fn(prismaExecutor(tx), tx)),
        statusOf: async (id) => (await prisma.thing.findUnique({ where: { id } }))?.status,
        close: async () => {
          await prisma.$disconnect();
          await pool.end();
        },
        drop: async () => {
          await pool.query(`DROP TABLE IF EXISTS ${orders}, ${things}; DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
          removeGenerated(name);
        },
      };
    }
  }
}

// Kysely's table types, loose: the table names are made per test.
type Tables = Record<string, { key: string; id: string; status: string }>;

interface Raw {
  count(sql: string, params: unknown[]): Promise<number>;
  close(): Promise<void>;
  drop(): Promise<void>;
}

function kysely(plain: IdempotencyStore, db: Kysely<Tables>, orders: string, things: string, raw: Raw): OrmBackend {
  const store = kyselyTransactions(plain, db);
  const quote = (column: string) => (plain.name === 'mysql' ? `\`${column}\`` : column);
  return {
    store,
    plain,
    things,
    async insertOrder(tx, key) {
      await (tx as Kysely<Tables>).insertInto(orders).values({ key } as never).execute();
    },
    lateWrites(tx, key) {
      // Kysely's builders are not thenables: a query runs on `execute()`.
      const query = (tx as Kysely<Tables>).insertInto(orders).values({ key } as never);
      return [{ what: 'query.execute()', run: () => query.execute() }];
    },
    countOrders: (key) => raw.count(`SELECT count(*) AS n FROM ${orders} WHERE ${quote('key')} = ?`, [key]),
    inOrmTransaction: (fn) => db.transaction().execute((trx) => fn(kyselyExecutor(trx), trx)),
    async statusOf(id) {
      const row = await db.selectFrom(things).select('status').where('id', '=', id).executeTakeFirst();
      return row?.status;
    },
    close: raw.close,
    drop: raw.drop,
  };
}

function knexLateWrites(trx: Knex.Transaction, orders: string, key: string): LateWrite[] {
  // Knex's builders and raw queries are thenables that start their query when awaited.
  const query = trx(orders).insert({ key });
  const raw = trx.raw(`INSERT INTO ${orders} VALUES (?)`, [key]);
  return [
    { what: 'await trx(orders).insert(…)', run: () => query },
    { what: 'await trx.raw(…)', run: () => raw },
  ];
}

function typeormLateWrites(manager: EntityManager, entity: EntitySchema<{ id: number; key: string }>, key: string): LateWrite[] {
  const query = manager.createQueryBuilder().insert().into(entity).values({ key });
  const runner = manager.queryRunner!;
  const insert = manager.connection.driver.escape('key');
  return [
    { what: 'query.execute()', run: () => query.execute() },
    { what: 'manager.queryRunner.query(…)', run: () => runner.query(`INSERT INTO ${manager.connection.getMetadata(entity).tableName} (${insert}) VALUES ('${key}')`) },
  ];
}
