/**
 * The Web and Hono adapters on every store a Bun or Deno service would use (issue 31, item 3):
 * memory, SQLite (the runtime's driver: better-sqlite3 on Node 20, node:sqlite on Node 22/24 and
 * Deno, bun:sqlite on Bun; test/support/sqlite-driver.ts), Redis through ioredis and PostgreSQL
 * through pg, served by the runtime's own server (test/http/apps/listen.ts) and called by
 * idemkit/client. `npm run test:runtimes` runs it on Node 22 and 24, Bun and Deno; `npm test` on
 * Node 20. Each case: a replay of the stored answer, a key reused with another body refused, 50
 * concurrent requests with one key run once, and the client's retry after a lost answer replayed.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../src/client/index.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { freePort } from '../support/ports.js';
import { POSTGRES, REDIS, requireService } from '../support/services.js';
import { openSqlite, testSqliteDriver } from '../support/sqlite-driver.js';
import { createHonoApp } from './apps/hono-app.js';
import { createWebApp } from './apps/web-app.js';
import type { AppFactory, AppState, TestApp } from './harness.js';

interface StoreCase {
  readonly name: string;
  open(): Promise<{ store: IdempotencyStore; close(): Promise<void> }>;
}

const redisUp = await requireService(REDIS);
const postgresUp = await requireService(POSTGRES);

const stores: StoreCase[] = [
  {
    name: 'memory',
    open: async () => {
      const store = memoryStore();
      return { store, close: async () => store.close() };
    },
  },
  {
    name: `sqlite (${testSqliteDriver})`,
    open: async () => {
      const dir = mkdtempSync(join(tmpdir(), 'idemkit-runtime-'));
      const db = openSqlite(join(dir, 'store.db'));
      const store = sqliteStore({ database: db });
      return {
        store,
        close: async () => {
          store.close();
          db.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
  ...(redisUp
    ? [
        {
          name: 'redis (ioredis)',
          open: async () => {
            const client = new Redis({ host: REDIS.host, port: REDIS.port, maxRetriesPerRequest: 1 });
            const prefix = `idemkit-runtime-${randomUUID()}`;
            const store = redisStore({ client, prefix });
            return {
              store,
              close: async () => {
                const keys = await client.keys(`${prefix}*`);
                if (keys.length > 0) await client.del(...keys);
                await client.quit();
              },
            };
          },
        },
      ]
    : []),
  ...(postgresUp
    ? [
        {
          name: 'postgres (pg)',
          open: async () => {
            const pool = new pg.Pool({ host: POSTGRES.host, port: POSTGRES.port, user: process.env.PGUSER ?? 'postgres', database: 'test', max: 10 });
            pool.on('error', () => {});
            const table = `idem_runtime_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
            const store = postgresStore({ pool, table });
            await store.migrate();
            return {
              store,
              close: async () => {
                await pool.query(`DROP TABLE IF EXISTS ${table}`);
                await pool.end();
              },
            };
          },
        },
      ]
    : []),
];

const adapters: Array<[string, AppFactory]> = [
  ['web', createWebApp],
  ['hono', createHonoApp],
];

const key = () => `key-${randomUUID()}`;

const json = { 'content-type': 'application/json', authorization: 'Bearer tenant-a' };

describe.each(adapters)('%s adapter', (_adapter, factory) => {
  describe.each(stores)('on the $name store', (storeCase) => {
    const state: AppState = { executions: 0 };
    let app: TestApp;
    let close: () => Promise<void>;

    beforeAll(async () => {
      const opened = await storeCase.open();
      close = opened.close;
      app = await factory({ store: opened.store }, state);
    });
    afterAll(async () => {
      await app?.close();
      await close?.();
    });

    const post = (k: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${app.url}/charges`, { method: 'POST', headers: { ...json, 'idempotency-key': k, ...headers }, body: JSON.stringify(body) });

    it('replays the stored answer to a retry, and refuses the key with another body', async () => {
      state.executions = 0;
      const k = key();
      const first = await post(k, { amount: 1 });
      expect(first.status).toBe(201);
      const original = await first.json();
      const again = await post(k, { amount: 1 });
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.json()).toEqual(original);
      const other = await post(k, { amount: 2 });
      expect(other.status).toBe(422);
      await other.arrayBuffer();
      expect(state.executions).toBe(1);
    });

    it('runs 50 concurrent requests with one key exactly once; the others get 409', async () => {
      state.executions = 0;
      const k = key();
      // The request that claims is held until the other 49 have their answers, so each of them
      // meets the claim in flight however slowly the runtime delivers them.
      let open!: () => void;
      state.hold = new Promise<void>((resolve) => (open = resolve));
      let answered = 0;
      let othersDone!: () => void;
      const others = new Promise<void>((resolve) => (othersDone = resolve));
      const pending = Array.from({ length: 50 }, () =>
        post(k, { amount: 50 }, { 'x-hold': '1' }).then(async (r) => {
          await r.arrayBuffer();
          if (++answered === 49) othersDone();
          return r.status;
        }),
      );
      await others;
      open();
      const statuses = await Promise.all(pending);
      state.hold = undefined;
      expect(state.executions).toBe(1);
      expect(statuses.filter((s) => s === 201)).toHaveLength(1);
      expect(statuses.filter((s) => s === 409)).toHaveLength(49);
    });

    it("idemkit/client's retry after a lost answer gets the replay, and the handler ran once", async () => {
      state.executions = 0;
      let calls = 0;
      // The first request reaches the handler and its answer is lost: the client sees the error
      // this runtime's fetch gives for a connection that failed (one to a closed port), which
      // differs between undici, Bun and Deno.
      const lossy: typeof fetch = async (input, init) => {
        const response = await fetch(input, init);
        if (++calls === 1) {
          await response.arrayBuffer();
          await fetch(`http://127.0.0.1:${await freePort()}/`, { method: 'POST' });
          throw new Error('a closed port answered');
        }
        return response;
      };
      const client = createIdempotentFetch({ fetch: lossy, minTimeout: 5, maxTimeout: 20, retryBudget: false });
      const response = await client(`${app.url}/charges`, { method: 'POST', headers: json, body: JSON.stringify({ amount: 3 }) });
      expect(response.status).toBe(201);
      expect(response.headers.get('idempotent-replayed')).toBe('true');
      expect(response.idempotency.attempts).toBe(2);
      expect(calls).toBe(2);
      expect(state.executions).toBe(1);
    });
  });
});
