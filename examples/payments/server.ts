/**
 * Entry point of the payments service.
 *
 *   DATABASE_URL   sqlite:/path/file.db (default: payments.db in the working directory) | postgres://…
 *   TABLE_PREFIX   prefix of every table (tests on a shared server)
 *   PORT           default 3000 (0: any free port)
 *   CHANNEL_URL    the payment channel (the demo starts a simulated one)
 *   WEBHOOK_SECRET whsec_… shared with the channel
 *   AMQP_URL       deliver "order paid" through RabbitMQ instead of the in-process queue (AMQP_QUEUE names the queue)
 *   CRASH_AT       after_transition | after_commit | pay_phase_2: SIGKILL at that point (fault scenarios)
 *   LEASE_MS       lease of in-flight idempotency records (default 30000)
 *   SEED           seed of the queue's duplicate deliveries
 *   BROKEN         consumer: consume without dedup (for the test that reconciliation catches it)
 *
 * GET /metrics serves the Prometheus text format (idemkit's counters and store latency histogram).
 */
import { reapProcessed } from 'idemkit/messaging';
import { openDb } from './db.js';
import { startRelay } from './queue.js';
import { buildService } from './service.js';
import { paymentsCompleter } from './completer.js';
import { startTelemetry } from './telemetry.js';

const env = process.env;
const port = Number(env.PORT ?? 3000);
const leaseMs = Number(env.LEASE_MS ?? 30_000);
const channelUrl = env.CHANNEL_URL ?? 'http://127.0.0.1:4000';
const db = await openDb(env.DATABASE_URL ?? 'sqlite:payments.db', env.TABLE_PREFIX ?? '');
await db.migrate();

const telemetry = startTelemetry();
const onError = (error: unknown) => console.error('payments:', error instanceof Error ? error.message : error);
const { app, phases } = await buildService({
  db,
  channelUrl,
  notifyUrl: env.NOTIFY_URL ?? `http://127.0.0.1:${port}/callbacks/channel`,
  webhookSecret: env.WEBHOOK_SECRET ?? 'whsec_ZGVtby1zZWNyZXQtZG8tbm90LXVzZQ==',
  leaseMs,
  channelTimeoutMs: Number(env.CHANNEL_TIMEOUT_MS ?? 300),
  telemetry,
});
const relay = await startRelay({
  db: db.sql,
  t: db.t,
  seed: env.SEED ?? 'payments',
  amqpUrl: env.AMQP_URL || undefined,
  amqpQueue: env.AMQP_QUEUE,
  broken: env.BROKEN === 'consumer',
  onError,
});
const completion = paymentsCompleter({
  db,
  phases,
  channelUrl,
  leaseMs,
  queryAfterMs: Number(env.QUERY_AFTER_MS ?? 5_000),
  onError,
});
const timer = setInterval(() => void completion.run(), Number(env.COMPLETER_MS ?? 500));
// Dedup records must expire (anti-pattern "no expiry"): idempotency keys after their 24 h window,
// processed-message ids after consumeOnce's retention.
const reaper = setInterval(() => {
  db.store.reap().catch(onError);
  reapProcessed(db.sql, { table: db.t.processed }).catch(onError);
}, 60_000);
reaper.unref();

const address = await app.listen({ port, host: '127.0.0.1' });
console.log(`payments listening on ${address}`);

const shutdown = async () => {
  clearInterval(timer);
  clearInterval(reaper);
  await app.close();
  await relay.stop();
  await db.close();
  await telemetry.shutdown();
  process.exit(0);
};
process.once('SIGTERM', () => void shutdown());
process.once('SIGINT', () => void shutdown());
