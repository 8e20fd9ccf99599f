/**
 * A consumer process for the proofs: consumes a RabbitMQ queue or a JetStream durable consumer,
 * writing its business effect and the processed record in one PostgreSQL transaction. It kills
 * itself with SIGKILL at an env-configured point, so the proofs crash it mid-stream:
 *   CRASH_PHASE=handler  inside the handler, after the effect's writes, before the commit;
 *   CRASH_PHASE=ack      after the commit, before the broker ack (the redelivery must be a duplicate);
 * at the CRASH_AT-th handler call / ack of this process. With HOLD_AT=n, a handler that starts after
 * this process has processed n messages waits forever: the proofs kill such a process from outside,
 * and however slow the machine is, it cannot work through the queue before that kill lands.
 * SIGTERM stops gracefully and prints stats.
 * Prints `ready`, `ok` per processed message, `dup <id>` per duplicate skipped.
 */
import amqp from 'amqplib';
import type { ConsumeMessage } from 'amqplib';
import { jetstream } from '@nats-io/jetstream';
import type { JsMsg } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { amqpConsumeOnce, natsConsumeOnce } from '../../src/messaging/index.js';
import type { AmqpChannel } from '../../src/messaging/amqp.js';
import type { ConsumeStats } from '../../src/messaging/delivery.js';
import type { NatsJsMessage } from '../../src/messaging/nats.js';
import { sqlExecutor } from '../../src/patterns/sql.js';
import type { SqlExecutor } from '../../src/patterns/sql.js';

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};
const phase = process.env.CRASH_PHASE ?? 'none';
const crashAt = Number(process.env.CRASH_AT ?? 0);
const holdAt = Number(process.env.HOLD_AT ?? 0);
const effects = env('EFFECTS');
const counters = env('COUNTERS');
const options = { table: env('PROCESSED'), consumer: env('CONSUMER'), onDuplicate: (id: string) => console.log(`dup ${id}`) };

const pool = new pg.Pool({ host: '127.0.0.1', port: 5432, user: process.env.PGUSER ?? 'postgres', database: 'test', max: 8 });
pool.on('error', () => {});
const db = sqlExecutor(pool);

let calls = 0;
let acks = 0;
let processed = 0;
const die = () => process.kill(process.pid, 'SIGKILL');
/** Past HOLD_AT, never returns: the handler (and its open transaction) waits for the external kill. */
async function holdPastLimit(): Promise<void> {
  if (holdAt > 0 && processed >= holdAt) await new Promise<never>(() => {});
}

async function effect(tx: SqlExecutor, id: string) {
  await tx.query(`INSERT INTO ${effects} (message_id) VALUES (?)`, [id]);
  await tx.query(`UPDATE ${counters} SET n = n + 1 WHERE name = 'effects'`);
  if (phase === 'handler' && ++calls === crashAt) die();
}
function beforeAck() {
  if (phase === 'ack' && ++acks === crashAt) die();
}
const finish = async (stats: ConsumeStats) => {
  console.log(`stats ${JSON.stringify(stats)}`);
  await pool.end();
  process.exit(0);
};

if (env('BROKER') === 'amqp') {
  const connection = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createChannel();
  await channel.prefetch(16);
  // The real channel, with a crash point between the commit and the ack.
  const wrapped: AmqpChannel<ConsumeMessage> = {
    consume: (queue, onMessage, o) => channel.consume(queue, onMessage, o),
    ack: (message) => {
      beforeAck();
      channel.ack(message);
    },
    nack: (message, allUpTo, requeue) => channel.nack(message, allUpTo, requeue),
    cancel: (tag) => channel.cancel(tag),
  };
  const consumer = await amqpConsumeOnce(wrapped, env('QUEUE'), { db, ...options }, async (message, tx) => {
    await holdPastLimit();
    await effect(tx, String(message.properties.messageId));
    processed++;
    console.log('ok');
  });
  console.log('ready');
  process.once('SIGTERM', () => void (async () => {
    await consumer.cancel();
    await channel.close();
    await connection.close();
    await finish(consumer.stats);
  })());
} else {
  const nc = await connect({ servers: '127.0.0.1:4222' });
  const js = jetstream(nc);
  const source = await (await js.consumers.get(env('STREAM'), env('DURABLE'))).consume({ max_messages: 32 });
  // The real messages, with a crash point between the commit and the ack.
  async function* withCrashPoint(): AsyncGenerator<NatsJsMessage & { readonly id: string }> {
    for await (const m of source as AsyncIterable<JsMsg>) {
      yield {
        id: m.headers?.get('Nats-Msg-Id') ?? '',
        data: m.data,
        subject: m.subject,
        headers: m.headers,
        info: m.info,
        ack: () => {
          beforeAck();
          m.ack();
        },
        nak: (ms?: number) => m.nak(ms),
        term: () => m.term(),
      };
    }
  }
  const running = natsConsumeOnce(withCrashPoint(), { db, ...options }, async (message, tx) => {
    await holdPastLimit();
    await effect(tx, message.id);
    processed++;
    console.log('ok');
  });
  console.log('ready');
  process.once('SIGTERM', () => void (async () => {
    await source.close();
    await finish(await running.done);
  })());
}
