/** Base URI of the stable problem `type`s; each case appends its slug. */
export const PROBLEM_BASE = 'https://idemkit.dev/problems/';

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

/** An option was invalid; thrown eagerly when a factory resolves its options. */
export class InvalidOptionError extends IdemkitError {
  readonly option: string;

  constructor(option: string, message: string) {
    super('ERR_IDEMKIT_INVALID_OPTION', `Invalid option \`${option}\`: ${message}`);
    this.option = option;
  }
}

/** The owner token is no longer current: the lease ran out and another request took over. */
export class LeaseLostError extends IdemkitError {
  constructor(message = 'The idempotency record is no longer owned by this request (lease lost or record replaced)') {
    super('ERR_IDEMKIT_LEASE_LOST', message);
  }
}

/** A store could not be reached or answered with an error. */
export class StoreUnavailableError extends IdemkitError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_IDEMKIT_STORE_UNAVAILABLE', message, options);
  }
}

/** A stored record could not be read back (a corrupt row or hash); the message names the record. */
export class CorruptRecordError extends IdemkitError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_IDEMKIT_CORRUPT_RECORD', message, options);
  }
}

/**
 * A scope, key or fingerprint a store refuses before it touches the backend: not a string, not
 * well-formed UTF-16 (a lone surrogate, which drivers encode as U+FFFD, so two different scopes
 * could share one record), or longer than the store's columns hold. `field` names which one.
 */
export class InvalidRecordRefError extends IdemkitError {
  /** The refused part: the ref's scope or key, or the fingerprint that travels with a claim. */
  readonly field: 'scope' | 'key' | 'fingerprint';
  readonly reason: string;

  constructor(field: 'scope' | 'key' | 'fingerprint', reason: string) {
    super('ERR_IDEMKIT_INVALID_REF', `Invalid record ${field}: ${reason}`);
    this.field = field;
    this.reason = reason;
  }
}

/** A write was attempted through a store transaction that had already committed or rolled back. */
export class TransactionEndedError extends IdemkitError {
  constructor(message: string) {
    super('ERR_IDEMKIT_TRANSACTION_ENDED', message);
  }
}

/** An error that maps to an HTTP answer with a problem+json body. */
export class IdempotencyHttpError extends IdemkitError {
  readonly status: number;
  readonly slug: string;
  readonly title: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly extensions: Readonly<Record<string, unknown>>;

  constructor(init: {
    code: string;
    status: number;
    slug: string;
    title: string;
    detail: string;
    headers?: Record<string, string>;
    extensions?: Record<string, unknown>;
    cause?: unknown;
  }) {
    super(init.code, init.detail, { cause: init.cause });
    this.status = init.status;
    this.slug = init.slug;
    this.title = init.title;
    this.headers = init.headers ?? {};
    this.extensions = init.extensions ?? {};
  }

  get type(): string {
    return PROBLEM_BASE + this.slug;
  }

  problem(): ProblemDetails {
    return { ...this.extensions, type: this.type, title: this.title, status: this.status, detail: this.message };
  }
}

/** 400: the key header is absent on a route that requires one. */
export class MissingKeyError extends IdempotencyHttpError {
  constructor(header: string) {
    super({
      code: 'ERR_IDEMKIT_KEY_MISSING',
      status: 400,
      slug: 'missing-key',
      title: 'Idempotency-Key is missing',
      detail: `This operation requires an \`${header}\` header.`,
    });
  }
}

/** 400: the key header is present but unusable (syntax, length, characters, policy, repeated). */
export class InvalidKeyError extends IdempotencyHttpError {
  readonly reason: string;

  constructor(header: string, reason: string) {
    super({
      code: 'ERR_IDEMKIT_KEY_INVALID',
      status: 400,
      slug: 'invalid-key',
      title: 'Idempotency-Key is invalid',
      detail: `The \`${header}\` header is invalid: ${reason}.`,
      extensions: { reason },
    });
    this.reason = reason;
  }
}

/** 409: the first request with this key is still being processed. */
export class KeyInFlightError extends IdempotencyHttpError {
  constructor(retryAfterMs: number) {
    const seconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
    super({
      code: 'ERR_IDEMKIT_KEY_IN_FLIGHT',
      status: 409,
      slug: 'request-in-progress',
      title: 'A request with this Idempotency-Key is in progress',
      detail: 'The original request is still being processed; retry with the same key and body after Retry-After.',
      headers: { 'retry-after': String(seconds) },
    });
  }
}

/** 409: this request lost its lease while running; its transaction was rolled back. */
export class LeaseLostHttpError extends IdempotencyHttpError {
  constructor(cause?: unknown) {
    super({
      code: 'ERR_IDEMKIT_LEASE_LOST',
      status: 409,
      slug: 'lease-lost',
      title: 'The request lost ownership of its Idempotency-Key',
      detail: 'The request ran past its lease and another request took over; nothing from this attempt was committed.',
      headers: { 'retry-after': '1' },
      cause,
    });
  }
}

/** 422: the key was already used with a different request (method, path or body). */
export class KeyMismatchError extends IdempotencyHttpError {
  constructor() {
    super({
      code: 'ERR_IDEMKIT_KEY_MISMATCH',
      status: 422,
      slug: 'key-reused',
      title: 'Idempotency-Key is already used',
      detail: 'This key was already used with a different request payload; use a new key for a new operation.',
    });
  }
}

/** 413: the request body is larger than the middleware reads. */
export class BodyTooLargeError extends IdempotencyHttpError {
  constructor(limit: number) {
    super({
      code: 'ERR_IDEMKIT_BODY_TOO_LARGE',
      status: 413,
      slug: 'body-too-large',
      title: 'Request body too large',
      detail: `The request body exceeds the limit of ${limit} bytes (option \`maxBodyBytes\`).`,
      extensions: { limit },
    });
  }
}

/** 503: the store could not be reached or did not answer in time, so the request is refused (fail closed). */
export class StoreUnavailableHttpError extends IdempotencyHttpError {
  constructor(cause?: unknown) {
    super({
      code: 'ERR_IDEMKIT_STORE_UNAVAILABLE',
      status: 503,
      slug: 'store-unavailable',
      title: 'Idempotency store unavailable',
      detail: 'The idempotency store could not be reached or did not answer in time; the request was not executed. Retry with the same key.',
      headers: { 'retry-after': '1' },
      cause,
    });
  }
}

/** 400: the `scope` hook returned text that cannot be stored as it is (ill-formed UTF-16). */
export class InvalidScopeError extends IdempotencyHttpError {
  constructor(reason: string) {
    super({
      code: 'ERR_IDEMKIT_SCOPE_INVALID',
      status: 400,
      slug: 'invalid-scope',
      title: 'The request has no usable idempotency scope',
      detail: `The scope this request belongs to is unusable: ${reason}.`,
    });
  }
}

/**
 * 503: the handler ran past `maxExecutionMs`. Its claim stopped being renewed then; in transactional
 * mode its transaction was rolled back and `ctx.tx` refused, so nothing of this attempt was
 * committed. Also what `onError` is told when the ceiling is reached.
 */
export class ExecutionTimeoutHttpError extends IdempotencyHttpError {
  constructor(maxExecutionMs: number, committed: 'nothing' | 'unknown') {
    super({
      code: 'ERR_IDEMKIT_EXECUTION_TIMEOUT',
      status: 503,
      slug: 'execution-timeout',
      title: 'The request ran past its time limit',
      detail:
        committed === 'nothing'
          ? `The handler ran longer than ${maxExecutionMs} ms (option \`maxExecutionMs\`); its transaction was rolled back and nothing was committed. Retry with the same key.`
          : `The handler has run longer than ${maxExecutionMs} ms (option \`maxExecutionMs\`); its claim is no longer renewed, so once its lease ends a retry with the same key may run again.`,
      headers: { 'retry-after': '1' },
    });
  }
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';
