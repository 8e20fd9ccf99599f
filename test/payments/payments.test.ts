/**
 * The payments acceptance scenarios (examples/payments) as tests: the demo's own runner, started
 * the way `npm run demo` starts it (a child process with the source condition), smaller, on SQLite,
 * on PostgreSQL (own table prefix, dropped after) and with the consumer on RabbitMQ (own queue,
 * deleted after). Its JSON report is asserted. A deliberately broken consumer must be caught.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { Report } from '../../examples/payments/scenarios.js';
import { POSTGRES, RABBITMQ, requireService } from '../support/services.js';

const root = join(import.meta.dirname, '..', '..');
const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test';
const AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';
const postgresUp = await requireService(POSTGRES);
const rabbitUp = await requireService(RABBITMQ);
const dir = mkdtempSync(join(tmpdir(), 'idemkit-payments-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs examples/payments/demo.ts with `args`; answers its exit code, output and JSON report. */
async function demo(args: string[]): Promise<{ code: number | null; out: string; report: Report }> {
  const file = join(dir, `report-${randomBytes(4).toString('hex')}.json`);
  const child = spawn(process.execPath, ['--conditions=idemkit-source', '--import', 'tsx', 'examples/payments/demo.ts', ...args, '--report', file], {
    cwd: root,
    env: { ...process.env, AMQP_URL: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  let report: Report;
  try {
    report = JSON.parse(readFileSync(file, 'utf8')) as Report;
  } catch {
    throw new Error(`the demo wrote no report (exit ${code}):\n${out}`);
  }
  return { code, out, report };
}

/** Every failing row and check, so a failure names what did not reconcile. */
function failures(report: Report): string[] {
  return [
    ...report.scenarios.flatMap((s) => s.checks.filter((c) => !c.pass).map((c) => `[${s.id}] ${c.name}: expected ${c.expected}, got ${c.actual}`)),
    ...report.reconciliation.filter((r) => !r.pass).map((r) => `${r.table} ${r.check}: expected ${r.expected}, got ${r.actual}`),
  ];
}

function expectReconciled(run: { code: number | null; report: Report }, scenarios: number[]): void {
  expect(failures(run.report)).toEqual([]);
  expect(run.report.pass).toBe(true);
  expect(run.code).toBe(0);
  expect(run.report.scenarios.map((s) => s.id)).toEqual(scenarios);
  const orders = run.report.reconciliation.find((r) => r.table === 'orders' && r.check.startsWith('rows'))!;
  expect(orders.actual).toBe(orders.expected);
}

describe('payments acceptance', () => {
  it('SQLite: all six scenarios, crashes included, reconcile', async () => {
    const run = await demo(['--orders', '30', '--concurrency', '8', '--seed', 'test-sqlite']);
    expectReconciled(run, [1, 2, 3, 4, 5, 6]);
    // The faults really happened: the gateway lost answers and the channel answered late.
    expect(Number(run.report.stats['s2: answers dropped']) + Number(run.report.stats['s2: 504 after execution'])).toBeGreaterThan(0);
    expect(Number(run.report.stats['s3: channel late answers'])).toBeGreaterThan(0);
    expect(run.out).toMatch(/^PASS: 30 orders/m);
  }, 240_000);

  it.skipIf(!postgresUp)('PostgreSQL: all six scenarios reconcile, and the tables are dropped after', async () => {
    const prefix = `paytest_${randomBytes(4).toString('hex')}_`;
    const run = await demo(['--orders', '30', '--concurrency', '8', '--seed', 'test-postgres', '--db', POSTGRES_URL, '--prefix', prefix]);
    expectReconciled(run, [1, 2, 3, 4, 5, 6]);
    const client = new pg.Client(POSTGRES_URL);
    await client.connect();
    try {
      const left = await client.query('SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE $1', [`${prefix}%`]);
      expect(left.rows[0].n).toBe(0);
    } finally {
      await client.end();
    }
  }, 240_000);

  it.skipIf(!rabbitUp)('RabbitMQ: the consumer processes each redelivered message once', async () => {
    const queue = `idemkit.payments.test.${process.pid}.${randomBytes(3).toString('hex')}`;
    const run = await demo(['--orders', '20', '--concurrency', '8', '--seed', 'test-rabbit', '--amqp', AMQP_URL, '--queue', queue, '--no-faults']);
    expectReconciled(run, [1, 2, 3, 4, 6]);
    expect(run.report.queue).toBe('RabbitMQ');
  }, 240_000);

  it('the same --seed makes the same decisions (lost answers, late channel answers, message copies)', async () => {
    const args = ['--orders', '15', '--concurrency', '4', '--seed', 'test-determinism', '--no-faults'];
    const [first, second] = [await demo(args), await demo(args)];
    expectReconciled(first, [1, 2, 3, 4, 6]);
    expectReconciled(second, [1, 2, 3, 4, 6]);
    // The seed's decisions, not the counts that also follow the machine's speed: a channel answer
    // slower than the service's 300 ms attempt timeout (a loaded CI machine) adds a charge request.
    const decisions = (stats: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(stats).filter(([name]) => /answers dropped|504 after execution|late answers|notification copies|crashes/.test(name)));
    expect(Object.keys(decisions(first.report.stats))).toHaveLength(5);
    expect(decisions(second.report.stats)).toEqual(decisions(first.report.stats));
    const other = await demo(['--orders', '15', '--concurrency', '4', '--seed', 'test-determinism-2', '--no-faults']);
    expect(decisions(other.report.stats)).not.toEqual(decisions(first.report.stats));
  }, 240_000);

  it('a consumer without consume-once is caught by the reconciliation (FAIL, exit 1)', async () => {
    const run = await demo(['--orders', '10', '--concurrency', '8', '--seed', 'test-broken', '--broken', 'consumer', '--no-faults', '--settle-ms', '4000']);
    expect(run.report.pass).toBe(false);
    expect(run.code).toBe(1);
    expect(run.out).toMatch(/^FAIL: 10 orders/m);
    const failed = run.report.reconciliation.filter((r) => !r.pass).map((r) => `${r.table}: ${r.check}`);
    expect(failed).toContain('processed_messages: shipping consumer (one per paid order)');
    // The duplicate deliveries damaged the business tables too: stock, shipments or the outbox are off.
    expect(failed.some((f) => f.startsWith('inventory') || f.startsWith('orders') || f.startsWith('outbox'))).toBe(true);
  }, 240_000);
});
