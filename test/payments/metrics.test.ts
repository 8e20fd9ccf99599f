/**
 * Issue 17 item 2: the payments service (examples/payments/server.ts, a child process on a SQLite
 * file) serves GET /metrics in the Prometheus text format; after a few requests the scrape counts
 * each outcome and has store latency histograms per operation.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../examples/payments/process.js';
import type { ServiceProcess } from '../../examples/payments/process.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-payments-metrics-'));
let service: ServiceProcess;
let base: string;

beforeAll(async () => {
  service = await startService({ DATABASE_URL: `sqlite:${join(dir, 'payments.db')}`, PORT: '0', CHANNEL_URL: 'http://127.0.0.1:9', COMPLETER_MS: '3600000' });
  base = /payments listening on (http:\/\/\S+)/.exec(service.output.join('\n'))![1]!;
});
afterAll(async () => {
  await service?.kill();
  rmSync(dir, { recursive: true, force: true });
});

const order = (key: string | undefined, quantity = 1) =>
  fetch(`${base}/orders`, {
    method: 'POST',
    headers: { authorization: 'Bearer acme', 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body: JSON.stringify({ clientOrderNo: `co-${key ?? 'none'}`, sku: 'sku-mug', quantity, amount: 900 * quantity }),
  });

/** The value of the one sample whose name is `name` and whose labels include each of `labels`. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const found = text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .filter((line) => Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)));
  if (found.length > 1) throw new Error(`${found.length} samples match ${name} ${JSON.stringify(labels)}:\n${found.join('\n')}`);
  return found[0] === undefined ? undefined : Number(found[0].slice(found[0].lastIndexOf(' ') + 1));
}

describe('GET /metrics on the payments service', () => {
  it('counts executed, replayed, mismatch and rejected requests, and store latency per operation', async () => {
    expect((await order('metrics-order-key-0001')).status).toBe(201);
    expect((await order('metrics-order-key-0001')).status).toBe(201); // replayed
    expect((await order('metrics-order-key-0002')).status).toBe(201);
    expect((await order('metrics-order-key-0001', 2)).status).toBe(422); // same key, another body
    expect((await order(undefined)).status).toBe(400); // no key
    const response = await fetch(`${base}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await response.text();
    if (process.env.SHOW_SCRAPE) console.log(text);
    expect(sample(text, 'idemkit_requests_total', { idemkit_outcome: 'executed' })).toBe(2);
    expect(sample(text, 'idemkit_requests_total', { idemkit_outcome: 'replayed' })).toBe(1);
    expect(sample(text, 'idemkit_requests_total', { idemkit_outcome: 'mismatch' })).toBe(1);
    expect(sample(text, 'idemkit_requests_total', { idemkit_outcome: 'rejected' })).toBe(1);
    expect(sample(text, 'idemkit_completions_total', { idemkit_completion: 'stored' })).toBe(2);
    // The exporter names a metric as OpenTelemetry does (dots to underscores), with no unit suffix: seconds, as `# UNIT` says.
    expect(text).toMatch(/^# TYPE idemkit_store_operation_duration histogram$/m);
    expect(text).toMatch(/^# UNIT idemkit_store_operation_duration s$/m);
    // Transactional mode: claims for all four keyed requests, and a transaction per executed one.
    const count = (operation: string) => sample(text, 'idemkit_store_operation_duration_count', { idemkit_store_operation: operation, idemkit_store_name: 'sqlite' });
    expect(count('claim')).toBe(4);
    expect(count('begin_transaction')).toBe(2);
    expect(count('complete')).toBe(2);
    expect(count('commit')).toBe(2);
    expect(sample(text, 'idemkit_store_operation_duration_bucket', { idemkit_store_operation: 'claim', le: '+Inf' })).toBe(4);
  });
});
