// npm run demo — the decision matrix, live, on a temporary SQLite file (no server needed).
// Starts a small charges service in transactional mode and fires the seed's acceptance cases at it:
// duplicates in flight, retries, changed payloads, two tenants, then checks that the charges table
// and the idempotency records reconcile.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import Database from 'better-sqlite3';
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idemkit/hono';
import { sqliteStore } from 'idemkit/stores/sqlite';

const keep = process.argv.includes('--keep');
const dir = mkdtempSync(join(tmpdir(), 'idemkit-demo-'));
const db = new Database(join(dir, 'demo.db'));
const store = sqliteStore({ database: db });
db.exec('CREATE TABLE charges (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, amount INTEGER NOT NULL)');

const app = new Hono<{ Variables: IdempotencyVariables<Database.Database> }>();
app.use('/charges', idempotency<Database.Database>({ store, transactional: true, scope: (c) => c.req.header('authorization') ?? '' }));
app.post('/charges', async (c) => {
  const { amount } = await c.req.json<{ amount: number }>();
  await new Promise((r) => setTimeout(r, 200)); // a slow payment call, so duplicates overlap
  const id = randomUUID();
  const { tx, scope } = c.get('idempotency')!;
  tx.prepare('INSERT INTO charges (id, tenant, amount) VALUES (?, ?, ?)').run(id, scope, amount);
  return c.json({ id, amount }, 201);
});

const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
await new Promise((r) => server.once('listening', r));
const address = server.address();
const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;

const pay = (key: string, amount: number, tenant = 'Bearer alice') =>
  fetch(`${base}/charges`, {
    method: 'POST',
    headers: { 'idempotency-key': key, authorization: tenant, 'content-type': 'application/json' },
    body: JSON.stringify({ amount }),
  });

const results: Array<{ scenario: string; expected: string; actual: string; pass: boolean }> = [];
const check = (scenario: string, expected: unknown, actual: unknown) => {
  const pass = JSON.stringify(expected) === JSON.stringify(actual);
  results.push({ scenario, expected: JSON.stringify(expected), actual: JSON.stringify(actual), pass });
  console.log(`${pass ? 'PASS' : 'FAIL'}  ${scenario}`);
};
const count = (sql: string, ...args: unknown[]) => (db.prepare(sql).get(...args) as { n: number }).n;

// 1. A double click and a gateway retry arriving together: 100 requests in flight with one key.
const k1 = randomUUID();
const burst = await Promise.all(Array.from({ length: 100 }, () => pay(k1, 1200)));
const statuses = burst.reduce<Record<number, number>>((m, r) => ({ ...m, [r.status]: (m[r.status] ?? 0) + 1 }), {});
check('100 concurrent requests, one key: 1 charge', 1, count('SELECT count(*) AS n FROM charges WHERE amount = 1200'));
check('…the other 99 answered 409 (in flight) or replayed', 99, (statuses[409] ?? 0) + burst.filter((r) => r.headers.get('idempotent-replayed')).length);

// 2. The client retries after a timeout: the same key replays the first result.
const first = await (await pay(k1, 1200)).json();
const again = await pay(k1, 1200);
check('a late retry replays the first charge', { replayed: 'true', id: first.id }, { replayed: again.headers.get('idempotent-replayed'), id: (await again.json()).id });

// 3. The same key with a different amount is refused and does not disturb the original.
check('same key, different amount: 422', 422, (await pay(k1, 999)).status);
check('…and nothing was charged for it', 0, count('SELECT count(*) AS n FROM charges WHERE amount = 999'));

// 4. Two tenants may use the same key.
const k2 = randomUUID();
await Promise.all([pay(k2, 500, 'Bearer alice'), pay(k2, 500, 'Bearer bob')]);
check('two tenants, one key: one charge each', 2, count('SELECT count(*) AS n FROM charges WHERE amount = 500'));

// 5. Reconcile: every charge has exactly one completed record, and nothing is left in flight.
check('charges = completed idempotency records', count('SELECT count(*) AS n FROM charges'), count("SELECT count(*) AS n FROM idempotency_records WHERE state = 'completed'"));
check('no record left in flight', 0, count("SELECT count(*) AS n FROM idempotency_records WHERE state = 'in_flight'"));

console.table(results);
const ok = results.every((r) => r.pass);
console.log(ok ? 'PASS: the tables reconcile' : 'FAIL: the tables do not reconcile');
server.close();
db.close();
if (keep) console.log(`database kept at ${join(dir, 'demo.db')}`);
else rmSync(dir, { recursive: true, force: true });
process.exitCode = ok ? 0 : 1;
