/**
 * The ORM examples (`npm run example:kysely`, `:drizzle`, `:knex`, `:typeorm`, `:prisma`), each
 * started as the README's command starts it, on every database it accepts: an order placed twice
 * with one key is one row, the retry is the replay, and another key is another row; SIGTERM ends
 * it cleanly.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tenantOf } from '../../examples/store.js';
import { startExample } from '../support/examples.js';
import { MARIADB, POSTGRES, requireService } from '../support/services.js';

type Database = 'sqlite' | 'postgres' | 'mysql';

const examples: Record<string, readonly Database[]> = {
  kysely: ['sqlite', 'postgres', 'mysql'],
  drizzle: ['sqlite', 'postgres'],
  knex: ['sqlite', 'postgres', 'mysql'],
  typeorm: ['sqlite', 'postgres', 'mysql'],
  prisma: ['postgres'],
};
/**
 * Prisma's table is fixed by the schema's @@map (its client is generated from it), so its runs
 * share that table and are kept apart by tenant: the test deletes its own rows. The others get a
 * table of their own per run (ORDERS_TABLE), dropped afterwards.
 */
const PRISMA_TABLE = 'prisma_example_orders';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-orm-examples-'));
const postgresUrl = 'postgres://postgres@127.0.0.1:5432/test';
const mysqlUrl = 'mysql://root@127.0.0.1:3306/test';
const up: Record<Database, boolean> = { sqlite: true, postgres: await requireService(POSTGRES), mysql: await requireService(MARIADB) };
const runs = Object.entries(examples).flatMap(([name, databases]) => databases.filter((database) => up[database]).map((database) => [name, database] as [string, Database]));

/** What each run left on a shared server: its own table, or (Prisma) its tenant's rows. */
const leftovers: Array<{ database: Database; sql: string; params: string[] }> = [];
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const { database, sql, params } of leftovers) {
    if (database === 'postgres') {
      const pool = new pg.Pool({ connectionString: postgresUrl });
      await pool.query(sql, params);
      await pool.end();
    } else if (database === 'mysql') {
      const pool = mysql.createPool(mysqlUrl);
      await pool.query(sql, params);
      await pool.end();
    }
  }
});

describe.each(runs)('example %s on %s', (name, database) => {
  const table = `example_orders_${name}_${randomUUID().slice(0, 8)}`;
  const tenant = `t-${randomUUID()}`;
  const STORE_URL = { sqlite: `sqlite:${join(dir, `${name}.db`)}`, postgres: postgresUrl, mysql: mysqlUrl }[database];
  // The examples store the tenant id their demo auth derives from the token, not the token.
  if (name === 'prisma') leftovers.push({ database, sql: `DELETE FROM ${PRISMA_TABLE} WHERE tenant = $1`, params: [tenantOf(`Bearer ${tenant}`)!] });
  else if (database !== 'sqlite') leftovers.push({ database, sql: `DROP TABLE IF EXISTS ${table}`, params: [] });

  let url: string;
  let child: ChildProcess;
  beforeAll(async () => {
    ({ url, child } = await startExample(name, { STORE_URL, ORDERS_TABLE: table }));
  }, 60_000);
  afterAll(() => {
    if (child?.exitCode === null) process.kill(child.pid!, 'SIGKILL');
  });

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
    expect(placed).toEqual({ order: key, sku: 'book', quantity: 2 });
    const again = await order(key, { sku: 'book', quantity: 2 });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(placed);
    expect(await rows()).toEqual([{ key, sku: 'book', quantity: 2 }]);
    // Another key is another order.
    const second = randomUUID();
    expect((await order(second, { sku: 'pen', quantity: 1 })).status).toBe(201);
    const all = (await rows()) as Array<{ key: string }>;
    expect(all.map((row) => row.key).sort()).toEqual([key, second].sort());
  });

  it('on SIGTERM, ends its connections and exits', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    process.kill(child.pid!, 'SIGTERM');
    // A pool left open would keep the process alive and time this test out.
    expect(await exited).toBe(0);
  });
});
