/**
 * The "order paid" messages travel through an outbox: the payment's transaction writes the
 * message row, and a relay delivers it afterwards, at least once.
 *
 * - In-process (default, on the service's own database): the relay hands each message to the
 *   consumer 2–3 times (seeded), shuffled across the batch, so duplicates and reordering are the
 *   normal case. A row is marked published only after every copy was handled; a crash before that
 *   redelivers it.
 * - RabbitMQ (`AMQP_URL`): the relay publishes 2–3 copies of each row (shuffled, persistent,
 *   with `messageId`), then marks it published; the consumer is idemkit/messaging's
 *   `amqpConsumeOnce` with manual acks.
 */
import type { SqlExecutor } from 'idemkit/patterns';
import { amqpConsumeOnce } from 'idemkit/messaging';
import type { TableNames } from './schema.js';
import { handleOrderPaid, SHIPPING_CONSUMER, shipInTx } from './consumer.js';
import type { OrderPaid } from './consumer.js';
import { pick, shuffle } from './rng.js';

export interface RelayOptions {
  readonly db: SqlExecutor;
  readonly t: TableNames;
  readonly seed: string;
  /** Deliver each message this many times (inclusive range). @default [2, 3] */
  readonly copies?: readonly [number, number];
  readonly amqpUrl?: string;
  readonly amqpQueue?: string;
  /** The anti-pattern switch for tests: consume without dedup. */
  readonly broken?: boolean;
  readonly onError?: (error: unknown) => void;
}

export interface Relay {
  stop(): Promise<void>;
}

interface OutboxRow {
  seq: number;
  message_id: string;
  payload: string;
}

export async function startRelay(o: RelayOptions): Promise<Relay> {
  const [min, max] = o.copies ?? [2, 3];
  const onError = o.onError ?? ((error: unknown) => console.error('relay:', error));
  const { db, t } = o;
  let stopped = false;
  const countDelivery = (messageId: string) => db.query(`UPDATE ${t.outbox} SET deliveries = deliveries + 1 WHERE message_id = ?`, [messageId]);
  const batch = async () =>
    (await db.query<OutboxRow>(`SELECT seq, message_id, payload FROM ${t.outbox} WHERE published = 0 ORDER BY seq LIMIT 100`)).rows;
  const copiesOf = (rows: OutboxRow[]) =>
    shuffle(
      // Copies are decided by the client's order number (stable under a seed; order ids are random).
      rows.flatMap((row) => Array.from({ length: pick(o.seed, min, max, 'copies', subjectOf(row)) }, () => row)),
      o.seed,
      'batch',
      rows[0]?.message_id ?? '',
    );
  const subjectOf = (row: OutboxRow) => (JSON.parse(row.payload) as { clientOrderNo?: string }).clientOrderNo ?? row.message_id;
  const markPublished = (seqs: number[]) =>
    seqs.length === 0 ? Promise.resolve() : db.query(`UPDATE ${t.outbox} SET published = 1 WHERE seq IN (${seqs.map(() => '?').join(', ')})`, seqs);

  let publish: (rows: OutboxRow[]) => Promise<number[]>;
  let closeBroker = async () => {};
  if (o.amqpUrl) {
    const amqp = await import('amqplib');
    const connection = await amqp.connect(o.amqpUrl);
    const queue = o.amqpQueue ?? 'idemkit.payments.order-paid';
    const publisher = await connection.createConfirmChannel();
    await publisher.assertQueue(queue, { durable: true });
    const consumerChannel = await connection.createChannel();
    await consumerChannel.prefetch(16);
    const consumer = await amqpConsumeOnce(
      consumerChannel,
      queue,
      {
        db,
        consumer: SHIPPING_CONSUMER,
        table: t.processed,
        onError: (error) => onError(error),
        onDuplicate: (messageId) => void countDelivery(messageId).catch(onError),
      },
      async (message, tx) => {
        const body = JSON.parse(Buffer.from(message.content).toString('utf8')) as OrderPaid;
        await tx!.query(`UPDATE ${t.outbox} SET deliveries = deliveries + 1 WHERE message_id = ?`, [body.messageId]);
        return shipInTx(tx!, t, body.orderId);
      },
    );
    publish = async (rows) => {
      for (const row of copiesOf(rows)) {
        publisher.sendToQueue(queue, Buffer.from(row.payload), { messageId: row.message_id, persistent: true, contentType: 'application/json' });
      }
      await publisher.waitForConfirms();
      return rows.map((row) => row.seq);
    };
    closeBroker = async () => {
      await consumer.cancel();
      await connection.close();
    };
  } else {
    publish = async (rows) => {
      const failed = new Set<number>();
      await Promise.all(
        copiesOf(rows).map(async (row) => {
          try {
            await countDelivery(row.message_id);
            await handleOrderPaid(db, t, JSON.parse(row.payload) as OrderPaid, o.broken);
          } catch (error) {
            failed.add(row.seq); // not acknowledged: delivered again on the next round
            onError(error);
          }
        }),
      );
      // A failed message is redelivered, after a pause: a handler that keeps failing must not spin.
      if (failed.size > 0) await new Promise((r) => setTimeout(r, 250));
      return rows.filter((row) => !failed.has(row.seq)).map((row) => row.seq);
    };
  }

  const loop = (async () => {
    while (!stopped) {
      try {
        const rows = await batch();
        if (rows.length > 0) await markPublished(await publish(rows));
        else await new Promise((r) => setTimeout(r, 25));
      } catch (error) {
        onError(error);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  })();

  return {
    async stop() {
      stopped = true;
      await loop;
      await closeBroker();
    },
  };
}
