/** One record per (scope, key): scope is the tenant, never chosen by the client alone. */
export interface RecordRef {
  readonly scope: string;
  readonly key: string;
}

/** The response kept for replay. Headers are already filtered through the replay allowlist. */
export interface StoredResponse {
  readonly status: number;
  readonly headers: ReadonlyArray<readonly [name: string, value: string]>;
  /** The body, byte for byte; empty for 204 and friends; `null` when omitted. */
  readonly body: Uint8Array | null;
  /** True when the body exceeded the store's `maxResponseBytes` and was not kept. */
  readonly bodyOmitted: boolean;
}

export interface ClaimOptions {
  /** How long the claim is trusted before another request may take over. */
  readonly leaseMs: number;
  /** How long the key is remembered after the claim (the retention window). */
  readonly windowMs: number;
  /**
   * The claiming instance's incarnation (`Instance.incarnation`, 16 hex characters): the owner
   * token of an acquired claim starts with it, so that `endLeasesOf` finds it. Absent without an
   * instance identity: the token is all fresh random bits.
   */
  readonly incarnation?: string | undefined;
}

export type Claim =
  | {
      readonly kind: 'acquired';
      /** 128 random bits; fences checkpoint, complete and release. */
      readonly token: string;
      /** True when an earlier owner's lease ran out and this claim took the record over. */
      readonly takeover: boolean;
      /** The last recovery point the earlier owner reached, when taking over. */
      readonly resumeFrom?: string | undefined;
      readonly recoveryData?: unknown;
    }
  | { readonly kind: 'completed'; readonly response: StoredResponse }
  | {
      readonly kind: 'in_flight';
      /**
       * What is left of the owner's lease, in ms on the store's clock (> 0): when a retry could take
       * the record over if the owner stops renewing. Not a retry hint (the engine's `retryAfterMs`
       * option is one); the name is the contract's since its first version.
       */
      readonly retryAfterMs: number;
      /**
       * How long ago the record last changed, in ms on the store's clock (≥ 0): the claim or
       * take-over that made its owner, a renewal, a checkpoint (the record's `updatedAt`, read in
       * the same atomic claim). A live owner renews every third of its lease, so a value well past
       * that says the owner stopped renewing: crashed, frozen or cut off (the engine's 409 says so,
       * docs/semantics.md). A duration, never a time: instances with skewed clocks read it alike.
       * `undefined` when unknown: a record written before the store kept its times, or a store
       * written for an earlier idemkit (the engine then takes the owner for alive).
       */
      readonly renewedMsAgo?: number | undefined;
    }
  | { readonly kind: 'mismatch' };

export type RecordState = 'in_flight' | 'completed';

export interface IdempotencyRecord {
  readonly scope: string;
  readonly key: string;
  readonly state: RecordState;
  readonly fingerprint: string;
  /** Epoch ms on the store's clock. */
  readonly leaseUntil: number;
  readonly expiresAt: number;
  readonly recoveryPoint?: string | undefined;
  readonly recoveryData?: unknown;
  readonly response?: StoredResponse | undefined;
  /**
   * When the record was claimed, epoch ms on the store's clock. A take-over keeps it (how old the
   * request is); a claim after the window ended starts a new record, and a new time. `undefined`
   * when unknown: a record written before the store kept it (an older idemkit), or a store that
   * keeps no times (every built-in store keeps them).
   */
  readonly createdAt?: number | undefined;
  /**
   * The record's last change, epoch ms on the store's clock: a claim or take-over, a renewal, a
   * checkpoint, the completion. Reads (a replay, an in-flight or mismatch answer, `get`) leave it.
   * `undefined` when unknown, as `createdAt`.
   */
  readonly updatedAt?: number | undefined;
}

/**
 * The one store contract. Every operation that changes a record is a single atomic operation on
 * the backend, and decides with the store's clock. Fenced operations throw `LeaseLostError` when
 * `token` is not the record's current owner token.
 */
export interface IdempotencyStore {
  /** A short name for logs and benchmark tables. */
  readonly name: string;
  /** Response bodies larger than this are not kept (the record marks them omitted). */
  readonly maxResponseBytes: number;
  claim(ref: RecordRef, fingerprint: string, options: ClaimOptions): Promise<Claim>;
  /** Extends the lease of an in-flight record; false when the token is no longer current. */
  renew(ref: RecordRef, token: string, leaseMs: number): Promise<boolean>;
  checkpoint(ref: RecordRef, token: string, point: string, data?: unknown): Promise<void>;
  complete(ref: RecordRef, token: string, response: StoredResponse): Promise<void>;
  /** Deletes an in-flight record: nothing happened, so the key may be used again. */
  release(ref: RecordRef, token: string): Promise<void>;
  get(ref: RecordRef): Promise<IdempotencyRecord | undefined>;
  /** Deletes records whose window has passed, at most `limit` of them; returns how many. */
  reap(limit?: number): Promise<number>;
}

/** A transaction opened by a SQL store, in which the business writes and the completion commit together. */
export interface StoreTransaction<Tx> {
  /** What the handler writes through (a better-sqlite3 Database, a pg client, …). */
  readonly tx: Tx;
  /** Fenced completion inside the transaction; throws `LeaseLostError` when the token is stale. */
  complete(ref: RecordRef, token: string, response: StoredResponse): Promise<void>;
  /** Fenced checkpoint inside the transaction: it commits, or rolls back, with the business writes. */
  checkpoint(ref: RecordRef, token: string, point: string, data?: unknown): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

export interface TransactionalStore<Tx = unknown> extends IdempotencyStore {
  beginTransaction(): Promise<StoreTransaction<Tx>>;
  /**
   * Throws (`InvalidOptionError`, naming the store option) when `beginTransaction` could not work as
   * configured; transactional mode calls it when it is mounted, so the error comes before any request.
   */
  checkTransactions?(): void;
}

/**
 * The transaction object a store's transactions hand out (`ctx.tx`, a phase's `tx`): a
 * `pg.PoolClient` for a PostgreSQL store over a pg Pool, the better-sqlite3 `Database` for a
 * SQLite store, `never` for a store without transactions. Adapters derive `ctx.tx` from it, so a
 * handler's transaction type follows the store it was given.
 */
export type TxOf<S> = S extends TransactionalStore<infer Tx> ? Tx : never;

export function isTransactionalStore(store: IdempotencyStore): store is TransactionalStore {
  return typeof (store as Partial<TransactionalStore>).beginTransaction === 'function';
}

/**
 * An optional store capability, for a completer: the records whose owner is gone (in flight, lease
 * run out, window not yet over), oldest lease first, at most `limit` of them. A read, not a claim:
 * whoever acts on one must still claim it, and the claim decides between racing completers and retries.
 */
export interface AbandonedRecords {
  listAbandoned(limit?: number): Promise<IdempotencyRecord[]>;
}

export function canListAbandoned<S extends IdempotencyStore>(store: S): store is S & AbandonedRecords {
  return typeof (store as Partial<AbandonedRecords>).listAbandoned === 'function';
}

/**
 * An optional store capability, for instance identities (`startInstance`): ends now the leases of
 * the in-flight records an incarnation claimed (their owner token starts with `incarnation`), as
 * `renew(…, 0)` would, so a retry or a completer takes each over at once, from its recovery point.
 * Records it no longer owns (taken over, completed, released) are untouched: the token decides.
 * Returns how many leases it ended. Only for an incarnation known to be gone: its instance's
 * registration ran out and a new incarnation of the same instance holds it.
 */
export interface IncarnationLeases {
  endLeasesOf(incarnation: string): Promise<number>;
}

export function canEndLeasesOf<S extends IdempotencyStore>(store: S): store is S & IncarnationLeases {
  return typeof (store as Partial<IncarnationLeases>).endLeasesOf === 'function';
}

/** A clock in epoch milliseconds; injectable so tests can move time. */
export type Clock = () => number;

export const systemClock: Clock = () => Date.now();

/** Default for `maxResponseBytes` of the built-in stores. */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

/**
 * Applies a store's size limit: a body over the limit is never truncated; it is dropped and the
 * record says so, while status and headers are kept.
 */
export function fitResponse(response: StoredResponse, maxBytes: number): StoredResponse {
  if (response.body === null || response.body.byteLength <= maxBytes) return response;
  return { status: response.status, headers: response.headers, body: null, bodyOmitted: true };
}

/**
 * What an operator sees of one record (`idemkit inspect`): the record as `get` returns it, and
 * what the store keeps beside it. Times are epoch ms on the store's clock; the record's
 * `createdAt` and `updatedAt` are `null` here when unknown (where `get` leaves them `undefined`),
 * so that they stay in its JSON.
 */
export interface RecordDetails extends Omit<IdempotencyRecord, 'createdAt' | 'updatedAt'> {
  /**
   * The first 8 characters of the owner token, never all of it: the full token would let whoever
   * reads it complete or release the record. Empty when the store no longer keeps the token.
   */
  readonly tokenPrefix: string;
  /** Claims of the record in its window: 1, plus one per take-over. */
  readonly attempt: number;
  /** The store's clock when the record was read. */
  readonly now: number;
  /** Past its window with no live lease: claims treat it as absent, and `reap` deletes it. */
  readonly expired: boolean;
  /** `IdempotencyRecord.createdAt` (how old the request is), `null` when unknown. */
  readonly createdAt: number | null;
  /** `IdempotencyRecord.updatedAt` (the record's last change), `null` when unknown. */
  readonly updatedAt: number | null;
}

/** One line of a listing (`idemkit list`): the record without its recovery data, headers and body. */
export interface RecordSummary
  extends Pick<RecordDetails, 'scope' | 'key' | 'state' | 'fingerprint' | 'leaseUntil' | 'expiresAt' | 'expired' | 'attempt' | 'createdAt' | 'updatedAt' | 'recoveryPoint'> {
  /** The stored status of a completed record. */
  readonly status?: number | undefined;
  /** The stored body's length; `null` when it was omitted (over `maxResponseBytes`) or not yet stored. */
  readonly bodyBytes: number | null;
}

export interface RecordFilter {
  readonly state?: RecordState | undefined;
  readonly scope?: string | undefined;
  /**
   * Only records claimed at least this many ms ago (`createdAt`), on the store's clock. A record
   * whose creation time is unknown (written by an idemkit that did not keep it) is judged by its
   * lease instead: it counts when its lease ended at least this long ago.
   */
  readonly olderThanMs?: number | undefined;
  /** At most this many, oldest lease first. @default 100 */
  readonly limit?: number | undefined;
}

export interface RecordStats {
  /** The store's clock when counted. */
  readonly now: number;
  /** In flight and not expired (including abandoned ones). */
  readonly inFlight: number;
  /** Of those, how many have a lease that ran out (owner gone, window open: a completer's work). */
  readonly abandoned: number;
  /** Completed and not expired: what replays answer from. */
  readonly completed: number;
  /** Past their window, waiting for `reap` (or, in Redis, for their TTL). */
  readonly expired: number;
  /** The live in-flight record whose lease ended first (the longest-gone owner), if any. */
  readonly oldestInFlight: { readonly scope: string; readonly key: string; readonly leaseUntil: number } | null;
  /** Bytes of stored response bodies. */
  readonly bodyBytes: number;
  /** The backend's own measure of what the records take (table and indexes, or Redis values), where it has one. */
  readonly storageBytes?: number | undefined;
}

/** What `purge` did: deleted it, found nothing, or refused an in-flight record without `force`. */
export type PurgeOutcome = 'purged' | 'not_found' | 'in_flight';

/**
 * An operator's view of a store's records (the `idemkit` command). Reads decide on the store's
 * clock; none of it is on a request's path. `list` and `stats` may scan every record.
 */
export interface StoreAdmin {
  inspect(ref: RecordRef): Promise<RecordDetails | undefined>;
  list(filter?: RecordFilter): Promise<RecordSummary[]>;
  stats(): Promise<RecordStats>;
  /**
   * Deletes the record of `ref`, atomically refusing one in flight unless `force` (its owner may
   * still be running; deleting it lets a retry run the work again).
   */
  purge(ref: RecordRef, options?: { readonly force?: boolean }): Promise<PurgeOutcome>;
}

/** An optional store capability: `store.admin`. Every built-in store has it. */
export interface AdministrableStore {
  readonly admin: StoreAdmin;
}

export function hasAdmin<S extends IdempotencyStore>(store: S): store is S & AdministrableStore {
  const admin = (store as Partial<AdministrableStore>).admin;
  return typeof admin === 'object' && admin !== null && typeof admin.inspect === 'function';
}
