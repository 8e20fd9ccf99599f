import { ERROR_CODES } from './error-codes.js';
import type { ErrorCode, HttpErrorCode } from './error-codes.js';

export { ERROR_CODES, errorCodeEntry } from './error-codes.js';
export type { CodeOf, ErrorCode, ErrorCodeEntry, ErrorEntryPoint, HttpErrorCode, HttpProblemFacts, PhaseErrorCode } from './error-codes.js';

/**
 * The default base of the problem `type`s: each case appends its slug, giving a URN such as
 * `urn:idemkit:problem:request-in-progress`. An identifier, not a locator (RFC 9457 §3.1.1 allows
 * a type URI that cannot be dereferenced): clients match on it or on the `code`. Give
 * `problemTypeBase` to make the types lead to your own documentation instead.
 */
export const PROBLEM_BASE = 'urn:idemkit:problem:';

/** An RFC 9457 problem details body. */
export interface ProblemDetails {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly [extension: string]: unknown;
}

/** Every error idemkit throws carries a stable, machine-readable `code`. */
export class IdemkitError extends Error {
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/**
 * The base of the errors that carry only a message: the code is the subclass's static `code`, so
 * such a class is its code and its doc comment.
 */
export abstract class CodedError extends IdemkitError {
  constructor(message: string, options?: { cause?: unknown }) {
    super((new.target as unknown as { readonly code: ErrorCode }).code, message, options);
  }
}

/** An error that maps to an HTTP answer with a problem+json body. */
export class IdempotencyHttpError extends IdemkitError {
  readonly status: number;
  readonly slug: string;
  readonly title: string;
  /** The problem's `detail`: the message, unless the message is for logs and the client gets a fixed text. */
  readonly detail: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly extensions: Readonly<Record<string, unknown>>;

  constructor(init: {
    code: string;
    status: number;
    slug: string;
    title: string;
    detail: string;
    /** The error's message when it is not the detail (which then stays what the client is told). */
    message?: string;
    headers?: Record<string, string>;
    extensions?: Record<string, unknown>;
    cause?: unknown;
  }) {
    super(init.code, init.message ?? init.detail, { cause: init.cause });
    this.status = init.status;
    this.slug = init.slug;
    this.title = init.title;
    this.detail = init.detail;
    this.headers = init.headers ?? {};
    this.extensions = init.extensions ?? {};
  }

  /** The problem `type` under the default base (`urn:idemkit:problem:<slug>`). */
  get type(): string {
    return PROBLEM_BASE + this.slug;
  }

  /** The problem+json body; `typeBase` (a checked `problemTypeBase`) replaces the default base of its `type`. */
  problem(typeBase: string = PROBLEM_BASE): ProblemDetails {
    const problem: ProblemDetails = { type: typeBase + this.slug, title: this.title, status: this.status, detail: this.detail };
    // The extensions first, as they always were; without a spread (slow on Node 20, docs/performance.md).
    return Object.keys(this.extensions).length === 0 ? problem : Object.assign({}, this.extensions, problem);
  }
}

/** What the rest of an `IdempotencyHttpError`'s constructor argument says besides its code. */
interface ProblemInit {
  detail: string;
  message?: string;
  headers?: Record<string, string>;
  extensions?: Record<string, unknown>;
  cause?: unknown;
}

/**
 * An `IdempotencyHttpError`'s constructor argument: the code with its status, slug and title from
 * the table, and the rest. Each field by name: a 409 under a retry storm builds one of these per
 * request, and `{ ...facts, detail }` costs microseconds on Node 20 (docs/performance.md).
 */
function problemInit(code: HttpErrorCode, init: ProblemInit) {
  const { status, slug, title } = ERROR_CODES[code].http;
  return { code, status, slug, title, detail: init.detail, message: init.message, headers: init.headers, extensions: init.extensions, cause: init.cause };
}

/**
 * The answer of a code whose detail the table fixes (the client learns nothing of the store), with
 * a message of its own for logs, and `Retry-After: 1`.
 */
function fixedDetailAnswer(code: 'ERR_IDEMKIT_LEASE_LOST' | 'ERR_IDEMKIT_STORE_UNAVAILABLE', message: string, cause: unknown) {
  return problemInit(code, { detail: ERROR_CODES[code].http.detail, message, headers: { 'retry-after': '1' }, cause });
}

/**
 * The problem+json body a request is answered with for `error`, or undefined when it is not an
 * HTTP answer. `typeBase` replaces the default base of the `type` (check it once with
 * `checkProblemTypeBase`, as every option that takes it does).
 */
export function problemFor(error: unknown, typeBase: string = PROBLEM_BASE): ProblemDetails | undefined {
  return error instanceof IdempotencyHttpError ? error.problem(typeBase) : undefined;
}

/** An option was invalid; thrown eagerly when a factory resolves its options. */
export class InvalidOptionError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_INVALID_OPTION' satisfies ErrorCode;
  readonly option: string;

  constructor(option: string, message: string) {
    super(InvalidOptionError.code, `Invalid option \`${option}\`: ${message}`);
    this.option = option;
  }
}

/** `startInstance()`: another live process keeps renewing this instance name; nothing of its was touched. */
export class InstanceInUseError extends CodedError {
  static readonly code = 'ERR_IDEMKIT_INSTANCE_IN_USE' satisfies ErrorCode;
  constructor(name: string, waitedMs: number) {
    super(`Instance ${JSON.stringify(name)} is registered by another live process (still renewed after ${waitedMs} ms): every process needs its own name`);
  }
}

/** The same route is protected twice (two middlewares, or the plugin registered twice): protect it once. */
export class MountedTwiceError extends CodedError { static readonly code = 'ERR_IDEMKIT_MOUNTED_TWICE' satisfies ErrorCode; }

/**
 * 409 (lease-lost): the owner token is no longer current; the lease ran out and another request
 * took over. Stores throw it with a message for logs; the client is told the table's fixed detail.
 */
export class LeaseLostError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_LEASE_LOST' satisfies ErrorCode;

  constructor(message = 'The idempotency record is no longer owned by this request (lease lost or record replaced)', options?: { cause?: unknown }) {
    super(fixedDetailAnswer(LeaseLostError.code, message, options?.cause));
  }
}

/**
 * 503 (store-unavailable): a store could not be reached, answered with an error, or did not answer
 * in time, so the request is refused (fail closed). `message` says what failed, for logs; the client
 * is told the table's fixed detail. Without a message, the message is that detail.
 */
export class StoreUnavailableError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_STORE_UNAVAILABLE' satisfies ErrorCode;

  constructor(message: string = ERROR_CODES[StoreUnavailableError.code].http.detail, options?: { cause?: unknown }) {
    super(fixedDetailAnswer(StoreUnavailableError.code, message, options?.cause));
  }
}

/**
 * 503 (store-full): the store has no room for a new key, and making room would mean forgetting an
 * answer still inside its window (a retry of that key would then run again), so the claim is
 * refused. `message` names the bound that was reached, for logs; the client is told the table's
 * fixed detail and `Retry-After` (`retryAfterMs` rounded up to whole seconds).
 */
export class StoreFullError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_STORE_FULL' satisfies ErrorCode;
  /** When room may be there again, in ms (the `Retry-After` header rounds it up to whole seconds). */
  readonly retryAfterMs: number;

  constructor(message: string, retryAfterMs = 1000) {
    const code = StoreFullError.code;
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    super(problemInit(code, { detail: ERROR_CODES[code].http.detail, message, headers: { 'retry-after': String(seconds) }, extensions: { retryAfterMs: Math.max(0, Math.ceil(retryAfterMs)) } }));
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * 503 (store-busy): the store's one writer is held by another request's transaction (SQLite has one
 * writer per file) for longer than this request could wait, so it was not executed. `message` says
 * who holds the writer and the option to tune, for logs; the client is told the table's fixed
 * detail and `Retry-After` (`retryAfterMs` rounded up to whole seconds).
 */
export class StoreBusyError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_STORE_BUSY' satisfies ErrorCode;
  /** When the writer is likely free again, in ms (the `Retry-After` header rounds it up to whole seconds). */
  readonly retryAfterMs: number;

  constructor(message: string, retryAfterMs = 1000, options?: { cause?: unknown }) {
    const code = StoreBusyError.code;
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    super(
      problemInit(code, { detail: ERROR_CODES[code].http.detail, message, headers: { 'retry-after': String(seconds) }, extensions: { retryAfterMs: Math.max(0, Math.ceil(retryAfterMs)) }, cause: options?.cause }),
    );
    this.retryAfterMs = retryAfterMs;
  }
}

/** A stored record could not be read back (a corrupt row or hash); the message names the record. */
export class CorruptRecordError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_CORRUPT_RECORD' satisfies ErrorCode;

  constructor(message: string, options?: { cause?: unknown }) {
    super(CorruptRecordError.code, message, options);
  }
}

/**
 * 500 (store-schema-missing): the store's table, a column or its claim function is not there, found
 * by `store.verify()` or by a statement the database refused for it. `missing` names each part, and
 * the message (for logs) says the command that creates them; the client is told the table's fixed
 * detail and no `Retry-After`: the fault lasts until someone migrates, so retrying cannot help.
 */
export class StoreSchemaMissingError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_STORE_SCHEMA_MISSING' satisfies ErrorCode;
  readonly missing: readonly string[];

  constructor(store: string, missing: readonly string[], fix: string, options?: { cause?: unknown }) {
    const code = StoreSchemaMissingError.code;
    super(problemInit(code, { detail: ERROR_CODES[code].http.detail, message: `${store} store: missing ${missing.join(', ')}; run ${fix}`, cause: options?.cause }));
    this.missing = missing;
  }
}

/**
 * `store.verify()` found that the server, or the client, cannot run the store as configured,
 * though it answers: `reason` says what (a server too old for the store's scripts, scripting
 * commands an ACL or `rename-command` refuses, a key pattern the ACL user may not touch, a client
 * that rewrites the store's keys), and the message says the fix.
 */
export class StoreIncompatibleError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_STORE_INCOMPATIBLE' satisfies ErrorCode;
  readonly reason: StoreIncompatibility;

  constructor(reason: StoreIncompatibility, message: string, options?: { cause?: unknown }) {
    super(StoreIncompatibleError.code, message, options);
    this.reason = reason;
  }
}

/** What `StoreIncompatibleError` found. */
export type StoreIncompatibility = 'server-version' | 'scripting-refused' | 'keys-refused' | 'key-prefix' | 'key-slot';

/**
 * A scope, key or fingerprint a store refuses before it touches the backend: not a string, not
 * well-formed UTF-16 (a lone surrogate, which drivers encode as U+FFFD, so two different scopes
 * could share one record), or longer than the store's columns hold. `field` names which one.
 */
export class InvalidRecordRefError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_INVALID_REF' satisfies ErrorCode;
  /** The refused part: the ref's scope or key, or the fingerprint that travels with a claim. */
  readonly field: 'scope' | 'key' | 'fingerprint';
  readonly reason: string;

  constructor(field: 'scope' | 'key' | 'fingerprint', reason: string) {
    super(InvalidRecordRefError.code, `Invalid record ${field}: ${reason}`);
    this.field = field;
    this.reason = reason;
  }
}

/** A write was attempted through a store transaction that had already committed or rolled back. */
export class TransactionEndedError extends CodedError { static readonly code = 'ERR_IDEMKIT_TRANSACTION_ENDED' satisfies ErrorCode; }

/**
 * A phase transaction (`ctx.beginTransaction()`, or phases' `run()`) was asked for in whole-request
 * transactional mode: that mode commits the request once, a phase commits on its own.
 */
export class TransactionalModeError extends CodedError { static readonly code = 'ERR_IDEMKIT_TRANSACTIONAL_MODE' satisfies ErrorCode; }

/** `ctx.beginTransaction()` on a store without transactions (Redis, memory). */
export class NotTransactionalError extends CodedError { static readonly code = 'ERR_IDEMKIT_NOT_TRANSACTIONAL' satisfies ErrorCode; }

/** The request's context was used after its request had ended. */
export class ExecutionEndedError extends CodedError { static readonly code = 'ERR_IDEMKIT_EXECUTION_ENDED' satisfies ErrorCode; }

/**
 * Express: the request body was read before the idempotency middleware ran and not kept (neither
 * `req.rawBody` nor `req.body`), so there is nothing to fingerprint. Mount the middleware first,
 * or keep the bytes.
 */
export class BodyNotKeptError extends CodedError { static readonly code = 'ERR_IDEMKIT_BODY_NOT_KEPT' satisfies ErrorCode; }

/** Express: the client went away before its request body was read; nothing was claimed or run. */
export class RequestAbortedError extends CodedError { static readonly code = 'ERR_IDEMKIT_REQUEST_ABORTED' satisfies ErrorCode; }

/** 400: the key header is absent on a route that requires one. */
export class MissingKeyError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_KEY_MISSING' satisfies ErrorCode;

  constructor(header: string) {
    super(problemInit(MissingKeyError.code, { detail: `This operation requires an \`${header}\` header.` }));
  }
}

/** 400: the key header is present but unusable (syntax, length, characters, policy, repeated). */
export class InvalidKeyError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_KEY_INVALID' satisfies ErrorCode;
  readonly reason: string;

  constructor(header: string, reason: string) {
    super(problemInit(InvalidKeyError.code, { detail: `The \`${header}\` header is invalid: ${reason}.`, extensions: { reason } }));
    this.reason = reason;
  }
}

/**
 * What a 409 `request-in-progress` says of the request that holds the key, from the store's
 * in-flight answer (durations on the store's clock).
 */
interface InFlightOwner {
  /**
   * `alive`: its record changed within 1.5 renewal periods (a live owner renews every third of
   * its lease); `unresponsive`: it has not, so it likely crashed, froze or lost the store, and a
   * retry can take the key over once the lease ends (`leaseEndsInMs`).
   */
  readonly owner: 'alive' | 'unresponsive';
  /** What is left of its lease, in ms. */
  readonly leaseEndsInMs: number;
  /** How long ago its record last changed (claim, renewal, checkpoint), in ms; undefined when the store cannot tell. */
  readonly renewedMsAgo?: number | undefined;
}

/**
 * 409: the first request with this key is still being processed. The hint goes out twice: as
 * `Retry-After` in whole seconds (at least 1, RFC 9110), which every client understands, and in
 * ms as the problem's `retryAfterMs` member, so a client that reads it (idemkit's) can come back
 * after 100 ms when the original takes 100 ms, not after the header's 1 s. With `owner` (the
 * engine always gives it), the problem also says whether that request is alive, when its lease
 * ends and how long ago it last renewed (members `owner`, `leaseEndsInMs`, `renewedMsAgo`).
 */
export class KeyInFlightError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_KEY_IN_FLIGHT' satisfies ErrorCode;
  /** When to try again, in ms (the `Retry-After` header rounds it up to whole seconds). */
  readonly retryAfterMs: number;
  /** `alive` or `unresponsive` (see the problem members in docs/semantics.md); undefined when not given. */
  readonly owner: InFlightOwner['owner'] | undefined;
  /** What is left of the owner's lease, in ms; undefined when not given. */
  readonly leaseEndsInMs: number | undefined;
  /** How long ago the owner's record last changed, in ms; undefined when unknown. */
  readonly renewedMsAgo: number | undefined;

  constructor(retryAfterMs: number, owner?: InFlightOwner) {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    const hint = Math.max(0, Math.ceil(retryAfterMs));
    const extensions: Record<string, unknown> = { retryAfterMs: hint };
    if (owner !== undefined) {
      extensions.owner = owner.owner;
      extensions.leaseEndsInMs = Math.max(0, Math.ceil(owner.leaseEndsInMs));
      if (owner.renewedMsAgo !== undefined) extensions.renewedMsAgo = Math.max(0, Math.floor(owner.renewedMsAgo));
    }
    super(
      problemInit(KeyInFlightError.code, {
        detail:
          owner?.owner === 'unresponsive'
            ? 'The original request has stopped renewing its claim on this key (its process may have ended); retry with the same key and body after Retry-After, when its lease ends and the retry can take it over.'
            : 'The original request is still being processed; retry with the same key and body after Retry-After.',
        headers: { 'retry-after': String(seconds) },
        extensions,
      }),
    );
    this.retryAfterMs = retryAfterMs;
    this.owner = owner?.owner;
    this.leaseEndsInMs = owner?.leaseEndsInMs;
    this.renewedMsAgo = owner?.renewedMsAgo;
  }
}

/** 422: the key was already used with a different request (method, path or body). */
export class KeyMismatchError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_KEY_MISMATCH' satisfies ErrorCode;

  /** `detail`: why, when it is not the usual different payload (a record made with other fingerprint settings). */
  constructor(detail?: string) {
    super(
      problemInit(KeyMismatchError.code, {
        detail: detail ?? 'This key was already used with a different request payload; use a new key for a new operation.',
      }),
    );
  }
}

/** 413: the request body is larger than the middleware reads. */
export class BodyTooLargeError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_BODY_TOO_LARGE' satisfies ErrorCode;

  constructor(limit: number) {
    super(
      problemInit(BodyTooLargeError.code, {
        detail: `The request body exceeds the limit of ${limit} bytes (option \`maxBodyBytes\`).`,
        extensions: { limit },
      }),
    );
  }
}

/** 400: the `scope` hook returned text that cannot be stored as it is (ill-formed UTF-16). */
export class InvalidScopeError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_SCOPE_INVALID' satisfies ErrorCode;

  constructor(reason: string) {
    super(problemInit(InvalidScopeError.code, { detail: `The scope this request belongs to is unusable: ${reason}.` }));
  }
}

/**
 * 503: the handler ran past `maxExecutionMs`. Its claim stopped being renewed then; in transactional
 * mode its transaction was rolled back and `ctx.tx` refused, so nothing of this attempt was
 * committed. Also what `onError` is told when the ceiling is reached.
 */
export class ExecutionTimeoutHttpError extends IdempotencyHttpError {
  static readonly code = 'ERR_IDEMKIT_EXECUTION_TIMEOUT' satisfies ErrorCode;

  constructor(maxExecutionMs: number, committed: 'nothing' | 'unknown') {
    super(
      problemInit(ExecutionTimeoutHttpError.code, {
        detail:
          committed === 'nothing'
            ? `The handler ran longer than ${maxExecutionMs} ms (option \`maxExecutionMs\`); its transaction was rolled back and nothing was committed. Retry with the same key.`
            : `The handler has run longer than ${maxExecutionMs} ms (option \`maxExecutionMs\`); its claim is no longer renewed, so once its lease ends a retry with the same key may run again.`,
        headers: { 'retry-after': '1' },
      }),
    );
  }
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';
