import { IdempotencyHttpError, InvalidRecordRefError, InvalidScopeError, KeyMismatchError, MissingKeyError } from './errors.js';
import { fieldsDigest, fingerprint } from './fingerprint.js';
import { Deadlines, lateExplainerOf } from './deadlines.js';
import { LeaseKeeper } from './lease-keeper.js';
import { parseIdempotencyKey } from './key.js';
import type { EngineOptions, IdempotencyOptions, ResolvedOptions } from './options.js';
import { resolveOptions } from './options.js';
import type { ReaderSettings } from './option-reader.js';
import type { Claim, RecordRef, StoreTransaction, TransactionalStore } from './store.js';
import { REPRESENTATION_HEADERS } from './response.js';
import { isReservedScope } from './namespaces.js';
import { since } from './events.js';
import { Execution } from './execution.js';
import type { ExecutionGuard } from './execution.js';
import type { Decision, RequestBody, RequestFacts, RequestReader } from './engine-request.js';
import type { Claiming, OtherSettings } from './engine-claim.js';
import { OTHER_SETTINGS_DETAIL, claimAfterMismatch, claimOnce, giveBack } from './engine-claim.js';
import { conflictOf, isUnresponsive, storeDown, tellAcquired, tellConflict, tellMismatch, tellRejected, tellReplay } from './engine-outcome.js';

export { Execution } from './execution.js';
export type { AbandonedCheck, ContextFor, FencedTransaction, HandlerTx, IdempotencyContext } from './execution.js';
export type { Decision, RequestBody, RequestFacts, RequestReader } from './engine-request.js';

/** The one answer for every request that passes without a key: shared, already resolved. */
const PASSED: Promise<{ readonly kind: 'pass'; readonly failOpen: false; readonly body: undefined }> = Promise.resolve(
  Object.freeze({ kind: 'pass', failOpen: false, body: undefined } as const),
);

const WAIT_POLL_MIN_MS = 10;
const WAIT_POLL_MAX_MS = 250;

/** The lease keeper's ticks per lease. */
const LEASE_TICKS = 3;
/** Renewal periods without a change to an in-flight record after which its owner counts as unresponsive. */
const SILENT_PERIODS = 1.5;

/**
 * Options an engine derived with `withOverrides` may set differently from its parent: the ones
 * that change how one request is claimed and answered, not where records live nor how they look.
 */
export type EngineOverrides<Req = unknown> = Pick<
  IdempotencyOptions<Req>,
  'required' | 'leaseMs' | 'inFlight' | 'waitTimeoutMs' | 'retryAfterMs' | 'scope' | 'previousScope' | 'fingerprintFields' | 'previousFingerprintFields'
>;

/** What an engine and the engines derived from it share: their timers. */
interface Shared {
  readonly deadlines: Deadlines;
  /** One lease keeper per tick period: a keeper must tick every third of its executions' lease. */
  readonly keepers: Map<number, LeaseKeeper>;
}

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
  /**
   * How long an in-flight record may go unchanged before its owner counts as unresponsive: 1.5 of
   * this engine's renewal periods (one late renewal is not enough). Infinite when this engine does
   * not renew leases: then no owner does, and silence says nothing.
   */
  private readonly silentAfterMs: number;
  private readonly deadlines: Deadlines;
  /** The store, its deadlines, the claim's lease and window, the known field lists (engine-claim.ts). */
  private readonly claiming: Claiming;
  private readonly shared: Shared;
  /** The options as given, which `withOverrides` overrides. */
  private readonly given: EngineOptions<Req>;

  /** `naming` and `parent` are `withOverrides`'s: call it rather than passing them. */
  constructor(options: EngineOptions<Req>, naming?: ReaderSettings, parent?: IdempotencyEngine<Req>) {
    const resolved = resolveOptions(options, naming);
    // A derived engine reports through its parent's onError, so that the logger's rate limit (one
    // line per distinct failure) holds across every route rather than per route.
    this.options = parent === undefined ? resolved : Object.assign({}, resolved, { onError: parent.options.onError });
    // storeTimeoutMs is never overridden: a derived engine bounds its store calls with its parent's timer.
    this.given = options;
    const { store, storeTimeoutMs } = this.options;
    this.shared = parent?.shared ?? { deadlines: new Deadlines(storeTimeoutMs, lateExplainerOf(store), store), keepers: new Map() };
    this.deadlines = this.shared.deadlines;
    this.headerName = this.options.header.toLowerCase();
    const knownFields = new Map<string, readonly string[]>();
    for (const fields of [this.options.fingerprintFields, this.options.previousFingerprintFields]) if (fields) knownFields.set(fieldsDigest(fields), fields);
    const { leaseMs, windowMs, instance } = this.options;
    const claimOptions = Object.freeze(instance === undefined ? { leaseMs, windowMs } : { leaseMs, windowMs, incarnation: instance.incarnation });
    this.claiming = { store: this.options.store, deadlines: this.deadlines, claimOptions, knownFields, onError: this.options.onError };
    this.representationHeaders = Object.freeze([...this.options.replayHeaders, ...REPRESENTATION_HEADERS]);
    // Ticks every third of a lease: renews leases (unless renewLease is off), and asks each
    // adapter's check whether an answer went out without us (Execution.watch).
    const periodMs = Math.max(1, Math.floor(this.options.leaseMs / LEASE_TICKS));
    let keeper = this.shared.keepers.get(periodMs);
    if (keeper === undefined) this.shared.keepers.set(periodMs, (keeper = new LeaseKeeper(periodMs, this.options.logger)));
    this.keeper = keeper;
    this.silentAfterMs = this.options.renewLease ? SILENT_PERIODS * periodMs : Infinity;
  }

  /**
   * An engine that answers like this one but for `overrides` (a route's own lease, in-flight
   * policy, scope…): the options are resolved again through the same validation, once, when the
   * route is set up; the store, the store deadlines and the lease keepers are shared. `naming`
   * names the overrides in errors (`{ path: 'config.idempotency', suffix: ' of /orders' }`).
   */
  withOverrides(overrides: EngineOverrides<Req>, naming?: ReaderSettings): IdempotencyEngine<Req> {
    const merged: Record<string, unknown> = { ...this.given };
    // An override left undefined keeps the parent's value rather than falling back to the default.
    for (const [name, value] of Object.entries(overrides)) if (value !== undefined) merged[name] = value;
    return new IdempotencyEngine<Req>(merged as unknown as EngineOptions<Req>, naming, this);
  }

  covers(method: string): boolean {
    // Frameworks hand over the method as sent, which is upper case all but always.
    const { methods } = this.options;
    return methods.has(method) || methods.has(method.toUpperCase());
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
  /**
   * True when `decide` would answer `pass` without reading anything: the method is not covered, or
   * the request has no key header where none is required. Adapters whose framework takes a
   * synchronous `next()` call this first, so that such requests do not wait for a promise's turn.
   */
  passesAtOnce(request: Req, reader: RequestReader<Req, RequestBody<Req>>): boolean {
    if (!this.covers(reader.method(request))) return true;
    if (this.options.required) return false;
    const values = reader.header(request, this.headerName);
    return values === undefined || values === null || (typeof values !== 'string' && values.length === 0);
  }

  decide<Body extends RequestBody<Req>>(request: Req, reader: RequestReader<Req, Body>): Promise<Decision<Req, Body>> {
    const method = reader.method(request);
    if (!this.covers(method)) return PASSED;
    let key: string | undefined;
    let read: Body | PromiseLike<Body>;
    try {
      key = this.parseKey(reader.header(request, this.headerName));
      if (key === undefined) return PASSED;
      read = reader.readBody(request, this.options.maxBodyBytes);
    } catch (error) {
      if (!(error instanceof IdempotencyHttpError)) return Promise.reject(error as Error);
      this.rejected(error, method, request, reader);
      return Promise.resolve({ kind: 'reject', error });
    }
    // The adapter awaits the claim's own promise: no async layer in between.
    return this.claim(request, key, method, reader, read);
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
      if (!(error instanceof IdempotencyHttpError)) throw error;
      return this.rejected(error, method, request, reader);
    }
    const invalid = invalidScope(scope, 'scope');
    if (invalid !== undefined) return this.rejected(invalid, method, request, reader);
    const ref: RecordRef = { scope, key };
    const facts: RequestFacts = { method, path: reader.path(request), contentType: reader.contentType(request), body: body.body, parsedJson: body.parsedJson };
    const fp = fingerprint(facts, { fields: options.fingerprintFields });
    const deadline = Date.now() + options.waitTimeoutMs;
    const { events } = options;
    let pollMs = WAIT_POLL_MIN_MS;
    for (;;) {
      let claim: Claim | OtherSettings;
      // Only a listener makes the engine read a clock for it.
      const claimedFrom = events === undefined ? 0 : performance.now();
      try {
        claim = await claimOnce(this.claiming, ref, fp);
        if (claim.kind === 'mismatch') claim = await claimAfterMismatch(this.claiming, ref, fp, facts, claim);
      } catch (error) {
        return this.claimFailed(error, ref, method, facts, request, reader, body);
      }
      // The record this request is answered from, and the previous scope's record held meanwhile.
      let at = ref;
      let guard: ExecutionGuard | undefined;
      if (claim.kind === 'acquired' && !claim.takeover && options.previousScope !== undefined) {
        // A new key under this scope may have been used under the scope this deployment replaced:
        // claiming it there too (not a read) orders this request with instances still on the old
        // hook, so at most one of them runs (docs/semantics.md, "Mixed deployments").
        let previous: string;
        try {
          const scoped = options.previousScope(body.request ?? request);
          previous = typeof scoped === 'string' ? scoped : await scoped;
          const invalid = invalidScope(previous, 'previousScope');
          if (invalid !== undefined) throw invalid;
        } catch (error) {
          await giveBack(options.store, ref, claim).catch(options.onError);
          if (!(error instanceof IdempotencyHttpError)) throw error;
          return this.rejected(error, method, request, reader);
        }
        if (previous !== scope) {
          const old: RecordRef = { scope: previous, key };
          let found: Claim | OtherSettings;
          try {
            found = await claimOnce(this.claiming, old, fp);
            if (found.kind === 'mismatch') found = await claimAfterMismatch(this.claiming, old, fp, facts, found);
          } catch (error) {
            await giveBack(options.store, ref, claim).catch(options.onError);
            return this.claimFailed(error, old, method, facts, request, reader, body);
          }
          if (found.kind === 'acquired' && !found.takeover) {
            guard = { ref: old, token: found.token };
          } else {
            // The key was used under the previous scope: answered from that record (a take-over
            // of it runs there, resuming from its recovery point), and this scope's claim undone.
            await giveBack(options.store, ref, claim).catch(options.onError);
            claim = found;
            at = old;
          }
        }
      }
      switch (claim.kind) {
        case 'completed':
          if (events?.wants('replay')) tellReplay(events, at, method, facts.path, claim.response.status, claimedFrom);
          return { kind: 'replay', response: claim.response };
        case 'mismatch':
          if (events?.wants('mismatch')) tellMismatch(events, at, method, facts.path, claimedFrom);
          return { kind: 'reject', error: new KeyMismatchError('otherSettings' in claim ? OTHER_SETTINGS_DETAIL : undefined) };
        case 'acquired':
          if (events !== undefined) tellAcquired(events, claim, facts, at, since(claimedFrom));
          if (options.transactional) return this.startTransactionalExecution(at, claim, body, facts, guard);
          return { kind: 'execute', execution: new Execution(options, at, claim, undefined, this.keeper, this.deadlines, facts, guard), body };
        case 'in_flight': {
          const remaining = deadline - Date.now();
          const unresponsive = isUnresponsive(claim, this.silentAfterMs);
          if (options.inFlight === 'conflict' || remaining <= 0) {
            const error = conflictOf(claim, options.retryAfterMs, unresponsive);
            if (events?.wants('conflict')) tellConflict(events, at, method, facts.path, error, claimedFrom);
            return { kind: 'reject', error };
          }
          // Waiters poll far more often than the hint: a short handler's result is replayed soon
          // after it lands, and the lease's end (a takeover) is never overslept. An owner that
          // stopped renewing changes nothing before its lease ends: the waiter sleeps until then
          // (or its own deadline) and claims again, taking the key over, rather than polling a
          // dead owner every 250 ms. Should the owner come back meanwhile, that claim finds it
          // alive (or its answer) and polling resumes.
          const leaseLeftMs = Math.max(claim.retryAfterMs, 1);
          await delay(unresponsive ? Math.min(remaining, leaseLeftMs) : Math.min(pollMs, remaining, leaseLeftMs));
          if (!unresponsive) pollMs = Math.min(pollMs * 2, WAIT_POLL_MAX_MS);
        }
      }
    }
  }

  /** A claim that threw: a scope the store cannot keep is the request's problem; anything else an outage. */
  private claimFailed<Body extends RequestBody<Req>>(
    error: unknown,
    ref: RecordRef,
    method: string,
    facts: RequestFacts,
    request: Req,
    reader: RequestReader<Req, Body>,
    body: Body,
  ): Decision<Req, Body> {
    // A scope the store cannot keep (too long for its column, say) is the request's problem,
    // not an outage: never a 503, and never a reason for failOpen to run unprotected.
    if (error instanceof InvalidRecordRefError && error.field === 'scope') return this.rejected(new InvalidScopeError(error.reason), method, request, reader);
    const { events } = this.options;
    if (events?.wants('storeError')) events.emit('storeError', { operation: 'claim', error, request: events.request(ref.scope, ref.key, method, facts.path) });
    return storeDown(this.options, error, body);
  }

  /** A request refused before anything was claimed: told to `rejected` listeners, answered with its problem. */
  private rejected<Body extends RequestBody<Req>>(
    error: IdempotencyHttpError,
    method: string,
    request: Req,
    reader: RequestReader<Req, Body>,
  ): Decision<Req, Body> {
    const { events } = this.options;
    if (events?.wants('rejected')) tellRejected(events, error, method, reader.path(request));
    return { kind: 'reject', error };
  }

  private async startTransactionalExecution<Body extends RequestBody<Req>>(
    ref: RecordRef,
    claim: Extract<Claim, { kind: 'acquired' }>,
    body: Body,
    facts: RequestFacts,
    guard: ExecutionGuard | undefined,
  ): Promise<Decision<Req, Body>> {
    const store = this.options.store as TransactionalStore;
    let transaction: StoreTransaction<unknown>;
    try {
      const begin = store.beginTransaction();
      // A transaction that opens after we gave up must still be closed, or it would hold a connection.
      begin.catch(() => {});
      transaction = await this.deadlines.bound(begin, 'beginTransaction', (late) => void late.rollback().catch(() => {}));
    } catch (error) {
      await giveBack(this.options.store, ref, claim).catch(this.options.onError);
      if (guard !== undefined) await this.options.store.release(guard.ref, guard.token).catch(this.options.onError);
      const { events } = this.options;
      if (events?.wants('storeError')) {
        events.emit('storeError', { operation: 'beginTransaction', error, request: events.request(ref.scope, ref.key, facts.method, facts.path) });
      }
      return storeDown(this.options, error, body);
    }
    return { kind: 'execute', execution: new Execution(this.options, ref, claim, transaction, this.keeper, this.deadlines, facts, guard), body };
  }
}

/** Why a scope cannot be used, or undefined when it can. */
function invalidScope(scope: unknown, option: 'scope' | 'previousScope'): InvalidScopeError | undefined {
  if (typeof scope !== 'string') throw new TypeError(`The \`${option}\` option must return a string`);
  // A lone surrogate cannot be stored as text losslessly (pg turns it into U+FFFD, so two
  // tenants would share records): such a scope is refused before anything is claimed.
  if (!scope.isWellFormed()) return new InvalidScopeError(`the \`${option}\` hook returned ill-formed UTF-16 (a lone surrogate)`);
  // Scopes starting with U+001F hold idemkit's own records (consume-once messages): no request
  // may address them, whatever its tenant id is.
  if (isReservedScope(scope)) {
    return new InvalidScopeError(`the \`${option}\` hook returned a scope that starts with U+001F, which idemkit reserves for its own records`);
  }
  return undefined;
}

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown }).then === 'function';
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

