import { deserialize, serialize } from 'node:v8';
import { LeaseLostError, StoreFullError } from '../../core/errors.js';
import type { AbandonedRecords, AdministrableStore, Claim, ClaimOptions, Clock, IdempotencyRecord, IdempotencyStore, RecordRef, StoredResponse } from '../../core/store.js';
import { DEFAULT_MAX_RESPONSE_BYTES, fitResponse, systemClock } from '../../core/store.js';
import { newOwnerToken } from '../../core/token.js';
import { checkInteger, optionReader } from '../../core/option-reader.js';
import { checkRecordRef } from '../../core/validate.js';
import { memoryAdmin } from './admin.js';

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

/** What the memory store counts for each record besides its strings and response (object, map entry, fields). */
export const MEMORY_RECORD_OVERHEAD_BYTES = 256;
/** Default of `maxBytes`. */
export const DEFAULT_MEMORY_MAX_BYTES = 64 * 1024 * 1024;
// Per header pair when headers are kept as a list: the pair's array and the list's slot.
const HEADER_PAIR_OVERHEAD_BYTES = 48;
// A response's fixed part (status, flags, the unpacked object once replayed).
const RESPONSE_OVERHEAD_BYTES = 64;

/**
 * One record, kept small: a completed response is packed into two strings (headers, body) and
 * unpacked on its first replay. Every object a record holds is copied by each young-generation
 * collection it survives, then marked by every full one; the unpacked form (response object,
 * header list, one array per header, a Buffer view) was ~10 objects. Measured on Express, new
 * keys: not keeping the response at all cut scavenge time per request from ~12.4 to 8.4–10.6 µs
 * (--trace-gc); packing it took the time added per request from 21.3 to 18.7 µs (A/B, same run).
 */
class MemoryRecord {
  state: 'in_flight' | 'completed' = 'in_flight';
  attempt = 1;
  recoveryPoint: string | undefined = undefined;
  /** The checkpoint's data, serialized: a copy nobody else holds, and its size is known. */
  recoveryBytes: Buffer | undefined = undefined;
  /** What the store counts for this record (see `maxBytes`). */
  bytes = 0;
  status = 0;
  /** `name\nvalue\n…` (Node refuses CR and LF in header values), or undefined with `headerList`. */
  headerText: string | undefined = undefined;
  /** Headers that do not fit `headerText` (a newline, a character past U+00FF), as given. */
  headerList: ReadonlyArray<readonly [string, string]> | undefined = undefined;
  /** The body's bytes as a Latin-1 string (one byte per character); null when omitted. */
  bodyText: string | null = null;
  bodyOmitted = false;
  /** The unpacked response, once a replay asked for it. */
  unpacked: StoredResponse | undefined = undefined;

  constructor(
    readonly scope: string,
    readonly key: string,
    public fingerprint: string,
    public token: string,
    public leaseUntil: number,
    public expiresAt: number,
    /** When this record was claimed; a take-over keeps it. */
    readonly createdAt: number,
    /** Its last change: claim, take-over, renewal, checkpoint, completion. */
    public updatedAt: number,
  ) {}

  complete(response: StoredResponse): void {
    this.state = 'completed';
    this.token = '';
    this.status = response.status;
    this.headerText = packHeaders(response.headers);
    // A copy either way: the caller's array and tuples are not ours to keep.
    this.headerList = this.headerText === undefined ? response.headers.map(([n, v]) => [n, v] as const) : undefined;
    const body = response.body;
    this.bodyText = body === null ? null : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('latin1');
    this.bodyOmitted = response.bodyOmitted;
  }

  get response(): StoredResponse | undefined {
    if (this.state !== 'completed') return undefined;
    if (this.unpacked === undefined) {
      this.unpacked = {
        status: this.status,
        headers: this.headerList ?? unpackHeaders(this.headerText!),
        body: this.bodyText === null ? null : Buffer.from(this.bodyText, 'latin1'),
        bodyOmitted: this.bodyOmitted,
      };
      // The unpacked form replaces the packed one: the body is held once, as `maxBytes` counts it.
      this.headerText = undefined;
      this.headerList = undefined;
      this.bodyText = null;
    }
    return this.unpacked;
  }

  get recoveryData(): unknown {
    return this.recoveryBytes === undefined ? undefined : deserialize(this.recoveryBytes);
  }
}

/** What the store counts for a record in flight (see `maxBytes`): overhead, strings, recovery point and data. */
function inFlightBytes(r: MemoryRecord): number {
  const strings = r.scope.length + r.key.length + r.fingerprint.length + r.token.length + (r.recoveryPoint?.length ?? 0);
  return MEMORY_RECORD_OVERHEAD_BYTES + 2 * strings + (r.recoveryBytes?.byteLength ?? 0);
}

/**
 * What a response adds to its record. Headers are counted as the list a replay unpacks them into
 * (UTF-16 strings in small arrays), an upper bound on their packed text; the body by its bytes.
 */
function responseBytes(response: StoredResponse): number {
  let n = RESPONSE_OVERHEAD_BYTES + (response.body?.byteLength ?? 0);
  for (const [name, value] of response.headers) n += 2 * (name.length + value.length) + HEADER_PAIR_OVERHEAD_BYTES;
  return n;
}

// Anything outside printable Latin-1 (and tab) is kept as a list instead.
const UNPACKABLE = /[^\t\x20-\x7e\x80-\xff]/;

function packHeaders(headers: StoredResponse['headers']): string | undefined {
  let text = '';
  for (const [name, value] of headers) {
    if (UNPACKABLE.test(name) || UNPACKABLE.test(value)) return undefined;
    text += text === '' ? `${name}\n${value}` : `\n${name}\n${value}`;
  }
  return text;
}

function unpackHeaders(text: string): Array<readonly [string, string]> {
  if (text === '') return [];
  const parts = text.split('\n');
  const headers: Array<readonly [string, string]> = [];
  for (let i = 0; i < parts.length; i += 2) headers.push([parts[i]!, parts[i + 1]!]);
  return headers;
}

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

export interface MemoryStore extends IdempotencyStore, AbandonedRecords, AdministrableStore {
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
  // Scope, then key: no joined string to build on each operation, nor to keep per record.
  const scopes = new Map<string, Map<string, MemoryRecord>>();
  let completed = 0;
  let size = 0;
  let bytes = 0;
  let refused = 0;
  // No record can be expired before this time (a lower bound of `expiryOf` over the records): a
  // store full of live records then refuses a claim without walking them all. Lowered whenever a
  // record's expiry may move earlier (a new record, a completion, a lease given back); set exactly
  // by every full sweep.
  let nextExpiry = Infinity;
  const find = (ref: RecordRef) => scopes.get(ref.scope)?.get(ref.key);
  // A record in flight lives as long as its lease even past its window (its owner may still complete).
  const expiryOf = (r: MemoryRecord) => (r.state === 'completed' ? r.expiresAt : Math.max(r.expiresAt, r.leaseUntil));
  const isExpired = (r: MemoryRecord, t: number) => expiryOf(r) <= t;
  const mayExpireFrom = (r: MemoryRecord) => {
    nextExpiry = Math.min(nextExpiry, expiryOf(r));
  };

  function insert(r: MemoryRecord): void {
    let keys = scopes.get(r.scope);
    if (keys === undefined) scopes.set(r.scope, (keys = new Map()));
    keys.set(r.key, r);
    size++;
    bytes += r.bytes;
    mayExpireFrom(r);
  }

  function remove(r: MemoryRecord): void {
    const keys = scopes.get(r.scope);
    if (keys === undefined || keys.get(r.key) !== r) return;
    keys.delete(r.key);
    if (keys.size === 0) scopes.delete(r.scope);
    size--;
    bytes -= r.bytes;
    if (r.state === 'completed') completed--;
  }

  function* all(): Generator<MemoryRecord> {
    for (const keys of scopes.values()) yield* keys.values();
  }

  /** Removes expired records, at most `limit`; never `keep` (a record an operation is writing). */
  function sweep(limit = Infinity, keep?: MemoryRecord): number {
    const t = now();
    let removed = 0;
    let earliest = Infinity;
    for (const r of all()) {
      if (removed >= limit) return removed; // a partial pass: `nextExpiry` stays a lower bound
      if (r !== keep && isExpired(r, t)) {
        remove(r);
        removed++;
      } else {
        earliest = Math.min(earliest, expiryOf(r));
      }
    }
    nextExpiry = earliest;
    return removed;
  }

  /** Sweeps when a record may have expired since the last sweep; otherwise there is nothing to gain. */
  function sweepIfDue(keep?: MemoryRecord): void {
    if (now() >= nextExpiry) sweep(Infinity, keep);
  }

  const fits = (records: number, more: number) => size + records <= maxRecords && bytes + more <= maxBytes;

  /**
   * Makes room for `records` more records and `more` more bytes by sweeping expired records, and
   * nothing else: a completed record inside its window is an answer a retry is owed, and a record
   * in flight belongs to a running handler. False when that is not enough.
   */
  function makeRoom(records: number, more: number, keep?: MemoryRecord): boolean {
    if (fits(records, more)) return true;
    sweepIfDue(keep);
    return fits(records, more);
  }

  /**
   * The refusal, naming the bound reached (the message is the same for every refusal of that bound,
   * so the logger's rate limit folds them into one line). Retry-After: when the earliest record
   * ends, within 1 s to 60 s (a release, or a shorter window, may make room sooner).
   */
  function full(bound: string, what: string): StoreFullError {
    refused++;
    const retryAfterMs = Math.min(60_000, Math.max(1000, nextExpiry - now()));
    return new StoreFullError(
      `memory store is full (${bound}): ${what}; it never forgets an answer inside its window to make room, so a new key waits until a record's window ends or a claim is released (raise the bound, or use a shared store)`,
      retryAfterMs,
    );
  }
  const boundReached = () => (size + 1 > maxRecords ? `maxRecords = ${maxRecords}` : `maxBytes = ${maxBytes}`);

  /** Room for a new record in its scope and in the store, sweeping first when something may have expired. */
  function admit(fresh: MemoryRecord): StoreFullError | undefined {
    const inScope = () => scopes.get(fresh.scope)?.size ?? 0;
    if (inScope() >= maxRecordsPerScope) {
      sweepIfDue();
      if (inScope() >= maxRecordsPerScope) return full(`maxRecordsPerScope = ${maxRecordsPerScope}`, 'a new key of a scope at its quota is refused');
    }
    if (!makeRoom(1, fresh.bytes)) return full(boundReached(), 'a new key is refused');
    return undefined;
  }

  function owned(ref: RecordRef, token: string): MemoryRecord {
    const r = find(ref);
    if (!r || r.state !== 'in_flight' || r.token !== token) throw new LeaseLostError();
    return r;
  }

  const timer = sweepIntervalMs > 0 ? setInterval(() => sweep(), sweepIntervalMs) : undefined;
  timer?.unref?.();

  return {
    name: 'memory',
    maxResponseBytes,
    get size() {
      return size;
    },
    stats() {
      return { records: size, inFlight: size - completed, completed, bytes, refused };
    },
    async claim(ref: RecordRef, fingerprint: string, o: ClaimOptions): Promise<Claim> {
      checkRecordRef(ref);
      const t = now();
      const r = find(ref);
      if (r && !isExpired(r, t)) {
        if (r.fingerprint !== fingerprint) return { kind: 'mismatch' };
        if (r.state === 'completed') return { kind: 'completed', response: r.response! };
        if (r.leaseUntil > t) return { kind: 'in_flight', retryAfterMs: r.leaseUntil - t };
        r.token = newOwnerToken();
        r.leaseUntil = t + o.leaseMs;
        r.updatedAt = t;
        r.attempt++;
        return { kind: 'acquired', token: r.token, takeover: true, resumeFrom: r.recoveryPoint, recoveryData: r.recoveryData };
      }
      // Past its window the old record is gone for every purpose: the new one replaces it.
      if (r) remove(r);
      const token = newOwnerToken();
      const fresh = new MemoryRecord(ref.scope, ref.key, fingerprint, token, t + o.leaseMs, t + o.windowMs, t, t);
      fresh.bytes = inFlightBytes(fresh);
      const refusal = admit(fresh);
      if (refusal !== undefined) throw refusal;
      insert(fresh);
      return { kind: 'acquired', token, takeover: false };
    },
    async renew(ref, token, leaseMs) {
      checkRecordRef(ref);
      const r = find(ref);
      if (!r || r.state !== 'in_flight' || r.token !== token) return false;
      const t = now();
      r.leaseUntil = t + leaseMs;
      r.updatedAt = t;
      mayExpireFrom(r); // a lease given back (0 ms) may end the record sooner
      return true;
    },
    async checkpoint(ref, token, point, data) {
      checkRecordRef(ref);
      const r = owned(ref, token);
      const before = { point: r.recoveryPoint, data: r.recoveryBytes };
      r.recoveryPoint = point;
      r.recoveryBytes = data === undefined ? undefined : serialize(data);
      const n = inFlightBytes(r);
      if (n > r.bytes && !makeRoom(0, n - r.bytes, r)) {
        r.recoveryPoint = before.point;
        r.recoveryBytes = before.data;
        throw full(`maxBytes = ${maxBytes}`, 'the checkpoint was not kept (the earlier one stays)');
      }
      bytes += n - r.bytes;
      r.bytes = n;
      r.updatedAt = now();
    },
    async complete(ref, token, response) {
      checkRecordRef(ref);
      const r = owned(ref, token);
      let fitted = fitResponse(response, maxResponseBytes);
      let more = responseBytes(fitted);
      // The handler has run: its result is never refused. When sweeping cannot make room for the
      // body, the record keeps status and headers and says the body was omitted.
      if (!makeRoom(0, more, r) && fitted.body !== null) {
        fitted = { status: fitted.status, headers: fitted.headers, body: null, bodyOmitted: true };
        more = responseBytes(fitted);
        makeRoom(0, more, r);
      }
      r.complete(fitted);
      r.updatedAt = now();
      bytes += more;
      r.bytes += more;
      completed++;
      mayExpireFrom(r); // completed, it ends with its window, which may be before its lease
    },
    async release(ref, token) {
      checkRecordRef(ref);
      remove(owned(ref, token));
    },
    async get(ref): Promise<IdempotencyRecord | undefined> {
      checkRecordRef(ref);
      const r = find(ref);
      return r && toRecord(r);
    },
    async listAbandoned(limit = 100) {
      const max = checkInteger('limit', limit, { default: 100, min: 1 });
      const t = now();
      const found = [...all()].filter((r) => r.state === 'in_flight' && r.leaseUntil <= t && r.expiresAt > t);
      return found.sort((a, b) => a.leaseUntil - b.leaseUntil).slice(0, max).map(toRecord);
    },
    async reap(limit = 1000) {
      return sweep(limit);
    },
    admin: memoryAdmin({ now, records: all, find, remove, toRecord }),
    close() {
      if (timer) clearInterval(timer);
    },
  };
}

function toRecord(r: MemoryRecord): IdempotencyRecord {
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
