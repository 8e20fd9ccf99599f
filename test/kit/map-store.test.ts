// map-store.test.ts: a toy store on a Map, and the contract suite run against it with vitest.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError } from 'idemkit';
import type { IdempotencyStore } from 'idemkit';
import { checkRecordRef, describeStoreContract, fitResponse, newOwnerToken, systemClock } from 'idemkit/kit';
import type { Claim, ClaimOptions, Clock, IdempotencyRecord, RecordRef, StoredResponse } from 'idemkit/kit';

type Entry = { -readonly [K in keyof IdempotencyRecord]: IdempotencyRecord[K] } & { token: string };

export function mapStore(options: { clock?: Clock; maxResponseBytes?: number } = {}): IdempotencyStore {
  const clock = options.clock ?? systemClock;
  const records = new Map<string, Entry>();
  const id = (ref: RecordRef) => JSON.stringify([ref.scope, ref.key]);
  /** The live record of `ref` (one past its window counts as gone). */
  const find = (ref: RecordRef): Entry | undefined => {
    checkRecordRef(ref); // every operation refuses ill-formed scopes and keys
    const entry = records.get(id(ref));
    return entry && entry.expiresAt > clock() ? entry : undefined;
  };
  /** The in-flight record `token` owns, or LeaseLostError: every write is fenced by the token. */
  const owned = (ref: RecordRef, token: string): Entry => {
    const entry = find(ref);
    if (!entry || entry.state !== 'in_flight' || entry.token !== token) throw new LeaseLostError();
    return entry;
  };
  const view = ({ token: _token, ...record }: Entry): IdempotencyRecord => structuredClone(record);

  return {
    name: 'map',
    maxResponseBytes: options.maxResponseBytes ?? 64 * 1024,
    async claim(ref: RecordRef, fingerprint: string, { leaseMs, windowMs }: ClaimOptions): Promise<Claim> {
      const now = clock();
      const entry = find(ref);
      if (!entry) {
        const token = newOwnerToken();
        const { scope, key } = ref;
        const times = { createdAt: now, updatedAt: now };
        records.set(id(ref), { scope, key, state: 'in_flight', fingerprint, leaseUntil: now + leaseMs, expiresAt: now + windowMs, ...times, token });
        return { kind: 'acquired', token, takeover: false };
      }
      if (entry.fingerprint !== fingerprint) return { kind: 'mismatch' };
      if (entry.state === 'completed') return { kind: 'completed', response: entry.response! };
      // In flight: the lease left, and how long ago the owner last wrote (a live one renews).
      if (entry.leaseUntil > now) return { kind: 'in_flight', retryAfterMs: entry.leaseUntil - now, renewedMsAgo: now - entry.updatedAt! };
      // The owner's lease ran out: this request takes over, from the last recovery point.
      Object.assign(entry, { token: newOwnerToken(), leaseUntil: now + leaseMs, updatedAt: now });
      return { kind: 'acquired', token: entry.token, takeover: true, resumeFrom: entry.recoveryPoint, recoveryData: entry.recoveryData };
    },
    async renew(ref: RecordRef, token: string, leaseMs: number): Promise<boolean> {
      const entry = find(ref);
      if (!entry || entry.state !== 'in_flight' || entry.token !== token) return false;
      const now = clock();
      Object.assign(entry, { leaseUntil: now + leaseMs, updatedAt: now });
      return true;
    },
    async checkpoint(ref: RecordRef, token: string, point: string, data?: unknown): Promise<void> {
      Object.assign(owned(ref, token), { recoveryPoint: point, recoveryData: structuredClone(data), updatedAt: clock() });
    },
    async complete(ref: RecordRef, token: string, response: StoredResponse): Promise<void> {
      const fitted = fitResponse(response, this.maxResponseBytes);
      const kept: StoredResponse = { ...fitted, headers: fitted.headers.map(([n, v]) => [n, v] as const), body: fitted.body?.slice() ?? null };
      Object.assign(owned(ref, token), { state: 'completed', response: kept, updatedAt: clock() });
    },
    async release(ref: RecordRef, token: string): Promise<void> {
      owned(ref, token);
      records.delete(id(ref));
    },
    async get(ref: RecordRef): Promise<IdempotencyRecord | undefined> {
      checkRecordRef(ref);
      const entry = records.get(id(ref));
      return entry && view(entry);
    },
    async reap(limit = 1000): Promise<number> {
      let reaped = 0;
      for (const [k, entry] of records) {
        if (reaped >= limit) break;
        if (entry.expiresAt <= clock()) reaped += Number(records.delete(k));
      }
      return reaped;
    },
  };
}

// The contract, on a clock the suite moves forward.
let now = Date.now();
describeStoreContract(
  'map (the docs example)',
  () => ({ store: mapStore({ clock: () => now }), advance: async (ms: number) => void (now += ms) }),
  { describe, it, expect, beforeAll, afterAll },
);
