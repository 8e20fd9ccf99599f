/**
 * The DynamoDB store's table: `migrate()` creates it (on-demand capacity, partition key `pk`) and
 * turns TTL on for its `ttl` attribute; `verify()` checks both without writing a record.
 */
import { StoreSchemaMissingError } from '../../core/errors.js';
import type { IdempotencyLogger } from '../../core/logger.js';
import type { Output, Sender } from './client.js';
import { MIGRATE_FIX } from './client.js';
import { A } from './item.js';

const causeName = (error: unknown) => String(((error as { cause?: unknown } | null)?.cause as { name?: unknown } | null | undefined)?.name ?? '');

/** How long `migrate()` waits for a new table to become ACTIVE (DynamoDB takes seconds; CloudFormation-made tables are already there). */
const ACTIVE_WAIT_MS = 5 * 60_000;

/** Creates the table and turns TTL on where missing; resolves to what it created. Idempotent, and safe from several processes at once. */
export async function migrate(send: Sender, table: string, logger: IdempotencyLogger): Promise<string[]> {
  const done: string[] = [];
  try {
    await send('CreateTable', {
      TableName: table,
      AttributeDefinitions: [{ AttributeName: A.pk, AttributeType: 'S' }],
      KeySchema: [{ AttributeName: A.pk, KeyType: 'HASH' }],
      BillingMode: 'PAY_PER_REQUEST',
    });
    done.push(`table ${table}`);
  } catch (error) {
    // Another process (or an earlier run) created it: go on to its TTL.
    if (causeName(error) !== 'ResourceInUseException') throw error;
  }
  await untilActive(send, table);
  const ttl = await describeTtl(send, table);
  if (ttl.status !== 'ENABLED' && ttl.status !== 'ENABLING') {
    try {
      await send('UpdateTimeToLive', { TableName: table, TimeToLiveSpecification: { AttributeName: A.ttl, Enabled: true } });
      done.push(`TTL on ${table}.${A.ttl}`);
    } catch (error) {
      // An emulator without the TTL API (dynalite): the records are then deleted by reap() only.
      if (causeName(error) === 'UnknownOperationException') {
        logger.warn(`dynamodb store: this endpoint has no UpdateTimeToLive (an emulator such as dynalite?): TTL is not on for table ${table}, and only store.reap() deletes expired records`);
        return done;
      }
      // A concurrent migration turned it on first: DynamoDB refuses a second change.
      if (!/already enabled/i.test(String((error as { cause?: { message?: unknown } }).cause?.message ?? ''))) throw error;
    }
  }
  return done;
}

async function untilActive(send: Sender, table: string): Promise<void> {
  const deadline = Date.now() + ACTIVE_WAIT_MS;
  for (let wait = 50; ; wait = Math.min(wait * 2, 2_000)) {
    const { Table } = await send('DescribeTable', { TableName: table });
    if (Table?.TableStatus === 'ACTIVE' || Date.now() > deadline) return;
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

async function describeTtl(send: Sender, table: string): Promise<{ status: string | undefined; attribute: string | undefined }> {
  const { TimeToLiveDescription: d }: Output = await send('DescribeTimeToLive', { TableName: table });
  return { status: d?.TimeToLiveStatus, attribute: d?.AttributeName };
}

/**
 * Throws `StoreSchemaMissingError` when the table is missing or was not made for this store (its
 * key is not `pk`, a string); TTL off (or on another attribute) is one warning: records are then
 * only deleted by `reap()`, and every decision stays correct (the store checks each record's end itself).
 */
export async function verify(send: Sender, table: string, logger: IdempotencyLogger): Promise<void> {
  const { Table } = await send('DescribeTable', { TableName: table });
  const hash = Table?.KeySchema?.find((k) => k.KeyType === 'HASH');
  const type = Table?.AttributeDefinitions?.find((d) => d.AttributeName === hash?.AttributeName)?.AttributeType;
  if (hash?.AttributeName !== A.pk || type !== 'S' || (Table?.KeySchema?.length ?? 0) !== 1) {
    throw new StoreSchemaMissingError('dynamodb', [`table ${table} with the partition key ${A.pk} (a string) and no sort key`], MIGRATE_FIX);
  }
  const ttl = await describeTtl(send, table);
  if ((ttl.status !== 'ENABLED' && ttl.status !== 'ENABLING') || ttl.attribute !== A.ttl) {
    logger.warn(
      `dynamodb store: TTL is not on for the attribute "${A.ttl}" of table ${table} (status ${ttl.status ?? 'unknown'}${ttl.attribute ? `, attribute "${ttl.attribute}"` : ''}): ` +
        `DynamoDB will not delete expired records, and only store.reap() will; run ${MIGRATE_FIX}`,
    );
  }
}
