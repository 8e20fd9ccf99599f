import { LeaseLostError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import type { AbandonedRecords, AdministrableStore, Clock, IdempotencyRecord, IdempotencyStore, IncarnationLeases, RecordRef, StoredResponse } from '../../core/store.js';
import { fitResponse, systemClock } from '../../core/store.js';
import { checkIncarnation } from '../../core/token.js';
import { checkRecordRef } from '../../core/validate.js';
import { dynamodbAdmin } from './admin.js';
import type { DynamoContext } from './claim.js';
import { claim } from './claim.js';
import type { DynamoDBClientLike } from './client.js';
import { ConditionFailed, isItemTooLarge, sender } from './client.js';
import type { AttributeValue, Item } from './item.js';
import { A, COMPLETED, EXPIRED, IN_FLIGHT, keyOf, n, namesIn, readItem, s, toRecord, ttlOf } from './item.js';
import { migrate, verify } from './table.js';

export type { DynamoDBClientLike } from './client.js';

export interface DynamoDBStoreOptions {
  /**
   * A `DynamoDBClient` of `@aws-sdk/client-dynamodb` v3, created by the caller (its region,
   * credentials and retry settings are the store's). Required.
   */
  readonly client: DynamoDBClientLike;
  /** The table: 3 to 255 letters, digits, `_ - .`. `migrate()` creates it. @default 'idempotency_records' */
  readonly table?: string;
  /**
   * Larger response bodies are not stored (the record marks them omitted). An item holds at most
   * 400 KB with its other attributes, so at most 400 KiB; a completion the service still refuses
   * as too large (long headers, large recovery data) is stored with the body omitted too.
   * @default 358_400 (350 KiB)
   */
  readonly maxResponseBytes?: number;
  /**
   * DynamoDB conditions have no clock of their own, so lease and window ends are the instances'
   * clocks: an end counts as passed only once it is this far behind the clock of the instance that
   * decides. Instances whose clocks are within this of each other never hold one key at once
   * (docs/stores/dynamodb.md). A take-over and a window's end come this much later.
   * @default 5_000
   */
  readonly clockMarginMs?: number;
  /** The instance's clock, epoch ms; injectable so tests can move time. @default Date.now */
  readonly clock?: Clock;
  /** Where `verify()` warns that TTL is off (`{ warn, error }`: console, pino, …). @default console */
  readonly logger?: IdempotencyLogger;
}

export interface DynamoDBStore extends IdempotencyStore, AbandonedRecords, IncarnationLeases, AdministrableStore {
  /**
   * Creates the table (on-demand capacity, partition key `pk`) if missing, waits until it is
   * ACTIVE, and turns TTL on for its `ttl` attribute. Idempotent; safe from several processes at
   * once. Resolves to what it created (`table <name>`, `TTL on <name>.ttl`).
   */
  migrate(): Promise<string[]>;
  /**
   * Resolves when the table exists with the store's key; otherwise rejects with
   * `StoreSchemaMissingError` naming `migrate()` as the fix. TTL off is one warning to `logger`.
   */
  verify(): Promise<void>;
}

const TABLE = /^[A-Za-z0-9_.-]{3,255}$/;
const MAX_RESPONSE_BYTES = 400 * 1024;
const DEFAULT_MAX_RESPONSE_BYTES = 350 * 1024;

const OWNED = `#${A.token} = :tok AND #${A.state} = :in_flight`;

/**
 * The store on DynamoDB through the application's `DynamoDBClient`. A record is one item; every
 * change is one conditional write fenced by the owner token. Not transactional with the handler's
 * writes: docs/stores/dynamodb.md says what that means, as for Redis.
 */
export function dynamodbStore(options: DynamoDBStoreOptions): DynamoDBStore {
  const read = optionReader('dynamodbStore()', options);
  const client = read.driver('client', ['send'], 'a DynamoDBClient of @aws-sdk/client-dynamodb v3');
  const table = read.value('table') ?? 'idempotency_records';
  if (typeof table !== 'string' || !TABLE.test(table)) read.fail('table', `expected 3 to 255 letters, digits, "_", "-" or ".", got ${JSON.stringify(table)}`);
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES, max: MAX_RESPONSE_BYTES });
  const marginMs = read.integer('clockMarginMs', { default: 5_000 });
  const clock = read.function('clock', { default: systemClock, expected: 'a function returning epoch ms' });
  const logger = read.driver('logger', ['warn', 'error'], 'a logger with warn() and error() (console, pino, …)', { optional: true }) ?? consoleLogger;
  read.done();
  const send = sender(client, table);
  const c: DynamoContext = { send, table, marginMs, clock };

  /** One fenced UpdateItem: `LeaseLostError` when the token is not the record's current owner. */
  async function fenced(ref: RecordRef, token: string, update: string, values: Record<string, AttributeValue>, returnValues?: 'ALL_NEW'): Promise<Item | undefined> {
    try {
      const { Attributes } = await send('UpdateItem', {
        TableName: table,
        Key: keyOf(ref),
        UpdateExpression: update,
        ConditionExpression: OWNED,
        ExpressionAttributeNames: namesIn(update, OWNED),
        ExpressionAttributeValues: Object.assign(values, { ':tok': s(token), ':in_flight': s(IN_FLIGHT) }),
        ReturnValues: returnValues,
      });
      return Attributes;
    } catch (error) {
      if (error instanceof ConditionFailed) throw new LeaseLostError();
      throw error;
    }
  }

  async function complete(ref: RecordRef, token: string, response: StoredResponse): Promise<void> {
    checkRecordRef(ref);
    const fitted = fitResponse(response, maxResponseBytes);
    const write = async (r: StoredResponse) => {
      const body = r.body === null ? '' : `, #${A.body} = :body`;
      const values: Record<string, AttributeValue> = {
        ':completed': s(COMPLETED),
        ':status': n(r.status),
        ':headers': s(JSON.stringify(r.headers)),
        ':omitted': { BOOL: r.bodyOmitted },
        ':bytes': n(r.body?.byteLength ?? 0),
        ':now': n(clock()),
      };
      if (r.body !== null) values[':body'] = { B: r.body };
      // The TTL stays: it was set past max(window, lease) by the claim and every renewal.
      const update = `SET #${A.state} = :completed, #${A.status} = :status, #${A.headers} = :headers, #${A.bodyOmitted} = :omitted, #${A.bodyBytes} = :bytes, #${A.updatedAt} = :now${body}`;
      await fenced(ref, token, update, values);
    };
    try {
      await write(fitted);
    } catch (error) {
      // Under maxResponseBytes, yet the item is over 400 KB with everything else it holds: the
      // design's rule for a body too large, never a truncation.
      if (fitted.body === null || !isItemTooLarge(error)) throw error;
      await write({ status: fitted.status, headers: fitted.headers, body: null, bodyOmitted: true });
    }
  }

  async function renew(ref: RecordRef, token: string, leaseMs: number): Promise<boolean> {
    checkRecordRef(ref);
    const ms = checkInteger('leaseMs', leaseMs, { required: true });
    const now = clock();
    // 0 ends the lease now on every clock within the margin: a claim of the same request takes over at once.
    const lease = ms === 0 ? now - marginMs : now + ms;
    let item: Item | undefined;
    try {
      item = await fenced(ref, token, `SET #${A.leaseUntil} = :lu, #${A.updatedAt} = :now`, { ':lu': n(lease), ':now': n(now) }, 'ALL_NEW');
    } catch (error) {
      if (error instanceof LeaseLostError) return false;
      throw error;
    }
    // A lease that outlives the record's TTL (past its window) moves the TTL along; one more write,
    // only then. An expression cannot take the larger of two numbers.
    const ttl = item && Number(item[A.ttl]?.N ?? 0);
    const needed = Number(ttlOf(lease, marginMs).N);
    if (ttl !== undefined && ttl < needed) {
      try {
        await fenced(ref, token, `SET #${A.ttl} = :ttl`, { ':ttl': n(needed) });
      } catch (error) {
        if (!(error instanceof LeaseLostError)) throw error;
      }
    }
    return true;
  }

  async function scan(filter: string, values: Record<string, AttributeValue>, projection?: string): Promise<Item[]> {
    const items: Item[] = [];
    let start: Item | undefined;
    do {
      const out = await send('Scan', {
        TableName: table,
        FilterExpression: filter,
        ExpressionAttributeNames: namesIn(filter, projection ?? ''),
        ExpressionAttributeValues: values,
        ProjectionExpression: projection,
        ExclusiveStartKey: start,
        ConsistentRead: true,
      });
      items.push(...(out.Items ?? []));
      start = out.LastEvaluatedKey;
    } while (start !== undefined);
    return items;
  }

  return {
    name: 'dynamodb',
    maxResponseBytes,
    migrate: () => migrate(send, table, logger),
    verify: () => verify(send, table, logger),
    claim: (ref, fingerprint, o) => claim(c, ref, fingerprint, o),
    renew,
    async checkpoint(ref, token, point, data) {
      checkRecordRef(ref);
      const json = data === undefined ? undefined : JSON.stringify(data);
      const values: Record<string, AttributeValue> = { ':rp': s(point), ':now': n(clock()) };
      if (json !== undefined) values[':rd'] = s(json);
      const update = `SET #${A.recoveryPoint} = :rp, #${A.updatedAt} = :now${json === undefined ? '' : `, #${A.recoveryData} = :rd`}${json === undefined ? ` REMOVE #${A.recoveryData}` : ''}`;
      await fenced(ref, token, update, values);
    },
    complete,
    async release(ref, token) {
      checkRecordRef(ref);
      try {
        await send('DeleteItem', {
          TableName: table,
          Key: keyOf(ref),
          ConditionExpression: OWNED,
          ExpressionAttributeNames: namesIn(OWNED),
          ExpressionAttributeValues: { ':tok': s(token), ':in_flight': s(IN_FLIGHT) },
        });
      } catch (error) {
        if (error instanceof ConditionFailed) throw new LeaseLostError();
        throw error;
      }
    },
    async get(ref): Promise<IdempotencyRecord | undefined> {
      checkRecordRef(ref);
      const { Item: item } = await send('GetItem', { TableName: table, Key: keyOf(ref), ConsistentRead: true });
      return item && toRecord(readItem(item, table, true, ref));
    },
    /**
     * Deletes expired records that DynamoDB's TTL has not deleted yet (it may take days). A Scan
     * of the whole table: run it rarely, if at all. Each deletion re-checks expiry in its condition.
     */
    async reap(limit = 1000) {
      const batch = checkInteger('limit', limit, { default: 1000 });
      const cut = clock() - marginMs;
      const values = { ':cut': n(cut), ':completed': s(COMPLETED) };
      let reaped = 0;
      for (const item of await scan(EXPIRED, values, `#${A.pk}`)) {
        if (reaped >= batch) break;
        try {
          await send('DeleteItem', { TableName: table, Key: { [A.pk]: item[A.pk]! }, ConditionExpression: EXPIRED, ExpressionAttributeNames: namesIn(EXPIRED), ExpressionAttributeValues: values });
          reaped++;
        } catch (error) {
          if (!(error instanceof ConditionFailed)) throw error;
        }
      }
      return reaped;
    },
    async listAbandoned(limit = 100) {
      const batch = checkInteger('limit', limit, { default: 100, min: 1 });
      const cut = clock() - marginMs;
      const filter = `#${A.state} = :in_flight AND #${A.leaseUntil} <= :cut AND #${A.expiresAt} > :cut`;
      const items = await scan(filter, { ':in_flight': s(IN_FLIGHT), ':cut': n(cut) });
      return items
        .map((item) => readItem(item, table))
        .sort((a, b) => a.leaseUntil - b.leaseUntil)
        .slice(0, batch)
        .map(toRecord);
    },
    async endLeasesOf(incarnation) {
      checkIncarnation(incarnation);
      const now = clock();
      const cut = now - marginMs;
      const filter = `#${A.state} = :in_flight AND #${A.leaseUntil} > :cut AND begins_with(#${A.token}, :inc)`;
      const items = await scan(filter, { ':in_flight': s(IN_FLIGHT), ':cut': n(cut), ':inc': s(incarnation) }, `#${A.pk}, #${A.token}`);
      let ended = 0;
      for (const item of items) {
        const token = item[A.token]?.S;
        if (token === undefined) continue;
        try {
          await send('UpdateItem', {
            TableName: table,
            Key: { [A.pk]: item[A.pk]! },
            UpdateExpression: `SET #${A.leaseUntil} = :ended, #${A.updatedAt} = :now`,
            ConditionExpression: `${OWNED} AND #${A.leaseUntil} > :cut`,
            ExpressionAttributeNames: namesIn(OWNED, `#${A.leaseUntil} #${A.updatedAt}`),
            ExpressionAttributeValues: { ':tok': s(token), ':in_flight': s(IN_FLIGHT), ':cut': n(cut), ':ended': n(cut), ':now': n(now) },
          });
          ended++;
        } catch (error) {
          if (!(error instanceof ConditionFailed)) throw error;
        }
      }
      return ended;
    },
    admin: dynamodbAdmin({ send, table, clock, marginMs }),
  };
}
