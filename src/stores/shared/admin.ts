/**
 * What the stores' admin capabilities (`store.admin`, used by the `idemkit` command) share: the
 * checks of a filter, the token prefix, and, for stores that read their records one by one
 * (memory, Redis), list and stats computed over a pass of every record.
 */
import { InvalidOptionError } from '../../core/errors.js';
import { checkInteger } from '../../core/option-reader.js';
import type { PurgeOutcome, RecordDetails, RecordFilter, RecordRef, RecordStats, RecordSummary, StoreAdmin, StoredResponse } from '../../core/store.js';
import { checkRecordRef } from '../../core/validate.js';

/** How much of an owner token an operator sees. */
export const TOKEN_PREFIX_LENGTH = 8;

export const tokenPrefix = (token: string | null | undefined): string => (token ?? '').slice(0, TOKEN_PREFIX_LENGTH);

export interface CheckedFilter {
  readonly state: 'in_flight' | 'completed' | undefined;
  readonly scope: string | undefined;
  readonly olderThanMs: number | undefined;
  readonly limit: number;
}

/** The filter with its default, each field checked (naming it) before the backend is touched. */
export function checkFilter(filter: RecordFilter = {}): CheckedFilter {
  const { state, scope } = filter;
  if (state !== undefined && state !== 'in_flight' && state !== 'completed') {
    throw new InvalidOptionError('state', `expected 'in_flight' or 'completed', got ${JSON.stringify(state)}`);
  }
  if (scope !== undefined) checkRecordRef({ scope, key: '' });
  return {
    state,
    scope,
    olderThanMs: checkInteger('olderThanMs', filter.olderThanMs, { default: undefined }),
    limit: checkInteger('limit', filter.limit, { default: 100, min: 1 }),
  };
}

/** The counts a SQL store's stats query returns, as numbers, on the store's clock `now`. */
export interface StatsCounts {
  readonly now: number;
  readonly total: number;
  readonly inFlight: number;
  readonly abandoned: number;
  readonly completed: number;
  readonly bodyBytes: number;
}

/** `RecordStats` from a SQL store's counts: what is neither in flight nor completed is expired. */
export function statsOf(c: StatsCounts, oldestInFlight: RecordStats['oldestInFlight'], storageBytes?: number): RecordStats {
  const { now, inFlight, abandoned, completed, bodyBytes } = c;
  const expired = c.total - inFlight - completed;
  return { now, inFlight, abandoned, completed, expired, oldestInFlight, bodyBytes, ...(storageBytes === undefined ? {} : { storageBytes }) };
}

export const isExpiredAt = (r: { state: string; leaseUntil: number; expiresAt: number }, now: number) =>
  r.expiresAt <= now && (r.state === 'completed' || r.leaseUntil <= now);

export function summarize(r: RecordDetails): RecordSummary {
  const body = r.response?.body;
  return {
    scope: r.scope,
    key: r.key,
    state: r.state,
    fingerprint: r.fingerprint,
    leaseUntil: r.leaseUntil,
    expiresAt: r.expiresAt,
    expired: r.expired,
    attempt: r.attempt,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    recoveryPoint: r.recoveryPoint,
    status: r.response?.status,
    bodyBytes: body == null ? null : body.byteLength,
  };
}

/** What a record's details carry beyond its summary's fields. */
export interface DetailsBeyondSummary {
  readonly recoveryData: unknown;
  readonly response: StoredResponse | undefined;
  readonly tokenPrefix: string;
  readonly now: number;
}

/** A record's details from its summary (the fields they share) and the rest: `summarize`'s inverse. */
export function detailsOf(s: RecordSummary, rest: DetailsBeyondSummary): RecordDetails {
  return {
    scope: s.scope,
    key: s.key,
    state: s.state,
    fingerprint: s.fingerprint,
    leaseUntil: s.leaseUntil,
    expiresAt: s.expiresAt,
    recoveryPoint: s.recoveryPoint,
    recoveryData: rest.recoveryData,
    response: rest.response,
    tokenPrefix: rest.tokenPrefix,
    attempt: s.attempt,
    now: rest.now,
    expired: s.expired,
    createdAt: s.createdAt,
    updatedAt: s.updatedAt,
  };
}

/** Listing order: oldest lease first, then scope and key, so a listing is stable. */
export function byAge(a: RecordSummary, b: RecordSummary): number {
  return a.leaseUntil - b.leaseUntil || compare(a.scope, b.scope) || compare(a.key, b.key);
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Whether a record passes the filter, on the store's clock `now`. */
export function matches(r: RecordSummary, f: CheckedFilter, now: number): boolean {
  if (f.state !== undefined && r.state !== f.state) return false;
  if (f.scope !== undefined && r.scope !== f.scope) return false;
  if (f.olderThanMs !== undefined && ageFrom(r) > now - f.olderThanMs) return false;
  return true;
}

/**
 * What `olderThanMs` measures a record's age from: its creation, or, for a record whose creation
 * time is unknown (written by an older idemkit), the end of its lease, as before the stores kept one.
 */
export const ageFrom = (r: { createdAt: number | null; leaseUntil: number }): number => r.createdAt ?? r.leaseUntil;

/** Counts for `stats`, one record at a time. */
export class StatsTally {
  private inFlight = 0;
  private abandoned = 0;
  private completed = 0;
  private expired = 0;
  private bodyBytes = 0;
  private oldest: RecordStats['oldestInFlight'] = null;

  add(r: RecordSummary, now: number): void {
    this.bodyBytes += r.bodyBytes ?? 0;
    if (r.expired) this.expired++;
    else if (r.state === 'completed') this.completed++;
    else {
      this.inFlight++;
      if (r.leaseUntil <= now) this.abandoned++;
      if (this.oldest === null || r.leaseUntil < this.oldest.leaseUntil) this.oldest = { scope: r.scope, key: r.key, leaseUntil: r.leaseUntil };
    }
  }

  result(now: number, storageBytes?: number): RecordStats {
    return {
      now,
      inFlight: this.inFlight,
      abandoned: this.abandoned,
      completed: this.completed,
      expired: this.expired,
      oldestInFlight: this.oldest,
      bodyBytes: this.bodyBytes,
      ...(storageBytes === undefined ? {} : { storageBytes }),
    };
  }
}

/** A store that reads its records one by one (memory, Redis): list and stats walk all of them. */
export interface RecordWalker {
  /** The store's clock. */
  now(): Promise<number>;
  /** Every record, summarized. */
  each(): AsyncIterable<RecordSummary>;
  inspect(ref: RecordRef): Promise<RecordDetails | undefined>;
  purge(ref: RecordRef, force: boolean): Promise<PurgeOutcome>;
  /** Bytes the backend holds for the records, if it can tell; added up by `stats`. */
  storageBytes?(record: RecordSummary): number;
}

export function walkingAdmin(walker: RecordWalker): StoreAdmin {
  return {
    async inspect(ref) {
      checkRecordRef(ref);
      return walker.inspect(ref);
    },
    async list(filter) {
      const f = checkFilter(filter);
      const now = await walker.now();
      const found: RecordSummary[] = [];
      for await (const s of walker.each()) if (matches(s, f, now)) found.push(s);
      return found.sort(byAge).slice(0, f.limit);
    },
    async stats() {
      const now = await walker.now();
      const tally = new StatsTally();
      let storage: number | undefined = walker.storageBytes ? 0 : undefined;
      for await (const r of walker.each()) {
        tally.add(r, now);
        if (storage !== undefined) storage += walker.storageBytes!(r);
      }
      return tally.result(now, storage);
    },
    async purge(ref, options = {}) {
      checkRecordRef(ref);
      return walker.purge(ref, options.force === true);
    },
  };
}
