/**
 * The owner's writes on a record it claimed: renewal, checkpoint, completion and release. Each is
 * one conditional write fenced by the owner token (`tok` is the caller's, the record in flight):
 * a stale or unknown token changes nothing and is `LeaseLostError` (`false` from `renew`).
 */
import { LeaseLostError } from '../../core/errors.js';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../core/store.js';
import { fitResponse } from '../../core/store.js';
import { checkInteger } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import type { DynamoContext } from './claim.js';
import { ConditionFailed, isItemTooLarge } from './client.js';
import type { AttributeValue, Item } from './item.js';
import { A, COMPLETED, IN_FLIGHT, keyOf, n, namesIn, s, ttlOf } from './item.js';

export const OWNED = `#${A.token} = :tok AND #${A.state} = :in_flight`;

export type OwnerWrites = Pick<IdempotencyStore, 'renew' | 'checkpoint' | 'complete' | 'release'>;

export function ownerWrites(c: DynamoContext, maxResponseBytes: number): OwnerWrites {
  const { send, table, clock, marginMs } = c;

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

  async function checkpoint(ref: RecordRef, token: string, point: string, data?: unknown): Promise<void> {
    checkRecordRef(ref);
    const json = data === undefined ? undefined : JSON.stringify(data);
    const values: Record<string, AttributeValue> = { ':rp': s(point), ':now': n(clock()) };
    if (json !== undefined) values[':rd'] = s(json);
    const update = `SET #${A.recoveryPoint} = :rp, #${A.updatedAt} = :now${json === undefined ? '' : `, #${A.recoveryData} = :rd`}${json === undefined ? ` REMOVE #${A.recoveryData}` : ''}`;
    await fenced(ref, token, update, values);
  }

  async function release(ref: RecordRef, token: string): Promise<void> {
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
  }

  return { renew, checkpoint, complete, release };
}
