import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import { Redis } from 'ioredis';
import type { Channel, ChannelModel, ConsumeMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { amqpConsumeOnce, amqpMessageId, migrateProcessed, MissingMessageIdError } from '../../src/messaging/index.js';
import type { AmqpMessage } from '../../src/messaging/amqp.js';
import type { AmqpConsumer } from '../../src/messaging/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { STORE_CLIENT_OPTIONS } from '../support/redis-servers.js';
import { POSTGRES, RABBITMQ, REDIS, requireService } from '../support/services.js';
import type { TestDatabase } from '../support/databases.js';
import { postgresDatabase, sqliteDatabase } from '../support/databases.js';

const available = (await requireService(RABBITMQ)) && (await requireService(POSTGRES));
const hasRedis = await requireService(REDIS);
const tag = `${process.pid}-${randomBytes(3).toString('hex')}`;

const fake = (properties: AmqpMessage['properties'], body = 'payload'): AmqpMessage => ({
  content: Buffer.from(body),
  fields: { deliveryTag: 1, redelivered: false },
  properties,
});

describe('amqpMessageId', () => {
  it('takes properties.messageId, then the configured header, then the content hash (only when enabled)', () => {
    const both = fake({ messageId: 'prop-1', headers: { 'x-id': 'hdr-1' } });
    expect(amqpMessageId(both, { idHeader: 'x-id', hashFallback: true })).toBe('prop-1');
    const header = fake({ headers: { 'x-id': Buffer.from('hdr-2') } });
    expect(amqpMessageId(header, { idHeader: 'x-id', hashFallback: true })).toBe('hdr-2');
    expect(amqpMessageId(fake({ headers: { 'x-id': 42 } }), { idHeader: 'x-id' })).toBe('42');
    const bare = fake({ headers: {} }, 'same body');
    expect(amqpMessageId(bare, { idHeader: 'x-id', hashFallback: true })).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(amqpMessageId(fake({}, 'same body'), { hashFallback: true })).toBe(amqpMessageId(bare, { hashFallback: true }));
  });

  it('refuses a message without an id when no fallback is configured, naming what it looked for', () => {
    expect(() => amqpMessageId(fake({ messageId: '' }))).toThrow(MissingMessageIdError);
    expect(() => amqpMessageId(fake({ headers: {} }), { idHeader: 'x-id' })).toThrow(/properties\.messageId and no `x-id` header/);
  });
});

describe('amqpConsumeOnce without a broker (a recording channel)', () => {
  function recordingChannel() {
    const calls: string[] = [];
    let deliver!: (message: AmqpMessage | null) => void;
    const channel = {
      consume: async (_q: string, onMessage: (m: AmqpMessage | null) => void) => {
        deliver = onMessage;
        return { consumerTag: 'ctag' };
      },
      ack: (m: AmqpMessage) => calls.push(`ack ${String(m.properties.messageId)}`),
      nack: (m: AmqpMessage, _all?: boolean, requeue?: boolean) => calls.push(`nack ${String(m.properties.messageId).slice(0, 8)} requeue=${requeue}`),
      cancel: async () => undefined,
    };
    return { channel, calls, deliver: (m: AmqpMessage) => deliver(m) };
  }

  it('validates every option when it starts, not per message', async () => {
    const { channel } = recordingChannel();
    const t = sqliteDatabase();
    try {
      const bad: Array<[Record<string, unknown>, string]> = [
        [{ db: t.db, consumer: '' }, 'consumer'],
        [{ db: t.db, consumer: 'c', table: 'no-dashes' }, 'table'],
        [{ db: t.db, consumer: 'c', retentionMs: -1 }, 'retentionMs'],
        [{ db: t.db, consumer: 'c', requeue: 'yes' }, 'requeue'],
        [{ db: t.db, consumer: 'c', idHeader: '' }, 'idHeader'],
        [{ db: t.db, consumer: 'c', prefetch: 10 }, 'prefetch'],
        [{ consumer: 'c' }, 'db'],
        [{ db: t.db, store: {}, consumer: 'c' }, 'db'],
      ];
      for (const [options, option] of bad) {
        await expect(amqpConsumeOnce(channel, 'q', options as never, async () => 1), option).rejects.toMatchObject({ option });
      }
    } finally {
      await t.close();
    }
  });

  it('refuses (nack without requeue) an id that is missing or too long, instead of requeueing it forever', async () => {
    const { channel, calls, deliver } = recordingChannel();
    const t = sqliteDatabase();
    const table = t.table('refuse');
    await migrateProcessed(t.db, { table });
    const errors: unknown[] = [];
    try {
      const c = await amqpConsumeOnce(channel, 'q', { db: t.db, table, consumer: 'c', onError: (e) => errors.push(e) }, async () => 1);
      deliver(fake({ messageId: 'x'.repeat(256) }));
      deliver(fake({}));
      deliver(fake({ messageId: 'ok-1' }));
      await c.cancel();
      expect(calls.sort()).toEqual(['ack ok-1', 'nack undefine requeue=false', 'nack xxxxxxxx requeue=false']);
      expect(c.stats).toMatchObject({ processed: 1, refused: 2 });
      expect(errors.map((e) => (e as { code: string }).code).sort()).toEqual(['ERR_IDEMKIT_MESSAGE_ID_INVALID', 'ERR_IDEMKIT_MESSAGE_ID_MISSING']);
    } finally {
      await t.close();
    }
  });
});

describe.skipIf(!available)('amqpConsumeOnce on RabbitMQ + PostgreSQL', () => {
  let connection: ChannelModel;
  let admin: Channel;
  let t: TestDatabase;
  let table: string;
  let effects: string;
  const queues: string[] = [];

  beforeAll(async () => {
    connection = await amqp.connect(`amqp://guest:guest@${RABBITMQ.host}:${RABBITMQ.port}`);
    admin = await connection.createChannel();
    t = postgresDatabase();
    table = t.table('amqp_processed');
    effects = t.table('amqp_effects');
    await migrateProcessed(t.db, { table });
    await t.db.query(`CREATE TABLE ${effects} (message_id TEXT NOT NULL)`);
  });
  afterAll(async () => {
    for (const q of queues) await admin?.deleteQueue(q).catch(() => undefined);
    await connection?.close();
    await t?.close();
  });

  async function queue(name: string): Promise<{ queue: string; dlq: string }> {
    const q = `idem-msg-${name}-${tag}`;
    const dlq = `${q}-dlq`;
    queues.push(q, dlq);
    await admin.assertQueue(dlq, { durable: false });
    await admin.assertQueue(q, { durable: false, deadLetterExchange: '', deadLetterRoutingKey: dlq });
    return { queue: q, dlq };
  }
  const until = async (what: string, done: () => boolean | Promise<boolean>) => {
    for (let i = 0; i < 2000; i++) {
      if (await done()) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`timed out waiting for ${what}`);
  };
  const effectCount = async () => Number((await t.db.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${effects}`)).rows[0]!.n);

  it('processes each id once, acks duplicates, retries a failed handler, dead-letters a message without id', async () => {
    const { queue: q, dlq } = await queue('main');
    const channel = await connection.createChannel();
    await channel.prefetch(10);
    const errors: unknown[] = [];
    const duplicates: string[] = [];
    let failOnce = true;
    const consumer = await amqpConsumeOnce(
      channel,
      q,
      { db: t.db, table, consumer: `amqp-${tag}`, idHeader: 'x-event-id', onError: (e) => errors.push(e), onDuplicate: (id) => duplicates.push(id) },
      async (message: ConsumeMessage, tx) => {
        const id = message.properties.messageId ?? String(message.properties.headers?.['x-event-id']);
        if (id === 'm-7' && failOnce) {
          failOnce = false;
          throw new Error('transient');
        }
        await tx.query(`INSERT INTO ${effects} (message_id) VALUES (?)`, [id]);
      },
    );
    for (let i = 0; i < 40; i++) {
      for (let copy = 0; copy < 2; copy++) admin.sendToQueue(q, Buffer.from(`body ${i}`), { messageId: `m-${i}` });
    }
    // The id in a header instead of properties.messageId.
    admin.sendToQueue(q, Buffer.from('h'), { headers: { 'x-event-id': 'hdr-1' } });
    admin.sendToQueue(q, Buffer.from('h'), { headers: { 'x-event-id': 'hdr-1' } });
    admin.sendToQueue(q, Buffer.from('no id at all'));
    await until('all deliveries', () => consumer.stats.processed + consumer.stats.duplicates + consumer.stats.refused === 83);
    await consumer.cancel();
    expect(consumer.stats).toMatchObject({ processed: 41, duplicates: 41, failed: 1, refused: 1 });
    expect(duplicates).toHaveLength(41);
    expect(await effectCount()).toBe(41);
    const ids = (await t.db.query<{ message_id: string }>(`SELECT DISTINCT message_id FROM ${effects}`)).rows;
    expect(ids).toHaveLength(41);
    expect(errors.some((e) => e instanceof MissingMessageIdError)).toBe(true);
    expect(errors.some((e) => (e as Error).message === 'transient')).toBe(true);
    // Everything acked: nothing left; the message without an id went to the dead-letter queue.
    await channel.close();
    expect((await admin.checkQueue(q)).messageCount).toBe(0);
    await until('dead letter', async () => (await admin.checkQueue(dlq)).messageCount === 1);
  });

  it('acks only after the commit: a channel lost mid-handler redelivers, and the redelivery is a duplicate', async () => {
    const { queue: q } = await queue('lost');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered = false;
    const first = await connection.createChannel();
    first.on('error', () => {});
    const errors: unknown[] = [];
    const a: AmqpConsumer = await amqpConsumeOnce(first, q, { db: t.db, table, consumer: `lost-${tag}`, onError: (e) => errors.push(e) }, async (_m, tx) => {
      entered = true;
      await gate;
      await tx.query(`INSERT INTO ${effects} (message_id) VALUES (?)`, ['lost-1']);
    });
    admin.sendToQueue(q, Buffer.from('x'), { messageId: 'lost-1' });
    await until('handler entered', () => entered);
    await first.close(); // unacked: RabbitMQ requeues it
    release();
    await until('first attempt settled', () => a.stats.processed === 1);
    expect(errors).toHaveLength(1); // the ack on a closed channel, reported

    const second = await connection.createChannel();
    let ran = false;
    const b = await amqpConsumeOnce(second, q, { db: t.db, table, consumer: `lost-${tag}` }, async () => {
      ran = true;
    });
    await until('redelivery', () => b.stats.duplicates === 1);
    await b.cancel();
    await second.close();
    expect(ran).toBe(false);
    expect(Number((await t.db.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${effects} WHERE message_id = 'lost-1'`)).rows[0]!.n)).toBe(1);
    expect((await admin.checkQueue(q)).messageCount).toBe(0);
  });

  it('with requeue: false, a failing message is dead-lettered instead of retried', async () => {
    const { queue: q, dlq } = await queue('norequeue');
    const channel = await connection.createChannel();
    const c = await amqpConsumeOnce(channel, q, { db: t.db, table, consumer: `nr-${tag}`, requeue: false }, async () => {
      throw new Error('permanent');
    });
    admin.sendToQueue(q, Buffer.from('x'), { messageId: 'nr-1' });
    await until('dead letter', async () => (await admin.checkQueue(dlq)).messageCount === 1);
    await c.cancel();
    await channel.close();
    expect(c.stats.failed).toBe(1);
    expect(Number((await t.db.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${table} WHERE message_id = 'nr-1'`)).rows[0]!.n)).toBe(0);
  });

  it.skipIf(!hasRedis)('with a Redis store: a concurrent delivery of an in-flight id is requeued, then acked as a duplicate', async () => {
    const { queue: q } = await queue('store');
    // The client settings docs/stores/redis.md recommends (redisStore warns about the defaults).
    const client = new Redis({ host: REDIS.host, port: REDIS.port, ...STORE_CLIENT_OPTIONS });
    await client.connect();
    const prefix = `idem-msg-amqp-${tag}`;
    try {
      const channel = await connection.createChannel();
      await channel.prefetch(4);
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const c = await amqpConsumeOnce(channel, q, { store: redisStore({ client, prefix }), consumer: `store-${tag}`, leaseMs: 30_000 }, async () => {
        runs++;
        await gate;
      });
      admin.sendToQueue(q, Buffer.from('x'), { messageId: 's-1' });
      admin.sendToQueue(q, Buffer.from('x'), { messageId: 's-1' });
      await until('the second delivery to find the first in flight', () => c.stats.inFlight >= 1);
      release();
      await until('processed and the duplicate acked', () => c.stats.processed === 1 && c.stats.duplicates === 1);
      await c.cancel();
      await channel.close();
      expect(runs).toBe(1);
      expect((await admin.checkQueue(q)).messageCount).toBe(0);
    } finally {
      const keys = await client.keys(`${prefix}:*`);
      if (keys.length) await client.del(...keys);
      await client.quit();
    }
  });
});
