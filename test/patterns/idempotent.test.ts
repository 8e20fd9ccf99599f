/**
 * Issue 18 item 4: `idempotent(fn)` runs a function once per key, on every store: the same
 * suite against memory, SQLite (a file), PostgreSQL, MariaDB and Redis, including 100 concurrent
 * calls with one key → one execution.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createPool } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidKeyError, InvalidOptionError, KeyInFlightError, KeyMismatchError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { idempotent, ResultNotKeptError } from '../../src/patterns/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { dropTable, newPool, uniqueTable } from '../stores/postgres-support.js';
import { connectStoreClient, deleteKeys } from '../support/redis-servers.js';
import { MARIADB, POSTGRES, REDIS, requireService } from '../support/services.js';
import { sqliteFile } from '../support/sqlite-file.js';

interface Backend {
  readonly store: IdempotencyStore;
  close(): Promise<void>;
}

/** Results over 256 bytes are not kept by any store of this suite. */
const MAX_RESPONSE_BYTES = 256;

function describeIdempotent(name: string, up: boolean, open: () => Promise<Backend>): void {
  describe.skipIf(!up)(`idempotent(fn) on ${name}`, () => {
    let backend: Backend;
    beforeAll(async () => {
      backend = await open();
    });
    afterAll(() => backend?.close());

    /** A charge function that counts its runs, wrapped once per test. */
    function charging(extra: Partial<Parameters<typeof idempotent>[1]> = {}) {
      const runs: string[] = [];
      const charge = idempotent(
        async (orderId: string, amount: number) => {
          runs.push(orderId);
          await new Promise((resolve) => setImmediate(resolve));
          return { charged: amount, orderId, at: 'once' };
        },
        { store: backend.store, key: (orderId) => `charge-${orderId}`, scope: 'tenant-a', name: 'charge', ...extra },
      );
      return { charge, runs };
    }

    it('runs once; a repeat returns the stored result without running', async () => {
      const { charge, runs } = charging();
      const id = randomUUID();
      expect(await charge(id, 1200)).toEqual({ charged: 1200, orderId: id, at: 'once' });
      expect(await charge(id, 1200)).toEqual({ charged: 1200, orderId: id, at: 'once' });
      expect(runs).toEqual([id]);
    });

    it('100 concurrent calls with one key run the function once; in wait mode all get its result', async () => {
      const { charge, runs } = charging({ inFlight: 'wait', waitTimeoutMs: 30_000 });
      const id = randomUUID();
      const results = await Promise.all(Array.from({ length: 100 }, () => charge(id, 5)));
      expect(runs).toEqual([id]);
      expect(new Set(results.map((r) => JSON.stringify(r)))).toEqual(new Set([JSON.stringify({ charged: 5, orderId: id, at: 'once' })]));
    });

    it('in conflict mode a call while the first runs throws KeyInFlightError with a retry hint', async () => {
      const { charge, runs } = charging();
      const id = randomUUID();
      const settled = await Promise.allSettled(Array.from({ length: 20 }, () => charge(id, 5)));
      expect(runs).toEqual([id]);
      const refused = settled.filter((s) => s.status === 'rejected').map((s) => (s as PromiseRejectedResult).reason as unknown);
      expect(settled.filter((s) => s.status === 'fulfilled').length + refused.length).toBe(20);
      expect(refused.length).toBeGreaterThan(0);
      for (const error of refused) {
        expect(error).toBeInstanceOf(KeyInFlightError);
        expect((error as KeyInFlightError).retryAfterMs).toBeGreaterThan(0);
      }
    });

    it('the same key with other arguments throws KeyMismatchError; other scopes and functions are apart', async () => {
      const { charge, runs } = charging();
      const id = randomUUID();
      await charge(id, 1);
      await expect(charge(id, 2)).rejects.toBeInstanceOf(KeyMismatchError);
      // Another tenant's call with the key runs on its own.
      const other = idempotent(async (orderId: string, amount: number) => ({ charged: amount, orderId, at: 'tenant-b' }), {
        store: backend.store,
        key: (orderId) => `charge-${orderId}`,
        scope: 'tenant-b',
        name: 'anonymousCharge',
      });
      expect(await other(id, 1)).toEqual({ charged: 1, orderId: id, at: 'tenant-b' });
      // Another function with the same key and scope mismatches instead of replaying a stranger's result.
      const refund = idempotent(async function refund(orderId: string, amount: number) { return { refunded: amount, orderId }; }, {
        store: backend.store,
        key: (orderId) => `charge-${orderId}`,
        scope: 'tenant-a',
      });
      await expect(refund(id, 1)).rejects.toBeInstanceOf(KeyMismatchError);
      expect(runs).toEqual([id]);
    });

    it('a thrown error stores nothing: the key is free and the next call runs', async () => {
      let attempts = 0;
      const flaky = idempotent(
        async function sendInvoice(id: string) {
          attempts++;
          if (attempts === 1) throw new Error('SMTP down');
          return `sent ${id}`;
        },
        { store: backend.store, key: (id) => `invoice-${id}` },
      );
      const id = randomUUID();
      await expect(flaky(id)).rejects.toThrow('SMTP down');
      expect(await flaky(id)).toBe(`sent ${id}`);
      expect(await flaky(id)).toBe(`sent ${id}`);
      expect(attempts).toBe(2);
    });

    it('keeps undefined, null, strings, arrays; keys with quotes and backslashes are keys like others', async () => {
      const values: unknown[] = [undefined, null, 'text', [1, 'two', { three: 3 }]];
      for (const value of values) {
        let runs = 0;
        const fn = idempotent(async function give(_k: string) { runs++; return value; }, { store: backend.store, key: (k) => k });
        const key = `a "quoted\\" key ${randomUUID()}`;
        expect(await fn(key)).toEqual(value);
        expect(await fn(key)).toEqual(value);
        expect(runs).toBe(1);
      }
      const unicode = idempotent(async function give(k: string) { return k; }, { store: backend.store, key: (k) => k });
      await expect(unicode('ключ')).rejects.toBeInstanceOf(InvalidKeyError);
    });

    it('a result the store cannot keep: the call ran once, and every repeat says so instead of running again', async () => {
      let runs = 0;
      const big = idempotent(async function exportReport(id: string) { runs++; return 'x'.repeat(MAX_RESPONSE_BYTES * 2) + id; }, {
        store: backend.store,
        key: (id) => id,
      });
      const id = randomUUID();
      expect(await big(id)).toHaveLength(MAX_RESPONSE_BYTES * 2 + id.length);
      await expect(big(id)).rejects.toBeInstanceOf(ResultNotKeptError);
      let bigintRuns = 0;
      const notJson = idempotent(async function count(_id: string) { bigintRuns++; return 10n; }, { store: backend.store, key: (id) => `n-${id}` });
      await expect(notJson(id)).rejects.toThrow(/ran, but its result is not JSON/);
      await expect(notJson(id)).rejects.toBeInstanceOf(ResultNotKeptError);
      expect([runs, bigintRuns]).toEqual([1, 1]);
    });
  });
}

describe('idempotent(fn) options', () => {
  it('refuses what it cannot use, naming the option', () => {
    const store = memoryStore();
    expect(() => idempotent(async () => 1, { store } as never)).toThrow(/`key`/);
    expect(() => idempotent(async () => 1, { store, key: () => 'k' })).toThrow(/`name`/);
    expect(() => idempotent(async function f() { return 1; }, { store, key: () => 'k', leaseMS: 10 } as never)).toThrow(/leaseMS.*leaseMs/s);
    expect(() => idempotent(async function f() { return 1; }, { store, key: () => 'k', scope: 5 } as never)).toThrow(/`scope`/);
    expect(() => idempotent(async function f() { return 1; }, { store, key: () => 'k', inFlight: 'queue' } as never)).toThrow(/inFlight/);
  });

  it('refuses a fingerprint that is not JSON before claiming anything', async () => {
    const store = memoryStore();
    const fn = idempotent(async function f(_n: bigint) { return 1; }, { store, key: () => 'k' });
    await expect(fn(1n)).rejects.toBeInstanceOf(InvalidOptionError);
    expect(store.stats().records).toBe(0);
  });
});

describeIdempotent('memory', true, async () => {
  const store = memoryStore({ maxResponseBytes: MAX_RESPONSE_BYTES });
  return { store, close: async () => store.close() };
});

describeIdempotent('SQLite', true, async () => {
  const file = sqliteFile();
  const store = sqliteStore({ database: file.db, maxResponseBytes: MAX_RESPONSE_BYTES });
  await store.migrate();
  return {
    store,
    close: async () => {
      store.close();
      file.cleanup();
    },
  };
});

describeIdempotent('PostgreSQL', await requireService(POSTGRES), async () => {
  const pool = newPool({ max: 10 });
  const table = uniqueTable();
  const store = postgresStore({ pool, table, maxResponseBytes: MAX_RESPONSE_BYTES });
  await store.migrate();
  return {
    store,
    close: async () => {
      await dropTable(pool, table);
      await pool.end();
    },
  };
});

describeIdempotent('MariaDB', await requireService(MARIADB), async () => {
  const pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 10 });
  const table = `idem_fn_${randomBytes(5).toString('hex')}`;
  const store = mysqlStore({ pool, table, maxResponseBytes: MAX_RESPONSE_BYTES });
  await store.migrate();
  return {
    store,
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS \`${table}\``);
      await pool.end();
    },
  };
});

describeIdempotent('Redis', await requireService(REDIS), async () => {
  const client = await connectStoreClient(REDIS.port);
  const prefix = `idem-fn-${randomBytes(5).toString('hex')}`;
  return {
    store: redisStore({ client, prefix, maxResponseBytes: MAX_RESPONSE_BYTES }),
    close: async () => {
      await deleteKeys(client, `${prefix}*`);
      client.disconnect();
    },
  };
});
