/**
 * Fuzzing the DynamoDB store's item decoder (src/stores/dynamodb/item.ts) through the real store
 * on dynalite (started here on a spare port): a completed record is written by the store, then
 * attributes are overwritten with arbitrary values of any DynamoDB type, or removed, with the
 * test's own client, then the record is claimed (the failed put, then the read of the item) and
 * read. See record-check.ts for what is owed.
 */
import { randomUUID } from 'node:crypto';
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CorruptRecordError } from '../../src/core/errors.js';
import type { RecordRef, StoredResponse } from '../../src/core/store.js';
import type { DynamoDBStore } from '../../src/stores/dynamodb/index.js';
import { dynamodbStore } from '../../src/stores/dynamodb/index.js';
import { A, partitionKey } from '../../src/stores/dynamodb/item.js';
import type { Dynalite } from '../stores/dynamodb-support.js';
import { startDynalite, uniqueTable, withTtlApi } from '../stores/dynamodb-support.js';
import { anyUtf16, FUZZ_TIMEOUT, fuzzAsync } from './fuzz.js';
import { CLAIM_OPTIONS, checkCorrupted, completeGood, expectedResponse } from './record-check.js';

/** Every attribute but the partition key (DynamoDB refuses an update of the key). */
const ATTRIBUTES = Object.values(A).filter((a) => a !== A.pk);

const number = fc.oneof(
  fc.integer({ min: -5, max: 1_000 }).map(String),
  fc.constantFrom('0', '1', '99', '100', '200', '999', '1000', '-1', '1.5', '200.0', '1e3', '9007199254740993', String(Number.MAX_SAFE_INTEGER), '99999999999999999999'),
);
const text = fc.oneof(
  anyUtf16({ maxLength: 20 }),
  fc.constantFrom('in_flight', 'completed', 'fp', '[]', '[["a","b"]]', '[["a b","x"]]', '[["a","x\\ny"]]', '[["a"]]', '{"a":1}', 'null', '{', '[["set-cookie","k=v"],["x",""]]'),
  fc.jsonValue({ maxDepth: 2 }).map((value) => JSON.stringify(value) ?? 'null'),
);
/** Any DynamoDB value, or undefined: remove the attribute. */
const value: fc.Arbitrary<AttributeValue | undefined> = fc.oneof(
  fc.constant(undefined),
  text.map((S) => ({ S })),
  number.map((N) => ({ N })),
  fc.uint8Array({ maxLength: 20 }).map((B) => ({ B })),
  fc.boolean().map((BOOL) => ({ BOOL })),
  fc.constant({ NULL: true } as AttributeValue),
  fc.constant({ L: [{ S: 'a' }] } as AttributeValue),
  fc.constant({ M: { a: { N: '1' } } } as AttributeValue),
  fc.constant({ SS: ['a', 'b'] } as AttributeValue),
);
const corruption = fc.array(fc.tuple(fc.constantFrom(...ATTRIBUTES), value), { minLength: 1, maxLength: 3 });

describe('fuzz: dynamodb store records', FUZZ_TIMEOUT, () => {
  let db: Dynalite;
  let store: DynamoDBStore;
  const table = uniqueTable();

  beforeAll(async () => {
    db = await startDynalite();
    store = dynamodbStore({ client: withTtlApi(db.client()), table });
    await store.migrate();
  });
  afterAll(async () => {
    await db?.close();
  });

  const keyOf = (ref: RecordRef) => ({ pk: { S: partitionKey(ref) } });
  const raw = async (ref: RecordRef) => (await db.client().send(new GetItemCommand({ TableName: table, Key: keyOf(ref), ConsistentRead: true }))).Item;

  /** Overwrites (or removes) attributes; false when DynamoDB refused a value (an invalid number, an empty set). */
  async function corrupt(ref: RecordRef, changes: ReadonlyArray<readonly [string, AttributeValue | undefined]>): Promise<boolean> {
    for (const [attribute, v] of changes) {
      try {
        await db.client().send(
          new UpdateItemCommand({
            TableName: table,
            Key: keyOf(ref),
            UpdateExpression: v === undefined ? 'REMOVE #a' : 'SET #a = :v',
            ExpressionAttributeNames: { '#a': attribute },
            ExpressionAttributeValues: v === undefined ? undefined : { ':v': v },
          }),
        );
      } catch (error) {
        if ((error as Error).name === 'ValidationException' || (error as Error).name === 'SerializationException') return false;
        throw error;
      }
    }
    return true;
  }

  /** The response the item holds, read by the test from the layout in item.ts. */
  async function held(ref: RecordRef): Promise<StoredResponse | 'invalid'> {
    const item = (await raw(ref)) ?? {};
    const status = item[A.status]?.N === undefined ? undefined : Number(item[A.status]!.N);
    const omitted = item[A.bodyOmitted] === undefined ? false : (item[A.bodyOmitted]!.BOOL ?? 'corrupt');
    const body = item[A.body] === undefined ? null : (item[A.body]!.B ?? 'corrupt');
    return expectedResponse(status, item[A.headers]?.S, body, omitted);
  }

  it('answers a corrupted record with the typed error or exactly what it holds, on claim and get', async () => {
    let corruptSeen = 0;
    await fuzzAsync(
      fc.asyncProperty(corruption, async (changes) => {
        const ref = { scope: 'fuzz', key: randomUUID() };
        await completeGood(store, ref);
        if (!(await corrupt(ref, changes))) return;
        if (await checkCorrupted(store, ref, () => held(ref))) corruptSeen++;
      }),
      // Each run is a handful of HTTP round trips to dynalite: a tenth of the default runs (at least 20).
      0.1,
    );
    expect(corruptSeen).toBeGreaterThan(0);
  });

  // Cases a decoder that trusted the item would get wrong, each refused with the typed error.
  it.each([
    [A.status, { N: '0' }, /status is not an HTTP status code/],
    [A.status, { S: '200' }, /sts is missing or not a number/],
    [A.headers, { S: '{' }, /headers are not JSON/],
    [A.headers, { S: '[["a b","x"]]' }, /header name "a b"/],
    [A.body, { S: 'text' }, /bd is not binary/],
    [A.bodyOmitted, { S: 'yes' }, /bo is not a boolean/],
    [A.leaseUntil, { N: '1.5' }, /lu is not an integer/],
    [A.scope, { S: 'another' }, /another scope or key/],
    [A.state, { S: 'done' }, /unknown state/],
  ] as Array<[string, AttributeValue, RegExp]>)('%s = %j is a CorruptRecordError on claim and get', async (attribute, v, reason) => {
    const ref = { scope: 'regression', key: randomUUID() };
    await completeGood(store, ref);
    expect(await corrupt(ref, [[attribute, v]])).toBe(true);
    for (const call of [() => store.get(ref), () => store.claim(ref, 'fp', CLAIM_OPTIONS)]) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(CorruptRecordError);
      expect((error as Error).message).toMatch(reason);
    }
  });
});
