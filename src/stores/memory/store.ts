import { serialize } from 'node:v8';
import type { AbandonedRecords, AdministrableStore, Claim, ClaimOptions, Clock, IdempotencyRecord, IdempotencyStore, IncarnationLeases, RecordRef } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse, systemClock } from '../../core/store.js';
import { SETTLED_ON_RETURN } from '../../core/deadlines.js';
import { checkIncarnation, newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import { memoryAdmin } from './admin.js';
import { MemoryRecord, inFlightBytes, responseBytes, toRecord } from './record.js';
import { MemoryTable } from './table.js';

export interface MemoryStoreOptions {
  /**
   * The most records kept. When a new key finds the store full, expired records are swept, and if
   * that makes no room the claim is refused (503 `store-full`, `StoreFullError`, whose message
   * names this bound). A record is never dropped inside its window to make room: a retry of a
   * completed key always replays, however full the store is.
   * @default 10_000
   */
  readonly maxRecords?: number;
  /**
   * The most records one scope (tenant) may hold. A new key of a scope at this bound is refused
   * as for `maxRecords` (503 `store-full`, the message naming `maxRecordsPerScope`), so one tenant
   * flooding the store with new keys leaves room for the others. At most `maxRecords`; the default
   * sets no quota of its own.
   * @default maxRecords
   */
  readonly maxRecordsPerScope?: number;
  /**
   * The most bytes the records may hold, counted roughly: per record a fixed overhead
   * (`MEMORY_RECORD_OVERHEAD_BYTES`), its scope, key, fingerprint and token (2 bytes per UTF-16
   * unit), its recovery point and data (their serialized size) and its response (status, headers,
   * body). Over it, expired records are swept, as for `maxRecords`; a claim or a checkpoint that
   * still does not fit is refused (503 `store-full`), and a completion that does not fit keeps
   * status and headers and marks the body omitted, as a body over `maxResponseBytes` is (the
   * handler has run: its result is never dropped, so those few bytes may pass the bound). The
   * default keeps a development process small whatever its responses weigh (10 000 records of
   * the largest response, 1 MiB, would be ~10 GiB) while holding thousands of ordinary JSON
   * answers. At least `maxResponseBytes`.
   * @default 67_108_864 (64 MiB)
   */
  readonly maxBytes?: number;
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

/** Default of `maxBytes`. */
export const DEFAULT_MEMORY_MAX_BYTES = 64 * 1024 * 1024;

/** What a memory store holds, as it counts it. */
export interface MemoryStoreStats {
  /** Records held (in flight and completed). */
  readonly records: number;
  readonly inFlight: number;
  readonly completed: number;
  /**
   * Bytes held, as `maxBytes` counts them: at most `maxBytes`, except by the status and headers of
   * results completed when nothing expired was left to make room (see `maxBytes`).
   */
  readonly bytes: number;
  /** New claims and checkpoints refused for want of room (`StoreFullError`), since the store was made. */
  readonly refused: number;
}

export interface MemoryStore extends IdempotencyStore, AbandonedRecords, IncarnationLeases, AdministrableStore {
  /** Number of records held. */
  readonly size: number;
  /** Records and bytes held, and how many claims and checkpoints were refused for want of room. */
  stats(): MemoryStoreStats;
  /** Stops the background sweeper. */
  close(): void;
}

/**
 * A bounded, swept, single-process store for tests and development. Not shared between processes.
 * Bounded by records, by bytes and optionally per scope. When full it sweeps what has expired and
 * otherwise refuses new keys (`StoreFullError`, 503): it never forgets an answer inside its window
 * to admit a new claim, since a retry of that key would then run the handler a second time.
 */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  const read = optionReader('memoryStore()', options);
  const maxRecords = read.integer('maxRecords', { default: 10_000, min: 1 });
  const maxRecordsPerScope = read.integer('maxRecordsPerScope', { default: maxRecords, min: 1 });
  if (maxRecordsPerScope > maxRecords) read.fail('maxRecordsPerScope', `expected at most \`maxRecords\` (${maxRecords}); got ${maxRecordsPerScope}`);
  const sweepIntervalMs = read.duration('sweepIntervalMs', { default: 60_000 });
  const maxResponseBytes = read.integer('maxResponseBytes', { default: DEFAULT_MAX_RESPONSE_BYTES });
  const maxBytes = read.integer('maxBytes', { default: DEFAULT_MEMORY_MAX_BYTES, min: 1 });
  if (maxBytes < maxResponseBytes) {
    read.fail('maxBytes', `expected at least \`maxResponseBytes\` (${maxResponseBytes}), so that a body the store accepts can be kept; got ${maxBytes}`);
  }
  const now = read.function('clock', { default: systemClock, expected: 'a function returning epoch ms' });
  read.done();
  const table = new MemoryTable({ maxRecords, maxRecordsPerScope, maxBytes }, now);
  const timer = sweepIntervalMs > 0 ? setInterval(() => table.sweep(), sweepIntervalMs) : undefined;
  timer?.unref?.();

  const store: MemoryStore = {
    name: 'memory',
    maxResponseBytes,
    get size() {
      return table.size;
    },
    stats() {
      const { size, completed, bytes, refused } = table;
      return { records: size, inFlight: size - completed, completed, bytes, refused };
    },
    claim: async (ref, fingerprint, o) => claim(table, now, ref, fingerprint, o),
    async renew(ref, token, leaseMs) {
      checkRecordRef(ref);
      const r = table.find(ref);
      if (!r || r.state !== 'in_flight' || r.token !== token) return false;
      const t = now();
      r.leaseUntil = t + leaseMs;
      r.updatedAt = t;
      table.mayExpireFrom(r); // a lease given back (0 ms) may end the record sooner
      return true;
    },
    async checkpoint(ref, token, point, data) {
      checkRecordRef(ref);
      const r = table.owned(ref, token);
      const before = { point: r.recoveryPoint, data: r.recoveryBytes };
      r.recoveryPoint = point;
      r.recoveryBytes = data === undefined ? undefined : serialize(data);
      const n = inFlightBytes(r);
      if (n > r.bytes && !table.makeRoom(0, n - r.bytes, r)) {
        r.recoveryPoint = before.point;
        r.recoveryBytes = before.data;
        throw table.full(`maxBytes = ${maxBytes}`, 'the checkpoint was not kept (the earlier one stays)');
      }
      table.bytes += n - r.bytes;
      r.bytes = n;
      r.updatedAt = now();
    },
    async complete(ref, token, response) {
      checkRecordRef(ref);
      const r = table.owned(ref, token);
      let fitted = fitResponse(response, maxResponseBytes);
      let more = responseBytes(fitted);
      // The handler has run: its result is never refused. When sweeping cannot make room for the
      // body, the record keeps status and headers and says the body was omitted.
      if (!table.makeRoom(0, more, r) && fitted.body !== null) {
        fitted = { status: fitted.status, headers: fitted.headers, body: null, bodyOmitted: true };
        more = responseBytes(fitted);
        table.makeRoom(0, more, r);
      }
      r.complete(fitted);
      r.updatedAt = now();
      table.bytes += more;
      r.bytes += more;
      table.completedRecord(r);
    },
    async release(ref, token) {
      checkRecordRef(ref);
      table.remove(table.owned(ref, token));
    },
    async get(ref): Promise<IdempotencyRecord | undefined> {
      checkRecordRef(ref);
      const r = table.find(ref);
      return r && toRecord(r);
    },
    // Both walk the records in flight only (a Set the table keeps), never the completed ones.
    async listAbandoned(limit = 100) {
      const max = checkInteger('limit', limit, { default: 100, min: 1 });
      const t = now();
      const found: MemoryRecord[] = [];
      for (const r of table.inFlight()) if (r.leaseUntil <= t && r.expiresAt > t) found.push(r);
      return found.sort((a, b) => a.leaseUntil - b.leaseUntil).slice(0, max).map(toRecord);
    },
    async endLeasesOf(incarnation) {
      checkIncarnation(incarnation);
      const t = now();
      let ended = 0;
      for (const r of table.inFlight()) {
        if (r.leaseUntil <= t || !r.token.startsWith(incarnation)) continue;
        r.leaseUntil = t;
        r.updatedAt = t;
        table.mayExpireFrom(r);
        ended++;
      }
      return ended;
    },
    async reap(limit = 1000) {
      return table.sweep(limit);
    },
    admin: memoryAdmin({ now, records: () => table.all(), find: (ref) => table.find(ref), remove: (r) => table.remove(r), toRecord }),
    close() {
      if (timer) clearInterval(timer);
    },
  };
  // Every operation runs to its end before it returns: the engine sets no deadline on them (one a
  // wrapper replaced is bounded again). Not enumerable, so that a copy of the store is not marked.
  const { claim: ownClaim, renew, checkpoint, complete, release, get } = store;
  Object.defineProperty(store, SETTLED_ON_RETURN, { value: Object.freeze({ claim: ownClaim, renew, checkpoint, complete, release, get }) });
  return store;
}

/** A claim: replay, mismatch, in flight, take-over of a lapsed lease, or a new record if there is room. */
function claim(table: MemoryTable, now: Clock, ref: RecordRef, fingerprint: string, o: ClaimOptions): Claim {
  checkRecordRef(ref);
  const t = now();
  const r = table.find(ref);
  if (r && !table.isExpired(r, t)) {
    if (r.fingerprint !== fingerprint) return { kind: 'mismatch' };
    if (r.state === 'completed') return { kind: 'completed', response: r.response! };
    // An injected clock (or the host's, stepped back) may run backwards: an age is never negative.
    if (r.leaseUntil > t) return { kind: 'in_flight', retryAfterMs: r.leaseUntil - t, renewedMsAgo: Math.max(0, t - r.updatedAt) };
    r.token = newOwnerToken(o.incarnation);
    r.leaseUntil = t + o.leaseMs;
    r.updatedAt = t;
    r.attempt++;
    return { kind: 'acquired', token: r.token, takeover: true, resumeFrom: r.recoveryPoint, recoveryData: r.recoveryData };
  }
  // Past its window the old record is gone for every purpose: the new one replaces it.
  if (r) table.remove(r);
  const token = newOwnerToken(o.incarnation);
  const fresh = new MemoryRecord(ref.scope, ref.key, fingerprint, token, t + o.leaseMs, t + o.windowMs, t, t);
  fresh.bytes = inFlightBytes(fresh);
  const refusal = table.admit(fresh);
  if (refusal !== undefined) throw refusal;
  table.insert(fresh);
  return { kind: 'acquired', token, takeover: false };
}
