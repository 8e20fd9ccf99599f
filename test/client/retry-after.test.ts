/** Retry-After is obeyed ("not before"), in both forms, and capped by maxRetryAfter. */
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
