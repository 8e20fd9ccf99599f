/**
 * Proof on the real RabbitMQ and PostgreSQL: 1000 messages, each delivered 1–3 times (shuffled),
 * through consumer processes that are SIGKILLed mid-stream (inside the handler before the commit,
 * between the commit and the ack, and from outside) and restarted until the queue drains. Every
 * business effect happens exactly once.
 */
import { randomBytes } from 'node:crypto';
import amqp from 'amqplib';
import type { Channel, ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, RABBITMQ, requireService } from '../support/services.js';
import type { TestDatabase } from '../support/databases.js';
import { postgresDatabase } from '../support/databases.js';
import type { ConsumerProcess } from './proof-support.js';
import { CRASHES, createProofTables, killAll, plan, startConsumer, until } from './proof-support.js';

const available = (await requireService(RABBITMQ)) && (await requireService(POSTGRES));
const tag = `${process.pid}-${randomBytes(3).toString('hex')}`;

describe.skipIf(!available)('proof: RabbitMQ consumer crashes, every effect exactly once', () => {
  let connection: ChannelModel;
  let channel: Channel;
  let t: TestDatabase;
  const queue = `idem-proof-${tag}`;
  const names = { PROCESSED: '', EFFECTS: '', COUNTERS: '' };

  beforeAll(async () => {
    connection = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
    channel = await connection.createChannel();
    await channel.assertQueue(queue, { durable: false });
    t = postgresDatabase();
    Object.assign(names, await createProofTables(t, 'amqp'));
  });
  afterAll(async () => {
    killAll();
    await channel?.deleteQueue(queue).catch(() => undefined);
    await connection?.close();
    await t?.close();
  });

  it('1000 messages × 1–3 deliveries, 6 consumer kills', { timeout: 180_000 }, async () => {
    const started = Date.now();
    const { deliveries } = plan(1000);
    for (const id of deliveries) channel.sendToQueue(queue, Buffer.from(`payload of ${id}`), { messageId: id });
    await channel.checkQueue(queue); // a round trip after the publishes: they are all queued
    const env = { BROKER: 'amqp', QUEUE: queue, CONSUMER: `proof-${tag}`, ...names };
    const counter = async () => Number((await t.db.query<{ n: number }>(`SELECT n FROM ${names.COUNTERS}`)).rows[0]!.n);
    const runs: ConsumerProcess[] = [];

    let kills = 0;
    for (const crash of CRASHES) {
      // An external kill's process holds still after `external` messages, so the kill lands mid-stream on any machine.
      const run = startConsumer('external' in crash ? { ...env, HOLD_AT: String(crash.external) } : { ...env, CRASH_PHASE: crash.phase, CRASH_AT: String(crash.at) });
      runs.push(run);
      if ('external' in crash) {
        await until(`${crash.external} processed before the external kill`, () => run.ok() >= crash.external);
        run.kill('SIGKILL');
      }
      const how = await run.exited;
      expect(how, run.output()).toBe('SIGKILL');
      kills++;
    }
    const afterCrashes = await counter();
    expect(afterCrashes).toBeLessThan(1000);

    // Crash-free consumers until everything is acknowledged.
    for (let attempt = 0; ; attempt++) {
      const run = startConsumer(env);
      runs.push(run);
      await until('every effect and an empty queue', async () => (await counter()) >= 1000 && (await channel.checkQueue(queue)).messageCount === 0);
      run.kill('SIGTERM');
      expect(await run.exited, run.output()).toBe(0);
      if ((await channel.checkQueue(queue)).messageCount === 0) break;
      expect(attempt).toBeLessThan(3);
    }

    const { rows } = await t.db.query<{ n: string; d: string }>(`SELECT COUNT(*) AS n, COUNT(DISTINCT message_id) AS d FROM ${names.EFFECTS}`);
    expect(rows[0]).toEqual({ n: '1000', d: '1000' });
    expect(await counter()).toBe(1000);
    const records = await t.db.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${names.PROCESSED} WHERE consumer = ?`, [`proof-${tag}`]);
    expect(records.rows[0]!.n).toBe('1000');
    const duplicates = runs.reduce((n, r) => n + r.dups(), 0);
    // Every extra copy was acknowledged as a duplicate by some process (a few more when a process
    // died after reporting but before its ack reached the broker).
    expect(duplicates).toBeGreaterThanOrEqual(deliveries.length - 1000);
    console.log(
      `proof amqp: ${deliveries.length} deliveries of 1000 messages, ${kills} kills (effects committed before the final run: ${afterCrashes}), ` +
        `${duplicates} duplicates skipped, ${runs.length} processes, ${Date.now() - started} ms`,
    );
  });
});
