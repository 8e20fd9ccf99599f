/**
 * Issue 18, item 3: transactional mode through the user's ORM. A real HTTP server (the web adapter,
 * in a child process so it can be SIGKILLed) writes its business row through the ORM's own
 * transaction object (`ctx.tx`); the record's completion commits in that transaction. Then the
 * fencing of a stale owner and idemkit/patterns inside an ORM transaction, in this process.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import knexFactory from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError, LeaseLostError, TransactionEndedError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { drizzleTransactions } from '../../src/orm/drizzle.js';
import { knexTransactions } from '../../src/orm/knex.js';
import { kyselyTransactions } from '../../src/orm/kysely.js';
import { prismaTransactions } from '../../src/orm/prisma.js';
import { typeormTransactions } from '../../src/orm/typeorm.js';
import { insertOnce, transition } from '../../src/patterns/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { killAll, startServer, work } from '../proof/spawn.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';
import type { Combo, LateWrite, OrmBackend } from './backends.js';
import { databaseOf, openOrm } from './backends.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-orm-'));
afterAll(() => {
  killAll();
  rmSync(dir, { recursive: true, force: true });
});

const ALL: Combo[] = (process.env.ORM_COMBOS?.split(',') as Combo[] | undefined) ?? [
  'kysely-postgres',
  'kysely-mysql',
  'kysely-sqlite',
  'drizzle-postgres',
  'drizzle-sqlite',
  'knex-postgres',
  'knex-mysql',
  'knex-sqlite',
  'typeorm-postgres',
  'typeorm-mysql',
  'typeorm-sqlite',
  'prisma-postgres',
];
const up = { postgres: await requireService(POSTGRES), mysql: await requireService(MARIADB), sqlite: true };
const combos = ALL.filter((combo) => up[databaseOf(combo)]);
const LEASE_MS = 1500;
const script = join(import.meta.dirname, 'server.ts');
const response = { status: 201, headers: [] as Array<[string, string]>, body: new Uint8Array([1, 2, 255]), bodyOmitted: false };

const isPrisma = (combo: Combo) => combo.startsWith('prisma');

/** The same request again until it is no longer refused as in flight (a failed attempt's record may linger briefly). */
async function untilNotInFlight(request: () => Promise<Response>): Promise<Response> {
  for (;;) {
    const answer = await request();
    if (answer.status !== 409) return answer;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Waits until the dead owner's lease has run out on the store's clock. */
async function leaseExpired(store: IdempotencyStore, key: string): Promise<void> {
  for (;;) {
    const record = await store.get({ scope: 'orm', key });
    if (!record || record.state !== 'in_flight' || record.leaseUntil <= Date.now()) return;
    await new Promise((r) => setTimeout(r, Math.max(10, record.leaseUntil - Date.now())));
  }
}

describe.each(combos)('transactional mode through %s', (combo) => {
  const name = `${combo.replace('-', '_')}_${randomUUID().slice(0, 8)}`;
  const env = { COMBO: combo, NAME: name, SQLITE_FILE: join(dir, `${name}.db`), LEASE_MS: String(LEASE_MS) };
  let backend: OrmBackend;
  let server: Awaited<ReturnType<typeof startServer>>;
  beforeAll(async () => {
    backend = await openOrm(combo, name, env.SQLITE_FILE);
    server = await startServer(env, script);
  }, 30_000);
  afterAll(async () => {
    server?.kill();
    await backend?.drop();
    await backend?.close();
  });
  const record = (key: string) => backend.plain.get({ scope: 'orm', key });

  it('the business row and the completed record commit together; the retry replays without executing', async () => {
    const key = randomUUID();
    const first = await work(server.url, key);
    expect(first.status).toBe(201);
    expect(await backend.countOrders(key)).toBe(1);
    expect((await record(key))?.state).toBe('completed');
    const retry = await work(server.url, key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.json()).toEqual(await first.json());
    expect(await backend.countOrders(key)).toBe(1);
  });

  it('a handler that throws after its write leaves neither the row nor a record; the retry executes once', async () => {
    const key = randomUUID();
    const failed = await work(server.url, key, { 'x-fail': 'throw' });
    expect(failed.status).toBe(500);
    expect(await backend.countOrders(key)).toBe(0);
    expect(await record(key)).toBeUndefined();
    const retry = await work(server.url, key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await backend.countOrders(key)).toBe(1);
  });

  it('SIGKILLed between the write and the answer: nothing committed, and the retry after the lease executes once', async () => {
    const key = randomUUID();
    const doomed = await startServer(env, script);
    await expect(work(doomed.url, key, { 'x-crash': 'after-insert' })).rejects.toThrow();
    expect(await doomed.exited).toBe('SIGKILL');
    expect(await backend.countOrders(key)).toBe(0);
    expect((await record(key))?.state).toBe('in_flight');
    await leaseExpired(backend.plain, key);
    const retry = await work(server.url, key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await backend.countOrders(key)).toBe(1);
    expect((await record(key))?.state).toBe('completed');
    expect((await work(server.url, key)).headers.get('idempotent-replayed')).toBe('true');
  }, 60_000);

  it('an owner whose lease was taken over cannot commit: its ORM transaction rolls back', async () => {
    const ref = { scope: 'orm', key: randomUUID() };
    const { store } = backend;
    const first = await store.claim(ref, 'fp', { leaseMs: 1, windowMs: 60_000 });
    if (first.kind !== 'acquired') throw new Error(`expected a claim, got ${first.kind}`);
    let second = await store.claim(ref, 'fp', { leaseMs: 60_000, windowMs: 60_000 });
    while (second.kind === 'in_flight') {
      await new Promise((r) => setTimeout(r, 5));
      second = await store.claim(ref, 'fp', { leaseMs: 60_000, windowMs: 60_000 });
    }
    if (second.kind !== 'acquired') throw new Error(`expected a takeover, got ${second.kind}`);
    expect(second.takeover).toBe(true);

    const stale = await store.beginTransaction();
    await backend.insertOrder(stale.tx, ref.key);
    await expect(stale.complete(ref, first.token, response)).rejects.toBeInstanceOf(LeaseLostError);
    await stale.rollback();
    expect(await backend.countOrders(ref.key)).toBe(0);
    expect((await backend.plain.get(ref))?.state).toBe('in_flight');
    // The transaction is over: its completion is refused rather than run outside it.
    await expect(stale.complete(ref, second.token, response)).rejects.toBeInstanceOf(TransactionEndedError);

    const current = await store.beginTransaction();
    await backend.insertOrder(current.tx, ref.key);
    await current.checkpoint(ref, second.token, 'written', { n: 1 });
    await current.complete(ref, second.token, response);
    await current.commit();
    expect(await backend.countOrders(ref.key)).toBe(1);
    const done = await backend.plain.get(ref);
    expect(done?.state).toBe('completed');
    expect([...done!.response!.body!]).toEqual([1, 2, 255]);
  });

  // SQLite has one writer per file: a second request cannot take over while the first one's
  // transaction holds the file, so there the takeover is shown before the transaction (above).
  it.skipIf(databaseOf(combo) === 'sqlite')('through the adapter: a request that lost its lease mid-handler cannot commit; the one that took over does', async () => {
    let wrote!: () => void;
    const written = new Promise<void>((resolve) => (wrote = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const handler = withIdempotency(
      async (_request, ctx) => {
        const call = ++calls;
        await backend.insertOrder(ctx!.tx, ctx!.key);
        if (call === 1) {
          wrote();
          await released;
        }
        return Response.json({ call }, { status: 201 });
      },
      { store: backend.store, transactional: true, leaseMs: 200, renewLease: false, scope: () => 'orm', onError: () => {} },
    );
    const key = randomUUID();
    const request = () => handler(new Request('http://x/pay', { method: 'POST', headers: { 'idempotency-key': key } }));
    const stale = request();
    await written;
    await leaseExpired(backend.plain, key);
    const current = await request();
    expect(current.status).toBe(201);
    expect(await current.json()).toEqual({ call: 2 });
    release();
    const lost = await stale;
    expect(lost.status).not.toBe(201);
    expect(await backend.countOrders(key)).toBe(1);
    const replay = await request();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual({ call: 2 });
  }, 30_000);

  it('ctx.tx is refused once the request is over: a late write cannot land outside the transaction', async () => {
    let kept: unknown;
    const handler = withIdempotency(
      async (_request, ctx) => {
        kept = ctx!.tx;
        await backend.insertOrder(ctx!.tx, ctx!.key);
        return new Response('ok', { status: 201 });
      },
      { store: backend.store, transactional: true, scope: () => 'orm' },
    );
    const key = randomUUID();
    const answer = await handler(new Request('http://x/pay', { method: 'POST', headers: { 'idempotency-key': key } }));
    expect(answer.status).toBe(201);
    // On Prisma too: a model delegate (`tx.order`) is a plain object of methods in a property, so
    // the fence wraps it, and idemkit refuses the call before Prisma would.
    await expect(backend.insertOrder(kept, key)).rejects.toBeInstanceOf(TransactionEndedError);
    if (combo.startsWith('prisma')) {
      expect(() => (kept as { $executeRawUnsafe(sql: string): unknown }).$executeRawUnsafe('SELECT 1')).toThrow(TransactionEndedError);
    }
    expect(await backend.countOrders(key)).toBe(1);
  });

  // Issue 26 item 2: a Drizzle query built in the handler and awaited after the answer ran on the
  // released pooled connection, outside any transaction. Every write the handler prepared through
  // ctx.tx (a lazy query, a driver object read through a property) is refused after the answer.
  it('a query built in the handler and run after its answer is refused, as is a driver object read through a property', async () => {
    let late: LateWrite[] = [];
    const handler = withIdempotency(
      async (_request, ctx) => {
        await backend.insertOrder(ctx!.tx, ctx!.key);
        late = backend.lateWrites(ctx!.tx, ctx!.key);
        return new Response('ok', { status: 201 });
      },
      { store: backend.store, transactional: true, scope: () => 'orm' },
    );
    const key = randomUUID();
    expect((await handler(new Request('http://x/pay', { method: 'POST', headers: { 'idempotency-key': key } }))).status).toBe(201);
    expect(late.length).toBeGreaterThan(0);
    const outcomes: string[] = [];
    for (const write of late) {
      try {
        await write.run();
        outcomes.push(`${write.what}: wrote`);
      } catch (error) {
        const refused = error instanceof TransactionEndedError || write.refusedBy?.test(String(error)) === true;
        outcomes.push(`${write.what}: ${refused ? 'refused' : String(error)}`);
      }
    }
    expect(outcomes).toEqual(late.map((write) => `${write.what}: refused`));
    expect(await backend.countOrders(key)).toBe(1);
  });

  // Prisma rolls an interactive transaction back past its `timeout`: the request cannot commit then.
  it.runIf(isPrisma(combo))('a handler that outlives the Prisma transaction\'s timeout commits nothing; the retry executes', async () => {
    let calls = 0;
    const handler = (store: typeof backend.store) => withIdempotency(
      async (_request, ctx) => {
        const call = ++calls;
        await backend.insertOrder(ctx!.tx, ctx!.key);
        if (call === 1) {
          // Until Prisma has expired the transaction (no clock read: its own refusal says so).
          for (;;) {
            try {
              await (ctx!.tx as { $queryRawUnsafe(sql: string): Promise<unknown> }).$queryRawUnsafe('SELECT 1');
            } catch {
              break;
            }
            await new Promise((r) => setTimeout(r, 20));
          }
        }
        return Response.json({ call }, { status: 201 });
      },
      { store, transactional: true, scope: () => 'orm', onError: () => {} },
    );
    const key = randomUUID();
    const request = (store: typeof backend.store) => handler(store)(new Request('http://x/pay', { method: 'POST', headers: { 'idempotency-key': key } }));
    const expired = await request(backend.rebridge!({ timeout: 50 }));
    expect(expired.status).not.toBe(201);
    expect(await backend.countOrders(key)).toBe(0);
    expect((await record(key))?.state).not.toBe('completed');
    // The retry on the default timeout: a loaded machine must not expire it too.
    const retry = await untilNotInFlight(() => request(backend.store));
    expect(retry.status).toBe(201);
    expect(await retry.json()).toEqual({ call: 2 });
    expect(await backend.countOrders(key)).toBe(1);
  });

  it('insertOnce and transition run inside an ORM transaction, and roll back with it', async () => {
    const id = randomUUID();
    const things = backend.things;
    await expect(
      backend.inOrmTransaction(async (x) => {
        expect((await insertOnce(x, { table: things, values: { id, status: 'new' }, conflict: ['id'] })).inserted).toBe(true);
        expect((await transition(x, { table: things, where: { id }, from: 'new', to: 'paid' })).changed).toBe(true);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await backend.statusOf(id)).toBeUndefined();

    await backend.inOrmTransaction(async (x) => {
      expect((await insertOnce(x, { table: things, values: { id, status: 'new' }, conflict: ['id'] })).inserted).toBe(true);
      expect((await insertOnce(x, { table: things, values: { id, status: 'new' }, conflict: ['id'] })).inserted).toBe(false);
      expect((await transition(x, { table: things, where: { id }, from: 'new', to: 'paid' })).changed).toBe(true);
      expect(await transition(x, { table: things, where: { id }, from: 'new', to: 'paid' })).toEqual({ changed: false, current: 'paid' });
    });
    expect(await backend.statusOf(id)).toBe('paid');
  });
});

describe('a bridge refuses what cannot commit the record with the business writes', () => {
  it('a store without SQL transactions, and an ORM on another kind of database, fail at start-up naming the option', () => {
    const pool = new pg.Pool({ max: 1 });
    const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
    expect(() => kyselyTransactions(memoryStore(), kysely)).toThrow(InvalidOptionError);
    expect(() => kyselyTransactions(memoryStore(), kysely)).toThrow(/store.*postgresStore, mysqlStore or sqliteStore/);
    const database = new Database(join(dir, 'refusals.db'));
    const sqlite = sqliteStore({ database, table: 'orm_refusals' });
    try {
      expect(() => kyselyTransactions(sqlite, kysely)).toThrow(/`db`.*postgres.*sqlite/);
      expect(() => knexTransactions(sqlite, knexFactory({ client: 'pg' }))).toThrow(/`knex`.*postgres.*sqlite/);
      expect(() => typeormTransactions(sqlite, new DataSource({ type: 'postgres' }))).toThrow(/`dataSource`.*postgres.*sqlite/);
      expect(() => drizzleTransactions(sqlite, drizzlePg(pool))).toThrow(/`db`.*different kinds of database/);
      const prisma = { _activeProvider: 'postgresql', $transaction: async () => {} };
      expect(() => prismaTransactions(sqlite, prisma)).toThrow(/`store`.*PostgreSQL only.*sqlite/);
      expect(() => prismaTransactions(postgresStore({ pool }), { ...prisma, _activeProvider: 'mysql' })).toThrow(/`prisma`.*mysql/);
      expect(() => prismaTransactions(postgresStore({ pool }), {} as never)).toThrow(/`prisma`.*PrismaClient/);
    } finally {
      sqlite.close();
      database.close();
    }
  });
});

describe('prismaTransactions() options', () => {
  // Prisma rolls an interactive transaction back after 5 s by default; the bridge holds one for a whole handler.
  it('opens each transaction with its timeout and maxWait (defaults far above Prisma\'s 5 s), and refuses bad ones naming them', async () => {
    const pool = new pg.Pool({ max: 1 });
    const store = postgresStore({ pool, table: 'orm_prisma_options' });
    const seen: unknown[] = [];
    const prisma = {
      $transaction: async (fn: (tx: object) => Promise<unknown>, options?: object) => {
        seen.push(options);
        return fn({ $executeRawUnsafe: async () => 0, $queryRawUnsafe: async () => [] });
      },
    };
    for (const bridged of [prismaTransactions(store, prisma), prismaTransactions(store, prisma, { timeout: 60_000, maxWait: 500 })]) {
      const opened = await bridged.beginTransaction();
      await opened.rollback();
    }
    expect(seen).toEqual([{ timeout: 300_000, maxWait: 10_000 }, { timeout: 60_000, maxWait: 500 }]);
    expect(() => prismaTransactions(store, prisma, { timeout: 0 })).toThrow(/`timeout`/);
    expect(() => prismaTransactions(store, prisma, { maxWait: -1 })).toThrow(/`maxWait`/);
    expect(() => prismaTransactions(store, prisma, { timeOut: 1 } as never)).toThrow(/timeOut/);
    await pool.end();
  });
});
