import { backoffDelay, parseRetryAfter, raceAbort, sleep } from './backoff.js';
import type { CallInfo } from './errors.js';
import { AttemptTimeoutError, HttpStatusError, RequestFailedError, RetryBudgetExhaustedError } from './errors.js';
import type { IdempotentFetchOptions, ResolvedClientOptions, RetryContext } from './options.js';
import { resolveClientOptions } from './options.js';
import type { IdempotentRequestInit, PreparedRequest } from './request.js';
import { prepareRequest } from './request.js';
import type { IdempotentResponse } from './response.js';
import { finalResponse, isReplayed, parseProblem } from './response.js';
import { RETRYABLE_STATUSES, isNetworkFailure } from './retryable.js';

/** fetch's signature; the response also says how the call went (`response.idempotency`). */
export type IdempotentFetch = (input: RequestInfo | URL, init?: IdempotentRequestInit) => Promise<IdempotentResponse>;

/** What one attempt produced: a response with its whole body, or an error. */
type Outcome =
  | { readonly response: Response; readonly body: Uint8Array<ArrayBuffer>; readonly error?: undefined }
  | { readonly response?: undefined; readonly error: unknown };

/**
 * Creates a fetch that sends one Idempotency-Key per logical call and retries network failures,
 * 409, 429, 500, 502, 503 and 504 with that same key and the same bytes, with full-jitter backoff,
 * Retry-After, time limits and a retry budget shared by all its calls. Options are validated here.
 */
export function createIdempotentFetch(options: IdempotentFetchOptions = {}): IdempotentFetch {
  const resolved = resolveClientOptions(options);
  return async function idempotentFetch(input, init) {
    const request = await prepareRequest(input, init, resolved);
    resolved.budget?.deposit();
    return run(request, resolved);
  };
}

async function run(request: PreparedRequest, o: ResolvedClientOptions): Promise<IdempotentResponse> {
  const started = performance.now();
  // Looked up per call, so a fetch installed after the client was created is used.
  const fetchImpl = o.fetch ?? globalThis.fetch;
  for (let attempt = 1; ; attempt++) {
    const outcome = await attemptOnce(fetchImpl, request, o.attemptTimeout);
    const info: CallInfo = { key: request.key, attempts: attempt };
    const { response } = outcome;
    const retryable = response
      ? RETRYABLE_STATUSES.has(response.status) && !isReplayed(response) // a replay is the server's final word for this key
      : isNetworkFailure(outcome.error);
    if (!retryable || !request.repeatable || attempt > o.retries) return settle(outcome, info, o);

    const retryAfter = response ? parseRetryAfter(response.headers.get('retry-after')) : undefined;
    // Retrying before the server's Retry-After would disobey it and most likely fail again.
    if (retryAfter !== undefined && retryAfter > o.maxRetryAfter) return settle(outcome, info, o);
    const delay = Math.max(retryAfter ?? 0, backoffDelay(attempt, o));
    if (performance.now() + delay - started > o.maxRetryTime) return settle(outcome, info, o);
    if (o.budget && !o.budget.tryWithdraw()) throw budgetExhausted(outcome, info);
    const context: RetryContext = {
      key: request.key,
      method: request.method,
      url: request.url,
      attempt,
      retriesLeft: o.retries - attempt,
      delay,
      ...(response ? { status: response.status } : { error: outcome.error }),
      ...(retryAfter !== undefined ? { retryAfter } : {}),
    };
    // Awaited, but an abort does not wait for a slow hook.
    if (o.onRetry) await raceAbort(Promise.resolve(o.onRetry(context)), request.signal);
    await sleep(delay, request.signal);
  }
}

/**
 * One attempt: the request and the whole response body, under the caller's signal and the
 * attempt timeout. Reading the body here means a connection cut mid-body is a failed attempt,
 * retried with the same key, rather than a broken stream after the call "succeeded".
 * Rejects only when the caller aborted.
 */
async function attemptOnce(fetchImpl: typeof fetch, request: PreparedRequest, timeout: number): Promise<Outcome> {
  const { signal } = request;
  signal?.throwIfAborted();
  const controller = new AbortController();
  const forward = () => controller.abort(signal?.reason);
  signal?.addEventListener('abort', forward, { once: true });
  const timer = Number.isFinite(timeout) ? setTimeout(() => controller.abort(new AttemptTimeoutError(timeout)), timeout) : undefined;
  try {
    const exchange = async (): Promise<Outcome> => {
      const response = await fetchImpl(request.url, { ...request.init, signal: controller.signal });
      return { response, body: new Uint8Array(await response.arrayBuffer()) };
    };
    return await raceAbort(exchange(), controller.signal);
  } catch (error) {
    // The caller's abort ends the call with the caller's reason, whatever the attempt was doing.
    signal?.throwIfAborted();
    return { error: controller.signal.aborted ? controller.signal.reason : error };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', forward);
  }
}

/** The call's final answer: the response (or `HttpStatusError`), or `RequestFailedError` for an error. */
function settle(outcome: Outcome, info: CallInfo, o: ResolvedClientOptions): IdempotentResponse {
  if (!outcome.response) throw new RequestFailedError(info, outcome.error);
  const replayed = isReplayed(outcome.response);
  const response = finalResponse(outcome.response, outcome.body, { ...info, replayed });
  if (o.throwOnError && response.status >= 400) {
    throw new HttpStatusError({ ...info, replayed }, response, parseProblem(response, outcome.body));
  }
  return response;
}

/** Failing fast: the error carries the last response (still readable) or the last error. */
function budgetExhausted(outcome: Outcome, info: CallInfo): RetryBudgetExhaustedError {
  if (!outcome.response) return new RetryBudgetExhaustedError(info, { error: outcome.error });
  // A retryable response is never a replay: replays are not retried.
  return new RetryBudgetExhaustedError(info, { response: finalResponse(outcome.response, outcome.body, { ...info, replayed: false }) });
}
