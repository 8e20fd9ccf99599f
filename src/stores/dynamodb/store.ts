import type { IdempotencyLogger } from '../../core/logger.js';
import { consoleLogger } from '../../core/logger.js';
import { optionReader } from '../../core/option-reader.js';
import type { AbandonedRecords, AdministrableStore, Clock, IdempotencyRecord, IdempotencyStore, IncarnationLeases } from '../../core/store.js';
import { systemClock } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';
import { dynamodbAdmin } from './admin.js';
import type { DynamoContext } from './claim.js';
import { claim } from './claim.js';
import type { DynamoDBClientLike } from './client.js';
import { sender } from './client.js';
import { keyOf, readItem, toRecord } from './item.js';
import { sweeps } from './sweeps.js';
import { migrate, verify } from './table.js';
import { ownerWrites } from './writes.js';

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

/**
 * The store on DynamoDB through the application's `DynamoDBClient`. A record is one item; every
 * change is one conditional write fenced by the owner token (the claim: claim.ts; the owner's
 * writes: writes.ts; reap and the lease sweeps: sweeps.ts). Not transactional with the handler's
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
  const owner = ownerWrites(c, maxResponseBytes);
  const across = sweeps(c);
  return {
    name: 'dynamodb',
    maxResponseBytes,
    migrate: () => migrate(send, table, logger),
    verify: () => verify(send, table, logger),
    claim: (ref, fingerprint, o) => claim(c, ref, fingerprint, o),
    renew: owner.renew,
    checkpoint: owner.checkpoint,
    complete: owner.complete,
    release: owner.release,
    async get(ref): Promise<IdempotencyRecord | undefined> {
      checkRecordRef(ref);
      const { Item: item } = await send('GetItem', { TableName: table, Key: keyOf(ref), ConsistentRead: true });
      return item && toRecord(readItem(item, table, true, ref));
    },
    reap: across.reap,
    listAbandoned: across.listAbandoned,
    endLeasesOf: across.endLeasesOf,
    admin: dynamodbAdmin({ send, table, clock, marginMs }),
  };
}
