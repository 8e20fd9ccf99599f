/**
 * `store.admin` of the DynamoDB store. `list` and `stats` Scan the table (bodies left out: their
 * lengths are kept beside them), `inspect` is one consistent GetItem and `purge` one conditional
 * DeleteItem. A pass over the table: for an operator, not for a request's path.
 */
import type { PurgeOutcome, RecordDetails, RecordRef, RecordSummary, StoreAdmin } from '../../core/store.js';
import { summarize, tokenPrefix, walkingAdmin } from '../shared/admin.js';
import type { Sender } from './client.js';
import { ConditionFailed } from './client.js';
import type { Item } from './item.js';
import { A, COMPLETED, isExpired, keyOf, namesIn, readItem, s, toRecord } from './item.js';

export interface DynamoAdminAccess {
  readonly send: Sender;
  readonly table: string;
  readonly clock: () => number;
  readonly marginMs: number;
}

/** Every attribute but the body. */
const SUMMARY = Object.values(A)
  .filter((a) => a !== A.body)
  .map((a) => `#${a}`)
  .join(', ');

export function dynamodbAdmin(a: DynamoAdminAccess): StoreAdmin {
  const details = (item: Item, now: number, withBody: boolean, ref?: RecordRef): RecordDetails => {
    const r = readItem(item, a.table, withBody, ref);
    return {
      ...toRecord(r),
      tokenPrefix: tokenPrefix(r.token),
      attempt: r.attempt,
      now,
      expired: isExpired(r, now - a.marginMs),
      createdAt: r.createdAt ?? null,
      updatedAt: r.updatedAt ?? null,
    };
  };
  return walkingAdmin({
    now: async () => a.clock(),
    async *each() {
      const now = a.clock();
      let start: Item | undefined;
      do {
        const out = await a.send('Scan', {
          TableName: a.table,
          ProjectionExpression: SUMMARY,
          ExpressionAttributeNames: namesIn(SUMMARY),
          ConsistentRead: true,
          ExclusiveStartKey: start,
        });
        for (const item of out.Items ?? []) {
          const d = details(item, now, false);
          const summary: RecordSummary = { ...summarize(d), bodyBytes: d.state === COMPLETED ? readItem(item, a.table, false).bodyBytes : null };
          yield summary;
        }
        start = out.LastEvaluatedKey;
      } while (start !== undefined);
    },
    async inspect(ref) {
      const { Item: item } = await a.send('GetItem', { TableName: a.table, Key: keyOf(ref), ConsistentRead: true });
      return item && details(item, a.clock(), true, ref);
    },
    async purge(ref, force): Promise<PurgeOutcome> {
      const condition = force ? `attribute_exists(#${A.pk})` : `#${A.state} = :completed`;
      try {
        await a.send('DeleteItem', {
          TableName: a.table,
          Key: keyOf(ref),
          ConditionExpression: condition,
          ExpressionAttributeNames: namesIn(condition),
          ExpressionAttributeValues: force ? undefined : { ':completed': s(COMPLETED) },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        });
        return 'purged';
      } catch (error) {
        if (!(error instanceof ConditionFailed)) throw error;
        if (force) return 'not_found';
        // Absent, or in flight: the old item tells, or (a service that does not return it) a read.
        const old = error.item ?? (await a.send('GetItem', { TableName: a.table, Key: keyOf(ref), ConsistentRead: true })).Item;
        return old === undefined ? 'not_found' : 'in_flight';
      }
    },
  });
}
