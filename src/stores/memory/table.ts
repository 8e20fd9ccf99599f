/**
 * What the memory store holds: its records by scope and key, what it counts of them, and the
 * bounds it keeps (`maxRecords`, `maxRecordsPerScope`, `maxBytes`) by sweeping expired records,
 * never by dropping a live one.
 */
import { LeaseLostError, StoreFullError } from '../../core/errors.js';
import type { RecordRef } from '../../core/store.js';
import type { MemoryRecord } from './record.js';
import { SlotList } from '../../core/slot-list.js';

export interface MemoryBounds {
  readonly maxRecords: number;
  readonly maxRecordsPerScope: number;
  readonly maxBytes: number;
}

export class MemoryTable {
  // Scope, then key: no joined string to build on each operation, nor to keep per record.
  private readonly scopes = new Map<string, Map<string, MemoryRecord>>();
  /**
   * The records in flight: what `listAbandoned` and `endLeasesOf` walk, so that their cost follows
   * the requests running, not the answers kept. One add per new record and one delete when
   * it completes or goes; a take-over or a renewal does not touch it.
   */
  private readonly running = new SlotList<MemoryRecord>();
  completed = 0;
  size = 0;
  bytes = 0;
  refused = 0;
  // No record can be expired before this time (a lower bound of `expiryOf` over the records): a
  // store full of live records then refuses a claim without walking them all. Lowered whenever a
  // record's expiry may move earlier (a new record, a completion, a lease given back); set exactly
  // by every full sweep.
  private nextExpiry = Infinity;

  constructor(
    private readonly bounds: MemoryBounds,
    private readonly now: () => number,
  ) {}

  find(ref: RecordRef): MemoryRecord | undefined {
    return this.scopes.get(ref.scope)?.get(ref.key);
  }

  isExpired(r: MemoryRecord, t: number): boolean {
    return expiryOf(r) <= t;
  }

  mayExpireFrom(r: MemoryRecord): void {
    this.nextExpiry = Math.min(this.nextExpiry, expiryOf(r));
  }

  insert(r: MemoryRecord): void {
    let keys = this.scopes.get(r.scope);
    if (keys === undefined) this.scopes.set(r.scope, (keys = new Map()));
    keys.set(r.key, r);
    if (r.state === 'in_flight') this.running.add(r);
    this.size++;
    this.bytes += r.bytes;
    this.mayExpireFrom(r);
  }

  remove(r: MemoryRecord): void {
    const keys = this.scopes.get(r.scope);
    if (keys === undefined || keys.get(r.key) !== r) return;
    keys.delete(r.key);
    if (keys.size === 0) this.scopes.delete(r.scope);
    this.size--;
    this.bytes -= r.bytes;
    if (r.state === 'completed') this.completed--;
    else this.running.delete(r);
  }

  /** `r` (in flight, held here) was just completed: it leaves the records in flight. */
  completedRecord(r: MemoryRecord): void {
    this.completed++;
    this.running.delete(r);
    this.mayExpireFrom(r); // completed, it ends with its window, which may be before its lease
  }

  *all(): Generator<MemoryRecord> {
    for (const keys of this.scopes.values()) yield* keys.values();
  }

  /** The records in flight, whatever their lease. */
  inFlight(): Iterable<MemoryRecord> {
    return this.running.snapshot();
  }

  /** Removes expired records, at most `limit`; never `keep` (a record an operation is writing). */
  sweep(limit = Infinity, keep?: MemoryRecord): number {
    const t = this.now();
    let removed = 0;
    let earliest = Infinity;
    for (const r of this.all()) {
      if (removed >= limit) return removed; // a partial pass: `nextExpiry` stays a lower bound
      if (r !== keep && this.isExpired(r, t)) {
        this.remove(r);
        removed++;
      } else {
        earliest = Math.min(earliest, expiryOf(r));
      }
    }
    this.nextExpiry = earliest;
    return removed;
  }

  /**
   * Makes room for `records` more records and `more` more bytes by sweeping expired records, and
   * nothing else: a completed record inside its window is an answer a retry is owed, and a record
   * in flight belongs to a running handler. False when that is not enough.
   */
  makeRoom(records: number, more: number, keep?: MemoryRecord): boolean {
    if (this.fits(records, more)) return true;
    this.sweepIfDue(keep);
    return this.fits(records, more);
  }

  /**
   * The refusal, naming the bound reached (the message is the same for every refusal of that bound,
   * so the logger's rate limit folds them into one line). Retry-After: when the earliest record
   * ends, within 1 s to 60 s (a release, or a shorter window, may make room sooner).
   */
  full(bound: string, what: string): StoreFullError {
    this.refused++;
    const retryAfterMs = Math.min(60_000, Math.max(1000, this.nextExpiry - this.now()));
    return new StoreFullError(
      `memory store is full (${bound}): ${what}; it never forgets an answer inside its window to make room, so a new key waits until a record's window ends or a claim is released (raise the bound, or use a shared store)`,
      retryAfterMs,
    );
  }

  /** Room for a new record in its scope and in the store, sweeping first when something may have expired. */
  admit(fresh: MemoryRecord): StoreFullError | undefined {
    const { maxRecords, maxRecordsPerScope, maxBytes } = this.bounds;
    const inScope = () => this.scopes.get(fresh.scope)?.size ?? 0;
    if (inScope() >= maxRecordsPerScope) {
      this.sweepIfDue();
      if (inScope() >= maxRecordsPerScope) return this.full(`maxRecordsPerScope = ${maxRecordsPerScope}`, 'a new key of a scope at its quota is refused');
    }
    if (!this.makeRoom(1, fresh.bytes)) return this.full(this.size + 1 > maxRecords ? `maxRecords = ${maxRecords}` : `maxBytes = ${maxBytes}`, 'a new key is refused');
    return undefined;
  }

  /** The record `token` owns, or `LeaseLostError`. */
  owned(ref: RecordRef, token: string): MemoryRecord {
    const r = this.find(ref);
    if (!r || r.state !== 'in_flight' || r.token !== token) throw new LeaseLostError();
    return r;
  }

  private fits(records: number, more: number): boolean {
    return this.size + records <= this.bounds.maxRecords && this.bytes + more <= this.bounds.maxBytes;
  }

  /** Sweeps when a record may have expired since the last sweep; otherwise there is nothing to gain. */
  private sweepIfDue(keep?: MemoryRecord): void {
    if (this.now() >= this.nextExpiry) this.sweep(Infinity, keep);
  }
}

// A record in flight lives as long as its lease even past its window (its owner may still complete).
function expiryOf(r: MemoryRecord): number {
  return r.state === 'completed' ? r.expiresAt : Math.max(r.expiresAt, r.leaseUntil);
}
