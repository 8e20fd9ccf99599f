/**
 * Opens each benchmarked store, in the server child and in the raw-store bench alike. Asked to
 * (`countRoundTrips`, the raw-store bench), server stores (PostgreSQL, Redis) count their round
 * trips, so the report can show how many one request costs; the server's stores do not, since the
 * counting wrapper's own work would be counted as idemkit's by `npm run bench:instructions`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { IdempotencyStore } from 'idemkit';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createClient } from 'redis';
import { memoryStore } from 'idemkit/stores/memory';
import { postgresStore } from 'idemkit/stores/postgres';
import { redisStore } from 'idemkit/stores/redis';
import { sqliteStore } from 'idemkit/stores/sqlite';
import type { StoreKind } from './shared.js';
import { MEMORY_MAX_BYTES, MEMORY_MAX_RECORDS } from './shared.js';

export interface BenchStore {
  readonly store: IdempotencyStore;
  /** Round trips to the server so far (always 0 for in-process stores, and when not counted). */
  roundTrips(): number;
  close(): Promise<void>;
}

export const POSTGRES_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379/0';

export async function openBenchStore(kind: Exclude<StoreKind, 'none'>, { countRoundTrips = false } = {}): Promise<BenchStore> {
  const none = () => 0;
  if (kind === 'memory') {
    const store = memoryStore({ maxRecords: MEMORY_MAX_RECORDS, maxBytes: MEMORY_MAX_BYTES });
    return { store, roundTrips: none, close: async () => store.close() };
  }
  if (kind === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'idemkit-bench-'));
    const database = new Database(join(dir, 'bench.db'));
    const store = sqliteStore({ database }); // WAL, synchronous = NORMAL
    return {
      store,
      roundTrips: none,
      close: async () => {
        database.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const table = `bench_${process.pid}`;
  if (kind === 'postgres') {
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 10 });
    pool.on('error', () => {});
    let trips = 0;
    const counted = {
      query: (...args: Parameters<pg.Pool['query']>) => {
        trips++;
        return (pool.query as (...a: unknown[]) => unknown)(...args);
      },
      connect: () => pool.connect(),
    } as unknown as pg.Pool;
    const store = postgresStore({ pool: countRoundTrips ? counted : pool, table });
    await store.migrate();
    return {
      store,
      roundTrips: () => trips,
      close: async () => {
        await pool.query(`DROP TABLE IF EXISTS ${table} CASCADE; DROP FUNCTION IF EXISTS ${table}_claim CASCADE`);
        await pool.end();
      },
    };
  }
  const prefix = `bench-${process.pid}`;
  if (kind === 'redis-node') {
    // The same store on node-redis, with the setting docs/stores/redis.md recommends for it.
    const client = createClient({ url: REDIS_URL, disableOfflineQueue: true });
    client.on('error', () => {});
    await client.connect();
    let trips = 0;
    const counted = Object.assign(Object.create(client) as typeof client, {
      sendCommand: (...args: Parameters<typeof client.sendCommand>) => {
        trips++;
        return client.sendCommand(...args);
      },
    });
    return {
      store: redisStore({ client: countRoundTrips ? counted : client, prefix }),
      roundTrips: () => trips,
      close: async () => {
        const keys = await client.keys(`${prefix}:*`);
        for (let i = 0; i < keys.length; i += 1000) await client.del(keys.slice(i, i + 1000));
        client.destroy();
      },
    };
  }
  // The settings docs/stores/redis.md recommends (they change nothing while Redis answers).
  const client = new Redis(REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
  await client.connect();
  let trips = 0;
  // The store sends its commands through the per-command Buffer methods (setBuffer for a claim,
  // evalshaBuffer and evalBuffer for scripts) where the client has them, and callBuffer
  // otherwise: count all four.
  // (ioredis defines the per-command methods at run time and does not type them.)
  const methods = client as unknown as Record<string, (...args: unknown[]) => unknown>;
  const counting = (name: string) => (...args: unknown[]) => {
    trips++;
    return methods[name]!.apply(client, args);
  };
  const counted = Object.assign(Object.create(client) as Redis, {
    callBuffer: counting('callBuffer'),
    evalshaBuffer: counting('evalshaBuffer'),
    evalBuffer: counting('evalBuffer'),
    setBuffer: counting('setBuffer'),
  });
  return {
    store: redisStore({ client: countRoundTrips ? counted : client, prefix }),
    roundTrips: () => trips,
    close: async () => {
      const keys = await client.keys(`${prefix}:*`);
      for (let i = 0; i < keys.length; i += 1000) await client.del(...keys.slice(i, i + 1000));
      client.disconnect();
    },
  };
}
