/**
 * Issue 26 item 1, the payments demo: its demo authentication (`Authorization: Bearer <tenant
 * name>`) made the bearer value itself the idempotency scope and the orders' tenant, so a
 * credential-shaped value was stored in every record (and shown by `idemkit list`/`inspect`/`ui`).
 * Now the service derives the tenant id as examples/store.ts's `tenantOf` does (a hash of the
 * bearer value): nothing stored holds the value, and the tenant still scopes keys and orders.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../examples/payments/process.js';
import type { ServiceProcess } from '../../examples/payments/process.js';
import { tenantOf } from '../../examples/store.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-payments-scope-'));
const file = join(dir, 'payments.db');
const TOKEN = 'sk_live_9c1e5b2dPaymentsScopeTest';
const OTHER = 'sk_live_4f6a8c0eAnotherTenantTest';
let service: ServiceProcess;
let base: string;

beforeAll(async () => {
  service = await startService({ DATABASE_URL: `sqlite:${file}`, PORT: '0', CHANNEL_URL: 'http://127.0.0.1:9', COMPLETER_MS: '3600000' });
  base = /payments listening on (http:\/\/\S+)/.exec(service.output.join('\n'))![1]!;
});
afterAll(async () => {
  await service?.kill();
  rmSync(dir, { recursive: true, force: true });
});

const order = (token: string, key: string) =>
  fetch(`${base}/orders`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ clientOrderNo: `co-${token.slice(-12)}-${key}`, sku: 'sku-mug', quantity: 1, amount: 900 }),
  });

/** Every row of every table in the service's SQLite file. */
function storedRows(): Array<Record<string, unknown>> {
  const db = new Database(file, { readonly: true });
  try {
    const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((t) => t.name);
    return tables.flatMap((table) => (db.prepare(`SELECT * FROM "${table}"`).all() as Array<Record<string, unknown>>).map((row) => ({ table, ...row })));
  } finally {
    db.close();
  }
}

describe('the payments service scopes by a tenant id, never the bearer value', () => {
  it('stores the hashed tenant id as scope and order tenant, and the bearer value nowhere', async () => {
    const key = 'scope-test-order-key-0001';
    const created = await order(TOKEN, key);
    expect(created.status).toBe(201);
    const { id } = (await created.json()) as { id: string };
    const tenant = tenantOf(`Bearer ${TOKEN}`)!;
    expect(tenant).toMatch(/^tenant-[0-9a-f]{16}$/);

    const rows = storedRows();
    const records = rows.filter((row) => row.key === key && 'scope' in row);
    expect(records.map((row) => row.scope)).toEqual([tenant]);
    expect(rows.filter((row) => row.id === id).map((row) => row.tenant)).toEqual([tenant]);
    const holding = rows.filter((row) => Object.values(row).some((value) => String(value instanceof Uint8Array ? Buffer.from(value).toString('latin1') : value).includes(TOKEN)));
    expect(holding).toEqual([]);

    // The tenant still scopes: the same key from another tenant is its own order, and an order is
    // read by its own tenant only.
    const other = await order(OTHER, key);
    expect(other.status).toBe(201);
    expect(other.headers.get('idempotent-replayed')).toBeNull();
    expect(((await other.json()) as { id: string }).id).not.toBe(id);
    const read = (token: string) => fetch(`${base}/orders/${id}`, { headers: { authorization: `Bearer ${token}` } });
    expect((await read(TOKEN)).status).toBe(200);
    expect((await read(OTHER)).status).toBe(404);
  });
});
