import { InvalidOptionError, LeaseLostError, StoreUnavailableError } from '../core/errors.js';
import type { AbandonedRecords, Claim, ClaimOptions, Clock, IdempotencyRecord, IdempotencyStore, RecordRef, StoredResponse } from '../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse, systemClock } from '../core/store.js';
import { newOwnerToken } from '../core/token.js';
import { durationOption, integerOption } from '../core/validate.js';

export interface MemoryStoreOptions {
  /**
   * The most records kept. When full, expired records are swept; if it is still full, claims fail
   * (503) rather than forgetting a key that is still inside its window.
   * @default 10_000
   */
  readonly maxRecords?: number;
  /**
   * How often expired records are removed in the background, in ms; 0 turns the sweeper off.
   * @default 60_000
   */
  readonly sweepIntervalMs?: number;
  /** @default 1_048_576 */
  readonly maxResponseBytes?: number;
  /** The store's clock, injectable so tests can move time. @default Date.now */
  readonly clock?: Clock;
}

interface MutableRecord {
  readonly scope: string;
  readonly key: string;
  state: 'in_flight' | 'completed';
  fingerprint: string;
  token: string;
  leaseUntil: number;
  expiresAt: number;
  attempt: number;
  recoveryPoint?: string;
  recoveryData?: unknown;
  response?: StoredResponse;
}

export interface MemoryStore extends IdempotencyStore, AbandonedRecords {
  /** Number of records held. */
  readonly size: number;
  /** Stops the background sweeper. */
  close(): void;
}

/** A bounded, swept, single-process store for tests and development. Not shared between processes. */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  const maxRecords = integerOption('maxRecords', options.maxRecords, 10_000, 1);
  const sweepIntervalMs = durationOption('sweepIntervalMs', options.sweepIntervalMs, 60_000, 0, false);
  const maxResponseBytes = integerOption('maxResponseBytes', options.maxResponseBytes, DEFAULT_MAX_RESPONSE_BYTES, 0);
  const now = options.clock ?? systemClock;
  if (typeof now !== 'function') throw new InvalidOptionError('clock', 'expected a function returning epoch ms');
  const records = new Map<string, MutableRecord>();
  const id = (ref: RecordRef) => `${ref.scope.length}:${ref.scope}${ref.key}`;
  const isExpired = (r: MutableRecord, t: number) => r.expiresAt <= t && (r.state === 'completed' || r.leaseUntil <= t);

  function sweep(limit = Infinity): number {
    const t = now();
    let removed = 0;
    for (const [k, r] of records) {
      if (removed >= limit) break;
      if (isExpired(r, t)) {
        records.delete(k);
        removed++;
      }
    }
    return removed;
  }

  function owned(ref: RecordRef, token: string): MutableRecord {
    const r = records.get(id(ref));
    if (!r || r.state !== 'in_flight' || r.token !== token) throw new LeaseLostError();
    return r;
  }

  const timer = sweepIntervalMs > 0 ? setInterval(() => sweep(), sweepIntervalMs) : undefined;
  timer?.unref?.();

  return {
    name: 'memory',
    maxResponseBytes,
    get size() {
      return records.size;
    },
    async claim(ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
      const t = now();
      const k = id(ref);
      const r = records.get(k);
      if (r && !isExpired(r, t)) {
        if (r.fingerprint !== fingerprint) return { kind: 'mismatch' };
        if (r.state === 'completed' && r.response) return { kind: 'completed', response: r.response };
        if (r.leaseUntil > t) return { kind: 'in_flight', retryAfterMs: r.leaseUntil - t };
        r.token = newOwnerToken();
        r.leaseUntil = t + o.leaseMs;
        r.attempt++;
        return { kind: 'acquired', token: r.token, takeover: true, resumeFrom: r.recoveryPoint, recoveryData: r.recoveryData };
      }
      if (!r && records.size >= maxRecords && sweep() === 0) {
        throw new StoreUnavailableError(`memory store is full (maxRecords = ${maxRecords})`);
      }
      const token = newOwnerToken();
      records.set(k, { scope: ref.scope, key: ref.key, state: 'in_flight', fingerprint, token, leaseUntil: t + o.leaseMs, expiresAt: t + o.windowMs, attempt: 1 });
      return { kind: 'acquired', token, takeover: false };
    },
    async renew(ref, token, leaseMs) {
      const r = records.get(id(ref));
      if (!r || r.state !== 'in_flight' || r.token !== token) return false;
      r.leaseUntil = now() + leaseMs;
      return true;
    },
    async checkpoint(ref, token, point, data) {
      const r = owned(ref, token);
      r.recoveryPoint = point;
      r.recoveryData = data === undefined ? undefined : structuredClone(data);
    },
    async complete(ref, token, response) {
      const r = owned(ref, token);
      const fitted = fitResponse(response, maxResponseBytes);
      r.state = 'completed';
      r.response = { ...fitted, headers: fitted.headers.map(([n, v]) => [n, v] as const), body: fitted.body && fitted.body.slice() };
    },
    async release(ref, token) {
      owned(ref, token);
      records.delete(id(ref));
    },
    async get(ref): Promise<IdempotencyRecord | undefined> {
      const r = records.get(id(ref));
      return r && toRecord(r);
    },
    async listAbandoned(limit = 100) {
      const max = integerOption('limit', limit, 100, 1);
      const t = now();
      const found = [...records.values()].filter((r) => r.state === 'in_flight' && r.leaseUntil <= t && r.expiresAt > t);
      return found.sort((a, b) => a.leaseUntil - b.leaseUntil).slice(0, max).map(toRecord);
    },
    async reap(limit = 1000) {
      return sweep(limit);
    },
    close() {
      if (timer) clearInterval(timer);
    },
  };
}

function toRecord(r: MutableRecord): IdempotencyRecord {
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
  };
}
