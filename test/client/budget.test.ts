/** The retry budget: a shared token bucket that keeps an outage from becoming a retry storm. */
import { describe, expect, it } from 'vitest';
import { RequestFailedError, RetryBudgetExhaustedError, createIdempotentFetch, createRetryBudget } from '../../src/client/index.js';
import { deadUrl, scriptedServer } from './servers.js';
import { expectFetchFailure } from '../support/fetch-failures.js';

describe('the token bucket', () => {
  it('starts full, spends one token per retry, and earns ratio per call, up to capacity', () => {
    const budget = createRetryBudget({ ratio: 0.1, capacity: 2 });
    expect(budget.tokens).toBe(2);
    expect([budget.tryWithdraw(), budget.tryWithdraw(), budget.tryWithdraw()]).toEqual([true, true, false]);
    for (let i = 0; i < 9; i++) budget.deposit();
    expect(budget.tryWithdraw()).toBe(false); // 0.9 of a token is not a retry
    budget.deposit();
    expect(budget.tryWithdraw()).toBe(true); // ten deposits of 0.1 make exactly one token
    for (let i = 0; i < 1000; i++) budget.deposit();
    expect(budget.tokens).toBe(2);
  });

  it('initialTokens: 0 means retries must be earned first', () => {
    const budget = createRetryBudget({ ratio: 0.5, initialTokens: 0 });
    expect(budget.tryWithdraw()).toBe(false);
    budget.deposit();
    budget.deposit();
    expect(budget.tryWithdraw()).toBe(true);
  });
});

describe('a burst against a dead server', () => {
  it('50 concurrent calls stay within calls × (1 + ratio) + capacity attempts; the rest fail with the typed error', async () => {
    const url = await deadUrl();
    const calls = 50;
    const ratio = 0.1;
    const capacity = 10;
    let attempts = 0;
    const client = createIdempotentFetch({
      retries: 3,
      minTimeout: 5,
      maxTimeout: 5,
      randomize: false,
      retryBudget: { ratio, capacity },
      fetch: (input, init) => {
        attempts++;
        return fetch(input, init);
      },
    });

    const errors = await Promise.all(Array.from({ length: calls }, () => client(url, { method: 'POST', body: '{}' }).then(() => undefined, (error: unknown) => error)));

    expect(attempts).toBeLessThanOrEqual(calls * (1 + ratio) + capacity);
    expect(attempts).toBeGreaterThan(calls); // the budget did allow some retries
    const exhausted = errors.filter((e): e is RetryBudgetExhaustedError => e instanceof RetryBudgetExhaustedError);
    const failed = errors.filter((e) => e instanceof RequestFailedError);
    expect(exhausted.length + failed.length).toBe(calls);
    // At most capacity + calls × ratio tokens exist, so at least the other calls never retried.
    const neverRetried = exhausted.filter((e) => e.attempts === 1);
    expect(neverRetried.length).toBeGreaterThanOrEqual(calls - (capacity + calls * ratio));
    for (const error of exhausted) {
      expect(error).toMatchObject({ code: 'ERR_IDEMKIT_RETRY_BUDGET_EXHAUSTED', status: undefined });
      expect(error.key).toMatch(/^[0-9a-f-]{36}$/);
      expectFetchFailure(error.cause, 'refused');
    }
  });

  it('a call the budget denies a retry fails at once: while the calls granted one are still in their pause', async () => {
    const url = await deadUrl();
    const calls = 50;
    const ratio = 0.1;
    const capacity = 10;
    const controller = new AbortController();
    // A pause far longer than the test may run: a call that slept one would never settle in it.
    const pause = 3_600_000;
    let retrying = 0;
    let settled = 0;
    let accounted!: () => void;
    const everyCallAccounted = new Promise<void>((resolve) => (accounted = resolve));
    const account = () => {
      if (retrying + settled === calls) accounted();
    };
    const client = createIdempotentFetch({
      retries: 3,
      minTimeout: pause,
      maxTimeout: pause,
      maxRetryTime: Infinity,
      randomize: false,
      retryBudget: { ratio, capacity },
      // Called once the token is taken, just before the pause.
      onRetry: () => {
        retrying++;
        account();
      },
    });

    const results = Array.from({ length: calls }, () =>
      client(url, { method: 'POST', body: '{}', signal: controller.signal }).then(
        () => undefined,
        (error: unknown) => {
          settled++;
          account();
          return error;
        },
      ),
    );
    // Every call has either failed or started its pause: the order of events, not a duration.
    await everyCallAccounted;
    const failedFast = settled;
    controller.abort();
    const errors = await Promise.all(results);

    // The budget held capacity tokens, plus ratio per call at most: that many calls retried.
    expect(retrying).toBeGreaterThanOrEqual(capacity);
    expect(retrying).toBeLessThanOrEqual(capacity + calls * ratio);
    expect(failedFast).toBe(calls - retrying);
    const exhausted = errors.filter((e) => e instanceof RetryBudgetExhaustedError);
    expect(exhausted).toHaveLength(failedFast);
    expect(exhausted.every((e) => e.attempts === 1)).toBe(true);
    // The calls that were granted a retry were still in their pause: the abort ended them.
    expect(errors.filter((e) => e instanceof DOMException && e.name === 'AbortError')).toHaveLength(retrying);
  });

  it('the default budget is on (about 10 %): 20 calls × 4 attempts would be 80; the budget allows at most 32', async () => {
    const url = await deadUrl();
    let attempts = 0;
    const client = createIdempotentFetch({ minTimeout: 5, maxTimeout: 10, fetch: (input, init) => (attempts++, fetch(input, init)) });
    const errors = await Promise.all(Array.from({ length: 20 }, () => client(url, { method: 'POST' }).catch((e: unknown) => e)));
    expect(attempts).toBeLessThanOrEqual(20 * 1.1 + 10);
    expect(errors.some((e) => e instanceof RetryBudgetExhaustedError)).toBe(true);
  });

  it('a budget instance is shared between clients', async () => {
    const budget = createRetryBudget({ ratio: 0, capacity: 1 });
    const server = await scriptedServer(() => ({ status: 503 }));
    try {
      const a = createIdempotentFetch({ minTimeout: 5, retries: 1, retryBudget: budget });
      const b = createIdempotentFetch({ minTimeout: 5, retries: 1, retryBudget: budget });
      expect((await a(server.url, { method: 'POST' })).idempotency.attempts).toBe(2);
      const error = await b(server.url, { method: 'POST' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RetryBudgetExhaustedError);
      expect(error).toMatchObject({ status: 503, attempts: 1 });
      expect((error as RetryBudgetExhaustedError).response?.status).toBe(503);
      expect(server.seen).toHaveLength(3);
    } finally {
      await server.close();
    }
  });
});

describe('budget options are validated, each error naming the option as the caller wrote it (test:mutation survivors)', () => {
  it('createRetryBudget(): its own names, initialTokens at most capacity', () => {
    expect(() => createRetryBudget({ initialTokens: 20, capacity: 10 })).toThrow('Invalid option `initialTokens`: must be at most capacity (10)');
    expect(() => createRetryBudget({ capacity: 0 })).toThrow('Invalid option `capacity`: expected an integer >= 1, got 0');
    expect(() => createRetryBudget({ ratoi: 0.1 } as never)).toThrow('Invalid option `ratoi`: unknown option; did you mean `ratio`?');
    expect(() => createRetryBudget({ colour: 1 } as never)).toThrow(/^Invalid option `colour`: unknown option; createRetryBudget\(\) takes/);
  });

  it('retryBudget: budget options are named under retryBudget.…; a budget is anything with deposit() and tryWithdraw()', () => {
    expect(() => createIdempotentFetch({ retryBudget: { initialTokens: 20, capacity: 10 } })).toThrow('Invalid option `retryBudget.initialTokens`: must be at most capacity (10)');
    expect(() => createIdempotentFetch({ retryBudget: { capacity: 'x' } as never })).toThrow('Invalid option `retryBudget.capacity`: expected an integer >= 1, got x');
    for (const half of [{ deposit: () => {} }, { tryWithdraw: () => true }]) {
      expect(() => createIdempotentFetch({ retryBudget: half as never })).toThrow(/Invalid option `retryBudget\.(deposit|tryWithdraw)`: unknown option; `retryBudget` takes `ratio`, `capacity`, `initialTokens`/);
    }
    const own = { deposit: () => {}, tryWithdraw: () => false, tokens: 0 };
    expect(() => createIdempotentFetch({ retryBudget: own })).not.toThrow();
    for (const wrong of [[], null, 42, 'budget']) {
      expect(() => createIdempotentFetch({ retryBudget: wrong as never })).toThrow('Invalid option `retryBudget`: expected a RetryBudget (createRetryBudget()), budget options, or false');
    }
  });
});
