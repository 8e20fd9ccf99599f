/**
 * A 409 is not a failure: the original request with the key is running. The client comes back
 * after the server's hint in ms (the problem's `retryAfterMs`, finer than `Retry-After`), polls an
 * in-progress 409 outside `retries` and the retry budget, within `maxRetryTime`, and says "still in
 * progress" when it stops, never "outcome unknown".
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HttpStatusError, RetryBudgetExhaustedError, createIdempotentFetch } from '../../src/client/index.js';
import type { RetryContext } from '../../src/client/index.js';
import type { Action, IdempotentServer, ScriptedServer } from './servers.js';
import { idempotentServer, scriptedServer } from './servers.js';

let server: ScriptedServer | IdempotentServer | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await server?.close();
  server = undefined;
});

const post = { method: 'POST', body: 'x' };
/** Stops the call before its pause: what `onRetry` was told is what the client would wait. */
const stop = new Error('stop before the pause');

/** idemkit's 409: the problem, `Retry-After` in whole seconds and, unless `hint` (JSON text) is undefined, the hint in ms. */
function inProgress(hint: string | undefined, retryAfter = '1', type = 'urn:idemkit:problem:request-in-progress'): Action {
  const problem = JSON.stringify({ type, title: 'A request with this Idempotency-Key is in progress', status: 409 });
  const body = hint === undefined ? problem : `{"retryAfterMs":${hint},${problem.slice(1)}`;
  return { status: 409, headers: { 'content-type': 'application/problem+json', 'retry-after': retryAfter }, body };
}
const replay: Action = { status: 201, headers: { 'idempotent-replayed': 'true' }, body: '{"charge":1}' };

describe('50 concurrent calls with one key through one client, default options', () => {
  it('all succeed: 1 executed, 49 replayed; their 409s spend no retry budget', async () => {
    const calls = 50;
    // The original runs until every other call has had its 409: real concurrency, an order of events.
    const conflicted = new Set<string>();
    let release!: () => void;
    const everyDuplicateConflicted = new Promise<void>((resolve) => (release = resolve));
    const app = await idempotentServer({
      retryAfterMs: 50,
      hold: () => everyDuplicateConflicted,
      onAnswer: (status, request) => {
        if (status === 409) conflicted.add(String(request.headers['x-call']));
        if (conflicted.size === calls - 1) release();
      },
    });
    server = app;
    const client = createIdempotentFetch();
    const results = await Promise.allSettled(
      Array.from({ length: calls }, (_, i) => client(`${app.url}/charges`, { ...post, headers: { 'idempotency-key': 'one-charge', 'x-call': String(i) } })),
    );

    const rejected = results.filter((r) => r.status === 'rejected').map((r) => r.reason as unknown);
    expect(rejected.filter((e) => e instanceof RetryBudgetExhaustedError)).toEqual([]);
    expect(rejected).toEqual([]);
    const responses = results.map((r) => (r.status === 'fulfilled' ? r.value : undefined));
    expect(responses.map((r) => r?.status)).toEqual(Array.from({ length: calls }, () => 201));
    expect(responses.filter((r) => r?.idempotency.replayed === false)).toHaveLength(1);
    expect(responses.filter((r) => r?.idempotency.replayed === true)).toHaveLength(calls - 1);
    expect(conflicted.size).toBe(calls - 1);
    expect(app.effects()).toBe(1);
  }, 60_000); // 50 requests and their polls take seconds on a loaded machine
});

describe("the body's hint in ms, not the header's whole seconds", () => {
  it('a duplicate of a running request comes back after retryAfterMs (40 ms), though Retry-After says 1 s', async () => {
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let release!: () => void;
    const done = new Promise<void>((resolve) => (release = resolve));
    const app = await idempotentServer({ retryAfterMs: 40, hold: () => (started(), done) });
    server = app;
    const init = { ...post, headers: { 'idempotency-key': 'k-40' } };
    const first = createIdempotentFetch()(`${app.url}/charges`, init);
    await running;
    // What any client sees: the header keeps whole seconds (RFC 9110), the body carries the ms.
    const raw = await fetch(`${app.url}/charges`, { ...init, method: 'POST' });
    expect([raw.status, raw.headers.get('retry-after')]).toEqual([409, '1']);
    expect(await raw.json()).toMatchObject({ type: 'urn:idemkit:problem:request-in-progress', retryAfterMs: 40 });

    const contexts: RetryContext[] = [];
    const second = await createIdempotentFetch({
      onRetry: async (context) => {
        contexts.push(context);
        release();
        await first; // the original is done before the retry is due
      },
    })(`${app.url}/charges`, init);

    expect(contexts).toMatchObject([{ status: 409, retryAfter: 40, delay: 40 }]);
    expect(second.status).toBe(201);
    expect(second.idempotency).toMatchObject({ attempts: 2, replayed: true });
    expect(app.effects()).toBe(1);
  });

  it('scripted: the hint replaces Retry-After; a missing or malformed hint falls back to the header', async () => {
    const hints = ['30', '0', '2.5', undefined, '"30"', '-1', 'null', '1e400'];
    server = await scriptedServer((_n, seen) => inProgress(hints[Number(seen.headers['x-case'])]));
    const contexts: RetryContext[] = [];
    const client = createIdempotentFetch({ onRetry: (c) => (contexts.push(c), Promise.reject(stop)) });
    for (let i = 0; i < hints.length; i++) {
      await expect(client(server.url, { ...post, headers: { 'x-case': String(i) } })).rejects.toBe(stop);
    }
    // 1e400 parses as Infinity: not a wait; the header's 1 s it is.
    expect(contexts.map((c) => [c.retryAfter, c.delay])).toEqual([
      [30, 30],
      [0, 0],
      [3, 3],
      [1000, 1000],
      [1000, 1000],
      [1000, 1000],
      [1000, 1000],
      [1000, 1000],
    ]);
  });

  it('only the first 409 waits the hint alone; later ones back off (never sooner than the hint) up to maxConflictWait', async () => {
    server = await scriptedServer(() => inProgress('10'));
    const delays: number[] = [];
    const client = createIdempotentFetch({
      minTimeout: 20,
      randomize: false,
      maxConflictWait: 50,
      onRetry: (c) => (delays.push(c.delay), delays.length === 5 ? Promise.reject(stop) : undefined),
    });
    await expect(client(server.url, post)).rejects.toBe(stop);
    expect(delays).toEqual([10, 20, 40, 50, 50]);
  });
});

describe('an in-progress 409 is polled outside `retries` and the retry budget', () => {
  it('five 409s, then the replay: success with retries: 1 and an empty budget', async () => {
    server = await scriptedServer((n) => (n < 5 ? inProgress('1') : replay));
    const budget = { ratio: 0, capacity: 1, initialTokens: 0 };
    const contexts: RetryContext[] = [];
    const response = await createIdempotentFetch({ retries: 1, minTimeout: 1, retryBudget: budget, onRetry: (c) => void contexts.push(c) })(server.url, post);

    expect(response.status).toBe(201);
    expect(response.idempotency).toMatchObject({ attempts: 6, replayed: true });
    // The polls used none of the one retry `retries` allows.
    expect(contexts.map((c) => c.retriesLeft)).toEqual([1, 1, 1, 1, 1]);
  });

  it('under any problem type base, for a lease-lost 409 and a webhook still in progress too', async () => {
    const types = ['https://errors.example.com/problems/request-in-progress', 'urn:idemkit:problem:lease-lost', 'https://x.example/p#webhook-in-progress'];
    for (const type of types) {
      server = await scriptedServer((n) => (n < 3 ? inProgress('1', '1', type) : replay));
      const response = await createIdempotentFetch({ retries: 0, minTimeout: 1, retryBudget: { ratio: 0, capacity: 1, initialTokens: 0 } })(server.url, post);
      expect([type, response.status, response.idempotency.attempts]).toEqual([type, 201, 4]);
      await server.close();
      server = undefined;
    }
  });

  it('any other 409 counts against `retries` but is never charged to the budget', async () => {
    server = await scriptedServer(() => ({ status: 409, body: '{"error":"conflict"}' }));
    const response = await createIdempotentFetch({ retries: 2, minTimeout: 1, retryBudget: { ratio: 0, capacity: 1, initialTokens: 0 } })(server.url, post);
    expect(response.status).toBe(409);
    expect(response.idempotency.attempts).toBe(3);
  });

  it('a failure after the polls is still charged: the budget guards outages, not 409s', async () => {
    server = await scriptedServer((n) => (n < 2 ? inProgress('1') : { status: 503 }));
    const error = await createIdempotentFetch({ retryBudget: { ratio: 0, capacity: 1, initialTokens: 0 } })(server.url, post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RetryBudgetExhaustedError);
    expect(error).toMatchObject({ status: 503, attempts: 3 });
  });
});

describe('polling stops at maxRetryTime, and says the original was still in progress', () => {
  /** An injected fetch that answers idemkit's in-progress 409 at once (no time passes), counting calls. */
  function alwaysInProgress(hint: number) {
    const sent: number[] = [];
    const fetch = (() => {
      sent.push(performance.now());
      const body = JSON.stringify({ type: 'urn:idemkit:problem:request-in-progress', status: 409, retryAfterMs: hint, detail: 'still running' });
      return Promise.resolve(new Response(body, { status: 409, headers: { 'content-type': 'application/problem+json', 'retry-after': '1' } }));
    }) as typeof globalThis.fetch;
    return { fetch, sent };
  }

  it('polls until the deadline, the last poll moved up to it, then resolves the 409', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const { fetch, sent } = alwaysInProgress(300);
    const client = createIdempotentFetch({ fetch, maxRetryTime: 1_000, minTimeout: 100, randomize: false, retries: 0 });
    const call = client('http://api.test/charges', post);
    await vi.runAllTimersAsync();
    const response = await call;

    expect(response.status).toBe(409);
    // Pauses 300 (the hint), 300, 300 (backoff 100, 200 < hint), then 400 would pass the
    // deadline: the last poll is at 1,000 ms, and none after it.
    const t0 = sent[0]!;
    expect(sent.map((t) => t - t0)).toEqual([0, 300, 600, 900, 1_000]);
    expect(response.idempotency.attempts).toBe(5);
  });

  it('with throwOnError: HttpStatusError, inProgress, "still in progress", never "outcome unknown"', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const { fetch } = alwaysInProgress(100);
    // Pauses 100 (the hint), 100 (backoff 50 < hint), then 100 moved up to the deadline at 250.
    const client = createIdempotentFetch({ fetch, maxRetryTime: 250, minTimeout: 50, randomize: false, throwOnError: true });
    const call = client('http://api.test/charges', { ...post, idempotencyKey: 'order-7' }).catch((e: unknown) => e);
    await vi.runAllTimersAsync();
    const error = await call;

    expect(error).toBeInstanceOf(HttpStatusError);
    expect(error).toMatchObject({ status: 409, inProgress: true, key: 'order-7', attempts: 4 });
    const { message } = error as HttpStatusError;
    expect(message).toContain('still in progress');
    expect(message).toContain('It has not failed');
    expect(message).toContain('(order-7)');
    expect(message).not.toMatch(/unknown/i);
  });

  it('an answer that is not an in-progress 409 keeps the plain message', async () => {
    server = await scriptedServer(() => ({ status: 409, headers: { 'content-type': 'application/problem+json' }, body: '{"type":"about:blank","detail":"name taken"}' }));
    const error = await createIdempotentFetch({ retries: 0, throwOnError: true })(server.url, post).catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 409, inProgress: false, message: 'HTTP 409: name taken' });
  });
});
