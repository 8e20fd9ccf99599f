/**
 * npm run demo — the payments service under the seed's acceptance scenarios, on a temporary
 * SQLite file (no server needed), ending with a reconciliation report. Exit code 0 on PASS.
 *
 *   --orders N        orders in the gateway scenario (default 200)
 *   --concurrency N   requests in flight (default 16)
 *   --seed S          seed of every random decision (default "idemkit")
 *   --db URL          sqlite:/path/file.db | postgres://… (default: a temporary SQLite file)
 *   --amqp URL        deliver "order paid" through RabbitMQ (default: AMQP_URL, else in-process)
 *   --keep            keep the database for inspection
 *   --report FILE     also write the report: FILE.html writes HTML and JSON next to it, FILE.json JSON only
 *   --no-faults       skip the crash scenario
 * For tests: --prefix P (table prefix), --queue Q (RabbitMQ queue), --settle-ms N, --broken consumer.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { htmlReport, textReport } from './report.js';
import { runAcceptance } from './scenarios.js';

const { values } = parseArgs({
  options: {
    orders: { type: 'string', default: '200' },
    concurrency: { type: 'string', default: '16' },
    seed: { type: 'string', default: 'idemkit' },
    db: { type: 'string' },
    amqp: { type: 'string' },
    keep: { type: 'boolean', default: false },
    report: { type: 'string' },
    'no-faults': { type: 'boolean', default: false },
    broken: { type: 'string' },
    prefix: { type: 'string' },
    queue: { type: 'string' },
    'settle-ms': { type: 'string' },
  },
});
const positive = (name: string, value: string) => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) {
    console.error(`--${name} must be a positive integer, got ${value}`);
    process.exit(2);
  }
  return n;
};

const live = process.stdout.isTTY === true;
let pending = false;
const progress = (line: string, final: boolean) => {
  if (live) {
    process.stdout.write(`\r\x1b[2K${line}${final ? '\n' : ''}`);
    pending = !final;
  } else if (final) {
    console.log(line);
  }
};

const orders = positive('orders', values.orders);
const concurrency = positive('concurrency', values.concurrency);
console.log(`idemkit payments demo: ${orders} orders, concurrency ${concurrency}, seed ${values.seed}`);
const report = await runAcceptance({
  orders,
  concurrency,
  seed: values.seed,
  db: values.db,
  amqpUrl: values.amqp ?? (process.env.AMQP_URL || undefined),
  keep: values.keep,
  faults: !values['no-faults'],
  broken: values.broken === 'consumer' ? 'consumer' : undefined,
  prefix: values.prefix,
  amqpQueue: values.queue,
  settleTimeoutMs: values['settle-ms'] === undefined ? undefined : positive('settle-ms', values['settle-ms']),
  progress,
}).catch((error: unknown) => {
  if (pending) process.stdout.write('\n');
  console.error(`demo could not run: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(2);
});
if (pending) process.stdout.write('\n');
console.log(`\n${textReport(report)}`);
if (report.keptAt) console.log(`database kept: ${report.keptAt}`);
if (values.report) {
  const file = values.report;
  const json = JSON.stringify(report, null, 2);
  if (file.endsWith('.json')) writeFileSync(file, json);
  else {
    writeFileSync(file, htmlReport(report));
    writeFileSync(file.replace(/\.html?$/, '') + '.json', json);
  }
  console.log(`report written to ${file}`);
}
process.exitCode = report.pass ? 0 : 1;
