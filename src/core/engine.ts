import {
  ExecutionTimeoutHttpError,
  IdemkitError,
  IdempotencyHttpError,
  InvalidRecordRefError,
  InvalidScopeError,
  KeyInFlightError,
  KeyMismatchError,
  LeaseLostError,
  LeaseLostHttpError,
  MissingKeyError,
  StoreUnavailableHttpError,
  TransactionEndedError,
} from './errors.js';
import type { FingerprintInput } from './fingerprint.js';
import { fingerprint } from './fingerprint.js';
import { Deadlines } from './deadlines.js';
import { LeaseKeeper } from './lease-keeper.js';
import { parseIdempotencyKey } from './key.js';
import type { IdempotencyOptions, ResolvedOptions } from './options.js';
import { resolveOptions } from './options.js';
import type { Claim, ClaimOptions, RecordRef, StoreTransaction, StoredResponse, TransactionalStore } from './store.js';
import { isTransactionalStore } from './store.js';
import type { ResponseHeaders } from './response.js';
import { REPRESENTATION_HEADERS, toStoredResponse, toStoredResponseFromRecord } from './response.js';
import { isReservedScope } from './namespaces.js';
import { fenceHandle } from './tx-fence.js';

/** The request facts the engine needs, read by the adapter. */
export type RequestFacts = FingerprintInput;

/** A request body as an adapter read it (`RequestReader.readBody`). */
export interface RequestBody<Req = unknown> {
  /** The body bytes (empty when only a parsed value is left). */
  readonly body: Uint8Array;
  /** The parsed body, when the framework parsed it (see `FingerprintInput.parsedJson`). */
  readonly parsedJson?: { readonly value: unknown };
  /**
   * The request to use from here on, when reading the body replaced it (a fetch `Request`, whose
   * body can be read once): the scope hook and the handler get this one.
   */
  readonly request?: Req;
}

/**
 * How one framework's request is read: written once per adapter (or per route), not per request,
 * so that `decide` allocates nothing to learn about a request.
 */
export interface RequestReader<Req, Body extends RequestBody<Req> = RequestBody<Req>> {
  method(request: Req): string;
  /** Every occurrence of a request header; `name` is lower-case. */
  header(request: Req, name: string): readonly string[] | string | null | undefined;
  /** The path with its query string, as received. */
  path(request: Req): string;
  contentType(request: Req): string | null | undefined;
  /**
   * Reads the body, up to `limit` bytes: throws `BodyTooLargeError` past it (answered 413). Called
   * only for a request that carries a key. A plain value is used as it is, without waiting a turn.
   */
  readBody(request: Req, limit: number): Body | PromiseLike<Body>;
  /** Overrides the engine's `required` (a Fastify route's own setting). */
  readonly required?: boolean;
}

/**
 * The engine's one answer to a request, from `decide`. Errors the client caused or the store
 * reported arrive as `reject`, never thrown; only unexpected ones (a bug, a scope hook that threw
 * something else) reject the promise, and the adapter hands those to its framework.
 */
export type Decision<Req = unknown, Body extends RequestBody<Req> = RequestBody<Req>> =
  /**
   * Run the handler unprotected: the method is not covered, the request has no key and none is
   * required, or (`failOpen`) the store is down. After a fail-open the body was read: `body` is it.
   */
  | { readonly kind: 'pass'; readonly failOpen: false; readonly body: undefined }
  | { readonly kind: 'pass'; readonly failOpen: true; readonly body: Body }
  /** Send this stored answer (`replayHeaderList`/`replayHeaderRecord`, `replayBody`). */
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  /** Send this problem (400 key, 413, 409, 422, 503, invalid scope…); nothing was claimed. */
  | { readonly kind: 'reject'; readonly error: IdempotencyHttpError }
  /** Run the handler under `execution`, then `execution.finish` with its answer. */
  | { readonly kind: 'execute'; readonly execution: Execution; readonly body: Body };

/** @deprecated Use `Decision` (from `IdempotencyEngine.decide`). */
export type Admission =
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  | { readonly kind: 'reject'; readonly error: IdempotencyHttpError }
  | { readonly kind: 'execute'; readonly execution: Execution }
  /** The store is down and `failOpen` is set: run the handler without protection. */
  | { readonly kind: 'unprotected' };

/** The one answer for every request that passes without a key: shared, already resolved. */
const PASSED: Promise<{ readonly kind: 'pass'; readonly failOpen: false; readonly body: undefined }> = Promise.resolve(
  Object.freeze({ kind: 'pass', failOpen: false, body: undefined } as const),
);

/** Tells, at each lease-keeper tick, whether the answer went out without `finish` (a hijacked reply). */
export type AbandonedCheck<Target> = (target: Target) => boolean;

/** What the handler sees of its idempotency context. */
export interface IdempotencyContext<Tx = unknown> {
  readonly key: string;
  readonly scope: string;
  /** True when an earlier owner's lease ran out and this request took over. */
  readonly takeover: boolean;
  /** The last recovery point an earlier owner reached; resume from there. */
  readonly resumeFrom: string | undefined;
  readonly recoveryData: unknown;
  /**
   * The store transaction, in transactional mode: the driver's own object (a pg client, a mysql2
   * connection, a better-sqlite3 Database) behind a fence that refuses every call once the request
   * has ended (answered, rolled back, or past `maxExecutionMs`) with `TransactionEndedError`.
   */
  readonly tx: Tx;
  /** Records a recovery point (fenced by this request's owner token). */
  checkpoint(point: string, data?: unknown): Promise<void>;
  /**
   * Declares that nothing happened (validation failed inside the handler): the claim is released
   * and the response is not stored, so the key can be used again.
   */
  discard(): void;
  /**
   * Opens a store transaction of this request's own, for one recovery phase (idemkit/patterns
   * `definePhases`): its `checkpoint` is fenced by the owner token and commits with the writes.
   * Refused in transactional mode (the whole request is already one transaction, which a phase
   * commit would break) and on a store without transactions.
   */
  beginTransaction(): Promise<FencedTransaction<Tx>>;
  /**
   * Ends the request without a stored result but keeps its recovery points: the response is sent
   * and not stored, the record stays in flight and its lease is given up at once, so a retry (or a
   * completer) resumes from the last recovery point. Releasing instead would forget committed phases.
   */
  suspend(): void;
}

/** A store transaction bound to one claimed record: `checkpoint` is fenced by its owner token. */
export interface FencedTransaction<Tx = unknown> {
  readonly tx: Tx;
  /** Records a recovery point inside the transaction; throws `LeaseLostError` when the token is stale. */
  checkpoint(point: string, data?: unknown): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

const WAIT_POLL_MIN_MS = 10;
const WAIT_POLL_MAX_MS = 250;

/** What the deprecated `Execution.watchResponse` reads of a Node ServerResponse. */
export interface WatchedResponse {
  readonly writableFinished: boolean;
}

/** The lease keeper's ticks per lease. */
const LEASE_TICKS = 3;

/**
 * The framework-neutral decision matrix. An adapter asks `decide` about each request, with a
 * `RequestReader` for its framework, and then passes it through, replays, rejects, or runs the
 * handler under the returned `Execution` and gives its answer to `execution.finish`.
 */
export class IdempotencyEngine<Req = unknown> {
  readonly options: ResolvedOptions<Req>;
  /**
   * Headers that describe the handler's representation (the replayed ones, Set-Cookie,
   * Content-Length, Content-Encoding): an adapter drops them when a problem replaces its answer.
   */
  readonly representationHeaders: readonly string[];
  private readonly headerName: string;
  private readonly keeper: LeaseKeeper;
  private readonly deadlines: Deadlines;
  private readonly claimOptions: ClaimOptions;

  constructor(options: IdempotencyOptions<Req>) {
    this.options = resolveOptions(options);
    this.claimOptions = Object.freeze({ leaseMs: this.options.leaseMs, windowMs: this.options.windowMs });
    this.deadlines = new Deadlines(this.options.storeTimeoutMs);
    this.headerName = this.options.header.toLowerCase();
    this.representationHeaders = Object.freeze([...this.options.replayHeaders, ...REPRESENTATION_HEADERS]);
    // Ticks every third of a lease: renews leases (unless renewLease is off), and asks each
    // adapter's check whether an answer went out without us (Execution.watch).
    this.keeper = new LeaseKeeper(Math.max(1, Math.floor(this.options.leaseMs / LEASE_TICKS)));
  }

  covers(method: string): boolean {
    return this.options.methods.has(method.toUpperCase());
  }

  /**
   * The key of a covered request, or undefined when it has none and none is required.
   * Throws `MissingKeyError` or `InvalidKeyError`.
   */
  parseKey(values: readonly string[] | string | null | undefined, required = this.options.required): string | undefined {
    const key = parseIdempotencyKey(values, this.options.header, this.options.keyPolicy);
    if (key === undefined && required) throw new MissingKeyError(this.options.header);
    return key;
  }

  /**
   * Answers one request: pass it through, replay, reject with a problem, or execute. A missing or
   * invalid key, a body over `maxBodyBytes`, a conflict, a mismatch, an outage are all `reject`s;
   * the promise rejects only for what idemkit did not expect (a scope hook that threw, a bug).
   */
  decide<Body extends RequestBody<Req>>(request: Req, reader: RequestReader<Req, Body>): Promise<Decision<Req, Body>> {
    const method = reader.method(request);
    if (!this.covers(method)) return PASSED;
    let key: string | undefined;
    let read: Body | PromiseLike<Body>;
    try {
      key = this.parseKey(reader.header(request, this.headerName), reader.required ?? this.options.required);
      if (key === undefined) return PASSED;
      read = reader.readBody(request, this.options.maxBodyBytes);
    } catch (error) {
      return error instanceof IdempotencyHttpError ? Promise.resolve({ kind: 'reject', error }) : Promise.reject(error as Error);
    }
    // The adapter awaits the claim's own promise: no async layer in between.
    return this.claim(request, key, method, reader, read);
  }

  /** @deprecated Use `decide`, which also parses the key and reads the body. */
  async admit(request: Req, key: string, facts: RequestFacts): Promise<Admission> {
    const given: RequestReader<Req, RequestFacts> = {
      method: () => facts.method,
      header: () => key,
      path: () => facts.path,
      contentType: () => facts.contentType,
      readBody: () => facts,
    };
    const decision = await this.claim(request, key, facts.method, given, facts);
    return decision.kind === 'pass' ? { kind: 'unprotected' } : decision;
  }

  private async claim<Body extends RequestBody<Req>>(
    request: Req,
    key: string,
    method: string,
    reader: RequestReader<Req, Body>,
    read: Body | PromiseLike<Body>,
  ): Promise<Decision<Req, Body>> {
    const { options } = this;
    let body: Body;
    let scope: string;
    try {
      // Most bodies and scope hooks are there at once (a body a parser already read, a tenant id
      // on the request): awaiting a plain value would still cost a turn.
      body = isPromiseLike(read) ? await read : read;
      const scoped = options.scope(body.request ?? request);
      scope = typeof scoped === 'string' ? scoped : await scoped;
    } catch (error) {
      // A body over the limit, or a problem the scope hook chose to throw.
      if (error instanceof IdempotencyHttpError) return { kind: 'reject', error };
      throw error;
    }
    if (typeof scope !== 'string') throw new TypeError('The `scope` option must return a string');
    // A lone surrogate cannot be stored as text losslessly (pg turns it into U+FFFD, so two
    // tenants would share records): such a scope is refused before anything is claimed.
    if (!scope.isWellFormed()) {
      return { kind: 'reject', error: new InvalidScopeError('the `scope` hook returned ill-formed UTF-16 (a lone surrogate)') };
    }
    // Scopes starting with U+001F hold idemkit's own records (consume-once messages): no request
    // may address them, whatever its tenant id is.
    if (isReservedScope(scope)) {
      return { kind: 'reject', error: new InvalidScopeError('the `scope` hook returned a scope that starts with U+001F, which idemkit reserves for its own records') };
    }
    const ref: RecordRef = { scope, key };
    const facts: RequestFacts = { method, path: reader.path(request), contentType: reader.contentType(request), body: body.body, parsedJson: body.parsedJson };
    const fp = fingerprint(facts, { fields: options.fingerprintFields });
    const deadline = Date.now() + options.waitTimeoutMs;
    let pollMs = WAIT_POLL_MIN_MS;
    for (;;) {
      let claim: Claim;
      try {
        claim = await this.deadlines.bound(
          options.store.claim(ref, fp, this.claimOptions),
          'claim',
          // The client already got its 503: a claim that lands later must not block its retry for a lease.
          (late) => {
            if (late.kind === 'acquired') options.store.release(ref, late.token).catch(options.onError);
          },
        );
      } catch (error) {
        // A scope the store cannot keep (too long for its column, say) is the request's problem,
        // not an outage: never a 503, and never a reason for failOpen to run unprotected.
        if (error instanceof InvalidRecordRefError && error.field === 'scope') return { kind: 'reject', error: new InvalidScopeError(error.reason) };
        return this.storeDown(error, body);
      }
      switch (claim.kind) {
        case 'completed':
          return { kind: 'replay', response: claim.response };
        case 'mismatch':
          return { kind: 'reject', error: new KeyMismatchError() };
        case 'acquired':
          if (options.transactional) return this.startTransactionalExecution(ref, claim, body);
          return { kind: 'execute', execution: new Execution(options, ref, claim, undefined, this.keeper, this.deadlines), body };
        case 'in_flight': {
          const remaining = deadline - Date.now();
          if (options.inFlight === 'conflict' || remaining <= 0) {
            return { kind: 'reject', error: new KeyInFlightError(claim.retryAfterMs) };
          }
          await delay(Math.min(pollMs, remaining, Math.max(claim.retryAfterMs, 1)));
          pollMs = Math.min(pollMs * 2, WAIT_POLL_MAX_MS);
        }
      }
    }
  }

  private async startTransactionalExecution<Body extends RequestBody<Req>>(
    ref: RecordRef,
    claim: Extract<Claim, { kind: 'acquired' }>,
    body: Body,
  ): Promise<Decision<Req, Body>> {
    const store = this.options.store as TransactionalStore;
    let transaction: StoreTransaction<unknown>;
    try {
      const begin = store.beginTransaction();
      // A transaction that opens after we gave up must still be closed, or it would hold a connection.
      begin.catch(() => {});
      transaction = await this.deadlines.bound(begin, 'beginTransaction', (late) => void late.rollback().catch(() => {}));
    } catch (error) {
      await store.release(ref, claim.token).catch(this.options.onError);
      return this.storeDown(error, body);
    }
    return { kind: 'execute', execution: new Execution(this.options, ref, claim, transaction, this.keeper, this.deadlines), body };
  }

  private storeDown<Body extends RequestBody<Req>>(error: unknown, body: Body): Decision<Req, Body> {
    this.options.onError(error);
    if (this.options.failOpen) return { kind: 'pass', failOpen: true, body };
    return { kind: 'reject', error: new StoreUnavailableHttpError(error) };
  }
}

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown }).then === 'function';
}

/** One claimed request while its handler runs: lease renewal, checkpoints, and the fenced finish. */
export class Execution {
  readonly context: IdempotencyContext;
  private readonly options: ResolvedOptions<never>;
  private readonly ref: RecordRef;
  private readonly token: string;
  private readonly transaction: StoreTransaction<unknown> | undefined;
  private readonly keeper: LeaseKeeper;
  private readonly deadlines: Deadlines;
  /** What the adapter watches (its response), and how; see `watch`. */
  private watched: object | undefined;
  private abandoned: AbandonedCheck<never> | undefined;
  private readonly startedAt = Date.now();
  /** Closed when the execution ends (or runs past `maxExecutionMs`): `ctx.tx` refuses use from then on. */
  private readonly fence: { closedBecause: string | undefined } = { closedBecause: undefined };
  /** Past `maxExecutionMs`: no longer renewed; in transactional mode already rolled back. */
  private overtime = false;
  private leaseLost = false;
  private discarded = false;
  private suspended = false;
  private finished = false;

  constructor(
    options: ResolvedOptions<never>,
    ref: RecordRef,
    claim: Extract<Claim, { kind: 'acquired' }>,
    transaction: StoreTransaction<unknown> | undefined,
    keeper: LeaseKeeper,
    deadlines: Deadlines,
  ) {
    this.options = options;
    this.keeper = keeper;
    this.deadlines = deadlines;
    this.ref = ref;
    this.token = claim.token;
    this.transaction = transaction;
    // Inside a transaction the checkpoint must use it: the store may be serialised behind it. Once
    // the transaction is over, a checkpoint through it would run outside any transaction.
    const checkpoint =
      transaction === undefined
        ? (point: string, data?: unknown) => options.store.checkpoint(ref, claim.token, point, data)
        : async (point: string, data?: unknown) => {
            const closed = this.fence.closedBecause;
            if (closed !== undefined) throw new TransactionEndedError(`ctx.checkpoint() was called after ${closed}; nothing was written`);
            return transaction.checkpoint(ref, claim.token, point, data);
          };
    this.context = {
      key: ref.key,
      scope: ref.scope,
      takeover: claim.takeover,
      resumeFrom: claim.resumeFrom,
      recoveryData: claim.recoveryData,
      tx: transaction === undefined ? undefined : fenceHandle(transaction.tx, this.fence, 'ctx.tx'),
      checkpoint,
      discard: () => {
        this.discarded = true;
      },
      beginTransaction: () => this.beginPhaseTransaction(),
      suspend: () => {
        this.suspended = true;
      },
    };
    keeper.add(this);
  }

  /**
   * Lets the adapter watch the response this execution answers through, from the lease keeper's
   * ticks (not a listener per request, which costs more than the claim): when `abandoned(target)`
   * says the answer went out without passing `finish` (a hijacked reply), nothing was stored and
   * the claim is released. Whether the client is still connected is deliberately not a reason:
   * the lease belongs to the handler, which may still act after its client left, so the claim is
   * renewed for as long as it runs and its result is completed when it ends (a retry meanwhile
   * gets 409, then the replay). The target is let go of when the execution ends.
   */
  watch<Target extends object>(target: Target, abandoned: AbandonedCheck<Target>): void {
    this.watched = target;
    this.abandoned = abandoned as AbandonedCheck<never>;
  }

  /** @deprecated Node-specific: the HTTP adapters call `watch` with their own check. */
  watchResponse(response: WatchedResponse): void {
    this.watch(response, finishedWithoutUs);
  }

  private async beginPhaseTransaction(): Promise<FencedTransaction> {
    const { store } = this.options;
    if (this.transaction) {
      throw new IdemkitError(
        'ERR_IDEMKIT_TRANSACTIONAL_MODE',
        'ctx.beginTransaction() is refused in transactional mode: the request already runs in one transaction (use ctx.tx)',
      );
    }
    if (this.finished) throw new IdemkitError('ERR_IDEMKIT_EXECUTION_ENDED', 'ctx.beginTransaction() after the request has ended');
    if (!isTransactionalStore(store)) {
      throw new IdemkitError('ERR_IDEMKIT_NOT_TRANSACTIONAL', `ctx.beginTransaction() needs a store with transactions; the ${store.name} store has none`);
    }
    const begin = store.beginTransaction();
    begin.catch(() => {});
    const tx = await this.deadlines.bound(begin, 'beginTransaction', (late) => void late.rollback().catch(() => {}));
    // The phase's handle refuses use once the phase committed or rolled back: its connection is
    // back in the pool by then.
    const fence: { closedBecause: string | undefined } = { closedBecause: undefined };
    return {
      tx: fenceHandle(tx.tx, fence, 'the phase transaction'),
      checkpoint: (point, data) => tx.checkpoint(this.ref, this.token, point, data),
      commit: () => {
        fence.closedBecause ??= 'it committed';
        return tx.commit();
      },
      rollback: () => {
        fence.closedBecause ??= 'it rolled back';
        return tx.rollback();
      },
    };
  }

  /** Called by the lease keeper every third of a lease: extends the lease, or learns that it was lost. */
  renew(): void {
    if (this.watched !== undefined && (this.abandoned as AbandonedCheck<object>)(this.watched)) {
      void this.abort();
      return;
    }
    if (Date.now() - this.startedAt >= this.options.maxExecutionMs) {
      this.expire();
      return;
    }
    const { store, leaseMs, onError, renewLease } = this.options;
    if (!renewLease) return;
    store.renew(this.ref, this.token, leaseMs).then(
      (ok) => {
        if (!ok) {
          this.leaseLost = true;
          this.stopRenewal();
        }
      },
      (error: unknown) => onError(error),
    );
  }

  private stopRenewal(): void {
    this.keeper.delete(this);
  }

  /**
   * Marks the execution ended and lets go of the watched response: the Express adapter keeps its
   * state in a WeakMap keyed by the response, and a value pointing back at its key would keep every
   * finished request alive through young-generation collections (docs/performance.md).
   */
  private end(): void {
    this.finished = true;
    this.fence.closedBecause ??= 'its request ended';
    this.watched = undefined;
    this.stopRenewal();
  }

  /**
   * Ends the execution with the handler's answer: its status, headers (a fetch `Headers`, an
   * entries list, or a Node-style record such as `res.getHeaders()`) and body bytes. The engine
   * keeps what it replays (the allowlisted headers) and stores it. Returns undefined when that
   * answer should be sent, or an error to send instead (in transactional mode, when nothing was
   * committed). The stored form (`finish(storedResponse, threw)`) is accepted as well.
   *
   * `threw` tells that the response is the framework's answer to a thrown error: it is stored
   * (Stripe keeps 500s) unless the mode is transactional, where the rollback means nothing happened.
   */
  finish(status: number, headers: ResponseHeaders, body: Uint8Array, threw?: boolean): Promise<IdempotencyHttpError | undefined>;
  finish(response: StoredResponse, threw?: boolean): Promise<IdempotencyHttpError | undefined>;
  finish(
    statusOrResponse: number | StoredResponse,
    headersOrThrew?: ResponseHeaders | boolean,
    body?: Uint8Array,
    threw = false,
  ): Promise<IdempotencyHttpError | undefined> {
    if (typeof statusOrResponse !== 'number') return this.store(statusOrResponse, headersOrThrew === true);
    const headers = headersOrThrew as ResponseHeaders;
    const allow = this.options.replayHeaders;
    const stored = isIterable(headers)
      ? toStoredResponse(statusOrResponse, headers, body!, allow)
      : toStoredResponseFromRecord(statusOrResponse, headers, body!, allow);
    return this.store(stored, threw);
  }

  private async store(response: StoredResponse, threw: boolean): Promise<IdempotencyHttpError | undefined> {
    if (this.finished) return undefined;
    this.end();
    const { store, onError } = this.options;
    const tx = this.transaction;
    if (tx !== undefined && this.overtime) {
      // Rolled back when the ceiling passed: nothing of this attempt can be committed now.
      await this.releaseQuietly();
      return new ExecutionTimeoutHttpError(this.options.maxExecutionMs, 'nothing');
    }
    const failed = threw || (tx !== undefined && response.status >= 500);
    if (this.suspended) {
      if (tx) await tx.rollback().catch(onError);
      await this.yieldLease();
      return undefined;
    }
    if (this.discarded || (tx !== undefined && failed)) {
      if (tx) await tx.rollback().catch(onError);
      await this.releaseQuietly();
      return undefined;
    }
    // Each store applies its own size limit (fitResponse) when it writes the record.
    if (tx === undefined) {
      // The effect has happened: whatever the store says now, the client gets the real answer.
      await this.deadlines.bound(store.complete(this.ref, this.token, response), 'complete').catch(onError);
      return undefined;
    }
    try {
      if (this.leaseLost) throw new LeaseLostError();
      await this.deadlines.bound(tx.complete(this.ref, this.token, response), 'complete');
      // A commit that times out may still land: the 503 then means "unknown, retry with the same
      // key", and the retry replays or, after the lease, takes over a record that never completed.
      await this.deadlines.bound(tx.commit(), 'commit');
      return undefined;
    } catch (error) {
      await this.deadlines.bound(tx.rollback(), 'rollback').catch(() => {});
      onError(error);
      if (error instanceof LeaseLostError) return new LeaseLostHttpError(error);
      await this.releaseQuietly();
      return new StoreUnavailableHttpError(error);
    }
  }

  /** Ends the execution without a result (the handler was abandoned before producing one). */
  async abort(): Promise<void> {
    if (this.finished) return;
    this.end();
    if (this.transaction) await this.transaction.rollback().catch(this.options.onError);
    if (this.suspended) await this.yieldLease();
    else await this.releaseQuietly();
  }

  /** A suspended request keeps its record and recovery points; the lease ends now, so a retry may resume. */
  private async yieldLease(): Promise<void> {
    await this.options.store.renew(this.ref, this.token, 0).catch(this.options.onError);
  }

  /**
   * The handler ran past `maxExecutionMs`: renewal stops but the claim stays, so the lease runs out
   * and a retry takes over with the last recovery point (releasing would let a retry run at once).
   * In transactional mode the transaction is rolled back now and `ctx.tx` refuses every later call,
   * so nothing the handler does afterwards can commit. The handler itself cannot be stopped: when
   * it ends, `finish` still runs (outside transactional mode its completion is fenced by the token).
   */
  private expire(): void {
    if (this.finished || this.overtime) return;
    this.overtime = true;
    this.stopRenewal();
    const { maxExecutionMs, onError } = this.options;
    const tx = this.transaction;
    onError(new ExecutionTimeoutHttpError(maxExecutionMs, tx === undefined ? 'unknown' : 'nothing'));
    if (tx === undefined) return;
    this.fence.closedBecause = `its request ran past maxExecutionMs (${maxExecutionMs} ms) and was rolled back`;
    void tx.rollback().catch(onError);
  }

  private async releaseQuietly(): Promise<void> {
    try {
      await this.options.store.release(this.ref, this.token);
    } catch (error) {
      // A stale token means another request owns the key now: nothing of ours is left to release.
      if (!(error instanceof LeaseLostError)) this.options.onError(error);
    }
  }
}

function finishedWithoutUs(response: WatchedResponse): boolean {
  return response.writableFinished;
}

function isIterable(headers: ResponseHeaders): headers is Iterable<readonly [string, string | number | readonly string[] | undefined]> {
  return typeof (headers as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function';
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

