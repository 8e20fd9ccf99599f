/** Options are validated when the client is created; backoff and Retry-After parsing in isolation. */
import { describe, expect, it } from 'vitest';
import { backoffDelay, parseRetryAfter } from '../../src/client/backoff.js';
import { InvalidOptionError, createIdempotentFetch, createRetryBudget } from '../../src/client/index.js';

function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('createIdempotentFetch options', () => {
  it('accepts no options, and every option at a valid value', () => {
    expect(typeof createIdempotentFetch()).toBe('function');
    const client = createIdempotentFetch({
      retries: 0, factor: 1, minTimeout: 0, maxTimeout: Infinity, randomize: false, maxRetryTime: Infinity,
      attemptTimeout: Infinity, maxRetryAfter: 0, maxConflictWait: 0, retryBudget: false, onRetry: () => {}, throwOnError: true,
      methods: [], header: 'X-Key', maxBodyBytes: 0, fetch,
    });
    // The client has fetch's signature.
    const asFetch: typeof fetch = client;
    expect(asFetch).toBe(client);
  });

  it.each([
    [null, 'options'],
    [{ retries: -1 }, 'retries'],
    [{ retries: 1.5 }, 'retries'],
    [{ retries: Infinity }, 'retries'],
    [{ retries: '3' }, 'retries'],
    [{ factor: 0.5 }, 'factor'],
    [{ factor: NaN }, 'factor'],
    [{ factor: Infinity }, 'factor'],
    [{ minTimeout: -1 }, 'minTimeout'],
    [{ minTimeout: NaN }, 'minTimeout'],
    [{ minTimeout: Infinity }, 'minTimeout'],
    [{ minTimeout: 2000, maxTimeout: 1000 }, 'minTimeout'],
    [{ maxTimeout: -5 }, 'maxTimeout'],
    [{ maxTimeout: 2 ** 31 }, 'maxTimeout'],
    [{ randomize: 'yes' }, 'randomize'],
    [{ maxRetryTime: -1 }, 'maxRetryTime'],
    [{ maxRetryTime: NaN }, 'maxRetryTime'],
    [{ attemptTimeout: 0 }, 'attemptTimeout'],
    [{ attemptTimeout: 3e9 }, 'attemptTimeout'],
    [{ maxRetryAfter: -1 }, 'maxRetryAfter'],
    [{ maxConflictWait: -1 }, 'maxConflictWait'],
    [{ maxConflictWait: '2s' }, 'maxConflictWait'],
    [{ retryBudget: true }, 'retryBudget'],
    [{ retryBudget: 0.1 }, 'retryBudget'],
    [{ retryBudget: { ratio: 10 } }, 'retryBudget.ratio'],
    [{ retryBudget: { ratio: -0.1 } }, 'retryBudget.ratio'],
    [{ retryBudget: { capacity: 0 } }, 'retryBudget.capacity'],
    [{ retryBudget: { capacity: 5, initialTokens: 6 } }, 'retryBudget.initialTokens'],
    [{ retryBudget: { percent: 10 } }, 'retryBudget.percent'],
    [{ onRetry: 'log' }, 'onRetry'],
    [{ throwOnError: 1 }, 'throwOnError'],
    [{ methods: 'POST' }, 'methods'],
    [{ methods: ['PO ST'] }, 'methods'],
    [{ header: '' }, 'header'],
    [{ header: 'Idempotency Key' }, 'header'],
    [{ maxBodyBytes: -1 }, 'maxBodyBytes'],
    [{ fetch: 'undici' }, 'fetch'],
    [{ retry: 3 }, 'retry'],
    [{ onFailedAttempt: () => {} }, 'onFailedAttempt'],
  ])('rejects %o naming `%s`', (options, name) => {
    const error = thrownBy(() => createIdempotentFetch(options as never));
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect(error).toMatchObject({ option: name, code: 'ERR_IDEMKIT_INVALID_OPTION' });
    expect((error as Error).message).toContain(`\`${name}\``);
  });

  it('points p-retry names to ours', () => {
    expect((thrownBy(() => createIdempotentFetch({ onFailedAttempt: () => {} } as never)) as Error).message).toContain('onRetry');
  });

  it('createRetryBudget validates its own options by their plain names', () => {
    expect(thrownBy(() => createRetryBudget({ ratio: 2 }))).toMatchObject({ option: 'ratio' });
  });
});

describe('backoffDelay', () => {
  const options = { factor: 2, minTimeout: 100, maxTimeout: 1000, randomize: false };

  it('grows by factor from minTimeout and is capped at maxTimeout', () => {
    expect([1, 2, 3, 4, 5, 6].map((retry) => backoffDelay(retry, options))).toEqual([100, 200, 400, 800, 1000, 1000]);
  });

  it('full jitter: uniform in [0, ceiling]', () => {
    const jittered = { ...options, randomize: true };
    expect(backoffDelay(3, jittered, () => 0)).toBe(0);
    expect(backoffDelay(3, jittered, () => 0.5)).toBe(200);
    expect(backoffDelay(3, jittered, () => 0.999999)).toBe(400);
    for (let i = 0; i < 100; i++) expect(backoffDelay(10, jittered)).toBeLessThanOrEqual(1000);
  });

  it('never overflows a timer, even with maxTimeout Infinity', () => {
    expect(backoffDelay(200, { ...options, maxTimeout: Infinity })).toBe(2_147_483_647);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('Sun, 06 Nov 1994 08:49:37 GMT');

  it.each([
    ['0', 0],
    ['1', 1000],
    [' 120 ', 120_000],
    ['Sun, 06 Nov 1994 08:49:40 GMT', 3000],
    ['Sunday, 06-Nov-94 08:49:47 GMT', 10_000],
    ['Sun, 06 Nov 1994 08:49:00 GMT', 0], // in the past: retry now
  ])('%j → %i ms', (value, ms) => {
    expect(parseRetryAfter(value, now)).toBe(ms);
  });

  it.each([[null], [''], ['-1'], ['1.5'], ['soon'], ['2s'], ['Sun, 99 Foo 1994']])('%j → undefined', (value) => {
    expect(parseRetryAfter(value, now)).toBeUndefined();
  });
});
