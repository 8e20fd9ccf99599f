/**
 * The DynamoDB store's claim. A new key (or one past its window) is one conditional PutItem, which
 * answers a replay, a mismatch or an in-flight record with the item it found, so each costs one
 * call; a take-over is one conditional UpdateItem after it. DynamoDB has no clock in conditions:
 * times are the claiming instance's clock, and an end counts only once it is `marginMs` past
 * (docs/stores/dynamodb.md says why that keeps one owner per key).
 */
import { StoreUnavailableError } from '../../core/errors.js';
import type { Claim, ClaimOptions, RecordRef } from '../../core/store.js';
import { checkInteger } from '../../core/option-reader.js';
import { newOwnerToken } from '../../core/token.js';
import { checkRecordRef } from '../../core/validate.js';
import type { Sender } from './client.js';
import { ConditionFailed } from './client.js';
import type { Item, ItemRecord } from './item.js';
import { A, COMPLETED, EXPIRED, IN_FLIGHT, freshItem, isExpired, keyOf, n, namesIn, readItem, s, ttlOf } from './item.js';

export interface DynamoContext {
  readonly send: Sender;
  readonly table: string;
  readonly marginMs: number;
  readonly clock: () => number;
}

/** How often a claim re-reads a record that concurrent writers keep changing before it gives up. */
const ATTEMPTS = 5;

export const PUT_CONDITION = `attribute_not_exists(#${A.pk}) OR ${EXPIRED}`;
const TAKEOVER_CONDITION = `#${A.state} = :in_flight AND #${A.token} = :old AND #${A.leaseUntil} <= :cut AND #${A.fingerprint} = :fp`;
const TAKEOVER_UPDATE = `SET #${A.token} = :tok, #${A.leaseUntil} = :lu, #${A.updatedAt} = :now, #${A.attempt} = #${A.attempt} + :one, #${A.ttl} = :ttl`;

export async function claim(c: DynamoContext, ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
  checkRecordRef(ref);
  const leaseMs = checkInteger('leaseMs', o.leaseMs, { required: true, min: 1 });
  const windowMs = checkInteger('windowMs', o.windowMs, { required: true, min: 1 });
  const token = newOwnerToken(o.incarnation);
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const now = c.clock();
    const cut = now - c.marginMs;
    let old: Item | undefined;
    try {
      await c.send('PutItem', {
        TableName: c.table,
        Item: freshItem({ ref, fingerprint, token, now, leaseMs, windowMs, marginMs: c.marginMs }),
        ConditionExpression: PUT_CONDITION,
        ExpressionAttributeNames: namesIn(PUT_CONDITION),
        ExpressionAttributeValues: { ':cut': n(cut), ':completed': s(COMPLETED) },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      });
      return { kind: 'acquired', token, takeover: false };
    } catch (error) {
      if (!(error instanceof ConditionFailed)) throw error;
      old = error.item ?? (await readAfterFailure(c, ref));
    }
    // Gone between the put and the read (released, reaped): claim again.
    if (old === undefined) continue;
    const r = readItem(old, c.table, true, ref);
    // Expired by this clock, yet the condition failed: another writer changed it meanwhile.
    if (isExpired(r, cut)) continue;
    if (r.fingerprint !== fingerprint) return { kind: 'mismatch' };
    if (r.state === COMPLETED) return { kind: 'completed', response: r.response! };
    if (r.leaseUntil > cut) {
      return {
        kind: 'in_flight',
        retryAfterMs: Math.max(1, r.leaseUntil + c.marginMs - now),
        renewedMsAgo: r.updatedAt === undefined ? undefined : Math.max(0, now - r.updatedAt),
      };
    }
    const taken = await takeOver(c, ref, r, fingerprint, token, leaseMs, cut);
    if (taken !== undefined) return taken;
  }
  throw new StoreUnavailableError(`dynamodb store: the claim of a key in table ${c.table} kept racing with concurrent writers`);
}

/**
 * A service that does not return the old item on a failed condition (dynalite; DynamoDB before
 * `ReturnValuesOnConditionCheckFailure`) costs a strongly consistent read: it sees every write
 * acknowledged before it, so the failed condition's cause is there (or a later write).
 */
async function readAfterFailure(c: DynamoContext, ref: RecordRef): Promise<Item | undefined> {
  const { Item: item } = await c.send('GetItem', { TableName: c.table, Key: keyOf(ref), ConsistentRead: true });
  return item;
}

/**
 * The take-over of an in-flight record whose lease ended: conditioned on the owner token it read
 * and on the lease still being over, so a renewal that landed meanwhile, or a racing take-over,
 * wins and this one re-reads. It keeps the window, the creation time and the recovery point.
 */
async function takeOver(c: DynamoContext, ref: RecordRef, r: ItemRecord, fingerprint: string, token: string, leaseMs: number, cut: number): Promise<Claim | undefined> {
  const now = c.clock();
  const lease = now + leaseMs;
  const ttl = Math.max(r.ttl ?? 0, Number(ttlOf(Math.max(lease, r.expiresAt), c.marginMs).N));
  let attributes: Item | undefined;
  try {
    ({ Attributes: attributes } = await c.send('UpdateItem', {
      TableName: c.table,
      Key: keyOf(ref),
      UpdateExpression: TAKEOVER_UPDATE,
      ConditionExpression: TAKEOVER_CONDITION,
      ExpressionAttributeNames: namesIn(TAKEOVER_UPDATE, TAKEOVER_CONDITION),
      ExpressionAttributeValues: {
        ':tok': s(token),
        ':old': s(r.token),
        ':lu': n(lease),
        ':now': n(now),
        ':one': n(1),
        ':ttl': n(ttl),
        ':cut': n(cut),
        ':fp': s(fingerprint),
        ':in_flight': s(IN_FLIGHT),
      },
      ReturnValues: 'ALL_NEW',
    }));
  } catch (error) {
    if (error instanceof ConditionFailed) return undefined;
    throw error;
  }
  const taken = attributes === undefined ? r : readItem(attributes, c.table, true, ref);
  return { kind: 'acquired', token, takeover: true, resumeFrom: taken.recoveryPoint, recoveryData: taken.recoveryData };
}
