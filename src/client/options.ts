import { optionReader } from '../core/option-reader.js';
import type { RetryBudget, RetryBudgetOptions } from './budget.js';
import { budgetOption } from './budget.js';

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
  /**
   * What the server asked for, in ms, when it did: the problem body's `retryAfterMs` (idemkit's
   * hint, finer than the header), else `Retry-After`.
   */
  readonly retryAfter?: number;
  /**
   * What an in-progress 409 said of the original request's owner (idemkit's problem member
   * `owner`): `'alive'` (polled), `'unresponsive'` (`delay` waits for its lease to end, so the
   * retry can take the key over). Absent when the answer did not say.
   */
  readonly owner?: 'alive' | 'unresponsive';
}

/**
 * Options of `createIdempotentFetch`. Names follow p-retry where they overlap (`retries`, `factor`,
 * `minTimeout`, `maxTimeout`, `randomize`, `maxRetryTime`); all times are in ms.
 */
export interface IdempotentFetchOptions {
  /**
   * Retries after the first attempt (so at most `retries + 1` attempts). Polls of a request still
   * in progress (an idemkit 409 `request-in-progress`) are not counted: they are not failures,
   * and `maxRetryTime` bounds them.
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
   * call then settles with its last answer. A running attempt is bounded by `attemptTimeout`. It
   * is also how long a request still in progress (an idemkit 409 `request-in-progress`) is polled:
   * its last poll is moved up to this moment, and if that is still a 409 the call settles with it
   * (`HttpStatusError` with `inProgress: true` under `throwOnError`).
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
   * Longest pause before retrying a 409, whatever its `Retry-After` says. A 409 to a request with
   * a key means "the first request with this key is still running" (idemkit, Stripe, the IETF
   * Idempotency-Key draft): its `Retry-After` is a guess at how long that takes, and some servers
   * send their whole lease (idemkit did before `retryAfterMs`: 30 s). Retrying sooner is
   * harmless: the server answers another 409, or the replay. So the first 409 is retried after
   * its hint (the problem's `retryAfterMs`, else `Retry-After`), later ones after
   * `max(hint, backoff)`, each at most `maxConflictWait`; a long `Retry-After` never settles the
   * call. `Infinity` treats a 409's `Retry-After` like any other (up to `maxRetryAfter`).
   * @default 2_000
   */
  readonly maxConflictWait?: number;
  /**
   * The retry budget: a `RetryBudget` to share with other clients of the same dependency, options
   * for this client's own budget, or `false` for none (only when something else bounds retries).
   * Only failures spend it (network errors, timeouts, 429, 5xx); a 409 never does.
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

/**
 * The options with every default filled in, derived from `IdempotentFetchOptions`: only the ones
 * resolved into another shape are restated here.
 */
export type ResolvedClientOptions = Readonly<
  Required<Omit<IdempotentFetchOptions, 'retryBudget' | 'onRetry' | 'methods' | 'fetch'>> &
    Pick<IdempotentFetchOptions, 'onRetry' | 'fetch'> & {
      /** The budget, undefined with `retryBudget: false`. */
      readonly budget: RetryBudget | undefined;
      /** Upper-cased. */
      readonly methods: ReadonlySet<string>;
    }
>;

// Names people bring from p-retry, got or ky.
const ALIASES = {
  onFailedAttempt: 'onRetry', forever: 'retries', timeout: 'attemptTimeout', limit: 'retries', retry: 'retries',
  size: 'maxResponseBytes', follow: 'maxRedirects', // node-fetch's names
};

/** Validates every option eagerly and fills in defaults; throws `InvalidOptionError` naming the option. */
export function resolveClientOptions(options: IdempotentFetchOptions): ResolvedClientOptions {
  const read = optionReader('createIdempotentFetch()', options, { aliases: ALIASES });
  const factor = read.number('factor', { default: 2, min: 1 });
  const minTimeout = read.duration('minTimeout', { default: 500 });
  const maxTimeout = read.duration('maxTimeout', { default: 10_000, infinity: true });
  if (minTimeout > maxTimeout) read.fail('minTimeout', `must be at most maxTimeout (${maxTimeout})`);
  const methods = read.methods('methods', ['POST', 'PATCH']);
  const header = read.header('header', 'Idempotency-Key');
  const resolved: ResolvedClientOptions = {
    retries: read.integer('retries', { default: 3 }),
    factor,
    minTimeout,
    maxTimeout,
    randomize: read.boolean('randomize', { default: true }),
    maxRetryTime: read.duration('maxRetryTime', { default: 60_000, infinity: true }),
    attemptTimeout: read.duration('attemptTimeout', { default: 30_000, min: 1, infinity: true }),
    maxRetryAfter: read.duration('maxRetryAfter', { default: 60_000, infinity: true }),
    maxConflictWait: read.duration('maxConflictWait', { default: 2_000, infinity: true }),
    budget: budgetOption(read.value('retryBudget')),
    onRetry: read.function('onRetry'),
    throwOnError: read.boolean('throwOnError', { default: false }),
    methods,
    header,
    maxBodyBytes: read.integer('maxBodyBytes', { default: 1_048_576 }),
    maxResponseBytes: read.integer('maxResponseBytes', { default: 10_485_760 }),
    maxRedirects: read.integer('maxRedirects', { default: 5 }),
    fetch: read.function('fetch'),
  };
  read.done();
  return resolved;
}
