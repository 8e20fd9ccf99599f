// Picks the store named by STORE_URL: `sqlite:/path/file.db` (default: a temp file) or `memory:`.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { IdempotencyStore } from 'idemkit';
import { memoryStore } from 'idemkit/stores/memory';
import { sqliteStore } from 'idemkit/stores/sqlite';

export function storeFromUrl(url = process.env.STORE_URL): IdempotencyStore {
  if (!url) return sqliteStore({ database: new Database(join(mkdtempSync(join(tmpdir(), 'idemkit-')), 'idempotency.db')) });
  if (url === 'memory:') return memoryStore();
  if (url.startsWith('sqlite:')) return sqliteStore({ database: new Database(url.slice('sqlite:'.length)) });
  throw new Error(`STORE_URL: unsupported store "${url}" (use sqlite:/path/file.db or memory:)`);
}

/** Demo authentication: the bearer token is the tenant. Never do this in production. */
export function tenantOf(authorization: string | null | undefined): string | undefined {
  return /^Bearer (\S+)$/.exec(authorization ?? '')?.[1];
}

export const port = Number(process.env.PORT ?? 3000);
export const delay = () => new Promise((resolve) => setTimeout(resolve, Number(process.env.DELAY_MS ?? 0)));
