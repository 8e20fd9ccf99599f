/**
 * The payments acceptance scenarios (examples/payments/scenarios.ts) as tests: the same runner the
 * demo uses, smaller, on SQLite, on PostgreSQL (own table prefix, dropped after) and with the
 * consumer on RabbitMQ (own queue, deleted after). A deliberately broken consumer must be caught.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { Report } from '../../examples/payments/scenarios.js';
import { runAcceptance } from '../../examples/payments/scenarios.js';
import { POSTGRES, RABBITMQ, requireService } from '../support/services.js';

const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';
const AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';
const postgresUp = await requireService(POSTGRES);
const rabbitUp = await requireService(RABBITMQ);

/** Every failing row and check, so a failure names what did not reconcile. */
function failures(report: Report): string[] {
  return [
    ...report.scenarios.flatMap((s) => s.checks.filter((c) => !c.pass).map((c) => `[${s.id}] ${c.name}: expected ${c.expected}, got ${c.actual}`)),
    ...report.reconciliation.filter((r) => !r.pass).map((r) => `${r.table} ${r.check}: expected ${r.expected}, got ${r.actual}`),
  ];
}

function expectReconciled(report: Report, scenarios: number[]): void {
  expect(failures(report)).toEqual([]);
  expect(report.pass).toBe(true);
  expect(report.scenarios.map((s) => s.id)).toEqual(scenarios);
  const orders = report.reconciliation.find((r) => r.table === 'orders' && r.check.startsWith('rows'))!;
  expect(orders.actual).toBe(orders.expected);
}

describe('payments acceptance', () => {
  it('SQLite: all six scenarios, crashes included, reconcile', async () => {
    const report = await runAcceptance({ orders: 30, concurrency: 8, seed: 'test-sqlite' });
    expectReconciled(report, [1, 2, 3, 4, 5, 6]);
    // The faults really happened: the gateway lost answers and the channel answered late.
    expect(Number(report.stats['s2: answers dropped']) + Number(report.stats['s2: 504 after execution'])).toBeGreaterThan(0);
    expect(Number(report.stats['s3: channel late answers'])).toBeGreaterThan(0);
  }, 180_000);

  it.skipIf(!postgresUp)('PostgreSQL: all six scenarios reconcile, and the tables are dropped after', async () => {
    const prefix = `paytest_${randomBytes(4).toString('hex')}_`;
    const report = await runAcceptance({ orders: 30, concurrency: 8, seed: 'test-postgres', db: POSTGRES_URL, prefix });
    expectReconciled(report, [1, 2, 3, 4, 5, 6]);
    const client = new pg.Client(POSTGRES_URL);
    await client.connect();
    try {
      const left = await client.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE $1", [`${prefix}%`]);
      expect(left.rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
  }, 180_000);

  it.skipIf(!rabbitUp)('RabbitMQ: the consumer processes each redelivered message once', async () => {
    const report = await runAcceptance({
      orders: 20,
      concurrency: 8,
      seed: 'test-rabbit',
      amqpUrl: AMQP_URL,
      amqpQueue: `idemkit.payments.test.${process.pid}.${randomBytes(3).toString('hex')}`,
      faults: false,
    });
    expectReconciled(report, [1, 2, 3, 4, 6]);
    expect(report.queue).toBe('RabbitMQ');
  }, 180_000);

  it('a consumer without consume-once is caught by the reconciliation (FAIL)', async () => {
    const report = await runAcceptance({ orders: 10, concurrency: 8, seed: 'test-broken', broken: 'consumer', faults: false, settleTimeoutMs: 4_000 });
    expect(report.pass).toBe(false);
    const failed = report.reconciliation.filter((r) => !r.pass).map((r) => `${r.table}: ${r.check}`);
    expect(failed).toContain('processed_messages: shipping consumer (one per paid order)');
    // The duplicate deliveries did damage the business tables: shipped stock or shipped orders are off.
    expect(failed.some((f) => f.startsWith('inventory') || f.startsWith('orders') || f.startsWith('outbox'))).toBe(true);
  }, 180_000);
});
