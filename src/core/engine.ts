import {
  IdempotencyHttpError,
  InvalidRecordRefError,
  InvalidScopeError,
  KeyInFlightError,
  KeyMismatchError,
  MissingKeyError,
  StoreBusyError,
  StoreFullError,
  StoreSchemaMissingError,
  StoreUnavailableError,
} from './errors.js';
import type { FingerprintInput } from './fingerprint.js';
import { FINGERPRINT_VERSION, fieldsDigest, fingerprint, fingerprintForm } from './fingerprint.js';
import { Deadlines, lateExplainerOf } from './deadlines.js';
import { LeaseKeeper } from './lease-keeper.js';
import { parseIdempotencyKey } from './key.js';
import type { EngineOptions, IdempotencyOptions, ResolvedOptions } from './options.js';
import { resolveOptions } from './options.js';
import type { ReaderSettings } from './option-reader.js';
import type { Claim, ClaimOptions, RecordRef, StoreTransaction, StoredResponse, TransactionalStore } from './store.js';
import { REPRESENTATION_HEADERS } from './response.js';
import { isReservedScope } from './namespaces.js';
import { Execution } from './execution.js';
import type { ExecutionGuard } from './execution.js';
import type { EventSink } from './events.js';
import { since } from './events.js';

export { Execution } from './execution.js';
export type { AbandonedCheck, ContextFor, FencedTransaction, HandlerTx, IdempotencyContext } from './execution.js';

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

/** The one answer for every request that passes without a key: shared, already resolved. */
const PASSED: Promise<{ readonly kind: 'pass'; readonly failOpen: false; readonly body: undefined }> = Promise.resolve(
  Object.freeze({ kind: 'pass', failOpen: false, body: undefined } as const),
);

const WAIT_POLL_MIN_MS = 10;
const WAIT_POLL_MAX_MS = 250;

/** The lease keeper's ticks per lease. */
const LEASE_TICKS = 3;

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
  private readonly deadlines: Deadlines;
  private readonly claimOptions: ClaimOptions;
  private readonly shared: Shared;
  /** The options as given, which `withOverrides` overrides. */
  private readonly given: EngineOptions<Req>;
  /** The field lists this engine can fingerprint a retry with, by their digest (`fingerprintFields`, `previousFingerprintFields`). */
  private readonly knownFields: ReadonlyMap<string, readonly string[]>;

  /** `naming` and `parent` are `withOverrides`'s: call it rather than passing them. */
  constructor(options: EngineOptions<Req>, naming?: ReaderSettings, parent?: IdempotencyEngine<Req>) {
    const resolved = resolveOptions(options, naming);
    // A derived engine reports through its parent's onError, so that the logger's rate limit (one
    // line per distinct failure) holds across every route rather than per route.
    this.options = parent === undefined ? resolved : Object.assign({}, resolved, { onError: parent.options.onError });
    this.claimOptions = Object.freeze({ leaseMs: this.options.leaseMs, windowMs: this.options.windowMs });
    // storeTimeoutMs is never overridden: a derived engine bounds its store calls with its parent's timer.
    this.given = options;
    this.shared = parent?.shared ?? { deadlines: new Deadlines(this.options.storeTimeoutMs, lateExplainerOf(this.options.store)), keepers: new Map() };
    this.deadlines = this.shared.deadlines;
    this.headerName = this.options.header.toLowerCase();
    const knownFields = new Map<string, readonly string[]>();
    for (const fields of [this.options.fingerprintFields, this.options.previousFingerprintFields]) if (fields) knownFields.set(fieldsDigest(fields), fields);
    this.knownFields = knownFields;
    this.representationHeaders = Object.freeze([...this.options.replayHeaders, ...REPRESENTATION_HEADERS]);
    // Ticks every third of a lease: renews leases (unless renewLease is off), and asks each
    // adapter's check whether an answer went out without us (Execution.watch).
    const periodMs = Math.max(1, Math.floor(this.options.leaseMs / LEASE_TICKS));
    let keeper = this.shared.keepers.get(periodMs);
    if (keeper === undefined) this.shared.keepers.set(periodMs, (keeper = new LeaseKeeper(periodMs, this.options.logger)));
    this.keeper = keeper;
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
  /**
   * True when `decide` would answer `pass` without reading anything: the method is not covered, or
   * the request has no key header where none is required. Adapters whose framework takes a
   * synchronous `next()` call this first, so that such requests do not wait for a promise's turn.
   */
  passesAtOnce(request: Req, reader: RequestReader<Req, RequestBody<Req>>): boolean {
    if (!this.covers(reader.method(request))) return true;
    if (reader.required ?? this.options.required) return false;
    const values = reader.header(request, this.headerName);
    return values === undefined || values === null || (typeof values !== 'string' && values.length === 0);
  }

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
        claim = await this.claimAs(ref, fp, facts);
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
          await this.giveBack(ref, claim).catch(options.onError);
          if (!(error instanceof IdempotencyHttpError)) throw error;
          return this.rejected(error, method, request, reader);
        }
        if (previous !== scope) {
          const old: RecordRef = { scope: previous, key };
          let found: Claim | OtherSettings;
          try {
            found = await this.claimAs(old, fp, facts);
          } catch (error) {
            await this.giveBack(ref, claim).catch(options.onError);
            return this.claimFailed(error, old, method, facts, request, reader, body);
          }
          if (found.kind === 'acquired' && !found.takeover) {
            guard = { ref: old, token: found.token };
          } else {
            // The key was used under the previous scope: answered from that record (a take-over
            // of it runs there, resuming from its recovery point), and this scope's claim undone.
            await this.giveBack(ref, claim).catch(options.onError);
            claim = found;
            at = old;
          }
        }
      }
      switch (claim.kind) {
        case 'completed':
          if (events?.wants('replay')) {
            const who = events.request(at.scope, key, method, facts.path);
            events.emit('replay', { scope: who.scope, key: who.key, method: who.method, path: who.path, status: claim.response.status, storeMs: since(claimedFrom) });
          }
          return { kind: 'replay', response: claim.response };
        case 'mismatch':
          if (events?.wants('mismatch')) {
            const who = events.request(at.scope, key, method, facts.path);
            events.emit('mismatch', { scope: who.scope, key: who.key, method: who.method, path: who.path, status: 422, storeMs: since(claimedFrom) });
          }
          return { kind: 'reject', error: new KeyMismatchError('otherSettings' in claim ? OTHER_SETTINGS_DETAIL : undefined) };
        case 'acquired':
          if (events !== undefined) this.acquired(events, claim, facts, at, since(claimedFrom));
          if (options.transactional) return this.startTransactionalExecution(at, claim, body, facts, guard);
          return { kind: 'execute', execution: new Execution(options, at, claim, undefined, this.keeper, this.deadlines, facts, guard), body };
        case 'in_flight': {
          const remaining = deadline - Date.now();
          if (options.inFlight === 'conflict' || remaining <= 0) {
            // The hint is how long the original likely takes (`retryAfterMs`), bounded by what is
            // left of its lease: after that a retry takes over anyway.
            const retryAfterMs = Math.min(options.retryAfterMs, claim.retryAfterMs);
            if (events?.wants('conflict')) {
              const who = events.request(at.scope, key, method, facts.path);
              events.emit('conflict', { scope: who.scope, key: who.key, method: who.method, path: who.path, status: 409, retryAfterMs, storeMs: since(claimedFrom) });
            }
            return { kind: 'reject', error: new KeyInFlightError(retryAfterMs) };
          }
          // Waiters poll far more often than the hint: a short handler's result is replayed soon
          // after it lands, and the lease's end (a takeover) is never overslept.
          await delay(Math.min(pollMs, remaining, Math.max(claim.retryAfterMs, 1)));
          pollMs = Math.min(pollMs * 2, WAIT_POLL_MAX_MS);
        }
      }
    }
  }

  /**
   * Claims `ref` with this request's fingerprint. When the store answers mismatch, the record may
   * have been made with other fingerprint settings (another instance, or a deploy that changed
   * `fingerprintFields`): its stored fingerprint says how it was made, and the request is checked
   * that way. Same request by the record's own measure: claimed again with the record's
   * fingerprint, so the store decides atomically as for any retry. A different request: mismatch.
   * Settings this engine does not know: mismatch, saying so.
   */
  private async claimAs(ref: RecordRef, fp: string, facts: RequestFacts): Promise<Claim | OtherSettings> {
    const claim = await this.claimOnce(ref, fp);
    if (claim.kind !== 'mismatch') return claim;
    const { store, onError } = this.options;
    let stored: string | undefined;
    try {
      stored = (await this.deadlines.bound(store.get(ref), 'get'))?.fingerprint;
    } catch (error) {
      // The claim's answer stands: a mismatch by this engine's settings.
      onError(error);
      return claim;
    }
    if (stored === undefined || stored === fp) return claim;
    const theirs = this.fingerprintLike(stored, facts);
    if (theirs === undefined) return OTHER_SETTINGS;
    return theirs === stored ? this.claimOnce(ref, theirs) : claim;
  }

  private claimOnce(ref: RecordRef, fp: string): Promise<Claim> {
    return this.deadlines.bound(
      this.options.store.claim(ref, fp, this.claimOptions),
      'claim',
      // The client already got its 503: a claim that lands later must not block its retry for a lease.
      (late) => {
        if (late.kind === 'acquired') this.giveBack(ref, late).catch(this.options.onError);
      },
    );
  }

  /**
   * This request's fingerprint made the way `stored` was, or undefined when that way is unknown
   * here (another field list, an earlier release's form). A `v2:<hex>` fingerprint is the whole
   * body, or, written by a release before the form named its fields, a field list this engine
   * knows: each is tried, and a match is returned in the stored form.
   */
  private fingerprintLike(stored: string, facts: RequestFacts): string | undefined {
    const form = fingerprintForm(stored);
    if (form === undefined) return undefined;
    if (form.fieldsDigest !== undefined) {
      const fields = this.knownFields.get(form.fieldsDigest);
      return fields === undefined ? undefined : fingerprint(facts, { fields });
    }
    const whole = fingerprint(facts);
    if (whole === stored) return whole;
    for (const fields of this.knownFields.values()) {
      const made = fingerprint(facts, { fields });
      const bare = `${FINGERPRINT_VERSION}:${made.slice(made.lastIndexOf(':') + 1)}`;
      if (bare === stored) return bare;
    }
    return whole;
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
    return this.storeDown(error, body);
  }

  /** Tells `execute` (and `takeover`) listeners about a claim. */
  private acquired(events: EventSink, claim: Extract<Claim, { kind: 'acquired' }>, facts: RequestFacts, ref: RecordRef, storeMs: number): void {
    const who = events.request(ref.scope, ref.key, facts.method, facts.path);
    // Each event's fields by name: `{ ...who, more }` costs microseconds on Node 20 (docs/performance.md).
    const { scope, key, method, path } = who;
    if (claim.takeover && events.wants('takeover')) events.emit('takeover', { scope, key, method, path, resumeFrom: claim.resumeFrom });
    events.emit('execute', { scope, key, method, path, takeover: claim.takeover, storeMs });
  }

  /** A request refused before anything was claimed: told to `rejected` listeners, answered with its problem. */
  private rejected<Body extends RequestBody<Req>>(
    error: IdempotencyHttpError,
    method: string,
    request: Req,
    reader: RequestReader<Req, Body>,
  ): Decision<Req, Body> {
    const { events } = this.options;
    if (events?.wants('rejected')) {
      const path = reader.path(request);
      const query = path.indexOf('?');
      events.emit('rejected', { status: error.status, code: error.code, method, path: query === -1 ? path : path.slice(0, query) });
    }
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
      await this.giveBack(ref, claim).catch(this.options.onError);
      if (guard !== undefined) await this.options.store.release(guard.ref, guard.token).catch(this.options.onError);
      const { events } = this.options;
      if (events?.wants('storeError')) {
        events.emit('storeError', { operation: 'beginTransaction', error, request: events.request(ref.scope, ref.key, facts.method, facts.path) });
      }
      return this.storeDown(error, body);
    }
    return { kind: 'execute', execution: new Execution(this.options, ref, claim, transaction, this.keeper, this.deadlines, facts, guard), body };
  }

  /**
   * Undoes a claim whose request will not run: a new record is released, so the retry runs at
   * once. A take-over gives its lease back instead (`renew(…, 0)`): the record stays in flight with
   * the earlier owner's recovery point, and the retry takes it over and resumes there. Releasing
   * it would delete the record and its recovery point, and the retry would run from the start,
   * repeating phases that had committed (found by the model, docs/model.md).
   */
  private async giveBack(ref: RecordRef, claim: Extract<Claim, { kind: 'acquired' }>): Promise<void> {
    const { store } = this.options;
    if (claim.takeover) await store.renew(ref, claim.token, 0);
    else await store.release(ref, claim.token);
  }

  private storeDown<Body extends RequestBody<Req>>(error: unknown, body: Body): Decision<Req, Body> {
    this.options.onError(error);
    if (this.options.failOpen) return { kind: 'pass', failOpen: true, body };
    // A store that knows why it cannot serve says so: full or busy (retry later) or never migrated (retrying
    // cannot help). Anything else is the generic 503, whose detail tells the client nothing of the store.
    if (error instanceof StoreFullError || error instanceof StoreBusyError || error instanceof StoreSchemaMissingError) return { kind: 'reject', error };
    return { kind: 'reject', error: new StoreUnavailableError(undefined, { cause: error }) };
  }
}

/** A mismatch whose record was made with fingerprint settings this engine does not know. */
interface OtherSettings {
  readonly kind: 'mismatch';
  readonly otherSettings: true;
}
const OTHER_SETTINGS: OtherSettings = Object.freeze({ kind: 'mismatch', otherSettings: true });

const OTHER_SETTINGS_DETAIL =
  'This key was already used, and its record was made with fingerprint settings this server does not know (another `fingerprintFields`, or an earlier release), so it cannot tell whether this is the same request. Use a new key for a new operation; to get the stored answer, retry through a server with the settings the key was first used with.';

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

