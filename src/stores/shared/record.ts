/**
 * A record as `get` and `listAbandoned` answer it: the fields of `IdempotencyRecord`, without what
 * a store keeps beside them (the memory store's byte counts, DynamoDB's TTL and body length).
 */
import type { IdempotencyRecord } from '../../core/store.js';

export function plainRecord(r: IdempotencyRecord): IdempotencyRecord {
  return {
    scope: r.scope,
    key: r.key,
    state: r.state,
    fingerprint: r.fingerprint,
    leaseUntil: r.leaseUntil,
    expiresAt: r.expiresAt,
    recoveryPoint: r.recoveryPoint,
    recoveryData: r.recoveryData,
    response: r.response,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}
