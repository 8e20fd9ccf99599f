// The errors a request is answered with before or instead of its handler's answer: a missing or
// unusable key, a key in flight or reused, a body too large, an unusable scope, an execution past
// its ceiling. errors.ts re-exports them.
import type { ErrorCode } from './error-codes.js';
import { IdempotencyHttpError, problemInit } from './error-base.js';

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
