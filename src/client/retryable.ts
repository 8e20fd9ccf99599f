import { AttemptTimeoutError } from './errors.js';

/**
 * Statuses retried with the same key:
 * - 409: with idemkit (and Stripe) the first request with this key is still running; the retry
 *   gets its result once it finishes (its pause is capped by `maxConflictWait`);
 * - 429, 503: the server asked us to come back (usually with Retry-After);
 * - 500: the outcome is unknown, so keep the key: a server that recorded the attempt replays it,
 *   one that did not runs it once;
 * - 502, 504: a proxy lost or timed out on the upstream; the upstream may or may not have run it.
 * Every other status is an answer about this request, and asking again would not change it.
 */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([409, 429, 500, 502, 503, 504]);

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
 * Whether an attempt's error is a network failure worth retrying. Anything else (a bad URL, a
 * refused TLS certificate, a bug in an injected fetch) would fail the same way again.
 */
export function isNetworkFailure(error: unknown): boolean {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 8; depth++) {
    if (e instanceof AttemptTimeoutError) return true;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}
