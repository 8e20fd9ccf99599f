/**
 * Issue 26 item 11: in transactional mode each request holds a pooled connection for its
 * transaction while its handler runs, so with as many requests as connections the lease renewals
 * wait for a connection until the lease runs out, and another instance takes the keys over. Now
 * (a) the keeper warns that renewals are starved and does not pile them up in the pool's queue,
 * and (b) `leasePool` gives renewals a pool of their own, so the leases hold while the handlers
 * hold every connection of `pool`.
 *
 * Real PostgreSQL and MariaDB, real concurrency through the Web adapter; the handlers are held on a
 * promise and the test waits for events (a log line, a number of renewals), never for a duration.
 */
import pg from 'pg';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import type { IdempotencyStore, TransactionalStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { dropTable, newPool, sleep, uniqueTable, until } from './postgres-support.js';
import { latch, recordingLogger } from '../support/recording.js';

const MYSQL = { host: '127.0.0.1', port: 3306, user: 'root', database: 'test' } as const;

/** The store with its renewals counted: sent, and answered true, per key. */
function countingRenewals<S extends IdempotencyStore>(store: S) {
  let sent = 0;
  const renewed = new Map<string, number>();
  const proxy = new Proxy(store, {
    get(target, name, receiver) {
      if (name === 'renew') {
        return async (...args: Parameters<IdempotencyStore['renew']>) => {
          sent++;
          const ok = await target.renew(...args);
          if (ok) renewed.set(args[0].key, (renewed.get(args[0].key) ?? 0) + 1);
          return ok;
        };
      }
      const value = Reflect.get(target, name, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: proxy, sent: () => sent, renewed: (key: string) => renewed.get(key) ?? 0 };
}

const post = (key: string) =>
  new Request('http://local/orders', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{}' });

/** Two handlers that each hold their request's transaction (a pooled connection) until `release`. */
function heldHandlers() {
  const gate = latch();
  let inside = 0;
  let executions = 0;
  const handler = async () => {
    executions++;
    inside++;
    await gate.promise;
    return Response.json({ ok: true }, { status: 201 });
  };
  return { handler, inside: () => inside, executions: () => executions, release: gate.open };
}

type Backend = {
  /** A store on a pool of two connections, and with `lease` a store whose renewals use a pool of one. */
  store(lease: boolean): Promise<TransactionalStore>;
  /** A second instance: its own store on its own pool. */
  other(): Promise<IdempotencyStore>;
  /** Rows per key and their states. */
  rows(keys: readonly string[]): Promise<Array<{ key: string; state: string }>>;
  /** The number of requests waiting for one of the main pool's connections (the starved renewals). */
  waiting(): number;
  close(): Promise<void>;
};

function postgresBackend(): Backend {
  const table = uniqueTable();
  const pools: pg.Pool[] = [];
  let main: pg.Pool | undefined;
  const pool = (max: number) => {
    const made = newPool({ max });
    pools.push(made);
    return made;
  };
  return {
    async store(lease) {
      main = pool(2);
      const store = postgresStore({ pool: main, table, ...(lease ? { leasePool: pool(1) } : {}) });
      await store.migrate();
      return store;
    },
    async other() {
      return postgresStore({ pool: pool(2), table });
    },
    async rows(keys) {
      const { rows } = await pools[0]!.query(`SELECT key, state FROM "${table}" WHERE key = ANY($1) ORDER BY key`, [keys]);
      return rows as Array<{ key: string; state: string }>;
    },
    waiting: () => main!.waitingCount,
    async close() {
      const admin = newPool({ max: 1 });
      await dropTable(admin, table);
      await admin.end();
      await Promise.all(pools.map((p) => p.end()));
    },
  };
}

function mysqlBackend(): Backend {
  const table = `idem_lease_${Math.random().toString(36).slice(2, 10)}`;
  const pools: mysql.Pool[] = [];
  let queued = 0;
  const pool = (connectionLimit: number) => {
    const made = mysql.createPool({ ...MYSQL, connectionLimit });
    pools.push(made);
    return made;
  };
  return {
    async store(lease) {
      const main = pool(2);
      // mysql2 has no public count of waiters: count the getConnection calls not yet answered.
      const counted = {
        getConnection: async () => {
          queued++;
          try {
            return await main.getConnection();
          } finally {
            queued--;
          }
        },
      };
      const store = mysqlStore({ pool: counted, table, ...(lease ? { leasePool: pool(1) } : {}) });
      await store.migrate();
      return store;
    },
    async other() {
      return mysqlStore({ pool: pool(2), table });
    },
    async rows(keys) {
      const [rows] = await pools[0]!.query(`SELECT CAST(idem_key AS CHAR) AS k, state FROM \`${table}\` WHERE idem_key IN (?) ORDER BY idem_key`, [keys]);
      return (rows as Array<{ k: string; state: string }>).map(({ k, state }) => ({ key: k, state }));
    },
    waiting: () => queued,
    async close() {
      await pools[0]?.query(`DROP TABLE IF EXISTS \`${table}\``);
      await Promise.all(pools.map((p) => p.end()));
    },
  };
}

describe.each([
  { backend: 'PostgreSQL', make: postgresBackend },
  { backend: 'MariaDB', make: mysqlBackend },
])('renewals in transactional mode with every pooled connection held ($backend)', ({ make }) => {
  it('without leasePool: the starvation is logged, and renewals do not pile up behind the transactions', async () => {
    const backend = make();
    try {
      const { store, sent } = countingRenewals(await backend.store(false));
      const { lines, logger } = recordingLogger();
      const held = heldHandlers();
      const handle = withIdempotency(held.handler, { store, transactional: true, leaseMs: 300, logger });
      const keys = ['a-1', 'a-2'];
      const answers = keys.map((key) => handle(post(key)));
      await until(async () => held.inside() === 2, 'both handlers inside their transactions');
      await until(async () => lines.length > 0, 'the starvation warning');
      expect(lines[0]!.level).toBe('warn');
      expect(lines[0]!.message).toMatch(/^idemkit: lease renewal starved: the renewal of the lease on key "a-[12]" has waited \d+ ms/);
      expect(lines[0]!.message).toContain("queued behind the store's connections");
      expect(lines[0]!.message).toContain('`leasePool`');
      // Let many more renewal periods pass: each execution still has its one renewal waiting, no more.
      await sleep(1_000);
      expect(sent()).toBe(2);
      expect(backend.waiting()).toBe(2);
      expect(lines).toHaveLength(1);
      held.release();
      expect((await Promise.all(answers)).map((answer) => answer.status)).toEqual([201, 201]);
      await until(async () => backend.waiting() === 0, 'the waiting renewals answered');
    } finally {
      await backend.close();
    }
  });

  it('with leasePool: the leases are renewed while the handlers hold every connection of pool, and another instance cannot take the keys over', async () => {
    const backend = make();
    try {
      const { store, renewed } = countingRenewals(await backend.store(true));
      const { lines, logger } = recordingLogger();
      const lost: unknown[] = [];
      const held = heldHandlers();
      const leaseMs = 600;
      const handle = withIdempotency(held.handler, { store, transactional: true, leaseMs, logger, events: { leaseLost: (event) => lost.push(event) } });
      const keys = ['b-1', 'b-2'];
      const answers = keys.map((key) => handle(post(key)));
      await until(async () => held.inside() === 2, 'both handlers inside their transactions');
      // Four renewals each, a tick (a third of the lease) apart: more than a lease has passed since each claim.
      await until(async () => keys.every((key) => renewed(key) >= 4), 'four renewals of each lease');
      // A second instance retrying now finds the keys in flight: the leases held.
      const second = withIdempotency(held.handler, { store: await backend.other(), leaseMs, logger });
      expect((await Promise.all(keys.map((key) => second(post(key))))).map((answer) => answer.status)).toEqual([409, 409]);
      held.release();
      expect((await Promise.all(answers)).map((answer) => answer.status)).toEqual([201, 201]);
      expect(held.executions()).toBe(2);
      expect(lost).toEqual([]);
      expect(await backend.rows(keys)).toEqual(keys.map((key) => ({ key, state: 'completed' })));
      expect(lines).toEqual([]);
    } finally {
      await backend.close();
    }
  });
});

describe('leasePool is validated when the store is made', () => {
  let pool: pg.Pool;
  let my: mysql.Pool;
  beforeAll(() => {
    pool = newPool({ max: 1 });
    my = mysql.createPool({ ...MYSQL, connectionLimit: 1 });
  });
  afterAll(async () => {
    await pool.end();
    await my.end();
  });

  it('refuses the main pool itself, a pg Client and something without query()', () => {
    const refused = (make: () => unknown) => {
      try {
        make();
      } catch (error) {
        expect(error).toBeInstanceOf(InvalidOptionError);
        return (error as Error).message;
      }
      throw new Error('accepted');
    };
    expect(refused(() => postgresStore({ pool, leasePool: pool }))).toMatch(/`leasePool`: expected a pool of its own/);
    expect(refused(() => postgresStore({ pool, leasePool: new pg.Client() as never }))).toMatch(/leasePool.*pg\.Client/);
    expect(refused(() => postgresStore({ pool, leasePool: { connect: async () => ({}) } as never }))).toMatch(/leasePool.*`query\(\)`/);
    expect(refused(() => mysqlStore({ pool: my, leasePool: my }))).toMatch(/leasePool.*a pool of its own/);
    expect(refused(() => mysqlStore({ pool: my, leasePool: {} as never }))).toMatch(/leasePool.*`getConnection\(\)`/);
  });
});
