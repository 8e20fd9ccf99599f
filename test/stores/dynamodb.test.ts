/**
 * The DynamoDB store against dynalite, started here on a spare port and closed at the end: the
 * store contract (every section), the claim's two paths (a service that returns the old item on a
 * failed condition, and dynalite, which does not), the clock margin, the item size limit, the
 * table's migration and verification.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CreateTableCommand, DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { InvalidOptionError, LeaseLostError, StoreSchemaMissingError, StoreUnavailableError } from '../../src/core/errors.js';
import type { RecordRef, StoredResponse } from '../../src/core/store.js';
import type { DynamoDBStoreOptions } from '../../src/stores/dynamodb/index.js';
import { dynamodbStore } from '../../src/stores/dynamodb/index.js';
import { partitionKey } from '../../src/stores/dynamodb/item.js';
import { describeStoreContract } from './contract.js';
import type { Dynalite } from './dynamodb-support.js';
import { counting, returningOldItems, startDynalite, uniqueTable, withTtlApi } from './dynamodb-support.js';
import { manualClock } from './manual-clock.js';

const ok: StoredResponse = { status: 201, headers: [['content-type', 'text/plain']], body: new TextEncoder().encode('done'), bodyOmitted: false };
const ref = (): RecordRef => ({ scope: `s-${randomUUID()}`, key: `k-${randomUUID()}` });
const opts = { leaseMs: 10_000, windowMs: 60_000 };

let db: Dynalite;
beforeAll(async () => {
  db = await startDynalite();
});
afterAll(async () => {
  await db.close();
});

/** A migrated store on a table of its own, on a clock the test moves. */
async function newStore(options: Partial<DynamoDBStoreOptions> = {}) {
  const clock = manualClock(Date.now());
  const client = options.client ?? withTtlApi(db.client());
  const table = uniqueTable();
  const store = dynamodbStore({ table, clockMarginMs: 0, clock: clock.now, ...options, client });
  await store.migrate();
  return { store, clock, client, table };
}

describe('dynamodb store (dynalite)', () => {
  describeStoreContract('dynamodb', async () => {
    const { store, clock } = await newStore({ maxResponseBytes: 300 * 1024 });
    return { store, advance: clock.advance };
  });

  // dynalite never returns the old item; DynamoDB does. The same contract through a client that
  // does what DynamoDB does, so the path that answers from the returned item runs it all too.
  describeStoreContract('dynamodb, old items returned on a failed condition', async () => {
    const { store, clock } = await newStore({ client: returningOldItems(withTtlApi(db.client())) });
    return { store, advance: clock.advance };
  });
});

describe('dynamodbStore', () => {
  it('costs one call for a replay, a mismatch and an in-flight answer when the service returns the old item', async () => {
    const client = returningOldItems(withTtlApi(db.client()));
    const { store } = await newStore({ client });
    const r = ref();
    client.calls.length = 0;
    const first = await store.claim(r, 'fp', opts);
    expect(first.kind).toBe('acquired');
    expect(client.calls).toEqual(['PutItem']);
    for (const [fingerprint, kind] of [
      ['fp', 'in_flight'],
      ['other', 'mismatch'],
    ] as const) {
      client.calls.length = 0;
      expect((await store.claim(r, fingerprint, opts)).kind).toBe(kind);
      expect(client.calls).toEqual(['PutItem']);
    }
    if (first.kind !== 'acquired') return;
    await store.complete(r, first.token, ok);
    client.calls.length = 0;
    const replay = await store.claim(r, 'fp', opts);
    expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe('done');
    expect(client.calls).toEqual(['PutItem']);
  });

  it('reads the record with one consistent GetItem when the failed condition came back without it (dynalite)', async () => {
    const client = counting(withTtlApi(db.client()));
    const { store } = await newStore({ client });
    const r = ref();
    const first = await store.claim(r, 'fp', opts);
    if (first.kind !== 'acquired') throw new Error(first.kind);
    client.calls.length = 0;
    client.inputs.length = 0;
    expect(await store.claim(r, 'fp', opts)).toMatchObject({ kind: 'in_flight' });
    expect(client.calls).toEqual(['PutItem', 'GetItem']);
    // The put asked for the old item (DynamoDB would send it); the read is strongly consistent.
    expect(client.inputs[0]).toMatchObject({ ReturnValuesOnConditionCheckFailure: 'ALL_OLD', ConditionExpression: expect.stringMatching(/^attribute_not_exists\(#pk\) OR /) });
    expect(client.inputs[1]).toMatchObject({ ConsistentRead: true });
    await store.complete(r, first.token, ok);
    client.calls.length = 0;
    expect((await store.claim(r, 'other', opts)).kind).toBe('mismatch');
    expect((await store.claim(r, 'fp', opts)).kind).toBe('completed');
    expect(client.calls).toEqual(['PutItem', 'GetItem', 'PutItem', 'GetItem']);
  });

  it('takes an expired lease over with one conditional UpdateItem after the failed put, keeping the window, the creation time and the recovery point', async () => {
    const client = returningOldItems(withTtlApi(db.client()));
    const { store, clock } = await newStore({ client });
    const r = ref();
    const first = await store.claim(r, 'fp', opts);
    if (first.kind !== 'acquired') throw new Error(first.kind);
    await store.checkpoint(r, first.token, 'charged', { id: 7 });
    const before = await store.get(r);
    await clock.advance(opts.leaseMs);
    client.calls.length = 0;
    const taken = await store.claim(r, 'fp', opts);
    expect(taken).toMatchObject({ kind: 'acquired', takeover: true, resumeFrom: 'charged', recoveryData: { id: 7 } });
    expect(client.calls).toEqual(['PutItem', 'UpdateItem']);
    const after = await store.get(r);
    expect(after).toMatchObject({ expiresAt: before!.expiresAt, createdAt: before!.createdAt, recoveryPoint: 'charged' });
    expect((await store.admin.inspect(r))?.attempt).toBe(2);
    await expect(store.complete(r, first.token, ok)).rejects.toBeInstanceOf(LeaseLostError);
  });

  describe('clock margin (DynamoDB has no clock in conditions)', () => {
    it('lets a lease and a window end only clockMarginMs after their end on the deciding instance’s clock', async () => {
      const { store, clock } = await newStore({ clockMarginMs: 5_000 });
      const r = ref();
      const first = await store.claim(r, 'fp', { leaseMs: 1_000, windowMs: 60_000 });
      if (first.kind !== 'acquired') throw new Error(first.kind);
      await clock.advance(1_000 + 4_999);
      expect(await store.claim(r, 'fp', opts)).toMatchObject({ kind: 'in_flight', retryAfterMs: 1 });
      await clock.advance(1);
      const taken = await store.claim(r, 'fp', opts);
      expect(taken).toMatchObject({ kind: 'acquired', takeover: true });
      if (taken.kind !== 'acquired') return;
      await store.complete(r, taken.token, ok);
      const { expiresAt } = (await store.get(r))!;
      await clock.advance(expiresAt + 4_999 - clock.now());
      expect((await store.claim(r, 'fp', opts)).kind).toBe('completed');
      await clock.advance(1);
      expect(await store.claim(r, 'other', opts)).toMatchObject({ kind: 'acquired', takeover: false });
    });

    it('never gives one key to two instances whose clocks are within the margin: one 4.9 s ahead cannot take over a live lease', async () => {
      const table = uniqueTable();
      const behind = manualClock(Date.now());
      const ahead = () => behind.now() + 4_900;
      const a = dynamodbStore({ client: withTtlApi(db.client()), table, clock: behind.now });
      const b = dynamodbStore({ client: withTtlApi(db.client()), table, clock: ahead });
      await a.migrate();
      const r = ref();
      const first = await a.claim(r, 'fp', { leaseMs: 1_000, windowMs: 60_000 });
      expect(first.kind).toBe('acquired');
      // By its own clock, b sees the lease ended 3.9 s ago: within the margin, so still live.
      expect((await b.claim(r, 'fp', opts)).kind).toBe('in_flight');
      await behind.advance(1_000);
      // a's lease has really ended now (by a's clock): b, 4.9 s ahead, still waits out the margin.
      expect((await b.claim(r, 'fp', opts)).kind).toBe('in_flight');
      await behind.advance(101);
      expect(await b.claim(r, 'fp', opts)).toMatchObject({ kind: 'acquired', takeover: true });
    });

    it('ends a lease at once on renew(…, 0) and endLeasesOf, margin included', async () => {
      const { store } = await newStore({ clockMarginMs: 5_000 });
      const r = ref();
      const first = await store.claim(r, 'fp', opts);
      if (first.kind !== 'acquired') throw new Error(first.kind);
      expect(await store.renew(r, first.token, 0)).toBe(true);
      expect(await store.claim(r, 'fp', opts)).toMatchObject({ kind: 'acquired', takeover: true });
    });
  });

  it('stores a body under maxResponseBytes as omitted when the item would pass DynamoDB’s 400 KB limit', async () => {
    const { store } = await newStore({ maxResponseBytes: 400 * 1024 });
    const r = ref();
    const claim = await store.claim(r, 'fp', opts);
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    const body = new Uint8Array(randomBytes(390 * 1024));
    const headers: Array<[string, string]> = [['x-long', 'x'.repeat(20 * 1024)]];
    await store.complete(r, claim.token, { status: 200, headers, body, bodyOmitted: false });
    expect(await store.claim(r, 'fp', opts)).toMatchObject({ kind: 'completed', response: { status: 200, headers, body: null, bodyOmitted: true } });
    expect((await store.admin.list({ scope: r.scope }))[0]).toMatchObject({ state: 'completed', bodyBytes: null });
  });

  it('refuses maxResponseBytes over 400 KiB, a bad table name, and unknown options, naming them', () => {
    const client = db.client();
    expect(() => dynamodbStore({ client, maxResponseBytes: 400 * 1024 + 1 })).toThrow(InvalidOptionError);
    expect(() => dynamodbStore({ client, table: 'a b' })).toThrow(/table/);
    expect(() => dynamodbStore({ client, tableName: 'x' } as never)).toThrow(/tableName/);
    expect(() => dynamodbStore({ client: {} as never })).toThrow(/send/);
  });

  it('keeps the TTL attribute past the window and any live lease, and moves it when a lease outlives the window', async () => {
    const { store, client, clock, table } = await newStore();
    const r = ref();
    const claim = await store.claim(r, 'fp', { leaseMs: 1_000, windowMs: 2_000 });
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    const ttlNow = async () => Number((await (client as { send: (c: object) => Promise<{ Item?: { ttl?: { N?: string } } }> }).send(new GetItemCommand({ TableName: table, Key: { pk: { S: partitionKey(r) } }, ConsistentRead: true }))).Item!.ttl!.N);
    expect(await ttlNow()).toBeGreaterThanOrEqual(Math.ceil((clock.now() + 2_000) / 1000));
    expect(await store.renew(r, claim.token, 600_000)).toBe(true);
    expect(await ttlNow()).toBeGreaterThanOrEqual(Math.ceil((clock.now() + 600_000) / 1000));
  });

  describe('migrate() and verify()', () => {
    it('creates the table with TTL on its ttl attribute, once, even when several processes migrate at once; verify() then passes quietly', async () => {
      const client = withTtlApi(db.client());
      const table = uniqueTable();
      const stores = Array.from({ length: 3 }, () => dynamodbStore({ client, table, logger: { warn: vi.fn(), error: vi.fn() } }));
      const done = await Promise.all(stores.map((s) => s.migrate()));
      expect(done.flat().filter((d) => d === `table ${table}`)).toHaveLength(1);
      expect(client.ttl.get(table)).toBe('ttl');
      expect(await stores[0]!.migrate()).toEqual([]);
      const logger = { warn: vi.fn(), error: vi.fn() };
      await dynamodbStore({ client, table, logger }).verify();
      expect(logger.warn).not.toHaveBeenCalled();
    });

    it('migrate() on an endpoint without the TTL API (dynalite) creates the table, and warns once that only reap() will delete records', async () => {
      const logger = { warn: vi.fn(), error: vi.fn() };
      const table = uniqueTable();
      const store = dynamodbStore({ client: db.client(), table, logger });
      expect(await store.migrate()).toEqual([`table ${table}`]);
      expect(logger.warn).toHaveBeenCalledTimes(1);
      expect(String(logger.warn.mock.calls[0]![0])).toMatch(new RegExp(`no UpdateTimeToLive .*TTL is not on for table ${table}, and only store\\.reap\\(\\) deletes expired records`));
      expect((await store.claim(ref(), 'fp', opts)).kind).toBe('acquired');
    });

    it('verify(): a missing table is StoreSchemaMissingError naming migrate(), and so is every operation on it', async () => {
      const store = dynamodbStore({ client: db.client(), table: uniqueTable() });
      await expect(store.verify()).rejects.toBeInstanceOf(StoreSchemaMissingError);
      await expect(store.verify()).rejects.toThrow(/migrate/);
      await expect(store.claim(ref(), 'fp', opts)).rejects.toBeInstanceOf(StoreSchemaMissingError);
    });

    it('verify(): a table with another key is refused; TTL off is one warning', async () => {
      const client = db.client();
      const other = uniqueTable();
      await client.send(new CreateTableCommand({ TableName: other, AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }], KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }], BillingMode: 'PAY_PER_REQUEST' }));
      await expect(dynamodbStore({ client, table: other }).verify()).rejects.toBeInstanceOf(StoreSchemaMissingError);
      const table = uniqueTable();
      await dynamodbStore({ client: withTtlApi(client), table }).migrate();
      const logger = { warn: vi.fn(), error: vi.fn() };
      // Plain dynalite: its DescribeTimeToLive says DISABLED.
      await dynamodbStore({ client, table, logger }).verify();
      expect(logger.warn).toHaveBeenCalledTimes(1);
      expect(String(logger.warn.mock.calls[0]![0])).toMatch(/TTL is not on.*reap/);
    });
  });

  it('reads every page of a Scan (a page ends at 1 MB of items, before the filter and the projection): list, stats, listAbandoned and reap', async () => {
    const client = counting(withTtlApi(db.client()));
    const { store, clock } = await newStore({ client });
    const scope = `s-${randomUUID()}`;
    const body = new Uint8Array(300 * 1024);
    for (let i = 0; i < 6; i++) {
      const r = { scope, key: `done-${i}` };
      const claim = await store.claim(r, 'fp', { leaseMs: 1_000, windowMs: 60_000 });
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      await store.complete(r, claim.token, { status: 200, headers: [], body, bodyOmitted: false });
    }
    // The one abandoned record, written last: on the last page.
    expect((await store.claim({ scope, key: 'gone' }, 'fp', { leaseMs: 1, windowMs: 120_000 })).kind).toBe('acquired');
    await clock.advance(1);
    const scans = async <T>(read: () => Promise<T>): Promise<[T, number]> => {
      client.calls.length = 0;
      const out = await read();
      return [out, client.calls.filter((call) => call === 'Scan').length];
    };
    const [listed, listScans] = await scans(() => store.admin.list({ scope, limit: 100 }));
    expect(listed).toHaveLength(7);
    expect(listScans).toBeGreaterThan(1);
    const [stats, statsScans] = await scans(() => store.admin.stats());
    expect(stats).toMatchObject({ completed: 6, inFlight: 1, abandoned: 1, bodyBytes: 6 * 300 * 1024 });
    expect(statsScans).toBeGreaterThan(1);
    const [abandoned, abandonedScans] = await scans(() => store.listAbandoned());
    expect(abandoned.map((r) => r.key)).toEqual(['gone']);
    expect(abandonedScans).toBeGreaterThan(1);
    await clock.advance(60_000);
    const [reaped, reapScans] = await scans(() => store.reap());
    expect(reaped).toBe(6);
    expect(reapScans).toBeGreaterThan(1);
    expect((await store.admin.stats()).completed).toBe(0);
  });

  it('migrate() waits until a new table is ACTIVE (DynamoDB takes seconds; this dynalite 300 ms), so the first claim after it finds the table', async () => {
    const slow = await startDynalite({ createTableMs: 300 });
    try {
      const client = counting(withTtlApi(slow.client()));
      const table = uniqueTable();
      const store = dynamodbStore({ client, table });
      expect(await store.migrate()).toEqual([`table ${table}`, `TTL on ${table}.ttl`]);
      expect(client.calls.filter((call) => call === 'DescribeTable').length).toBeGreaterThan(1);
      expect((await store.claim(ref(), 'fp', opts)).kind).toBe('acquired');
    } finally {
      await slow.close();
    }
  });

  it('answers StoreUnavailableError when DynamoDB does not answer', async () => {
    const gone = await startDynalite();
    await gone.close();
    const down = dynamodbStore({ client: withTtlApi(new DynamoDBClient({ endpoint: gone.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' }, maxAttempts: 1 })), table: 'idemkit_gone' });
    await expect(down.claim(ref(), 'fp', opts)).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  it('fences renewal, checkpoint, completion and release by the owner token, also after a take-over', async () => {
    const { store, clock } = await newStore();
    const r = ref();
    const first = await store.claim(r, 'fp', { leaseMs: 100, windowMs: 60_000 });
    if (first.kind !== 'acquired') throw new Error(first.kind);
    await clock.advance(100);
    const second = await store.claim(r, 'fp', opts);
    if (second.kind !== 'acquired') throw new Error(second.kind);
    expect(await store.renew(r, first.token, 1_000)).toBe(false);
    await expect(store.checkpoint(r, first.token, 'x')).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.complete(r, first.token, ok)).rejects.toBeInstanceOf(LeaseLostError);
    expect(await store.get(r)).toMatchObject({ state: 'in_flight', recoveryPoint: undefined });
    await expect(store.release(r, first.token)).rejects.toBeInstanceOf(LeaseLostError);
    await store.release(r, second.token);
    expect(await store.get(r)).toBeUndefined();
  });
});
