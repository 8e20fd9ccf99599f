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
import type { TestDatabase } from '../support/databases.js';
import { postgresDatabase } from '../support/databases.js';
import { LONG_WINDOW_MS, narrowWindow, publishWithRetry } from './nats-window.js';
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
  const WINDOW_MS = 1000;

  beforeAll(async () => {
    nc = await connect({ servers: '127.0.0.1:4222' });
    jsm = await jetstreamManager(nc);
    js = jetstream(nc);
    // A duplicate window longer than the proof may run, so every publisher retry it sends is inside
    // it; the proof narrows it to WINDOW_MS (1 s) to publish past it.
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], duplicate_window: nanos(LONG_WINDOW_MS), storage: 'memory' as never });
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

  /** Publishes ids in parallel batches of 100; answers how many the server dropped as duplicates. */
  async function publish(ids: readonly string[]): Promise<number> {
    let dropped = 0;
    for (let i = 0; i < ids.length; i += 100) {
      const acks = await Promise.all(ids.slice(i, i + 100).map((id) => natsPublishOnce(js, `${stream}.msg`, `payload of ${id}`, id)));
      dropped += acks.filter((a) => a.duplicate).length;
    }
    return dropped;
  }
  /**
   * Publishes each id and at once a publisher's retry of it (after a lost PubAck), in parallel
   * batches of 100. Every retry is inside the (long) window and must have been dropped: answers how
   * many were.
   */
  async function publishWithRetries(ids: readonly string[]): Promise<number> {
    let dropped = 0;
    for (let i = 0; i < ids.length; i += 100) {
      const sent = await Promise.all(ids.slice(i, i + 100).map((id) => publishWithRetry(js, `${stream}.msg`, `payload of ${id}`, id)));
      for (const [j, { first, retry }] of sent.entries()) {
        expect(first.duplicate).toBe(false);
        expect(retry.duplicate, `retry of ${ids[i + j]!}`).toBe(true);
        if (retry.duplicate) dropped++;
      }
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
    const droppedByServer = await publishWithRetries(shuffled(ids));
    expect(droppedByServer).toBe(ids.length);
    // Copies 2 and 3 each after the (narrowed) window has passed: stored again, for the consumer to catch.
    await narrowWindow(jsm, stream, WINDOW_MS);
    await pastWindow('probe-1');
    expect(await publish(shuffled(ids.filter((id) => copies.get(id)! >= 2)))).toBe(0);
    await pastWindow('probe-2');
    expect(await publish(shuffled(ids.filter((id) => copies.get(id)! >= 3)))).toBe(0);
    const stored = deliveries.length;
    expect((await jsm.consumers.info(stream, 'proof')).num_pending).toBe(stored);

    const env = { BROKER: 'nats', STREAM: stream, DURABLE: 'proof', CONSUMER: `proof-${tag}`, ...names };
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
    expect(duplicates).toBeGreaterThanOrEqual(stored - 1000);
    console.log(
      `proof nats: ${stored} stored deliveries of 1000 messages (+${droppedByServer} publisher retries dropped in the duplicate window), ` +
        `${kills} kills (effects committed before the final run: ${afterCrashes}), ${duplicates} duplicates skipped, ${runs.length} processes, ${Date.now() - started} ms`,
    );
  });
});
