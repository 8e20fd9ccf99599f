// The bases every idemkit error builds on, and how an HTTP answer's problem is made from the
// code table; errors.ts holds the errors themselves (request-errors.ts those a request is answered with).
import { ERROR_CODES } from './error-codes.js';
import type { ErrorCode, HttpErrorCode } from './error-codes.js';


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
 * The base of the errors whose code is their class's static `code`: one that carries only a
 * message is its code and its doc comment.
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
export function problemInit(code: HttpErrorCode, init: ProblemInit) {
  const { status, slug, title } = ERROR_CODES[code].http;
  return { code, status, slug, title, detail: init.detail, message: init.message, headers: init.headers, extensions: init.extensions, cause: init.cause };
}

/**
 * The answer of a code whose detail the table fixes (the client learns nothing of the store), with
 * a message of its own for logs, and `Retry-After: 1`.
 */
export function fixedDetailAnswer(code: 'ERR_IDEMKIT_LEASE_LOST' | 'ERR_IDEMKIT_STORE_UNAVAILABLE', message: string, cause: unknown) {
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

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';
