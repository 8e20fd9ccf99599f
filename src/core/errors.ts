import { ERROR_CODES } from './error-codes.js';
import type { ErrorCode } from './error-codes.js';
import { CodedError, IdemkitError, IdempotencyHttpError, fixedDetailAnswer, problemInit } from './error-base.js';

export { ERROR_CODES, errorCodeEntry } from './error-codes.js';
export type { CodeOf, ErrorCode, ErrorCodeEntry, ErrorEntryPoint, HttpErrorCode, HttpProblemFacts, PhaseErrorCode } from './error-codes.js';
export { CodedError, IdemkitError, IdempotencyHttpError, PROBLEM_BASE, PROBLEM_CONTENT_TYPE, problemFor } from './error-base.js';
export type { ProblemDetails } from './error-base.js';
export { BodyTooLargeError, ExecutionTimeoutHttpError, InvalidKeyError, InvalidScopeError, KeyInFlightError, KeyMismatchError, MissingKeyError } from './request-errors.js';

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
export class CorruptRecordError extends CodedError { static readonly code = 'ERR_IDEMKIT_CORRUPT_RECORD' satisfies ErrorCode; }

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
