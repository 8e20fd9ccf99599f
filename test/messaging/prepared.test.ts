/**
 * A consumer is prepared once (issue 27, item 4): the broker adapters and the webhook receiver read
 * and check their options, and write their statements, when they start; a delivery reads none of
 * them again. consumeOnce does the same at the first call with an options object, and then reads
 * only that object's messageId. Proved by counting: every read of the options object and every read of the
 * executor's `dialect` (the INSERT is written from it) goes through a counting proxy.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import type { SqlExecutor } from '../../src/drivers/sql-executor.js';
import type { AmqpMessage } from '../../src/messaging/amqp.js';
import { amqpConsumeOnce } from '../../src/messaging/amqp.js';
import { consumeOnce } from '../../src/messaging/consume.js';
import type { NatsJsMessage } from '../../src/messaging/nats.js';
import { natsConsumeOnce } from '../../src/messaging/nats.js';
import { migrateProcessed } from '../../src/messaging/table.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { signWebhook } from '../../src/messaging/webhook-verify.js';
import { webhookReceiver } from '../../src/messaging/webhook.js';
import { sqliteDatabase } from '../support/databases.js';

/** `target` behind a proxy that counts every property read by name (symbols, e.g. brands, are not counted). */
function counted<T extends object>(target: T): { value: T; reads: () => number; names: string[] } {
  const names: string[] = [];
  const value = new Proxy(target, {
    get(object, key, receiver) {
      if (typeof key === 'string') names.push(key);
      return Reflect.get(object, key, receiver) as unknown;
    },
  });
  return { value, reads: () => names.length, names };
}

/** Counts the reads of `dialect`, the one property the SQL text is written from. */
function countedDialect(db: SqlExecutor): { db: SqlExecutor; reads: () => number } {
  let reads = 0;
  const proxy = new Proxy(db, {
    get(object, key, receiver) {
      if (key === 'dialect') reads++;
      return Reflect.get(object, key, receiver) as unknown;
    },
  });
  return { db: proxy, reads: () => reads };
}

const t = sqliteDatabase();
afterAll(() => t.close());

describe('a consumer is prepared once', () => {
  it('amqpConsumeOnce reads no option and writes no statement per delivery', async () => {
    const table = t.table('prep_amqp');
    await migrateProcessed(t.db, { table });
    const calls: string[] = [];
    let deliver!: (message: AmqpMessage | null) => void;
    const channel = {
      consume: async (_q: string, onMessage: (m: AmqpMessage | null) => void) => {
        deliver = onMessage;
        return { consumerTag: 'ctag' };
      },
      ack: (m: AmqpMessage) => calls.push(`ack ${String(m.properties.messageId)}`),
      nack: (m: AmqpMessage, _all?: boolean, requeue?: boolean) => calls.push(`nack ${String(m.properties.messageId)} requeue=${requeue}`),
      cancel: async () => undefined,
    };
    const told: string[] = [];
    const errors: unknown[] = [];
    const db = countedDialect(t.db);
    const events = counted({ processed: () => told.push('processed'), duplicate: () => told.push('duplicate'), failed: () => told.push('failed'), refused: () => told.push('refused') });
    const options = counted({
      db: db.db,
      table,
      consumer: 'prep-amqp',
      retentionMs: 60_000,
      onError: (error: unknown) => errors.push(error),
      onDuplicate: () => told.push('onDuplicate'),
      events: events.value,
    });
    const message = (messageId?: string): AmqpMessage => ({ content: Buffer.from('x'), fields: { deliveryTag: 1, redelivered: false }, properties: { messageId } });

    const consumer = await amqpConsumeOnce(channel, 'q', options.value, async (m, tx) => {
      if (m.properties.messageId === 'fails') throw new Error('handler failed');
      await tx!.query(`SELECT 1`);
    });
    const optionReads = options.reads();
    const listenerReads = events.reads();
    const dialectReads = db.reads();
    // Set-up read every option and wrote the INSERT from the dialect.
    expect(new Set(options.names)).toEqual(new Set(['db', 'table', 'consumer', 'retentionMs', 'onError', 'onDuplicate', 'events', 'store', 'clock', 'leaseMs', 'requeue', 'idHeader', 'hashFallback']));
    expect(dialectReads).toBeGreaterThan(0);

    deliver(message('m1'));
    deliver(message('m1'));
    deliver(message('fails'));
    deliver(message(undefined));
    await consumer.cancel();

    // The deliveries ran through every outcome...
    expect(consumer.stats).toMatchObject({ processed: 1, duplicates: 1, failed: 1, refused: 1 });
    expect(calls.sort()).toEqual(['ack m1', 'ack m1', 'nack fails requeue=true', 'nack undefined requeue=false']);
    expect(told.sort()).toEqual(['duplicate', 'failed', 'onDuplicate', 'processed', 'refused']);
    expect(errors).toHaveLength(2);
    // ...and none of them read an option, a listener or the dialect again.
    expect(options.reads()).toBe(optionReads);
    expect(events.reads()).toBe(listenerReads);
    expect(db.reads()).toBe(dialectReads);
  });

  it('natsConsumeOnce reads no option and writes no statement per delivery', async () => {
    const table = t.table('prep_nats');
    await migrateProcessed(t.db, { table });
    const acts: string[] = [];
    const message = (id: string | undefined): NatsJsMessage => ({
      data: new Uint8Array(0),
      subject: 'orders',
      headers: { get: (name: string) => (name === 'Nats-Msg-Id' ? (id ?? '') : '') },
      info: { stream: 'S', streamSequence: 1 },
      ack: () => acts.push(`ack ${id}`),
      nak: () => acts.push(`nak ${id}`),
      term: () => acts.push(`term ${id}`),
    });
    const db = countedDialect(t.db);
    const options = counted({ db: db.db, table, consumer: 'prep-nats', nakDelayMs: 5, onError: () => undefined });
    async function* deliveries() {
      yield* [message('n1'), message('n1'), message('fails'), message(undefined)];
    }
    const running = natsConsumeOnce(deliveries(), options.value, async (m) => {
      if (m.headers?.get('Nats-Msg-Id') === 'fails') throw new Error('handler failed');
    });
    // Counted as natsConsumeOnce returns: the loop has not finished its first delivery yet.
    const optionReads = options.reads();
    const dialectReads = db.reads();
    expect(new Set(options.names)).toContain('nakDelayMs');
    expect(dialectReads).toBeGreaterThan(0);

    const stats = await running.done;
    expect(stats).toMatchObject({ processed: 1, duplicates: 1, failed: 1, refused: 1 });
    expect(acts).toEqual(['ack n1', 'ack n1', 'nak fails', 'term undefined']);
    expect(options.reads()).toBe(optionReads);
    expect(db.reads()).toBe(dialectReads);
  });

  it('webhookReceiver reads no option and writes no statement per event', async () => {
    const table = t.table('prep_hook');
    await migrateProcessed(t.db, { table });
    const secret = 'whsec_' + Buffer.alloc(24, 7).toString('base64');
    const at = 1_700_000_000;
    let runs = 0;
    const errors: unknown[] = [];
    const db = countedDialect(t.db);
    const options = counted({
      secret,
      db: db.db,
      table,
      consumer: 'prep-hook',
      clock: () => at * 1000,
      onEvent: async () => void runs++,
      onError: (error: unknown) => errors.push(error),
    });
    const receiver = webhookReceiver(options.value);
    const optionReads = options.reads();
    const dialectReads = db.reads();
    expect(dialectReads).toBeGreaterThan(0);

    const body = Buffer.from('{"amount":1}');
    const headers = { 'webhook-id': 'evt_1', 'webhook-timestamp': String(at), 'webhook-signature': signWebhook(secret, 'evt_1', at, body) };
    const first = await receiver.receive(headers, body);
    const again = await receiver.receive(headers, body);
    expect([first.status, JSON.parse(first.body).status]).toEqual([200, 'processed']);
    expect([again.status, JSON.parse(again.body).status]).toEqual([200, 'duplicate']);
    const forged = await receiver.receive({ ...headers, 'webhook-signature': signWebhook(secret, 'evt_2', at, body) }, body);
    expect(forged.status).toBe(401);
    expect(runs).toBe(1);
    expect(errors).toHaveLength(1);
    expect(options.reads()).toBe(optionReads);
    expect(db.reads()).toBe(dialectReads);
  });
});

describe('consumeOnce prepares once per options object', () => {
  it('reads the options once across many calls with one object, and messageId on each call', async () => {
    const table = t.table('prep_direct');
    await migrateProcessed(t.db, { table });
    const db = countedDialect(t.db);
    const options = counted({ db: db.db, table, consumer: 'prep-direct', messageId: 'd0', retentionMs: 60_000 });
    let runs = 0;
    const handler = async (tx: SqlExecutor) => {
      await tx.query('SELECT 1');
      return ++runs;
    };
    const statuses: string[] = [];
    let readsAtFirst = 0;
    for (let i = 0; i < 10; i++) {
      // The same object each time, its messageId changed: every other message is a redelivery.
      options.value.messageId = `d${Math.floor(i / 2)}`;
      statuses.push((await consumeOnce(options.value, handler)).status);
      if (i === 0) readsAtFirst = options.reads();
    }
    expect(statuses).toEqual(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? 'processed' : 'duplicate')));
    expect(runs).toBe(5);
    // The first call read every option; the nine after it read messageId and nothing else, and
    // the INSERT was written once, from one read of the dialect.
    expect(new Set(options.names.slice(0, readsAtFirst))).toEqual(new Set(['db', 'table', 'consumer', 'messageId', 'retentionMs', 'clock', 'store']));
    expect(options.names.slice(readsAtFirst)).toEqual(Array(9).fill('messageId'));
    expect(db.reads()).toBe(1);

    // Another object with the same settings is read and prepared anew (its message is a duplicate).
    const other = counted({ db: db.db, table, consumer: 'prep-direct', messageId: 'd0', retentionMs: 60_000 });
    expect((await consumeOnce(other.value, handler)).status).toBe('duplicate');
    expect(new Set(other.names)).toEqual(new Set(options.names));
    expect(db.reads()).toBe(2);
    expect(options.names.slice(readsAtFirst)).toEqual(Array(9).fill('messageId'));
  });

  it('a changed option on a kept object is not read again; a new object is', async () => {
    const table = t.table('prep_changed');
    await migrateProcessed(t.db, { table });
    const options: { db: SqlExecutor; table: string; consumer: string; messageId: string } = { db: t.db, table, consumer: 'first', messageId: 'c1' };
    expect((await consumeOnce(options, async () => 1)).status).toBe('processed');
    options.consumer = 'second';
    // Still the first consumer's record: the object's consumer was read at its first call.
    expect((await consumeOnce(options, async () => 1)).status).toBe('duplicate');
    expect((await consumeOnce({ ...options }, async () => 1)).status).toBe('processed');
  });

  it('a refused object is not kept: corrected, the same object is checked again and runs', async () => {
    const table = t.table('prep_fixed');
    await migrateProcessed(t.db, { table });
    const options = counted({ db: t.db, table, consumer: 'prep-fixed', messageId: 'f1', retentionMs: 0 });
    await expect(consumeOnce(options.value, async () => 1)).rejects.toMatchObject({ option: 'retentionMs' });
    options.value.retentionMs = 60_000;
    expect((await consumeOnce(options.value, async () => 1)).status).toBe('processed');
    const readsAfter = options.reads();
    expect((await consumeOnce(options.value, async () => 1)).status).toBe('duplicate');
    expect(options.names.slice(readsAfter)).toEqual(['messageId']);
  });

  it('the store variant too: one object, many messages, its options read once', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const options = counted({ store, consumer: 'prep-store', messageId: 's0', leaseMs: 5_000 });
    let runs = 0;
    await consumeOnce(options.value, async () => ++runs);
    const readsAfterFirst = options.reads();
    const statuses: string[] = [];
    for (const id of ['s1', 's1', 's2', 's0']) {
      options.value.messageId = id;
      statuses.push((await consumeOnce(options.value, async () => ++runs)).status);
    }
    expect(statuses).toEqual(['processed', 'duplicate', 'processed', 'duplicate']);
    expect(runs).toBe(3);
    expect(options.names.slice(readsAfterFirst)).toEqual(['messageId', 'messageId', 'messageId', 'messageId']);
    store.close();
  });
});

describe('a bad option fails at set-up, before any message', () => {
  it('amqpConsumeOnce: the consumer is never registered with the channel', async () => {
    let consumed = 0;
    const channel = {
      consume: async () => {
        consumed++;
        return { consumerTag: 'ctag' };
      },
      ack: () => undefined,
      nack: () => undefined,
      cancel: async () => undefined,
    };
    for (const [options, option] of [
      [{ db: t.db, consumer: 'c', table: 'Bad-Name' }, 'table'],
      [{ db: t.db, consumer: 'c', leaseMs: 0 }, 'leaseMs'],
      [{ db: t.db, consumer: 'c', events: { procesed: () => undefined } }, 'events.procesed'],
      [{ db: t.db, consumer: 'c', idHeader: '' }, 'idHeader'],
    ] as const) {
      await expect(amqpConsumeOnce(channel, 'q', options as never, async () => 1), option).rejects.toMatchObject({ option });
    }
    expect(consumed).toBe(0);
  });

  it('natsConsumeOnce: throws when called, and the messages are never iterated', () => {
    let iterated = 0;
    const messages: AsyncIterable<NatsJsMessage> = {
      [Symbol.asyncIterator]() {
        iterated++;
        return { next: async () => ({ done: true, value: undefined }) };
      },
    };
    for (const [options, option] of [
      [{ db: t.db, consumer: '' }, 'consumer'],
      [{ db: t.db, consumer: 'c', retentionMs: 0 }, 'retentionMs'],
      [{ db: t.db, consumer: 'c', nakDelayMs: 1.5 }, 'nakDelayMs'],
      [{ db: t.db, consumer: 'c', requeue: 'no' }, 'requeue'],
      [{ db: t.db, consumer: 'c', idHeader: 5 }, 'idHeader'],
      [{ consumer: 'c' }, 'db'],
    ] as const) {
      let error: unknown;
      try {
        natsConsumeOnce(messages, options as never, async () => 1);
      } catch (e) {
        error = e;
      }
      expect(error, option).toBeInstanceOf(InvalidOptionError);
      expect((error as InvalidOptionError).option).toBe(option);
    }
    expect(iterated).toBe(0);
  });

  it('consumeOnce: a bad option is refused before a transaction starts or the handler runs', async () => {
    let transactions = 0;
    const db: SqlExecutor = {
      dialect: 'sqlite',
      query: (sql, params) => t.db.query(sql, params),
      transaction: (fn) => {
        transactions++;
        return t.db.transaction(fn);
      },
    };
    let runs = 0;
    const handler = async () => void runs++;
    for (const [options, option] of [
      [{ db, consumer: 'c', messageId: 'a', table: 'x; DROP TABLE y' }, 'table'],
      [{ db, consumer: 'c', messageId: 'a', retentionMs: -1 }, 'retentionMs'],
      [{ db, consumer: 'c', messageId: 'a', clock: 5 }, 'clock'],
    ] as const) {
      await expect(consumeOnce(options as never, handler), option).rejects.toMatchObject({ option });
    }
    expect(transactions).toBe(0);
    expect(runs).toBe(0);
  });
});
