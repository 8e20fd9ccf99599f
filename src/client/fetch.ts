import { readStreamLimited } from '../core/bytes.js';
import { backoffDelay, parseRetryAfter, raceAbort, sleep } from './backoff.js';
import type { CallInfo } from './errors.js';
import {
  AttemptTimeoutError,
  CrossOriginRedirectError,
  HttpStatusError,
  RequestFailedError,
  ResponseTooLargeError,
  RetryBudgetExhaustedError,
  TooManyRedirectsError,
} from './errors.js';
import type { IdempotentFetchOptions, ResolvedClientOptions, RetryContext } from './options.js';
import { resolveClientOptions } from './options.js';
import type { IdempotentRequestInit, PreparedRequest } from './request.js';
import { prepareRequest } from './request.js';
import type { InProgressInfo } from './errors.js';
import type { IdempotencyInfo, IdempotentResponse } from './response.js';
import { finalResponse, isReplayed, parseProblem } from './response.js';
import { RETRYABLE_STATUSES, isInProgress, isNetworkFailure, isPermanent, problemLeaseEnds, problemOwner, problemRetryAfter } from './retryable.js';

/** fetch's signature; the response also says how the call went (`response.idempotency`). */
export type IdempotentFetch = (input: RequestInfo | URL, init?: IdempotentRequestInit) => Promise<IdempotentResponse>;

/** What one attempt produced: a response with its whole body, or an error. */
type Outcome =
  | {
      readonly response: Response;
      readonly body: Uint8Array<ArrayBuffer>;
      /** The URL that gave the final response, after the redirects followed. */
      readonly url: string;
      readonly redirected: boolean;
      readonly error?: undefined;
      readonly final?: undefined;
    }
  | {
      readonly response?: undefined;
      readonly error: unknown;
      /** The server answered, but not usably (too large, a redirect not followed): the call ends with `error`, never retried. */
      readonly final?: boolean;
    };

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

/**
 * How long after an unresponsive owner's lease end the take-over retry is sent. The lease end is
 * measured on the store's clock when it answered, and counted here from when the answer arrived,
 * so the wait already ends after it; the margin covers the rounding to whole ms and a store whose
 * clock reading is a little behind (one taken when its transaction began).
 */
export const TAKEOVER_MARGIN_MS = 250;

async function run(request: PreparedRequest, o: ResolvedClientOptions): Promise<IdempotentResponse> {
  const started = performance.now();
  // Looked up per call, so a fetch installed after the client was created is used.
  const fetchImpl = o.fetch ?? globalThis.fetch;
  // Retries counted against `retries`: every one but the polls of an in-progress 409.
  let counted = 0;
  // 409s so far: the first is retried after the server's hint alone, later ones back off.
  let conflicts = 0;
  for (let attempt = 1; ; attempt++) {
    const info: CallInfo = { key: request.key, attempts: attempt };
    const outcome = await attemptOnce(fetchImpl, request, info, o);
    if (outcome.final) throw outcome.error;
    const { response } = outcome;
    // Parsed only for a status that may be retried: the hint and the kind of answer live in it.
    const problem = response && RETRYABLE_STATUSES.has(response.status) ? parseProblem(response, outcome.body) : undefined;
    const retryable = response
      ? RETRYABLE_STATUSES.has(response.status) && !isReplayed(response) && !isPermanent(problem) // a replay is the server's final word for this key
      : isNetworkFailure(outcome.error);
    if (!retryable || !request.repeatable) return settle(outcome, info, o);
    const conflict = response?.status === 409;
    // An in-progress 409 is no failure: the original is running and the next answer may be its
    // result. It is polled within `maxRetryTime`, outside `retries` and the budget (DESIGN.md).
    const inProgress = response !== undefined && isInProgress(response.status, problem);
    if (!inProgress && counted >= o.retries) return settle(outcome, info, o);

    // idemkit's hint in ms, from the problem body, else the whole seconds of `Retry-After`.
    const header = response ? parseRetryAfter(response.headers.get('retry-after')) : undefined;
    const retryAfter = problemRetryAfter(problem) ?? header;
    const owner = inProgress ? problemOwner(problem) : undefined;
    const left = o.maxRetryTime - (performance.now() - started);
    // Without `leaseEndsInMs` the header is the lease left: idemkit sends it so for this owner.
    const leaseEnds = owner === 'unresponsive' ? problemLeaseEnds(problem) ?? header : undefined;
    let delay: number;
    if (leaseEnds !== undefined) {
      // Its owner stopped renewing (crashed, frozen): polling cannot bring the result, only the end
      // of its lease can, after which a retry takes the key over and gets the real answer.
      const wait = leaseEnds + TAKEOVER_MARGIN_MS;
      conflicts++;
      // Past the deadline, or longer than any server is trusted to ask (`maxRetryAfter`): nothing
      // failed, so the call settles saying when a retry can take the key over.
      if (left <= 0 || leaseEnds > left || leaseEnds > o.maxRetryAfter) return settle(outcome, info, o, { owner, retryInMs: wait });
      // One wait to the lease's end. Should the key still be held after it (a renewal came late, a
      // store's clock ran behind), the next waits back off too, so such a server is not hammered.
      const backoff = conflicts === 1 ? 0 : Math.min(backoffDelay(conflicts - 1, o), o.maxConflictWait);
      delay = Math.min(Math.max(wait, backoff), left);
    } else {
      // A 409's Retry-After guesses how long the original still runs (some servers send their whole
      // lease): an earlier retry only meets another 409 or the replay, so its wait is capped.
      const notBefore = conflict && retryAfter !== undefined ? Math.min(retryAfter, o.maxConflictWait) : retryAfter;
      const progress = inProgress ? { owner, retryInMs: retryAfter } : undefined;
      // Retrying before any other Retry-After would disobey the server and most likely fail again.
      if (notBefore !== undefined && notBefore > o.maxRetryAfter) return settle(outcome, info, o, progress);
      if (conflict) {
        conflicts++;
        // The first 409 is retried when the server expects the original to be done; only when it
        // was not do the polls back off (jittered, never sooner than the hint), up to the cap.
        const backoff = retryAfter === undefined ? backoffDelay(conflicts, o) : conflicts === 1 ? 0 : backoffDelay(conflicts - 1, o);
        delay = Math.min(Math.max(retryAfter ?? 0, backoff), o.maxConflictWait);
      } else {
        delay = Math.max(notBefore ?? 0, backoffDelay(counted + 1, o));
      }
      if (progress) {
        // Polling early is harmless: the last poll is moved up to the deadline rather than dropped.
        if (left <= 0) return settle(outcome, info, o, progress);
        delay = Math.min(delay, left);
      } else {
        if (delay > left) return settle(outcome, info, o);
        // A 409 is an answer from a server that works, not the outage the budget guards against.
        if (!conflict && o.budget && !o.budget.tryWithdraw()) throw budgetExhausted(outcome, info);
        counted++;
      }
    }
    // Filled in after the literal: a spread of the optional fields costs microseconds on Node 20.
    const context: { -readonly [K in keyof RetryContext]: RetryContext[K] } = {
      key: request.key,
      method: request.method,
      url: request.url,
      attempt,
      retriesLeft: o.retries - counted,
      delay,
    };
    if (response) context.status = response.status;
    else context.error = outcome.error;
    if (retryAfter !== undefined) context.retryAfter = retryAfter;
    if (owner !== undefined) context.owner = owner;
    // Awaited, but an abort does not wait for a slow hook.
    if (o.onRetry) await raceAbort(Promise.resolve(o.onRetry(context)), request.signal);
    await sleep(delay, request.signal);
  }
}

/**
 * One attempt: the request, its redirects and the whole response body, under the caller's signal
 * and the attempt timeout. Reading the body here means a connection cut mid-body is a failed
 * attempt, retried with the same key, rather than a broken stream after the call "succeeded".
 * Rejects only when the caller aborted.
 */
async function attemptOnce(fetchImpl: typeof fetch, request: PreparedRequest, info: CallInfo, o: ResolvedClientOptions): Promise<Outcome> {
  const { signal } = request;
  signal?.throwIfAborted();
  const controller = new AbortController();
  const forward = () => controller.abort(signal?.reason);
  signal?.addEventListener('abort', forward, { once: true });
  const timeout = o.attemptTimeout;
  const timer = Number.isFinite(timeout) ? setTimeout(() => controller.abort(new AttemptTimeoutError(timeout)), timeout) : undefined;
  try {
    return await raceAbort(exchange(fetchImpl, request, info, o, controller.signal), controller.signal);
  } catch (error) {
    // The caller's abort ends the call with the caller's reason, whatever the attempt was doing.
    signal?.throwIfAborted();
    return { error: controller.signal.aborted ? controller.signal.reason : error };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', forward);
  }
}

/**
 * Sends the request, follows its redirects itself (fetch's own following would send the key and
 * the body to wherever the server points, and on Node 20 cannot resend a body on 307/308), and
 * reads the final body within `maxResponseBytes`.
 */
async function exchange(fetchImpl: typeof fetch, request: PreparedRequest, info: CallInfo, o: ResolvedClientOptions, signal: AbortSignal): Promise<Outcome> {
  const follow = request.redirect === 'follow';
  let url = request.url;
  for (let hops = 0; ; hops++) {
    const response = await fetchImpl(
      url,
      Object.assign({}, request.init, {
        // A copy per send: whatever a fetch does with its body's buffer (undici transfers its own
        // copies), the prepared bytes stay intact for the next redirect or retry.
        body: request.body && request.body.slice(),
        redirect: follow ? 'manual' : request.redirect,
        signal,
      }),
    );
    const location = follow ? redirectTarget(request.method, url, response) : undefined;
    if (location === undefined) {
      const read = await readLimited(response, request.method, o.maxResponseBytes);
      if ('body' in read) return { response, body: read.body, url, redirected: hops > 0 };
      const detail = { received: read.received, declared: read.declared, limit: o.maxResponseBytes, status: response.status, url };
      return { final: true, error: new ResponseTooLargeError(info, detail) };
    }
    // The redirect's own body is not wanted; cancelling it releases the connection.
    await response.body?.cancel().catch(() => {});
    const from = new URL(url).origin;
    const to = new URL(location).origin;
    if (from !== to) return { final: true, error: new CrossOriginRedirectError(info, { from, to, location, status: response.status }) };
    if (hops >= o.maxRedirects) return { final: true, error: new TooManyRedirectsError(info, { limit: o.maxRedirects, location }) };
    url = location;
  }
}

const REDIRECT_STATUSES: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

/**
 * Where to resend the request, for the redirects after which the fetch standard resends the same
 * method and body: 307 and 308 always, 301 and 302 except for a POST, 303 only for GET and HEAD.
 * The others are where fetch would turn the request into a GET without its body (a POST's
 * 301/302, any other method's 303): for an idempotent call that 3xx is the server's answer for
 * the key, "done, the result is over there", and it is returned as the response, as is a 3xx
 * without a usable Location.
 */
function redirectTarget(method: string, url: string, response: Response): string | undefined {
  const { status } = response;
  if (!REDIRECT_STATUSES.has(status)) return undefined;
  const verb = method.toUpperCase();
  if ((status === 301 || status === 302) && verb === 'POST') return undefined;
  if (status === 303 && verb !== 'GET' && verb !== 'HEAD') return undefined;
  const location = response.headers.get('location');
  if (location === null) return undefined;
  try {
    return new URL(location, url).href;
  } catch {
    return undefined;
  }
}

type LimitedRead =
  | { readonly body: Uint8Array<ArrayBuffer> }
  /** Over the limit: how many bytes were read before stopping, and the declared length, if any. */
  | { readonly received: number; readonly declared: number | undefined };

/**
 * Reads the whole body, but never more than `limit` bytes plus the chunk that crossed it: a
 * declared `Content-Length` over the limit is refused before reading, and a body that grows past
 * it has its stream cancelled there (which closes the connection).
 */
async function readLimited(response: Response, method: string, limit: number): Promise<LimitedRead> {
  if (response.body === null) return { body: new Uint8Array(0) };
  const header = response.headers.get('content-length');
  const declared = header !== null && /^\s*\d+\s*$/.test(header) ? Number(header) : undefined;
  // A HEAD's Content-Length describes the GET's body, and an encoded length the compressed bytes
  // (fetch hands over the decoded ones): only an identity length for a body counts here.
  const encoding = response.headers.get('content-encoding')?.trim().toLowerCase();
  const counts = method.toUpperCase() !== 'HEAD' && (encoding === undefined || encoding === '' || encoding === 'identity');
  if (declared !== undefined && counts && declared > limit) {
    await response.body.cancel().catch(() => {});
    return { received: 0, declared };
  }
  const { chunks, size, over } = await readStreamLimited(response.body, limit);
  if (over) return { received: size, declared };
  // Always a fresh, exact buffer: a chunk may be a view into a larger one the client should not keep.
  const body = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return { body };
}

/**
 * The call's final answer: the response (or `HttpStatusError`), or `RequestFailedError` for an
 * error. `inProgress`: the last answer was an in-progress 409 the client stopped at (polling
 * reached the deadline, or its owner's lease ends after it), with what it said of the owner.
 */
function settle(outcome: Outcome, info: CallInfo, o: ResolvedClientOptions, inProgress?: InProgressInfo): IdempotentResponse {
  if (!outcome.response) throw new RequestFailedError(info, outcome.error);
  const replayed = isReplayed(outcome.response);
  const settled: IdempotencyInfo = inProgress
    ? { key: info.key, attempts: info.attempts, replayed, inProgress: Object.freeze(inProgress) }
    : { key: info.key, attempts: info.attempts, replayed };
  const response = finalResponse(outcome, settled);
  if (o.throwOnError && response.status >= 400) {
    throw new HttpStatusError(settled, response, parseProblem(response, outcome.body));
  }
  return response;
}

/** Failing fast: the error carries the last response (still readable) or the last error. */
function budgetExhausted(outcome: Outcome, info: CallInfo): RetryBudgetExhaustedError {
  if (!outcome.response) return new RetryBudgetExhaustedError(info, { error: outcome.error });
  // A retryable response is never a replay: replays are not retried.
  return new RetryBudgetExhaustedError(info, { response: finalResponse(outcome, Object.assign({}, info, { replayed: false })) });
}
