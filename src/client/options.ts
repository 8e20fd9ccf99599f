import { InvalidOptionError } from '../core/errors.js';
import { booleanOption, integerOption } from '../core/validate.js';
import type { RetryBudget, RetryBudgetOptions } from './budget.js';
import { budgetOption } from './budget.js';
import { durationOption, rejectUnknown } from '../core/validate.js';

/** What `onRetry` is told before the client sleeps and retries. */
export interface RetryContext {
  /** The key every attempt carries; undefined for a request sent without one (e.g. a GET). */
  readonly key: string | undefined;
  readonly method: string;
  readonly url: string;
  /** The attempt that just failed, from 1. */
  readonly attempt: number;
  /** Retries still allowed by `retries` after this one. */
  readonly retriesLeft: number;
  /** The pause before the next attempt, in ms. */
  readonly delay: number;
  /** The retryable status (409, 429, 500, 502, 503, 504), when the attempt got a response. */
  readonly status?: number;
  /** The network error or `AttemptTimeoutError`, when the attempt got no response. */
  readonly error?: unknown;
  /** What the server's `Retry-After` asked for, in ms, when it sent one. */
  readonly retryAfter?: number;
}

/**
 * Options of `createIdempotentFetch`. Names follow p-retry where they overlap (`retries`, `factor`,
 * `minTimeout`, `maxTimeout`, `randomize`, `maxRetryTime`); all times are in ms.
 */
export interface IdempotentFetchOptions {
  /**
   * Retries after the first attempt (so at most `retries + 1` attempts).
   * @default 3
   */
  readonly retries?: number;
  /**
   * Growth of the backoff ceiling per retry; at least 1.
   * @default 2
   */
  readonly factor?: number;
  /**
   * The backoff ceiling of the first retry. With `randomize` the actual pause is drawn from
   * [0, ceiling]; without it, the pause is the ceiling.
   * @default 500
   */
  readonly minTimeout?: number;
  /**
   * The largest backoff ceiling.
   * @default 10_000
   */
  readonly maxTimeout?: number;
  /**
   * Full jitter: draw each pause uniformly from [0, ceiling]. Unlike p-retry (whose `randomize`
   * multiplies by 1–2 and is off by default), this is on by default, because clients that failed
   * together must not retry together.
   * @default true
   */
  readonly randomize?: boolean;
  /**
   * No retry is scheduled whose pause would end more than this long after the first attempt; the
   * call then settles with its last answer. A running attempt is bounded by `attemptTimeout`.
   * @default 60_000
   */
  readonly maxRetryTime?: number;
  /**
   * Longest time one attempt may take, from sending the request to the last byte of the response
   * body. A timed-out attempt is retried with the same key. `Infinity` disables it.
   * @default 30_000
   */
  readonly attemptTimeout?: number;
  /**
   * Longest `Retry-After` the client will wait. When the server asks for longer, the client does
   * not retry early (the server said "not before"): the call settles with that response.
   * @default 60_000
   */
  readonly maxRetryAfter?: number;
  /**
   * The retry budget: a `RetryBudget` to share with other clients of the same dependency, options
   * for this client's own budget, or `false` for none (only when something else bounds retries).
   * @default { ratio: 0.1, capacity: 10 } (a budget per client)
   */
  readonly retryBudget?: RetryBudget | RetryBudgetOptions | false;
  /**
   * Called before each retry's pause. If it throws (or rejects), no further retry happens and the
   * call rejects with that error.
   * @default undefined
   */
  readonly onRetry?: (context: RetryContext) => void | Promise<void>;
  /**
   * Reject with `HttpStatusError` (status, parsed problem+json, response) when the final status
   * is 400 or above, instead of resolving with the response as fetch does.
   * @default false
   */
  readonly throwOnError?: boolean;
  /**
   * Methods that get a generated key. Requests with other methods are sent without one, unless the
   * caller supplies a key.
   * @default ['POST', 'PATCH']
   */
  readonly methods?: readonly string[];
  /**
   * The request header that carries the key.
   * @default 'Idempotency-Key'
   */
  readonly header?: string;
  /**
   * The largest stream body (ReadableStream, async iterable, Node Readable, a `Request`'s body)
   * buffered for replay; a larger one is refused before the first attempt.
   * @default 1_048_576
   */
  readonly maxBodyBytes?: number;
  /**
   * The largest response body the client reads, in bytes. Each attempt reads the whole body (so a
   * connection cut mid-body is retried), and holds it in memory. A response that declares a larger
   * `Content-Length` is refused without reading; one without stops being read (its stream is
   * cancelled) as soon as the limit is passed. Either way the call rejects with
   * `ResponseTooLargeError`, which is not retried: the server answered, the request may have run.
   * @default 10_485_760 (10 MiB)
   */
  readonly maxResponseBytes?: number;
  /**
   * The most redirects followed in one attempt. Only redirects that resend the same method and
   * body to the same origin are followed (see docs/client.md); one more rejects with
   * `TooManyRedirectsError`. 0 follows none.
   * @default 5
   */
  readonly maxRedirects?: number;
  /**
   * The fetch to wrap (an undici `fetch`, a fetch with a custom dispatcher, …).
   * @default globalThis.fetch, looked up at each call
   */
  readonly fetch?: typeof globalThis.fetch;
}

export interface ResolvedClientOptions {
  readonly retries: number;
  readonly factor: number;
  readonly minTimeout: number;
  readonly maxTimeout: number;
  readonly randomize: boolean;
  readonly maxRetryTime: number;
  readonly attemptTimeout: number;
  readonly maxRetryAfter: number;
  readonly budget: RetryBudget | undefined;
  readonly onRetry: ((context: RetryContext) => void | Promise<void>) | undefined;
  readonly throwOnError: boolean;
  readonly methods: ReadonlySet<string>;
  readonly header: string;
  readonly maxBodyBytes: number;
  readonly maxResponseBytes: number;
  readonly maxRedirects: number;
  readonly fetch: typeof globalThis.fetch | undefined;
}

const KNOWN = [
  'retries', 'factor', 'minTimeout', 'maxTimeout', 'randomize', 'maxRetryTime', 'attemptTimeout', 'maxRetryAfter',
  'retryBudget', 'onRetry', 'throwOnError', 'methods', 'header', 'maxBodyBytes',
  'maxResponseBytes', 'maxRedirects', 'fetch',
];
// Names people bring from p-retry, got or ky.
const HINTS = {
  onFailedAttempt: 'onRetry', forever: 'retries', timeout: 'attemptTimeout', limit: 'retries', retry: 'retries',
  size: 'maxResponseBytes', follow: 'maxRedirects', // node-fetch's names
};
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Validates every option eagerly and fills in defaults; throws `InvalidOptionError` naming the option. */
export function resolveClientOptions(options: IdempotentFetchOptions): ResolvedClientOptions {
  if (options === null || typeof options !== 'object') throw new InvalidOptionError('options', 'expected an object');
  rejectUnknown(options, KNOWN, '', HINTS);
  const factor = options.factor ?? 2;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1) {
    throw new InvalidOptionError('factor', `expected a finite number >= 1, got ${String(factor)}`);
  }
  const minTimeout = durationOption('minTimeout', options.minTimeout, 500, 0, false);
  const maxTimeout = durationOption('maxTimeout', options.maxTimeout, 10_000, 0, true);
  if (minTimeout > maxTimeout) throw new InvalidOptionError('minTimeout', `must be at most maxTimeout (${maxTimeout})`);
  const methods = options.methods ?? ['POST', 'PATCH'];
  if (!Array.isArray(methods) || methods.some((m) => typeof m !== 'string' || !TOKEN.test(m))) {
    throw new InvalidOptionError('methods', 'expected an array of HTTP method names');
  }
  const header = options.header ?? 'Idempotency-Key';
  if (typeof header !== 'string' || !TOKEN.test(header)) throw new InvalidOptionError('header', 'expected a header name');
  return {
    retries: integerOption('retries', options.retries, 3, 0),
    factor,
    minTimeout,
    maxTimeout,
    randomize: booleanOption('randomize', options.randomize, true),
    maxRetryTime: durationOption('maxRetryTime', options.maxRetryTime, 60_000, 0, true),
    attemptTimeout: durationOption('attemptTimeout', options.attemptTimeout, 30_000, 1, true),
    maxRetryAfter: durationOption('maxRetryAfter', options.maxRetryAfter, 60_000, 0, true),
    budget: budgetOption(options.retryBudget),
    onRetry: functionOption('onRetry', options.onRetry),
    throwOnError: booleanOption('throwOnError', options.throwOnError, false),
    methods: new Set(methods.map((m: string) => m.toUpperCase())),
    header,
    maxBodyBytes: integerOption('maxBodyBytes', options.maxBodyBytes, 1_048_576, 0),
    maxResponseBytes: integerOption('maxResponseBytes', options.maxResponseBytes, 10_485_760, 0),
    maxRedirects: integerOption('maxRedirects', options.maxRedirects, 5, 0),
    fetch: functionOption('fetch', options.fetch),
  };
}

function functionOption<F>(name: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== 'function') throw new InvalidOptionError(name, 'expected a function');
  return value;
}
