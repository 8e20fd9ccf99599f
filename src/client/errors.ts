import { IdemkitError } from '../core/errors.js';
import type { ErrorCode } from '../core/errors.js';

/**
 * Why a call settled on an in-progress 409 (idemkit's `request-in-progress`), and when to ask
 * again with the same key. The operation has not failed; it may or may not have happened yet.
 */
export interface InProgressInfo {
  /**
   * What the server said of the original request's owner: `'alive'` (still running: polling
   * stopped at `maxRetryTime`), `'unresponsive'` (it stopped renewing its lease, e.g. its
   * instance crashed, and the lease ends later than the client would wait), or undefined when
   * the server does not say (other servers, older idemkit).
   */
  readonly owner: 'alive' | 'unresponsive' | undefined;
  /**
   * How long to wait before sending the request again with the same key, in ms from when the call
   * settled: for an unresponsive owner, until its lease has ended (plus a small margin), when that
   * retry takes the key over and gets the real answer (the server runs the request once under the
   * key, or replays what it stored); otherwise the server's retry hint. Undefined when there is none.
   */
  readonly retryInMs: number | undefined;
}

/** An RFC 9457 problem details body as received: every member is optional on the wire. */
export interface Problem {
  readonly type?: string;
  readonly title?: string;
  readonly status?: number;
  readonly detail?: string;
  readonly instance?: string;
  readonly [extension: string]: unknown;
}

/** What every failed call reports, so the caller can reconcile with the same key. */
export interface CallInfo {
  /** The key sent on every attempt; undefined when the request carried none (e.g. a GET). */
  readonly key: string | undefined;
  /** How many attempts were sent. */
  readonly attempts: number;
}

/**
 * A call that ended without a usable answer. It carries the key because the outcome may be
 * unknown: the server may have executed the request. Reconcile or retry later with the SAME key.
 */
export class IdempotentCallError extends IdemkitError {
  readonly key: string | undefined;
  readonly attempts: number;

  constructor(code: string, message: string, info: CallInfo, cause?: unknown) {
    super(code, message, { cause });
    this.key = info.key;
    this.attempts = info.attempts;
  }
}

/**
 * Every attempt ended without a response (connection refused or reset, socket closed
 * mid-response, attempt timeout), or with an error that is not retried. `cause` is the last error.
 */
export class RequestFailedError extends IdempotentCallError {
  static readonly code = 'ERR_IDEMKIT_REQUEST_FAILED' satisfies ErrorCode;

  constructor(info: CallInfo, cause: unknown) {
    super(
      RequestFailedError.code,
      `The request failed after ${info.attempts} attempt(s): ${describe(cause)}. The outcome is unknown; retry with the same key.`,
      info,
      cause,
    );
  }
}

/**
 * A retry was due but the shared retry budget is empty: the dependency is failing for many calls,
 * so this call fails fast instead of adding load. `cause` is the last error, `status` the last
 * response's status when there was one.
 */
export class RetryBudgetExhaustedError extends IdempotentCallError {
  static readonly code = 'ERR_IDEMKIT_RETRY_BUDGET_EXHAUSTED' satisfies ErrorCode;
  readonly status: number | undefined;
  readonly response: Response | undefined;

  constructor(info: CallInfo, last: { error?: unknown; response?: Response }) {
    const what = last.response ? `status ${last.response.status}` : describe(last.error);
    super(
      RetryBudgetExhaustedError.code,
      `Not retried: the retry budget is exhausted (last attempt: ${what}). The outcome may be unknown; retry later with the same key.`,
      info,
      last.error,
    );
    this.status = last.response?.status;
    this.response = last.response;
  }
}

/**
 * Thrown with `throwOnError: true` when the final response has a status >= 400. `problem` is the
 * parsed body when it is `application/problem+json`; `response` is still readable. `inProgress`
 * is true for an in-progress 409 the client stopped at: not a failure, the original request had
 * not finished (`owner` and `retryInMs` say why and when to ask again); its result comes with the
 * same key later.
 */
export class HttpStatusError extends IdempotentCallError {
  static readonly code = 'ERR_IDEMKIT_HTTP_STATUS' satisfies ErrorCode;
  readonly status: number;
  readonly problem: Problem | undefined;
  readonly response: Response;
  readonly replayed: boolean;
  readonly inProgress: boolean;
  /** With `inProgress`: what the server said of the original's owner (`InProgressInfo.owner`); else undefined. */
  readonly owner: 'alive' | 'unresponsive' | undefined;
  /** With `inProgress`: when to send it again with the same key, in ms (`InProgressInfo.retryInMs`); else undefined. */
  readonly retryInMs: number | undefined;

  /** `info.inProgress`: what the client knew of the original request it stopped at (`true`: nothing more). */
  constructor(info: CallInfo & { readonly replayed: boolean; readonly inProgress?: boolean | InProgressInfo }, response: Response, problem: Problem | undefined) {
    const text = problem?.detail ?? problem?.title;
    const detail = typeof text === 'string' ? text : undefined;
    const progress = info.inProgress === true ? { owner: undefined, retryInMs: undefined } : info.inProgress || undefined;
    super(HttpStatusError.code, progress ? inProgressMessage(response.status, info, progress) : `HTTP ${response.status}${detail ? `: ${detail}` : ''}`, info);
    this.status = response.status;
    this.problem = problem;
    this.response = response;
    this.replayed = info.replayed;
    this.inProgress = progress !== undefined;
    this.owner = progress?.owner;
    this.retryInMs = progress?.retryInMs;
  }
}

/** Says that nothing failed, what the original was doing, and to come back with the same key. */
function inProgressMessage(status: number, info: CallInfo, progress: InProgressInfo): string {
  const key = info.key === undefined ? '' : ` (${info.key})`;
  const when = progress.retryInMs === undefined ? 'later' : `in ${progress.retryInMs} ms or later`;
  if (progress.owner === 'unresponsive') {
    return `HTTP ${status}: the original request with this key is held by an owner that stopped renewing its lease (crashed or ` +
      `stalled), and its lease ends later than the client waits (${info.attempts} attempt(s), options \`maxRetryTime\`, ` +
      `\`maxRetryAfter\`). It has not failed: it may or may not have happened. A retry with the same key${key} ${when} ` +
      `takes the key over once the lease has ended, and settles it; never retry with a new one.`;
  }
  return `HTTP ${status}: the original request with this key was still in progress when the client stopped polling ` +
    `(${info.attempts} attempt(s), option \`maxRetryTime\`). It has not failed: ask again ${when} with the same key${key} ` +
    `to get its result, never with a new one.`;
}

/**
 * The response body is larger than `maxResponseBytes`: it declared a larger `Content-Length`
 * (nothing was read), or reading passed the limit and was stopped there (the stream cancelled).
 * Never retried: the server answered, so the request may have executed. Whether to send it again
 * follows the rules of the key: with the SAME key (a server that executed it replays the same
 * oversized answer), never blindly with a new one.
 */
export class ResponseTooLargeError extends IdempotentCallError {
  static readonly code = 'ERR_IDEMKIT_RESPONSE_TOO_LARGE' satisfies ErrorCode;
  /** The limit in force (`maxResponseBytes`). */
  readonly limit: number;
  /** Body bytes read before reading stopped: 0 when the declared length alone was over the limit. */
  readonly received: number;
  /** The response's `Content-Length`, when it declared one. */
  readonly declared: number | undefined;
  readonly status: number;
  readonly url: string;

  constructor(info: CallInfo, detail: { limit: number; received: number; declared: number | undefined; status: number; url: string }) {
    const what = detail.received === 0 && detail.declared !== undefined
      ? `it declares Content-Length ${detail.declared}, so nothing was read`
      : `reading stopped after ${detail.received} bytes`;
    super(
      ResponseTooLargeError.code,
      `The response to ${detail.url} (status ${detail.status}) is larger than \`maxResponseBytes\` (${detail.limit} bytes): ${what}. ` +
        `The server answered, so the request may have executed: ${sameKeyAdvice(info.key)}, or raise \`maxResponseBytes\`.`,
      info,
    );
    this.limit = detail.limit;
    this.received = detail.received;
    this.declared = detail.declared;
    this.status = detail.status;
    this.url = detail.url;
  }
}

/**
 * A redirect to another origin (scheme, host or port), which the client does not follow: the
 * request's key, body and headers (credentials included) are only ever sent to the origin the
 * caller named. Not retried. To follow it anyway, call with `redirect: 'manual'`, which returns the
 * 3xx, and decide yourself what to send where.
 */
export class CrossOriginRedirectError extends IdempotentCallError {
  static readonly code = 'ERR_IDEMKIT_CROSS_ORIGIN_REDIRECT' satisfies ErrorCode;
  /** The origin that answered with the redirect. */
  readonly from: string;
  /** The origin the redirect points to. */
  readonly to: string;
  /** The redirect's target, resolved against the URL that answered. */
  readonly location: string;
  readonly status: number;

  constructor(info: CallInfo, detail: { from: string; to: string; location: string; status: number }) {
    super(
      CrossOriginRedirectError.code,
      `${detail.from} answered ${detail.status} with a redirect to another origin, ${detail.to} (${detail.location}); not followed: ` +
        `the idempotency key, the body and the headers are never sent to another origin. Use \`redirect: 'manual'\` to get the ${detail.status} and follow it yourself.`,
      info,
    );
    this.from = detail.from;
    this.to = detail.to;
    this.location = detail.location;
    this.status = detail.status;
  }
}

/** More redirects in one attempt than `maxRedirects` allows (a loop, most likely). Not retried. */
export class TooManyRedirectsError extends IdempotentCallError {
  static readonly code = 'ERR_IDEMKIT_TOO_MANY_REDIRECTS' satisfies ErrorCode;
  readonly limit: number;
  /** Where the redirect that was not followed pointed. */
  readonly location: string;

  constructor(info: CallInfo, detail: { limit: number; location: string }) {
    super(
      TooManyRedirectsError.code,
      `More than ${detail.limit} redirect(s) (option \`maxRedirects\`); the next one pointed to ${detail.location}. ` +
        `The request may have executed on the way: ${sameKeyAdvice(info.key)}.`,
      info,
    );
    this.limit = detail.limit;
    this.location = detail.location;
  }
}

/** One attempt took longer than `attemptTimeout`; retried like a network failure. */
export class AttemptTimeoutError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_ATTEMPT_TIMEOUT' satisfies ErrorCode;
  readonly timeout: number;

  constructor(timeout: number) {
    super(AttemptTimeoutError.code, `The attempt did not complete within ${timeout} ms (option \`attemptTimeout\`)`);
    this.timeout = timeout;
  }
}

/**
 * The body cannot be sent identically on every attempt (a stream larger than `maxBodyBytes`, a
 * body already read). Thrown before the first attempt, so nothing reached the server.
 */
export class BodyNotReplayableError extends IdemkitError {
  static readonly code = 'ERR_IDEMKIT_BODY_NOT_REPLAYABLE' satisfies ErrorCode;

  constructor(reason: string, options?: { cause?: unknown }) {
    super(BodyNotReplayableError.code, `The request body cannot be replayed on retries: ${reason}. Nothing was sent.`, options);
  }
}

function sameKeyAdvice(key: string | undefined): string {
  return key === undefined
    ? 'check its outcome before sending it again'
    : `do not send it again with a new key; reconcile, or retry later with the same key (${key})`;
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? ` (${error.cause.message})` : '';
  return `${error.message}${cause}`;
}
