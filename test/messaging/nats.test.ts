import { randomBytes } from 'node:crypto';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateProcessed, MissingMessageIdError, natsConsumeOnce, natsMessageId, natsPublishOnce } from '../../src/messaging/index.js';
import type { NatsJsMessage } from '../../src/messaging/nats.js';
import { NATS, POSTGRES, requireService } from '../support/services.js';
import type { TestDatabase } from '../support/databases.js';
import { postgresDatabase } from '../support/databases.js';
import { LONG_WINDOW_MS, narrowWindow, publishWithRetry } from './nats-window.js';

const available = (await requireService(NATS)) && (await requireService(POSTGRES));
const tag = `${process.pid}_${randomBytes(3).toString('hex')}`;

const fake = (id: string | undefined): NatsJsMessage => ({
  data: new Uint8Array(),
  subject: 'orders.created',
  headers: { get: (name: string) => (name === 'Nats-Msg-Id' && id ? id : '') },
  info: { stream: 'ORDERS', streamSequence: 42 },
  ack() {},
  nak() {},
  term() {},
});

describe('natsMessageId', () => {
  it('reads Nats-Msg-Id; the stream sequence only when enabled; otherwise refuses naming the header', () => {
    expect(natsMessageId(fake('order-1'))).toBe('order-1');
    expect(natsMessageId(fake(undefined), { sequenceFallback: true })).toBe('ORDERS:42');
    expect(() => natsMessageId(fake(undefined))).toThrow(MissingMessageIdError);
    expect(() => natsMessageId(fake(undefined))).toThrow(/no `Nats-Msg-Id` header/);
  });

  it('refuses to publish without an id', async () => {
    await expect(natsPublishOnce({ publish: async () => ({ stream: 's', seq: 1, duplicate: false }) }, 's', 'x', '')).rejects.toThrow(MissingMessageIdError);
  });
});

describe.skipIf(!available)('natsConsumeOnce on NATS JetStream + PostgreSQL', () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let js: JetStreamClient;
  let t: TestDatabase;
  let table: string;
  let effects: string;
  const stream = `IDEM_MSG_${tag}`;
  const WINDOW_MS = 1000;

  beforeAll(async () => {
    nc = await connect({ servers: `${NATS.host}:${NATS.port}` });
    jsm = await jetstreamManager(nc);
    js = jetstream(nc);
    // A duplicate window longer than the test may run, so every retry it sends is inside it; the
    // test narrows it to WINDOW_MS (1 s) to get past it.
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], duplicate_window: nanos(LONG_WINDOW_MS), storage: 'memory' as never });
    // No test here waits for an ack timeout; a long one keeps a slow run from getting redeliveries it did not ask for.
    await jsm.consumers.add(stream, { durable_name: 'c', ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000), filter_subject: `${stream}.msg` });
    t = postgresDatabase();
    table = t.table('nats_processed');
    effects = t.table('nats_effects');
    await migrateProcessed(t.db, { table });
    await t.db.query(`CREATE TABLE ${effects} (message_id TEXT NOT NULL)`);
  });
  afterAll(async () => {
    await jsm?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
    await t?.close();
  });

  const until = async (what: string, done: () => boolean | Promise<boolean>) => {
    for (let i = 0; i < 2000; i++) {
      if (await done()) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`timed out waiting for ${what}`);
  };

  it('the stream drops repeats inside its duplicate window; the consumer catches repeats beyond it', async () => {
    const subject = `${stream}.msg`;
    // Each publish followed at once by a publisher's retry: within the window the server drops it.
    for (let i = 0; i < 30; i++) {
      const { first, retry } = await publishWithRetry(js, subject, `body ${i}`, `n-${i}`);
      expect(first.duplicate).toBe(false);
      expect(retry.duplicate, `retry of n-${i}`).toBe(true);
    }
    // Narrow the window, then wait until it has passed: a probe id is accepted again (polling the server, not a clock).
    await narrowWindow(jsm, stream, WINDOW_MS);
    expect((await natsPublishOnce(js, `${stream}.probe`, 'p', 'probe')).duplicate).toBe(false);
    await until('the duplicate window to pass', async () => !(await natsPublishOnce(js, `${stream}.probe`, 'p', 'probe')).duplicate);
    // Beyond the window the server stores a repeat again: 10 late retries, one message with no id.
    for (let i = 0; i < 10; i++) expect((await natsPublishOnce(js, subject, `body ${i}`, `n-${i}`)).duplicate).toBe(false);
    await js.publish(subject, 'no id');

    const consumer = await js.consumers.get(stream, 'c');
    const messages = await consumer.consume();
    let failOnce = true;
    const errors: unknown[] = [];
    // Events (issue 17): each outcome told once per delivery, naming the consumer and the id.
    const told: Record<string, string[]> = { processed: [], duplicate: [], failed: [], refused: [] };
    const tellTo = (name: string) => (e: { consumer: string; messageId: string | undefined; durationMs: number }) => {
      expect(e.consumer).toBe(`nats-${tag}`);
      expect(Number.isFinite(e.durationMs)).toBe(true);
      told[name]!.push(e.messageId ?? '(none)');
    };
    const events = { processed: tellTo('processed'), duplicate: tellTo('duplicate'), failed: tellTo('failed'), refused: tellTo('refused') };
    const running = natsConsumeOnce(messages, { db: t.db, table, consumer: `nats-${tag}`, onError: (e) => errors.push(e), events }, async (m: JsMsg, tx) => {
      const id = m.headers!.get('Nats-Msg-Id');
      if (id === 'n-3' && failOnce) {
        failOnce = false;
        throw new Error('transient');
      }
      await tx.query(`INSERT INTO ${effects} (message_id) VALUES (?)`, [id]);
    });
    await until('all deliveries', () => running.stats.processed + running.stats.duplicates + running.stats.refused === 41);
    await messages.close();
    const stats = await running.done;
    expect(stats).toMatchObject({ processed: 30, duplicates: 10, failed: 1, refused: 1 });
    expect([told.processed!.length, told.duplicate!.length, told.failed, told.refused]).toEqual([30, 10, ['n-3'], ['(none)']]);
    expect(new Set(told.processed).size).toBe(30);
    const { rows } = await t.db.query<{ n: string; d: string }>(`SELECT COUNT(*) AS n, COUNT(DISTINCT message_id) AS d FROM ${effects}`);
    expect(rows[0]).toEqual({ n: '30', d: '30' });
    expect(errors.some((e) => e instanceof MissingMessageIdError)).toBe(true);
    // Everything acknowledged (the message without an id terminated).
    await until('acks', async () => (await jsm.consumers.info(stream, 'c')).num_ack_pending === 0);
    expect((await jsm.consumers.info(stream, 'c')).num_pending).toBe(0);
  });
});
