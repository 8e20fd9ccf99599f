/**
 * The store contract, from Node, against the Durable Object store running in workerd: each
 * operation is sent to the test Worker's `/__store/<op>` (worker.ts), which calls
 * `durableObjectStore` there, and its answer or error is rebuilt here. The contract's cases, clock
 * and assertions run in vitest; the store, the objects and their clock run in workerd.
 */
import { InvalidOptionError, InvalidRecordRefError, LeaseLostError, StoreUnavailableError } from '../../../src/core/errors.js';
import type { AbandonedRecords, IdempotencyRecord, IdempotencyStore, IncarnationLeases } from '../../../src/core/store.js';
import type { WireClaim, WireRecord } from '../../../src/stores/durable-objects/wire.js';
import { fromWireRecord, fromWireResponse, toWireResponse } from '../../../src/stores/durable-objects/wire.js';

/** The classes the contract checks with `instanceof`, by code. */
const ERRORS: Record<string, abstract new (...args: never[]) => Error> = {
  ERR_IDEMKIT_LEASE_LOST: LeaseLostError,
  ERR_IDEMKIT_INVALID_REF: InvalidRecordRefError,
  ERR_IDEMKIT_INVALID_OPTION: InvalidOptionError,
  ERR_IDEMKIT_STORE_UNAVAILABLE: StoreUnavailableError,
};

export async function bridgeStore(url: string, graceMs?: number): Promise<IdempotencyStore & AbandonedRecords & IncarnationLeases> {
  async function call<T>(op: string, ...args: unknown[]): Promise<T> {
    const response = await fetch(`${url}/__store/${op}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ args, graceMs }) });
    const answer = (await response.json()) as { result?: T; error?: { name: string; code?: string; field?: string; message: string } };
    if (answer.error === undefined) return answer.result as T;
    const type = answer.error.code === undefined ? Error : ERRORS[answer.error.code];
    if (type === undefined) throw new Error(`${answer.error.name} (${answer.error.code}) from workerd: ${answer.error.message}`);
    // The error as thrown in the Worker: its class, code, field and message.
    throw Object.assign(Object.create(type.prototype as object) as Error, answer.error, { name: answer.error.name });
  }
  const maxResponseBytes = await call<number>('maxResponseBytes');
  return {
    name: 'durable-objects (workerd)',
    maxResponseBytes,
    async claim(ref, fingerprint, o) {
      const claim = await call<WireClaim>('claim', ref, fingerprint, o);
      return claim.kind === 'completed' ? { kind: 'completed', response: fromWireResponse(claim.response) } : claim;
    },
    renew: (ref, token, leaseMs) => call('renew', ref, token, leaseMs),
    checkpoint: (ref, token, point, data) => call('checkpoint', ref, token, point, data),
    complete: (ref, token, response) => call('complete', ref, token, toWireResponse(response)),
    release: (ref, token) => call('release', ref, token),
    async get(ref): Promise<IdempotencyRecord | undefined> {
      const record = await call<WireRecord | null>('get', ref);
      return record === null ? undefined : fromWireRecord(record);
    },
    reap: (limit) => call('reap', limit),
    listAbandoned: async (limit) => (await call<WireRecord[]>('listAbandoned', limit)).map(fromWireRecord),
    endLeasesOf: (incarnation) => call('endLeasesOf', incarnation),
  };
}
