/** Retry-After is obeyed ("not before"), in both forms, and capped by maxRetryAfter; a 409's wait is capped by maxConflictWait (test/client/conflict.test.ts: its hint in ms, and its polling). */
import { afterEach, describe, expect, it } from 'vitest';
import { HttpStatusError, createIdempotentFetch } from '../../src/client/index.js';
import type { ScriptedServer } from './servers.js';
import { scriptedServer } from './servers.js';

let server: ScriptedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const fast = { minTimeout: 5, maxTimeout: 10, retryBudget: false } as const;
const post = { method: 'POST', body: 'x' };

describe('Retry-After', () => {
  it('delay-seconds: the retry reaches the server at least that long after the 503', async () => {
    server = await scriptedServer((n) => (n === 0 ? { status: 503, headers: { 'retry-after': '1' } } : { status: 200 }));
    const delays: number[] = [];
    const response = await createIdempotentFetch({ ...fast, onRetry: (c) => void delays.push(c.delay) })(server.url, post);

    expect(response.status).toBe(200);
    expect(delays).toEqual([1000]);
    expect(server.seen[1]!.at - server.seen[0]!.at).toBeGreaterThanOrEqual(1000);
  });

  it('HTTP-date: the retry does not reach the server before that date', async () => {
    let notBefore = 0;
    server = await scriptedServer((n) => {
      if (n > 0) return { status: 200 };
      // An HTTP-date has whole seconds: 2 s ahead, rounded down, is 1–2 s away.
      notBefore = Math.floor(Date.now() / 1000) * 1000 + 2000;
      return { status: 429, headers: { 'retry-after': new Date(notBefore).toUTCString() } };
    });
    const retryAfter: number[] = [];
    const response = await createIdempotentFetch({ ...fast, onRetry: (c) => void retryAfter.push(c.retryAfter!) })(server.url, post);

    expect(response.status).toBe(200);
    // Parsed as a date: a wait no longer than the 2 s the server gave (however late the answer
    // was read), and a retry that did not reach the server before the date.
    expect(retryAfter).toHaveLength(1);
    expect(retryAfter[0]).toBeLessThanOrEqual(2000);
    expect(server.seen[1]!.wall).toBeGreaterThanOrEqual(notBefore);
  });

  it('longer than maxRetryAfter: no early retry; the call settles with that response at once', async () => {
    // An hour asked, ten minutes allowed: a call that waited for either would not settle within the test.
    server = await scriptedServer(() => ({ status: 503, headers: { 'retry-after': '3600' } }));
    let retries = 0;
    const response = await createIdempotentFetch({ ...fast, maxRetryAfter: 600_000, onRetry: () => void retries++ })(server.url, post);

    expect(response.status).toBe(503);
    expect(response.idempotency.attempts).toBe(1);
    expect(retries).toBe(0);
    expect(server.seen).toHaveLength(1);
  });

  it('the cap holds with throwOnError too: HttpStatusError carrying the 503', async () => {
    server = await scriptedServer(() => ({ status: 503, headers: { 'retry-after': new Date(Date.now() + 3_600_000).toUTCString() } }));
    const error = await createIdempotentFetch({ ...fast, throwOnError: true })(server.url, post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HttpStatusError);
    expect(error).toMatchObject({ status: 503, attempts: 1 });
    expect(server.seen).toHaveLength(1);
  });

  it('a malformed Retry-After falls back to the backoff', async () => {
    server = await scriptedServer((n) => (n === 0 ? { status: 503, headers: { 'retry-after': 'soon' } } : { status: 200 }));
    const delays: number[] = [];
    const response = await createIdempotentFetch({ ...fast, onRetry: (c) => void delays.push(c.delay) })(server.url, post);
    expect(response.status).toBe(200);
    expect(delays[0]).toBeLessThanOrEqual(5);
  });
});

describe("a 409's Retry-After is capped by maxConflictWait", () => {
  /** An idemkit 409 (before `retryAfterMs`, idemkit sent its whole 30 s lease). */
  const inFlight = (retryAfter: string) => ({
    status: 409,
    headers: { 'content-type': 'application/problem+json', 'retry-after': retryAfter },
    body: JSON.stringify({ type: 'urn:idemkit:problem:request-in-progress', status: 409, code: 'ERR_IDEMKIT_KEY_IN_FLIGHT' }),
  });
  /** Stops the call before its pause: what `onRetry` was told is what the client would wait. */
  const stop = new Error('stop before the pause');

  it('waits 2 s by default, not the 30 s the server asked', async () => {
    server = await scriptedServer(() => inFlight('30'));
    const contexts: { delay: number; retryAfter?: number }[] = [];
    const error = await createIdempotentFetch({ ...fast, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) })(server.url, post).catch((e: unknown) => e);
    expect(error).toBe(stop);
    expect(contexts).toMatchObject([{ delay: 2_000, retryAfter: 30_000 }]);
  });

  it('waits at most `maxConflictWait`, then gets the replay', async () => {
    server = await scriptedServer((n) => (n === 0 ? inFlight('30') : { status: 201, headers: { 'idempotent-replayed': 'true' } }));
    const delays: number[] = [];
    const response = await createIdempotentFetch({ ...fast, maxConflictWait: 20, onRetry: (c) => void delays.push(c.delay) })(server.url, post);
    expect(response.status).toBe(201);
    expect(response.idempotency).toMatchObject({ attempts: 2, replayed: true });
    expect(delays).toEqual([20]);
  });

  it('the first 409 waits a shorter Retry-After alone, whatever the backoff; a 409 without one backs off (within the cap)', async () => {
    server = await scriptedServer(() => inFlight('1'));
    const contexts: { delay: number }[] = [];
    const client = createIdempotentFetch({ ...fast, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) });
    await client(server.url, post).catch(() => {});
    // The server expects the original done by then: the failure backoff is not added to a 409.
    const slow = createIdempotentFetch({ minTimeout: 1_500, randomize: false, retryBudget: false, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) });
    await slow(server.url, post).catch(() => {});
    await server.close();
    server = await scriptedServer(() => ({ status: 409 }));
    await slow(server.url, post).catch(() => {});
    const capped = createIdempotentFetch({ minTimeout: 5_000, randomize: false, retryBudget: false, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) });
    await capped(server.url, post).catch(() => {});
    expect(contexts.map((c) => c.delay)).toEqual([1_000, 1_000, 1_500, 2_000]);
  });

  it('a 409 asking for longer than maxRetryAfter is retried after the cap, not settled', async () => {
    server = await scriptedServer(() => inFlight('3600'));
    const contexts: { delay: number }[] = [];
    const error = await createIdempotentFetch({ ...fast, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) })(server.url, post).catch((e: unknown) => e);
    expect(error).toBe(stop);
    expect(contexts.map((c) => c.delay)).toEqual([2_000]);
  });

  it('the time limit still bounds it: with maxRetryTime: 0 an in-progress 409 is not polled', async () => {
    // How polling runs up to the deadline: test/client/conflict.test.ts, on fake timers.
    server = await scriptedServer(() => inFlight('30'));
    const response = await createIdempotentFetch({ ...fast, maxRetryTime: 0 })(server.url, post);
    expect(response.status).toBe(409);
    expect(response.idempotency.attempts).toBe(1);
  });

  it('another 409 is not retried past maxRetryTime', async () => {
    server = await scriptedServer(() => ({ status: 409, headers: { 'retry-after': '30' } }));
    const response = await createIdempotentFetch({ ...fast, maxRetryTime: 1_000 })(server.url, post);
    expect(response.status).toBe(409);
    expect(response.idempotency.attempts).toBe(1);
  });

  it('with maxConflictWait: Infinity a 409 is treated like any other Retry-After', async () => {
    server = await scriptedServer(() => inFlight('30'));
    const contexts: { delay: number }[] = [];
    const error = await createIdempotentFetch({ ...fast, maxConflictWait: Infinity, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) })(server.url, post).catch((e: unknown) => e);
    expect(error).toBe(stop);
    expect(contexts.map((c) => c.delay)).toEqual([30_000]);
  });

  it('429 and 503 keep their Retry-After in full', async () => {
    const contexts: { delay: number; status?: number }[] = [];
    for (const status of [429, 503]) {
      server = await scriptedServer(() => ({ status, headers: { 'retry-after': '30' } }));
      await createIdempotentFetch({ ...fast, onRetry: (c) => (contexts.push(c), Promise.reject(stop)) })(server.url, post).catch(() => {});
      await server.close();
      server = undefined;
    }
    expect(contexts.map((c) => [c.status, c.delay])).toEqual([
      [429, 30_000],
      [503, 30_000],
    ]);
  });
});
