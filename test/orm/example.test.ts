/**
 * `npm run example:kysely`, started as the README's command starts it, on SQLite and PostgreSQL:
 * an order placed twice with one key is one row, and the retry is the replay.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExample } from '../support/examples.js';
import { POSTGRES, requireService } from '../support/services.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-kysely-example-'));
const table = `example_orders_${randomUUID().slice(0, 8)}`;
const postgresUrl = 'postgres://postgres@127.0.0.1:5432/test';
const stores: Array<[string, string]> = [['sqlite', `sqlite:${join(dir, 'shop.db')}`]];
if (await requireService(POSTGRES)) stores.push(['postgres', postgresUrl]);

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  if (stores.some(([kind]) => kind === 'postgres')) {
    const pool = new pg.Pool({ connectionString: postgresUrl });
    await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.end();
  }
});

describe.each(stores)('example kysely on %s', (_kind, STORE_URL) => {
  let url: string;
  let child: ChildProcess;
  beforeAll(async () => {
    ({ url, child } = await startExample('kysely', { STORE_URL, ORDERS_TABLE: table }));
  }, 30_000);
  afterAll(() => {
    if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  });

  const tenant = `t-${randomUUID()}`;
  const order = (key: string, body: unknown) =>
    fetch(`${url}/orders`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    });
  const rows = async () => (await (await fetch(`${url}/orders`, { headers: { authorization: `Bearer ${tenant}` } })).json()) as unknown[];

  it('places an order once: the retry is the replay, and the table has one row', async () => {
    const key = randomUUID();
    const first = await order(key, { sku: 'book', quantity: 2 });
    expect(first.status).toBe(201);
    const placed = await first.json();
    const again = await order(key, { sku: 'book', quantity: 2 });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(placed);
    expect(await rows()).toEqual([{ key, sku: 'book', quantity: 2 }]);
    // Another key is another order.
    expect((await order(randomUUID(), { sku: 'pen', quantity: 1 })).status).toBe(201);
    expect(await rows()).toHaveLength(2);
  });
});
