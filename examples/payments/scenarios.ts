/**
 * The seed's acceptance scenarios, run against the payments service in a child process. Shared by
 * `npm run demo` (examples/payments/demo.ts) and the tests (test/payments/*).
 *
 *   1. 100 concurrent POST /orders with one key           → 1 order, 1 reservation
 *   2. gateway loses answers after execution; client retries → 1 order per logical request
 *   3. the channel notifies 3 times (2 concurrently, 1 late after shipping) → 1 ledger entry, paid once
 *   4. every "order paid" message delivered 2–3 times, shuffled → 1 effect each
 *   5. SIGKILL after_commit, pay_phase_2, after_transition; restart; client retries + completer
 *   6. bad input → 4xx problem+json, nothing stored; the same key works once the request is fixed
 * Then the tables are reconciled against what the run itself asked for.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createIdempotentFetch } from 'idemkit/client';
import type { Channel } from './channel.js';
import { startChannel } from './channel.js';
import type { PaymentsDb } from './db.js';
import { openDb } from './db.js';
import { startGateway } from './gateway.js';
import type { ServiceProcess } from './process.js';
import { startService } from './process.js';
import { channelKeyFor } from './pay.js';
import { hexId, pick } from './rng.js';
import { CATALOGUE } from './schema.js';
import { tenantOf } from '../store.js';

/** The tenant id (scope, orders' tenant column) the service derives from `Bearer <name>`. */
const tenantIdOf = (name: string): string => tenantOf(`Bearer ${name}`)!;

export interface RunOptions {
  readonly orders: number;
  readonly concurrency: number;
  readonly seed: string;
  /** `sqlite:/path` (default: a temporary file) or `postgres://…`. */
  readonly db?: string;
  /** Table prefix; default '' on SQLite, a unique one on PostgreSQL (dropped after unless `keep`). */
  readonly prefix?: string;
  readonly keep?: boolean;
  readonly amqpUrl?: string;
  readonly amqpQueue?: string;
  /** Run the fault scenario (5). @default true */
  readonly faults?: boolean;
  /** Anti-pattern switch: `consumer` consumes without dedup. The report must then FAIL. */
  readonly broken?: 'consumer';
  /** Live progress: `final` false means the line may be overwritten. */
  readonly progress?: (line: string, final: boolean) => void;
  /** Longest wait for the system to settle at the end, in ms. @default 30_000 */
  readonly settleTimeoutMs?: number;
}

export interface Check {
  readonly name: string;
  readonly expected: number | string;
  readonly actual: number | string;
  readonly pass: boolean;
}

export interface ScenarioResult {
  readonly id: number;
  readonly title: string;
  readonly ms: number;
  readonly checks: Check[];
}

export interface ReconRow {
  readonly table: string;
  readonly check: string;
  readonly expected: number | string;
  readonly actual: number | string;
  readonly pass: boolean;
}

export interface Report {
  readonly pass: boolean;
  readonly seed: string;
  readonly orders: number;
  readonly concurrency: number;
  readonly database: string;
  readonly queue: string;
  readonly durationMs: number;
  readonly scenarios: ScenarioResult[];
  readonly reconciliation: ReconRow[];
  readonly stats: Record<string, number | string>;
  /** Where the database was kept (`keep`). */
  readonly keptAt?: string;
}

const TENANTS = ['acme', 'globex', 'initech', 'umbrella', 'hooli'];
const LEASE_MS = 1_500;
const WEBHOOK_SECRET = `whsec_${randomBytes(24).toString('base64')}`;

const eq = (name: string, expected: number | string, actual: number | string): Check => ({ name, expected, actual, pass: expected === actual });
const atLeast = (name: string, min: number, actual: number): Check => ({ name, expected: `≥ ${min}`, actual, pass: actual >= min });

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Runs `fn` over `items` with at most `limit` in flight. */
async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!, i);
      }
    }),
  );
  return out;
}

async function until(condition: () => Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

interface Planned {
  readonly clientOrderNo: string;
  readonly tenant: string;
  readonly sku: string;
  readonly quantity: number;
  readonly amount: number;
}

export async function runAcceptance(o: RunOptions): Promise<Report> {
  const started = Date.now();
  const say = o.progress ?? (() => {});
  const tmp = mkdtempSync(join(tmpdir(), 'idemkit-payments-'));
  const url = o.db ?? `sqlite:${join(tmp, 'payments.db')}`;
  const postgres = url.startsWith('postgres');
  const prefix = o.prefix ?? (postgres ? `pay_${randomBytes(4).toString('hex')}_` : '');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const channel: Channel = await startChannel({ seed: o.seed, secret: WEBHOOK_SECRET });
  const gateway = await startGateway(base, { seed: o.seed, dropRate: 0.15, timeoutRate: 0.1 });
  const env: Record<string, string> = {
    PORT: String(port),
    DATABASE_URL: url,
    TABLE_PREFIX: prefix,
    CHANNEL_URL: channel.url,
    WEBHOOK_SECRET,
    LEASE_MS: String(LEASE_MS),
    SEED: o.seed,
    AMQP_URL: o.amqpUrl ?? '',
    AMQP_QUEUE: o.amqpQueue ?? `idemkit.payments.${prefix || 'demo'}.${randomBytes(3).toString('hex')}`,
    BROKEN: o.broken ?? '',
    COMPLETER_MS: '250',
  };

  let service: ServiceProcess | undefined;
  let db: PaymentsDb | undefined;
  const scenarios: ScenarioResult[] = [];
  const stats: Record<string, number | string> = {};
  const planned: Planned[] = [];
  let completedKeys = 0; // keyed requests whose answer the service stores
  const crashes: string[] = [];
  const orderIds = new Map<string, string>(); // clientOrderNo → order id

  const scenario = async (id: number, title: string, fn: (checks: Check[]) => Promise<void>) => {
    const t0 = Date.now();
    say(`[${id}] ${title} …`, false);
    const checks: Check[] = [];
    try {
      await fn(checks);
    } catch (error) {
      checks.push({ name: 'ran to the end', expected: 'yes', actual: `error: ${(error as Error).message}`, pass: false });
    }
    const ms = Date.now() - t0;
    scenarios.push({ id, title, ms, checks });
    const failed = checks.filter((c) => !c.pass);
    say(`[${id}] ${title}: ${failed.length === 0 ? 'ok' : `FAILED (${failed.map((c) => c.name).join('; ')})`} — ${(ms / 1000).toFixed(1)} s`, true);
  };

  const plan = (clientOrderNo: string, tenant: string): Planned => {
    const item = CATALOGUE[pick(o.seed, 0, CATALOGUE.length - 1, 'sku', clientOrderNo)]!;
    const quantity = pick(o.seed, 1, 3, 'qty', clientOrderNo);
    return { clientOrderNo, tenant, sku: item.sku, quantity, amount: item.price * quantity };
  };
  const keyOf = (...subject: Array<string | number>) => `${hexId(o.seed, 16, ...subject)}`;
  const rawPost = (target: string, path: string, tenant: string, key: string | undefined, body: unknown) =>
    fetch(target + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant}`, 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body: JSON.stringify(body),
    });
  const orderBody = (p: Planned) => ({ clientOrderNo: p.clientOrderNo, sku: p.sku, quantity: p.quantity, amount: p.amount });
  const count = async (sql: string, params: unknown[] = []) => Number((await db!.sql.query<{ n: number }>(sql, params)).rows[0]?.n ?? 0);
  const t = () => db!.t;

  try {
    const t0 = Date.now();
    service = await startService(env);
    db = await openDb(url, prefix);
    if ((await count(`SELECT count(*) AS n FROM ${t().orders}`)) > 0) {
      throw new Error(`${url} already holds orders (tables ${prefix || 'without prefix'}); the scenarios need an empty database: use a new file or --prefix`);
    }
    say(`service started (pid ${service.pid}) on ${base} in ${((Date.now() - t0) / 1000).toFixed(1)} s; channel ${channel.url}; gateway ${gateway.url}`, true);

    // 1 ─ a double click, a gateway retry and a impatient script, all at once: 100 requests, one key.
    await scenario(1, '100 concurrent POST /orders with one Idempotency-Key', async (checks) => {
      const p = plan('s1-0', 'acme');
      const key = keyOf('s1');
      const answers = await Promise.all(Array.from({ length: 100 }, () => rawPost(base, '/orders', p.tenant, key, orderBody(p))));
      const originals = answers.filter((r) => r.status === 201 && !r.headers.get('idempotent-replayed')).length;
      const conflicts = answers.filter((r) => r.status === 409).length;
      const replays = answers.filter((r) => r.headers.get('idempotent-replayed') === 'true').length;
      for (const r of answers) await r.arrayBuffer();
      planned.push(p);
      completedKeys++;
      checks.push(eq('one original 201', 1, originals));
      checks.push(eq('the others: 409 in flight or a replay', 99, conflicts + replays));
      checks.push(eq('orders for the key', 1, await count(`SELECT count(*) AS n FROM ${t().orders} WHERE client_order_no LIKE 's1-%' AND tenant = ?`, [tenantIdOf(p.tenant)])));
      checks.push(eq('stock reserved (one reservation)', p.quantity, await count(`SELECT reserved AS n FROM ${t().inventory} WHERE sku = ?`, [p.sku])));
      // The key is scoped by tenant: another tenant's identical key is another request.
      const q = plan('s1-1', 'globex');
      const other = await rawPost(base, '/orders', q.tenant, key, orderBody(q));
      await other.arrayBuffer();
      checks.push(eq('same key, another tenant: its own order', '201 executed', `${other.status} ${other.headers.get('idempotent-replayed') ? 'replayed' : 'executed'}`));
      planned.push(q);
      completedKeys++;
      // The same key with a different body is refused, and the first order is untouched.
      const changed = await rawPost(base, '/orders', p.tenant, key, { ...orderBody(p), clientOrderNo: 's1-changed' });
      await changed.arrayBuffer();
      checks.push(eq('same key, same tenant, another body: 422', 422, changed.status));
      stats['s1: 409 answers'] = conflicts;
      stats['s1: replays'] = replays;
    });

    // 2 ─ the gateway loses answers after the service executed; idemkit/client retries with the same key.
    await scenario(2, `${o.orders} orders through a gateway that loses answers, idemkit/client retrying`, async (checks) => {
      const client = createIdempotentFetch({ retries: 6, minTimeout: 20, maxTimeout: 400, attemptTimeout: 10_000, retryBudget: { ratio: 0.5, capacity: 50 } });
      const items = Array.from({ length: o.orders }, (_, i) => plan(`s2-${i}`, TENANTS[i % TENANTS.length]!));
      let done = 0;
      let retried = 0;
      let replayed = 0;
      const results = await pool(items, o.concurrency, async (p, i) => {
        const response = await client(`${gateway.url}/orders`, {
          method: 'POST',
          headers: { authorization: `Bearer ${p.tenant}`, 'content-type': 'application/json' },
          body: JSON.stringify(orderBody(p)),
          idempotencyKey: keyOf('s2', i),
        });
        const body = (await response.json()) as { id?: string };
        if (response.idempotency.attempts > 1) retried++;
        if (response.idempotency.replayed) replayed++;
        if (++done % 10 === 0 || done === items.length) {
          say(`[2]   ${done}/${items.length} orders · gateway lost ${gateway.stats.dropped + gateway.stats.timedOut} answers · ${retried} retried`, false);
        }
        if (body.id) orderIds.set(p.clientOrderNo, body.id);
        return response.status;
      });
      planned.push(...items);
      completedKeys += items.length;
      const lost = gateway.stats.dropped + gateway.stats.timedOut;
      checks.push(eq('logical requests answered 201', items.length, results.filter((s) => s === 201).length));
      checks.push(eq('orders created (one per logical request)', items.length, await count(`SELECT count(*) AS n FROM ${t().orders} WHERE client_order_no LIKE 's2-%'`)));
      checks.push(eq('retried requests = answers the gateway lost', lost, retried));
      checks.push(eq('retries answered by a replay', lost, replayed));
      stats['s2: gateway requests'] = gateway.stats.requests;
      stats['s2: answers dropped'] = gateway.stats.dropped;
      stats['s2: 504 after execution'] = gateway.stats.timedOut;
    });

    // 6 ─ bad input first (its fixed order is paid with the others).
    await scenario(6, 'malformed orders: 4xx problem+json, nothing stored, key reusable after the fix', async (checks) => {
      const p = plan('s6-0', 'acme');
      const key = keyOf('s6');
      const before = await count(`SELECT count(*) AS n FROM ${t().orders}`);
      const bad: Array<[string, unknown, number]> = [
        ['negative amount', { ...orderBody(p), amount: -p.amount }, 422],
        ['unknown product', { ...orderBody(p), sku: 'sku-unicorn' }, 422],
        ['quantity over stock', { ...orderBody(p), quantity: 1_000_000, amount: (p.amount / p.quantity) * 1_000_000 }, 409],
        ['not an object', 'just a string', 400],
      ];
      for (const [name, body, status] of bad) {
        const response = await rawPost(base, '/orders', p.tenant, key, body);
        await response.arrayBuffer();
        checks.push(eq(`${name}: status`, status, response.status));
        checks.push(eq(`${name}: problem+json`, 'application/problem+json', (response.headers.get('content-type') ?? '').split(';')[0]!));
      }
      checks.push(eq('orders stored for them', 0, (await count(`SELECT count(*) AS n FROM ${t().orders}`)) - before));
      checks.push(eq('idempotency record left for the key', 0, await count(`SELECT count(*) AS n FROM ${t().idempotency} WHERE key = ?`, [key])));
      const fixed = await rawPost(base, '/orders', p.tenant, key, orderBody(p));
      const body = (await fixed.json()) as { id: string };
      orderIds.set(p.clientOrderNo, body.id);
      checks.push(eq('the same key after the fix: 201', 201, fixed.status));
      checks.push(eq('…and not a replay', 'no', fixed.headers.get('idempotent-replayed') ? 'yes' : 'no'));
      planned.push(p);
      completedKeys++;
    });

    // 3 + 4 ─ pay everything; the channel notifies 2× at once and 1× late; the queue redelivers.
    const toPay = [...planned];
    await scenario(3, `pay ${toPay.length} orders; channel answers late sometimes and notifies each 3 times (2 concurrent, 1 after shipping)`, async (checks) => {
      const client = createIdempotentFetch({ retries: 6, minTimeout: 20, maxTimeout: 400, retryBudget: false });
      for (const row of (await db!.sql.query<{ id: string; client_order_no: string }>(`SELECT id, client_order_no FROM ${t().orders}`)).rows) {
        orderIds.set(row.client_order_no, row.id);
      }
      let done = 0;
      const statuses = await pool(toPay, o.concurrency, async (p) => {
        const response = await client(`${base}/orders/${orderIds.get(p.clientOrderNo)}/pay`, {
          method: 'POST',
          headers: { authorization: `Bearer ${p.tenant}`, 'content-type': 'application/json' },
          body: '{}',
          idempotencyKey: keyOf('pay', p.clientOrderNo),
        });
        await response.arrayBuffer();
        if (++done % 10 === 0 || done === toPay.length) say(`[3]   ${done}/${toPay.length} paid · channel: ${channel.stats().lateAnswers} late answers`, false);
        return response.status;
      });
      completedKeys += toPay.length;
      checks.push(eq('pay answered 202', toPay.length, statuses.filter((s) => s === 202).length));
      const allShipped = await until(async () => (await count(`SELECT count(*) AS n FROM ${t().orders} WHERE status = 'SHIPPED'`)) >= planned.length, o.settleTimeoutMs ?? 30_000);
      checks.push(eq('orders shipped before the late notifications', 'yes', allShipped ? 'yes' : 'no'));
      channel.releaseLate();
      checks.push(eq('every notification answered 2xx (late ones too)', 'yes', (await channel.idle(o.settleTimeoutMs ?? 30_000)) ? 'yes' : 'no'));
      const s = channel.stats();
      checks.push(eq('notifications sent (3 per charge)', 3 * toPay.length, s.notifications));
      checks.push(eq('ledger entries', toPay.length, await count(`SELECT count(*) AS n FROM ${t().ledger}`)));
      checks.push(eq('channel charges (money moved)', toPay.length, s.charges));
      checks.push(atLeast('channel answers lost after charging (retried with the channel key)', 1, s.lateAnswers));
      checks.push(eq('duplicate notifications applied', 0, await count(`SELECT count(*) AS n FROM ${t().flows} WHERE outcome <> 'APPLIED'`)));
      stats['s3: channel charge requests'] = s.chargeRequests;
      stats['s3: channel late answers'] = s.lateAnswers;
      stats['s3: notification copies'] = s.notifications;
    });

    await scenario(4, '"order paid" messages delivered 2–3 times each, shuffled', async (checks) => {
      const messages = await count(`SELECT count(*) AS n FROM ${t().outbox}`);
      const deliveries = await count(`SELECT CAST(COALESCE(SUM(deliveries), 0) AS INTEGER) AS n FROM ${t().outbox}`);
      checks.push(eq('messages', toPay.length, messages));
      checks.push(atLeast('deliveries (≥ 2 per message)', 2 * messages, deliveries));
      checks.push(eq('processed once each', messages, await count(`SELECT count(*) AS n FROM ${t().processed} WHERE consumer = 'shipping'`)));
      checks.push(eq('orders shipped', messages, await count(`SELECT count(*) AS n FROM ${t().orders} WHERE status = 'SHIPPED'`)));
      stats['s4: deliveries'] = deliveries;
      stats['s4: queue'] = o.amqpUrl ? 'RabbitMQ' : 'in-process outbox';
    });

    if (o.faults !== false) {
      await scenario(5, 'SIGKILL after_commit, pay_phase_2, after_transition; restart; retries + completer', async (checks) => {
        // Each crash brings up the next armed service at once, as a supervisor would.
        const armed = ['pay_phase_2', 'after_transition', ''];
        const supervise = (current: ServiceProcess) => {
          void current.exited.then(async (how) => {
            if (service !== current) return; // killed on purpose
            crashes.push(`${current.crashAt}:${how}`);
            say(`[5]   service killed at ${current.crashAt} (${how}); restarting`, false);
            service = await startService(env, armed.shift() ?? '');
            supervise(service);
          });
        };
        const restartArmed = async (crashAt: string) => {
          const old = service!;
          service = undefined;
          await old.kill();
          service = await startService(env, crashAt);
          supervise(service);
        };
        // Patient enough to outlast a restart on a loaded machine (connection refused while it boots).
        const retrying = createIdempotentFetch({ retries: 40, minTimeout: 100, maxTimeout: 1_000, maxRetryTime: 90_000, attemptTimeout: 10_000, retryBudget: false });
        const create = async (p: Planned, key: string) => {
          const response = await retrying(`${base}/orders`, {
            method: 'POST',
            headers: { authorization: `Bearer ${p.tenant}`, 'content-type': 'application/json' },
            body: JSON.stringify(orderBody(p)),
            idempotencyKey: key,
          });
          const body = (await response.json()) as { id: string };
          planned.push(p);
          completedKeys++;
          return { response, id: body.id };
        };

        // a) killed after COMMIT, before the response: the client's retry gets the stored answer.
        await restartArmed('after_commit');
        const a = plan('s5-a', 'globex');
        const created = await create(a, keyOf('s5-a'));
        checks.push(eq('a) after_commit: the retry replays the committed order', 'replayed', created.response.idempotency.replayed ? 'replayed' : 'executed'));
        checks.push(eq('a) orders for the key', 1, await count(`SELECT count(*) AS n FROM ${t().orders} WHERE client_order_no = 's5-a'`)));

        // b) killed in the middle of the pay phases (the channel charged, our record says `started`).
        const b = plan('s5-b', 'initech');
        const bOrder = (await create(b, keyOf('s5-b'))).id;
        const bKey = keyOf('pay', 's5-b');
        const lost = await fetch(`${base}/orders/${bOrder}/pay`, {
          method: 'POST',
          headers: { authorization: `Bearer ${b.tenant}`, 'content-type': 'application/json', 'idempotency-key': bKey },
          body: '{}',
        }).then(
          () => 'answered',
          () => 'connection lost',
        );
        checks.push(eq('b) pay_phase_2: the client lost the connection', 'connection lost', lost));
        // The client gives up; the completer takes the abandoned record over once its lease runs out.
        const completedByCompleter = await until(async () => {
          const rows = await db!.sql.query<{ state: string }>(`SELECT state FROM ${t().idempotency} WHERE key = ?`, [bKey]);
          return rows.rows[0]?.state === 'completed';
        }, 20_000);
        checks.push(eq('b) the completer resumed and completed the record', 'completed', completedByCompleter ? 'completed' : 'not completed'));
        const late = await retrying(`${base}/orders/${bOrder}/pay`, {
          method: 'POST',
          headers: { authorization: `Bearer ${b.tenant}`, 'content-type': 'application/json' },
          body: '{}',
          idempotencyKey: bKey,
        });
        const lateBody = (await late.json()) as { resumedFrom?: string };
        checks.push(eq('b) a late client retry replays the completer\'s answer', '202 replayed', `${late.status} ${late.idempotency.replayed ? 'replayed' : 'executed'}`));
        checks.push(eq('b) resumed after the last recovery point', 'payment_started', lateBody.resumedFrom ?? 'none'));
        checks.push(eq('b) channel charges for the order', 1, channel.chargesFor(bOrder)));
        checks.push(atLeast('b) channel requests with the one channel key', 2, channel.requestsFor(channelKeyFor(tenantIdOf(b.tenant), bKey))));
        completedKeys++;

        // c) killed between the UNPAID→PAID update and the ledger write (inside the callback's
        //    transaction): the channel's resend applies it once after the restart.
        const c = plan('s5-c', 'hooli');
        const cOrder = (await create(c, keyOf('s5-c'))).id;
        // The order of (a) is paid alongside: its crash was before any payment.
        const payAll = await Promise.all(
          [
            [c, cOrder],
            [a, created.id],
          ].map(async ([p, id]) => {
            const response = await retrying(`${base}/orders/${id as string}/pay`, {
              method: 'POST',
              headers: { authorization: `Bearer ${(p as Planned).tenant}`, 'content-type': 'application/json' },
              body: '{}',
              idempotencyKey: keyOf('pay', (p as Planned).clientOrderNo),
            });
            await response.arrayBuffer();
            completedKeys++;
            return response.status;
          }),
        );
        const paid = { status: payAll[0]! };
        checks.push(eq('c) pay answered 202', 202, paid.status));
        const settled = await until(
          async () => (await count(`SELECT count(*) AS n FROM ${t().orders} WHERE client_order_no IN ('s5-a', 's5-b', 's5-c') AND status = 'SHIPPED'`)) === 3,
          20_000,
        );
        checks.push(eq('a, b, c) paid and shipped after the restarts', 'yes', settled ? 'yes' : 'no'));
        for (const [label, orderId] of [['b', bOrder], ['c', cOrder]] as const) {
          checks.push(eq(`${label}) ledger entries for the order`, 1, await count(`SELECT count(*) AS n FROM ${t().ledger} WHERE order_id = ?`, [orderId])));
        }
        checks.push(eq('crash points reached', 'after_commit, pay_phase_2, after_transition', crashes.map((x) => x.split(':')[0]).join(', ')));
        checks.push(eq('each by SIGKILL', 'SIGKILL', [...new Set(crashes.map((x) => x.split(':')[1]))].join(',') || 'none'));
      });
    }

    // Settle: late notifications, queue, completer.
    say('settling: waiting for notifications, the queue and the completer …', false);
    channel.releaseLate();
    const settleMs = o.settleTimeoutMs ?? 30_000;
    await channel.idle(settleMs);
    await until(
      async () =>
        (await count(`SELECT count(*) AS n FROM ${t().outbox} WHERE published = 0`)) === 0 &&
        (await count(`SELECT count(*) AS n FROM ${t().orders} WHERE status <> 'SHIPPED'`)) === 0 &&
        (await count(`SELECT count(*) AS n FROM ${t().idempotency} WHERE state = 'in_flight'`)) === 0,
      settleMs,
    );
    // One more pass of the relay, so a broken consumer's redeliveries are counted too.
    await new Promise((r) => setTimeout(r, 200));

    const reconciliation = await reconcile(db, planned, completedKeys, channel);
    Object.assign(stats, { 'crashes (SIGKILL)': crashes.length, 'channel: charge requests in all': channel.stats().chargeRequests });
    const pass = scenarios.every((s) => s.checks.every((c) => c.pass)) && reconciliation.every((r) => r.pass);
    return {
      pass,
      seed: o.seed,
      orders: o.orders,
      concurrency: o.concurrency,
      database: postgres ? `PostgreSQL (tables ${prefix}*)` : o.db ? url : 'temporary SQLite file',
      queue: o.amqpUrl ? 'RabbitMQ' : 'in-process outbox',
      durationMs: Date.now() - started,
      scenarios: scenarios.sort((x, y) => x.id - y.id),
      reconciliation,
      stats,
      keptAt: o.keep ? (postgres ? `${url.replace(/\/\/[^@]*@/, '//')} tables ${prefix}*` : url) : undefined,
    };
  } finally {
    const current = service;
    service = undefined;
    await current?.kill();
    await channel.close();
    await gateway.close();
    if (db) {
      if (!o.keep && postgres) await db.drop().catch(() => {});
      await db.close();
    }
    if (!o.keep) rmSync(tmp, { recursive: true, force: true });
    if (o.amqpUrl && !o.keep) await deleteQueue(o.amqpUrl, env.AMQP_QUEUE!).catch(() => {});
  }
}

async function deleteQueue(amqpUrl: string, queue: string): Promise<void> {
  const amqp = await import('amqplib');
  const connection = await amqp.connect(amqpUrl);
  try {
    const channel = await connection.createChannel();
    await channel.deleteQueue(queue);
  } finally {
    await connection.close();
  }
}

/** Cross-checks every table against what the run asked for (not against each other only). */
async function reconcile(db: PaymentsDb, planned: readonly Planned[], completedKeys: number, channel: Channel): Promise<ReconRow[]> {
  const { t } = db;
  const n = async (sql: string, params: unknown[] = []) => Number((await db.sql.query<{ n: number }>(sql, params)).rows[0]?.n ?? 0);
  const rows: ReconRow[] = [];
  const row = (table: string, check: string, expected: number | string, actual: number | string, pass = expected === actual) =>
    rows.push({ table, check, expected, actual, pass });
  const orders = planned.length;
  const money = planned.reduce((sum, p) => sum + p.amount, 0);

  row('orders', 'rows (one per logical order)', orders, await n(`SELECT count(*) AS n FROM ${t.orders}`));
  row('orders', 'paid (PAID or SHIPPED)', orders, await n(`SELECT count(*) AS n FROM ${t.orders} WHERE paid_at IS NOT NULL AND status IN ('PAID', 'SHIPPED')`));
  row('orders', 'shipped', orders, await n(`SELECT count(*) AS n FROM ${t.orders} WHERE status = 'SHIPPED'`));
  row('ledger', 'entries (one per paid order)', orders, await n(`SELECT count(*) AS n FROM ${t.ledger}`));
  row('ledger', 'sum of amounts', money, await n(`SELECT CAST(COALESCE(SUM(amount), 0) AS INTEGER) AS n FROM ${t.ledger}`));
  row('payment_flows', 'channel txns applied', orders, await n(`SELECT count(*) AS n FROM ${t.flows} WHERE outcome = 'APPLIED'`));
  row('payment_flows', 'second payments / rejected', 0, await n(`SELECT count(*) AS n FROM ${t.flows} WHERE outcome <> 'APPLIED'`));
  row('channel', 'charges (money moved)', orders, channel.stats().charges);
  row('channel', 'double charges', 0, channel.stats().doubleCharges);
  for (const item of CATALOGUE) {
    const qty = planned.filter((p) => p.sku === item.sku).reduce((sum, p) => sum + p.quantity, 0);
    const inv = (await db.sql.query<{ initial: number; available: number; reserved: number; sold: number }>(
      `SELECT initial, available, reserved, sold FROM ${t.inventory} WHERE sku = ?`,
      [item.sku],
    )).rows[0]!;
    const [initial, available, reserved, sold] = [inv.initial, inv.available, inv.reserved, inv.sold].map(Number) as [number, number, number, number];
    row('inventory', `${item.sku}: reserved + sold`, qty, reserved + sold);
    row('inventory', `${item.sku}: sold (shipped quantity)`, qty, sold);
    row('inventory', `${item.sku}: available + reserved + sold = initial`, item.stock, available + reserved + sold, available + reserved + sold === initial && initial === item.stock);
  }
  row('idempotency_records', 'completed', completedKeys, await n(`SELECT count(*) AS n FROM ${t.idempotency} WHERE state = 'completed'`));
  row('idempotency_records', 'left in flight', 0, await n(`SELECT count(*) AS n FROM ${t.idempotency} WHERE state = 'in_flight'`));
  row('processed_messages', 'shipping consumer (one per paid order)', orders, await n(`SELECT count(*) AS n FROM ${t.processed} WHERE consumer = 'shipping'`));
  row('outbox', 'messages (one per paid order)', orders, await n(`SELECT count(*) AS n FROM ${t.outbox}`));
  row('outbox', 'undelivered', 0, await n(`SELECT count(*) AS n FROM ${t.outbox} WHERE published = 0`));
  return rows;
}
