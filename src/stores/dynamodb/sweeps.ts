/**
 * What the DynamoDB store does across records: `reap` (expired records TTL has not deleted yet),
 * `listAbandoned` and `endLeasesOf`. Each is a Scan of the table (DynamoDB has no index the store
 * could range over without a second table), then one conditional write per record that re-checks
 * what the Scan saw: run them rarely.
 */
import type { AbandonedRecords, IdempotencyStore, IncarnationLeases } from '../../core/store.js';
import { checkInteger } from '../../core/option-reader.js';
import { checkIncarnation } from '../../core/token.js';
import type { DynamoContext } from './claim.js';
import { ConditionFailed } from './client.js';
import type { AttributeValue, Item } from './item.js';
import { A, COMPLETED, EXPIRED, IN_FLIGHT, n, namesIn, readItem, s, toRecord } from './item.js';
import { OWNED } from './writes.js';

export type Sweeps = Pick<IdempotencyStore, 'reap'> & AbandonedRecords & IncarnationLeases;

export function sweeps(c: DynamoContext): Sweeps {
  const { send, table, clock, marginMs } = c;

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
  };
}
