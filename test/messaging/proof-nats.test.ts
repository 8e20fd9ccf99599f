/**
 * Proof on the real NATS JetStream and PostgreSQL: 1000 messages published with Nats-Msg-Id;
 * repeats inside the stream's duplicate window are dropped by the server, repeats beyond it are
 * stored again so each message reaches the consumer 1–3 times. Consumer processes are SIGKILLed
 * mid-stream (before the commit, between commit and ack, from outside) and restarted until every
 * message is acknowledged. Every business effect happens exactly once.
 */
import { randomBytes } from 'node:crypto';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { natsPublishOnce } from '../../src/messaging/index.js';
import { NATS, POSTGRES, requireService } from '../support/services.js';
import type { TestDatabase } from './databases.js';
import { postgresDatabase } from './databases.js';
import type { ConsumerProcess } from './proof-support.js';
import { CRASHES, createProofTables, killAll, plan, startConsumer, until } from './proof-support.js';

const available = (await requireService(NATS)) && (await requireService(POSTGRES));
const tag = `${process.pid}_${randomBytes(3).toString('hex')}`;

describe.skipIf(!available)('proof: NATS JetStream consumer crashes, every effect exactly once', () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let js: JetStreamClient;
  let t: TestDatabase;
  const stream = `IDEM_PROOF_${tag}`;
  const names = { PROCESSED: '', EFFECTS: '', COUNTERS: '' };

  beforeAll(async () => {
    nc = await connect({ servers: '127.0.0.1:4222' });
    jsm = await jetstreamManager(nc);
    js = jetstream(nc);
    // A 1 s duplicate window so the proof can publish past it (the server default is 2 minutes).
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], duplicate_window: nanos(1000), storage: 'memory' as never });
    // A short ack_wait: messages held by a killed consumer come back quickly.
    await jsm.consumers.add(stream, { durable_name: 'proof', ack_policy: AckPolicy.Explicit, ack_wait: nanos(2000), filter_subject: `${stream}.msg` });
    t = postgresDatabase();
    Object.assign(names, await createProofTables(t, 'nats'));
  });
  afterAll(async () => {
    killAll();
    await jsm?.streams.delete(stream).catch(() => undefined);
    await nc?.close();
    await t?.close();
  });

  /**
   * Publishes ids in parallel batches; with `retry`, each batch is published again right away (a
   * publisher retrying after a lost PubAck, well inside the window). Answers how many the server
   * dropped as duplicates.
   */
  async function publish(ids: readonly string[], retry = false): Promise<number> {
    let dropped = 0;
    const send = (batch: readonly string[]) => Promise.all(batch.map((id) => natsPublishOnce(js, `${stream}.msg`, `payload of ${id}`, id)));
    for (let i = 0; i < ids.length; i += 100) {
      const batch = ids.slice(i, i + 100);
      dropped += (await send(batch)).filter((a) => a.duplicate).length;
      if (retry) dropped += (await send(batch)).filter((a) => a.duplicate).length;
    }
    return dropped;
  }
  /** Waits until the duplicate window has passed since now, by polling the server with a probe id. */
  async function pastWindow(probe: string): Promise<void> {
    expect((await natsPublishOnce(js, `${stream}.probe`, 'p', probe)).duplicate).toBe(false);
    await until('the duplicate window to pass', async () => !(await natsPublishOnce(js, `${stream}.probe`, 'p', probe)).duplicate, 10_000);
  }

  it('1000 messages × 1–3 deliveries, 6 consumer kills', { timeout: 180_000 }, async () => {
    const started = Date.now();
    const { copies, deliveries } = plan(1000);
    const ids = [...copies.keys()];
    const shuffled = (list: string[]) => deliveries.filter((id) => list.includes(id)).filter((id, i, all) => all.indexOf(id) === i);
    // Copy 1, plus an immediate publisher retry of every id: the server drops those.
    const droppedByServer = await publish(shuffled(ids), true);
    expect(droppedByServer).toBe(1000);
    // Copies 2 and 3 each after the window has passed: stored again, for the consumer to catch.
    await pastWindow('probe-1');
    expect(await publish(shuffled(ids.filter((id) => copies.get(id)! >= 2)))).toBe(0);
    await pastWindow('probe-2');
    expect(await publish(shuffled(ids.filter((id) => copies.get(id)! >= 3)))).toBe(0);
    expect((await jsm.consumers.info(stream, 'proof')).num_pending).toBe(deliveries.length);

    const env = { BROKER: 'nats', STREAM: stream, DURABLE: 'proof', CONSUMER: `proof-${tag}`, ...names };
    const counter = async () => Number((await t.db.query<{ n: number }>(`SELECT n FROM ${names.COUNTERS}`)).rows[0]!.n);
    const runs: ConsumerProcess[] = [];
    let kills = 0;
    for (const crash of CRASHES) {
      const run = startConsumer('external' in crash ? env : { ...env, CRASH_PHASE: crash.phase, CRASH_AT: String(crash.at) });
      runs.push(run);
      if ('external' in crash) {
        await until(`${crash.external} processed before the external kill`, () => run.ok() >= crash.external);
        run.kill('SIGKILL');
      }
      expect(await run.exited, run.output()).toBe('SIGKILL');
      kills++;
    }
    const afterCrashes = await counter();
    expect(afterCrashes).toBeLessThan(1000);

    const run = startConsumer(env);
    runs.push(run);
    await until('every effect and every message acknowledged', async () => {
      if ((await counter()) < 1000) return false;
      const info = await jsm.consumers.info(stream, 'proof');
      return info.num_pending === 0 && info.num_ack_pending === 0;
    });
    run.kill('SIGTERM');
    expect(await run.exited, run.output()).toBe(0);

    const { rows } = await t.db.query<{ n: string; d: string }>(`SELECT COUNT(*) AS n, COUNT(DISTINCT message_id) AS d FROM ${names.EFFECTS}`);
    expect(rows[0]).toEqual({ n: '1000', d: '1000' });
    expect(await counter()).toBe(1000);
    const duplicates = runs.reduce((n, r) => n + r.dups(), 0);
    expect(duplicates).toBeGreaterThanOrEqual(deliveries.length - 1000);
    console.log(
      `proof nats: ${deliveries.length} stored deliveries of 1000 messages (+${droppedByServer} publisher retries dropped in the duplicate window), ` +
        `${kills} kills (effects committed before the final run: ${afterCrashes}), ${duplicates} duplicates skipped, ${runs.length} processes, ${Date.now() - started} ms`,
    );
  });
});
