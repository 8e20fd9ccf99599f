import { MAX_RETRY_AFTER_MS } from './backoff.js';
import { AttemptTimeoutError } from './errors.js';
import type { Problem } from './errors.js';

/**
 * Statuses retried with the same key:
 * - 409: with idemkit (and Stripe) the first request with this key is still running; the retry
 *   gets its result once it finishes (its pause is capped by `maxConflictWait`). Not a failure:
 *   never charged to the retry budget, and an idemkit in-progress 409 (`isInProgress`) is polled
 *   within `maxRetryTime` without counting against `retries`; when it says the owner is
 *   unresponsive (`problemOwner`), the client waits for its lease to end instead, and retries once
 *   to take the key over;
 * - 429, 503: the server asked us to come back (usually with Retry-After);
 * - 500: the outcome is unknown, so keep the key: a server that recorded the attempt replays it,
 *   one that did not runs it once;
 * - 502, 504: a proxy lost or timed out on the upstream; the upstream may or may not have run it.
 * Every other status is an answer about this request, and asking again would not change it, as
 * is any of these whose problem says so (`isPermanent`: a store that is not migrated).
 */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([409, 429, 500, 502, 503, 504]);

/**
 * The problem `type` slugs (the type's last segment, under any base: `urn:idemkit:problem:`, a
 * `problemTypeBase` URL) of a 409 that says the original request with this key is still running
 * (or, `lease-lost`, that another request with it took over): nothing failed, so the client polls
 * it until the original is done, within `maxRetryTime`, outside `retries` and the retry budget.
 */
const IN_PROGRESS_SLUGS: ReadonlySet<string> = new Set(['request-in-progress', 'webhook-in-progress', 'lease-lost']);

/**
 * The problem `type` slugs of an answer that asking again cannot change, whatever its status:
 * `store-schema-missing` (idemkit's store has no table or function; it lasts until someone migrates).
 */
const PERMANENT_SLUGS: ReadonlySet<string> = new Set(['store-schema-missing']);

/** The last segment of a problem's `type` (after its last `:`, `/` or `#`), or undefined. */
function slugOf(problem: Problem | undefined): string | undefined {
  const type = problem?.type;
  return typeof type === 'string' ? type.slice(Math.max(type.lastIndexOf(':'), type.lastIndexOf('/'), type.lastIndexOf('#')) + 1) : undefined;
}

/** A 409 whose problem says the original request with the key is still in progress. */
export function isInProgress(status: number, problem: Problem | undefined): boolean {
  if (status !== 409) return false;
  const slug = slugOf(problem);
  return slug !== undefined && IN_PROGRESS_SLUGS.has(slug);
}

/** A problem that says retrying cannot help (e.g. `store-schema-missing`), even on a retryable status. */
export function isPermanent(problem: Problem | undefined): boolean {
  const slug = slugOf(problem);
  return slug !== undefined && PERMANENT_SLUGS.has(slug);
}

/**
 * The problem's `retryAfterMs` member, idemkit's retry hint in ms: finer than `Retry-After`,
 * which has whole seconds (a 100 ms hint goes out as `Retry-After: 1`). Undefined unless it is a
 * finite number >= 0; at most `MAX_RETRY_AFTER_MS`.
 */
export function problemRetryAfter(problem: Problem | undefined): number | undefined {
  const value = problem?.retryAfterMs;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.min(Math.ceil(value), MAX_RETRY_AFTER_MS) : undefined;
}

/** What idemkit's in-progress 409 says of the original request's owner (problem member `owner`). */
export type OwnerState = 'alive' | 'unresponsive';

/**
 * The problem's `owner` member: `alive` (the owner renews its lease: the original is running) or
 * `unresponsive` (it stopped renewing: crashed, frozen or cut off; its lease runs out and a retry
 * then takes the key over). Undefined for any other value or none (other servers, older idemkit),
 * which the client polls as it always has.
 */
export function problemOwner(problem: Problem | undefined): OwnerState | undefined {
  const value = problem?.owner;
  return value === 'alive' || value === 'unresponsive' ? value : undefined;
}

/**
 * The problem's `leaseEndsInMs` member: how long the owner's lease still ran, on the store's clock,
 * when the server answered. Undefined unless it is a finite number >= 0; at most `MAX_RETRY_AFTER_MS`.
 */
export function problemLeaseEnds(problem: Problem | undefined): number | undefined {
  const value = problem?.leaseEndsInMs;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.min(Math.ceil(value), MAX_RETRY_AFTER_MS) : undefined;
}

/**
 * Error codes (on the error or anywhere in its `cause` chain) that mean the connection failed:
 * refused, reset, closed mid-response, timed out, or the name did not resolve. Node's fetch
 * (undici) reports them as `TypeError: fetch failed` / `terminated` with such a cause.
 */
const NETWORK_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH',
  'ENETDOWN', 'EAI_AGAIN', 'ENOTFOUND', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED', 'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT',
]);

/**
 * Deno's fetch gives no code, only messages (Deno 2.9): `TypeError: fetch failed` caused by an
 * `Error: error sending request … client error (Connect): tcp connect error: Connection refused (os
 * error 111)`, `… (SendRequest): connection closed before message completed` or `Connection reset by
 * peer (os error 104)`; a body cut off while it is read is `TypeError: error reading a body from
 * connection`. Only what names the connection counts: a refused certificate comes the same way
 * (`client error (Connect): invalid peer certificate`), and a blocked port as `Fetch failed: Requests
 * to port 1 are blocked`. (Bun's fetch sets the codes above, on the error itself.)
 */
const DENO_NETWORK =
  /^(error sending request\b[\s\S]*(tcp connect error|connection closed before message completed|connection reset|broken pipe|dns error|timed out)|error reading a body from connection|(connection reset by peer|broken pipe|connection timed out) \(os error \d+\))/i;

/**
 * Whether an attempt's error is a network failure worth retrying. Anything else (a bad URL, a
 * refused TLS certificate, a bug in an injected fetch) would fail the same way again.
 */
export function isNetworkFailure(error: unknown): boolean {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    if (e instanceof AttemptTimeoutError) return true;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
    const message = (e as { message?: unknown }).message;
    if (code === undefined && typeof message === 'string' && DENO_NETWORK.test(message)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}
