import { MAX_TIMER_MS } from '../core/validate.js';

export interface BackoffOptions {
  readonly factor: number;
  readonly minTimeout: number;
  readonly maxTimeout: number;
  readonly randomize: boolean;
}

/**
 * The pause before retry number `retry` (1 for the first retry), in ms.
 *
 * The ceiling grows as `minTimeout × factor^(retry-1)`, capped at `maxTimeout`. With `randomize`
 * the pause is drawn uniformly from [0, ceiling] ("full jitter"): clients that failed together
 * then spread out instead of retrying in lockstep, which is what turns an outage into a storm.
 */
export function backoffDelay(retry: number, options: BackoffOptions, random: () => number = Math.random): number {
  const ceiling = Math.min(options.maxTimeout, options.minTimeout * options.factor ** (retry - 1), MAX_TIMER_MS);
  return Math.round(options.randomize ? random() * ceiling : ceiling);
}

/**
 * The longest wait `parseRetryAfter` answers (2^31 - 1 ms, about 24.8 days, the longest timer Node
 * arms): a server asking for longer is answered with this, which is still past any sensible
 * `maxRetryAfter`, rather than with a number too large to wait for (`1e400` seconds is Infinity).
 */
export const MAX_RETRY_AFTER_MS = MAX_TIMER_MS;

/**
 * Parses a `Retry-After` value (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Returns the
 * wait in ms (0 for a date in the past, at most `MAX_RETRY_AFTER_MS`), or undefined when the header
 * is absent or malformed, in which case the caller falls back to its own backoff.
 */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, MAX_RETRY_AFTER_MS);
  // An HTTP-date always names a weekday and a time; this keeps Date.parse from accepting "2" or "soon".
  if (!/^[A-Za-z]{3,9},? .*\d{2}:\d{2}:\d{2}/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.min(Math.max(0, at - now), MAX_RETRY_AFTER_MS);
}

/**
 * Waits `ms`, or rejects with the signal's reason as soon as it aborts. Re-arms until the full
 * time has passed on the monotonic clock, because a Node timer may fire slightly early and a
 * server's Retry-After means "not before".
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const until = performance.now() + ms;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const tick = () => {
      const left = until - performance.now();
      if (left > 0) {
        timer = setTimeout(tick, Math.min(Math.ceil(left), MAX_TIMER_MS));
        return;
      }
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    tick();
  });
}

/**
 * Settles with `promise`, or rejects with the signal's reason as soon as it aborts, even if the
 * work behind `promise` ignores the signal (an injected fetch, a caller's stream).
 */
export function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    promise.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      // The losing promise may still reject; that rejection is expected and not the caller's.
      promise.catch(() => {});
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
