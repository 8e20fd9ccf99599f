/**
 * Event sources through idempotent(fn): eventKey per source, and SQS partial batch responses
 * with a redelivery, on memory, SQLite and PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent, S3EventRecord, SQSRecord } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClaimOptions, IdempotencyStore, RecordRef } from '../../src/core/store.js';
import { eventKey, idempotentRecords } from '../../src/lambda/index.js';
import { idempotent } from '../../src/patterns/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { fakeContext } from '../http/apps/lambda-app.js';
import { dropTable, newPool, uniqueTable } from '../stores/postgres-support.js';
import { POSTGRES, requireService } from '../support/services.js';
import { sqliteFile } from '../support/sqlite-file.js';

/** An SQS record as Lambda delivers it; `receive` is its delivery count. */
function sqsRecord(messageId: string, body: string, receive = 1, queue = 'orders'): SQSRecord {
  return {
    messageId,
    receiptHandle: `AQEB${randomUUID()}`,
    body,
    attributes: {
      ApproximateReceiveCount: String(receive),
      SentTimestamp: '1767225600000',
      SenderId: 'AIDAEXAMPLE',
      ApproximateFirstReceiveTimestamp: '1767225600001',
    },
    messageAttributes: {},
    md5OfBody: 'd41d8cd98f00b204e9800998ecf8427e',
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:eu-west-1:123456789012:${queue}`,
    awsRegion: 'eu-west-1',
  };
}

/** The same messages delivered again: new receipt handles, one more receive. */
const redelivered = (records: SQSRecord[]) => records.map((r) => sqsRecord(r.messageId, r.body, Number(r.attributes.ApproximateReceiveCount) + 1, r.eventSourceARN.split(':').pop()));

function s3Record(bucket: string, key: string, sequencer: string): S3EventRecord {
  return {
    eventVersion: '2.1',
    eventSource: 'aws:s3',
    awsRegion: 'eu-west-1',
    eventTime: '2026-01-01T00:00:00.000Z',
    eventName: 'ObjectCreated:Put',
    userIdentity: { principalId: 'AWS:EXAMPLE' },
    requestParameters: { sourceIPAddress: '127.0.0.1' },
    responseElements: { 'x-amz-request-id': 'EXAMPLE', 'x-amz-id-2': 'EXAMPLE' },
    s3: {
      s3SchemaVersion: '1.0',
      configurationId: 'uploads',
      bucket: { name: bucket, ownerIdentity: { principalId: 'EXAMPLE' }, arn: `arn:aws:s3:::${bucket}` },
      object: { key, size: 1024, eTag: 'd41d8cd98f00b204e9800998ecf8427e', sequencer },
    },
  };
}

function eventBridge(id: string): EventBridgeEvent<'OrderPlaced', { order: string }> {
  return {
    id,
    version: '0',
    account: '123456789012',
    time: '2026-01-01T00:00:00Z',
    region: 'eu-west-1',
    resources: [],
    source: 'shop.orders',
    'detail-type': 'OrderPlaced',
    detail: { order: 'o-1' },
  };
}

describe('eventKey', () => {
  it('gives each source its documented key, the same on every redelivery', () => {
    const sqs = sqsRecord('059f36b4-87a3-44ab-83d2-661975830a7d', '{}');
    expect(eventKey(sqs)).toBe('059f36b4-87a3-44ab-83d2-661975830a7d');
    expect(eventKey(redelivered([sqs])[0]!)).toBe(eventKey(sqs));
    expect(eventKey(eventBridge('6a7e8feb-b491-4cf7-a9f1-bf3703467718'))).toBe('eventbridge:6a7e8feb-b491-4cf7-a9f1-bf3703467718');
    expect(eventKey(s3Record('uploads', 'a/b.csv', '0055AED6DCD90281E5'))).toBe('s3:uploads/a/b.csv@0055AED6DCD90281E5');
    expect(eventKey({ EventSource: 'aws:sns', Sns: { MessageId: '95df01b4-ee98-5cb9-9903-4c221d41eb5e' } })).toBe('sns:95df01b4-ee98-5cb9-9903-4c221d41eb5e');
    expect(eventKey({ eventSource: 'aws:kinesis', eventID: 'shardId-000000000006:49590338271490256608559692538361571095921575989136588898' })).toMatch(/^kinesis:shardId-000000000006:/);
  });

  it('hashes an S3 key that would pass 255 characters, and tells two sequencers of one object apart', () => {
    const long = eventKey(s3Record('uploads', 'k'.repeat(300), '0055AED6DCD90281E5'));
    expect(long.length).toBeLessThanOrEqual(255);
    expect(long).toMatch(/^s3:[0-9a-f]{64}@0055AED6DCD90281E5$/);
    expect(eventKey(s3Record('uploads', 'a.csv', '0055AED6DCD90281E6'))).not.toBe(eventKey(s3Record('uploads', 'a.csv', '0055AED6DCD90281E5')));
  });

  it('refuses a shape it does not know, asking for a key function', () => {
    expect(() => eventKey({ hello: 'world' })).toThrow(/give a key function/);
  });

  it('keys idempotent(fn) for an EventBridge event delivered twice: one run', async () => {
    const store = memoryStore();
    let runs = 0;
    const onEvent = idempotent(async (event: EventBridgeEvent<'OrderPlaced', { order: string }>) => ({ order: event.detail.order, run: ++runs }), {
      store,
      name: 'onOrderPlaced',
      key: eventKey,
      fingerprint: (event) => event.detail,
    });
    const event = eventBridge(randomUUID());
    expect(await onEvent(event)).toEqual({ order: 'o-1', run: 1 });
    expect(await onEvent({ ...event, time: '2026-01-01T00:00:05Z' })).toEqual({ order: 'o-1', run: 1 });
    expect(runs).toBe(1);
    store.close();
  });
});

interface Backend {
  readonly store: IdempotencyStore;
  close(): Promise<void>;
}

function describeBatches(name: string, up: boolean, open: () => Promise<Backend>): void {
  describe.skipIf(!up)(`SQS partial batch responses on ${name}`, () => {
    let backend: Backend;
    beforeAll(async () => {
      backend = await open();
    });
    afterAll(() => backend?.close());

    /** A consumer that counts its runs per message and fails the bodies listed in `failing`. */
    function consumer(failing: Set<string>) {
      const runs = new Map<string, number>();
      const handler = idempotentRecords(
        async (record: SQSRecord) => {
          runs.set(record.messageId, (runs.get(record.messageId) ?? 0) + 1);
          if (failing.has(record.body)) throw new Error(`declined ${record.body}`);
          return { charged: record.body };
        },
        { store: backend.store, name: 'chargeOrder', onError: () => {} },
      );
      return { runs, handler };
    }

    it('one failed record does not re-run the others; the redelivered batch replays the done ones and runs the failed one once more', async () => {
      const failing = new Set(['o-2']);
      const { runs, handler } = consumer(failing);
      const batch = ['o-1', 'o-2', 'o-3'].map((body) => sqsRecord(randomUUID(), body));
      expect(await handler({ Records: batch }, fakeContext())).toEqual({ batchItemFailures: [{ itemIdentifier: batch[1]!.messageId }] });
      expect([...runs.values()]).toEqual([1, 1, 1]);

      // The whole batch comes back (the function timed out after answering, or its response was
      // lost): the two done records replay; the failed one runs again, and now succeeds.
      failing.clear();
      expect(await handler({ Records: redelivered(batch) }, fakeContext())).toEqual({ batchItemFailures: [] });
      expect(batch.map((r) => runs.get(r.messageId))).toEqual([1, 2, 1]);

      // And once more: nothing runs.
      expect(await handler({ Records: redelivered(redelivered(batch)) }, fakeContext())).toEqual({ batchItemFailures: [] });
      expect(batch.map((r) => runs.get(r.messageId))).toEqual([1, 2, 1]);
    });

    it('on a FIFO queue the records after a failure are reported unrun, and run on redelivery', async () => {
      const { runs, handler } = consumer(new Set(['o-2']));
      const batch = ['o-1', 'o-2', 'o-3'].map((body) => sqsRecord(randomUUID(), body, 1, 'orders.fifo'));
      const answer = await handler({ Records: batch }, fakeContext());
      expect(answer.batchItemFailures.map((f) => f.itemIdentifier)).toEqual([batch[1]!.messageId, batch[2]!.messageId]);
      expect(batch.map((r) => runs.get(r.messageId))).toEqual([1, 1, undefined]);
    });

    it('a message another invocation is processing is reported failed (redelivered later), not run twice', async () => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const slow = idempotentRecords(
        async () => {
          runs++;
          await gate;
        },
        { store: backend.store, name: 'slowCharge', onError: () => {} },
      );
      const record = sqsRecord(randomUUID(), 'o-9');
      const first = slow({ Records: [record] }, fakeContext());
      await until(() => runs === 1);
      expect(await slow({ Records: redelivered([record]) }, fakeContext())).toEqual({ batchItemFailures: [{ itemIdentifier: record.messageId }] });
      release();
      expect(await first).toEqual({ batchItemFailures: [] });
      expect(runs).toBe(1);
    });

    it('caps each record\'s lease at the invocation\'s time left plus the margin', async () => {
      const leases: number[] = [];
      const spied = Object.assign(Object.create(backend.store) as IdempotencyStore, {
        claim: (ref: RecordRef, fp: string, o: ClaimOptions) => {
          leases.push(o.leaseMs);
          return backend.store.claim(ref, fp, o);
        },
      });
      const handler = idempotentRecords(async () => 'ok', { store: spied, name: 'capped', leaseMarginMs: 500 });
      const left = [4_000, 3_000];
      await handler({ Records: [sqsRecord(randomUUID(), 'a'), sqsRecord(randomUUID(), 'b')] }, fakeContext(() => left.shift() ?? 0));
      expect(leases).toEqual([4_500, 3_500]);
    });
  });
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe('S3 records (no partial batch response)', () => {
  it('tries every record, then throws the first error: the retried event replays the done ones', async () => {
    const store = memoryStore();
    const runs: string[] = [];
    let fail = true;
    const handler = idempotentRecords(
      async (record: S3EventRecord) => {
        runs.push(record.s3.object.key);
        if (fail && record.s3.object.key === 'b.csv') throw new Error('unreadable');
      },
      { store, name: 'ingest', onError: () => {} },
    );
    const event = { Records: [s3Record('uploads', 'a.csv', '01'), s3Record('uploads', 'b.csv', '02'), s3Record('uploads', 'c.csv', '03')] };
    await expect(handler(event, fakeContext())).rejects.toThrow('unreadable');
    fail = false;
    expect(await handler(event, fakeContext())).toEqual({ batchItemFailures: [] });
    expect(runs).toEqual(['a.csv', 'b.csv', 'c.csv', 'b.csv']);
    store.close();
  });
});

describeBatches('memory', true, async () => {
  const store = memoryStore();
  return { store, close: async () => store.close() };
});

describeBatches('SQLite', true, async () => {
  const file = sqliteFile();
  const store = sqliteStore({ database: file.db });
  await store.migrate();
  return {
    store,
    close: async () => {
      store.close();
      file.cleanup();
    },
  };
});

describeBatches('PostgreSQL', await requireService(POSTGRES), async () => {
  const pool = newPool({ max: 5 });
  const table = uniqueTable();
  const store = postgresStore({ pool, table });
  await store.migrate();
  return {
    store,
    close: async () => {
      await dropTable(pool, table);
      await pool.end();
    },
  };
});
