// Picks the store named by STORE_URL:
//   sqlite:/path/file.db (default: a temp file) · memory: · postgres://… · redis://… · mysql://…
// STORE_TABLE names the PostgreSQL/MySQL table and STORE_PREFIX the Redis key prefix (defaults:
// the stores' own), so several runs can share one server without sharing records.
// Drivers are loaded only for the store asked for, so the SQLite quickstart needs no server driver.
import { createHash } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IdempotencyStore } from 'idemkit';

export async function storeFromUrl(url = process.env.STORE_URL): Promise<IdempotencyStore> {
  if (!url || url.startsWith('sqlite:')) {
    const { default: Database } = await import('better-sqlite3');
    const { sqliteStore } = await import('idemkit/stores/sqlite');
    const file = url ? url.slice('sqlite:'.length) : join(mkdtempSync(join(tmpdir(), 'idemkit-')), 'idempotency.db');
    return sqliteStore({ database: new Database(file) });
  }
  if (url === 'memory:') return (await import('idemkit/stores/memory')).memoryStore();
  if (/^postgres(ql)?:\/\//.test(url)) {
    const { default: pg } = await import('pg');
    const { postgresStore } = await import('idemkit/stores/postgres');
    const pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: 2_000 });
    pool.on('error', (error) => console.error('postgres: idle connection lost', error.message)); // pg would crash otherwise
    const store = postgresStore({ pool, ...(process.env.STORE_TABLE ? { table: process.env.STORE_TABLE } : {}) });
    await store.migrate();
    return store;
  }
  if (/^rediss?:\/\//.test(url)) {
    const { Redis } = await import('ioredis');
    const { redisStore } = await import('idemkit/stores/redis');
    // The settings docs/stores/redis.md recommends: while Redis is down a request gets its 503 at
    // once, and no queued or resent claim runs after its request was answered.
    const client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
    await client.connect(); // with the offline queue off, commands sent before `ready` would fail
    return redisStore({ client, ...(process.env.STORE_PREFIX ? { prefix: process.env.STORE_PREFIX } : {}) });
  }
  if (/^(mysql|mariadb):\/\//.test(url)) {
    const mysql = await import('mysql2/promise');
    const { mysqlStore } = await import('idemkit/stores/mysql');
    const store = mysqlStore({ pool: mysql.createPool(url.replace(/^mariadb:/, 'mysql:')), ...(process.env.STORE_TABLE ? { table: process.env.STORE_TABLE } : {}) });
    await store.migrate();
    return store;
  }
  throw new Error(`STORE_URL: unsupported store "${url}" (sqlite:/path/file.db, memory:, postgres://, redis://, mysql://)`);
}

/**
 * Demo authentication, standing in for yours: any bearer token is accepted, and its tenant is
 * named by a hash of it, so that the token itself is never the scope (the scope is stored in
 * every record and shown by `idemkit list`, `inspect` and `ui`). A real application verifies the
 * token and answers the id of the account it belongs to; never the token, nor its hash.
 */
export function tenantOf(authorization: string | null | undefined): string | undefined {
  const token = /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
  return token === undefined ? undefined : `tenant-${createHash('sha256').update(token).digest('hex').slice(0, 16)}`;
}

export const port = Number(process.env.PORT ?? 3000);
/** LEASE_MS: a short lease, so `idemkit check --lease-ms` can observe it (default: the library's 30 s). */
export const leaseMs = process.env.LEASE_MS ? Number(process.env.LEASE_MS) : undefined;
export const delay = () => new Promise((resolve) => setTimeout(resolve, Number(process.env.DELAY_MS ?? 0)));
