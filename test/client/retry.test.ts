/** Which failures are retried and which are answers, against a scripted real HTTP server. */
import { afterEach, describe, expect, it } from 'vitest';
import {
  AttemptTimeoutError,
  HttpStatusError,
  RequestFailedError,
  createIdempotentFetch,
} from '../../src/client/index.js';
import type { RetryContext } from '../../src/client/index.js';
import type { Action, ScriptedServer } from './servers.js';
import { deadUrl, scriptedServer } from './servers.js';
import { expectFetchFailure, fetchRuntime } from '../support/fetch-failures.js';

let server: ScriptedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const fast = { minTimeout: 5, maxTimeout: 20, retryBudget: false } as const;
const ok: Action = { status: 201, body: '{"ok":true}' };
const post = { method: 'POST', body: '{"amount":1}', headers: { 'content-type': 'application/json' } };

/** A server that plays `actions` in order, then answers 201. */
function sequence(...actions: Action[]): Promise<ScriptedServer> {
  return scriptedServer((n) => actions[n] ?? ok);
}

describe('retried with the same key', () => {
  it.each([500, 502, 503, 504, 429, 409])('%i → success', async (status) => {
    server = await sequence({ status });
    const response = await createIdempotentFetch(fast)(server.url, post);
    expect(response.status).toBe(201);
    expect(response.idempotency.attempts).toBe(2);
    expect(server.seen).toHaveLength(2);
    expect(server.seen[1]!.headers['idempotency-key']).toBe(server.seen[0]!.headers['idempotency-key']);
  });

  it('409 → replay: the response says it was replayed', async () => {
    server = await sequence(
      { status: 409, headers: { 'content-type': 'application/problem+json', 'retry-after': '0' } },
      { status: 201, headers: { 'idempotent-replayed': 'true' } },
    );
    const response = await createIdempotentFetch(fast)(server.url, post);
    expect(response.idempotency).toMatchObject({ attempts: 2, replayed: true });
  });

  // What Deno's fetch throws (issue 31): errors that carry no code, only a message.
  const sending = (detail: string) => new TypeError('fetch failed', { cause: new Error(`error sending request for url (http://127.0.0.1:1/): ${detail}`) });
  it.each([
    ['refused', () => sending('client error (Connect): tcp connect error: Connection refused (os error 111)'), 2],
    ['closed', () => sending('client error (SendRequest): connection closed before message completed'), 2],
    ['reset', () => new TypeError('fetch failed', { cause: new Error('Connection reset by peer (os error 104)') }), 2],
    ['refused a certificate', () => sending('client error (Connect): invalid peer certificate: UnknownIssuer'), 1],
    ['to a blocked port', () => new TypeError('Fetch failed: Requests to port 1 are blocked'), 1],
  ] as const)("Deno's fetch error for a connection %s (no code, only its message) is retried when it names the connection", async (_name, thrown, attempts) => {
    let calls = 0;
    const denoFetch: typeof fetch = async () => {
      calls++;
      if (calls === 1) throw thrown();
      return new Response('{"ok":true}', { status: 201 });
    };
    const outcome = await createIdempotentFetch({ ...fast, fetch: denoFetch })('http://127.0.0.1:1/', post).then(
      (response) => response.status,
      (error: unknown) => error,
    );
    expect(calls).toBe(attempts);
    if (attempts === 2) expect(outcome).toBe(201);
    else expect(outcome).toBeInstanceOf(Error);
  });

  it("Deno's error for a body cut off while it is read (a TypeError with no code) is retried", async () => {
    let calls = 0;
    const denoFetch: typeof fetch = async () => {
      calls++;
      if (calls > 1) return new Response('{"ok":true}', { status: 201 });
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"partial":'));
          controller.error(new TypeError('error reading a body from connection'));
        },
      });
      return new Response(body, { status: 201, headers: { 'content-type': 'application/json' } });
    };
    const response = await createIdempotentFetch({ ...fast, fetch: denoFetch })('http://127.0.0.1:1/', post);
    expect(await response.json()).toEqual({ ok: true });
    expect(calls).toBe(2);
  });

  it.each([
    ['closed', 'drop'],
    ['reset', 'reset'],
  ] as const)('a connection %s before the response is retried', async (kind, action) => {
    server = await sequence(action);
    const errors: unknown[] = [];
    const response = await createIdempotentFetch({ ...fast, onRetry: (c) => void errors.push(c.error) })(server.url, post);
    expect(response.status).toBe(201);
    expectFetchFailure(errors[0], kind);
  });

  it('a connection cut after the headers, while the body is read, is retried', async () => {
    server = await sequence('drop-mid-body');
    const response = await createIdempotentFetch(fast)(server.url, post);
    expect(await response.json()).toEqual({ ok: true });
    expect(response.idempotency.attempts).toBe(2);
  });

  it('an attempt that exceeds attemptTimeout is abandoned and retried', async () => {
    server = await sequence('hang');
    const errors: unknown[] = [];
    // Retries to spare: on a loaded machine an answered attempt may also outlast 200 ms; what
    // matters is that every timed-out attempt was retried, with the same key, until one answered.
    const client = createIdempotentFetch({ ...fast, retries: 10, attemptTimeout: 200, onRetry: (c) => void errors.push(c.error) });
    const response = await client(server.url, post);
    expect(response.status).toBe(201);
    expect(errors.length).toBeGreaterThanOrEqual(1); // the first attempt hung: it timed out
    expect(errors.every((e) => e instanceof AttemptTimeoutError)).toBe(true);
    expect(response.idempotency.attempts).toBe(errors.length + 1);
    expect(new Set(server.seen.map((s) => s.headers['idempotency-key'])).size).toBe(1);
  });

  it('a dead server: every attempt refused, then RequestFailedError with the key and the cause', async () => {
    const url = await deadUrl();
    const error = await createIdempotentFetch({ ...fast, retries: 2 })(url, post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestFailedError);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_REQUEST_FAILED', attempts: 3 });
    expect((error as RequestFailedError).key).toMatch(/^[0-9a-f-]{36}$/);
    expectFetchFailure((error as Error).cause, 'refused');
  });

  it('after `retries`, a still-failing status is returned as the response', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    const response = await createIdempotentFetch({ ...fast, retries: 2 })(server.url, post);
    expect(response.status).toBe(503);
    expect(response.idempotency.attempts).toBe(3);
    expect(server.seen).toHaveLength(3);
  });

  it('maxRetryTime: no retry is scheduled whose pause would end past it', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    // Pauses of 1 ms, then 1000 s: the first retry ends within the 60 s allowed, the second could not
    // (whatever the attempts took, short of the test's own timeout), so the call settles without it.
    const delays: number[] = [];
    const client = createIdempotentFetch({
      ...fast, retries: 10, minTimeout: 1, factor: 1_000_000, maxTimeout: 1_000_000, randomize: false, maxRetryTime: 60_000,
      onRetry: (c) => void delays.push(c.delay),
    });
    const response = await client(server.url, post);
    expect(response.status).toBe(503);
    expect(delays).toEqual([1]);
    expect(response.idempotency.attempts).toBe(2);
    expect(server.seen).toHaveLength(2);
  });

  it('GET is retried (idempotent by definition) and carries no key', async () => {
    server = await sequence({ status: 503 });
    const response = await createIdempotentFetch(fast)(server.url);
    expect(response.status).toBe(201);
    expect(response.idempotency).toEqual({ key: undefined, attempts: 2, replayed: false });
    expect(server.seen.map((s) => s.headers['idempotency-key'])).toEqual([undefined, undefined]);
  });

  it('a POST outside `methods` and without a key is never sent twice', async () => {
    server = await sequence({ status: 503 });
    const response = await createIdempotentFetch({ ...fast, methods: ['PATCH'] })(server.url, post);
    expect(response.status).toBe(503);
    expect(server.seen).toHaveLength(1);
    expect(server.seen[0]!.headers['idempotency-key']).toBeUndefined();
  });
});

describe('onRetry', () => {
  it('is told the key, the attempt, what failed and the pause, before each retry', async () => {
    server = await sequence({ status: 500 }, { status: 429, headers: { 'retry-after': '0' } });
    const contexts: RetryContext[] = [];
    const response = await createIdempotentFetch({ ...fast, retries: 4, onRetry: (c) => void contexts.push(c) })(server.url, post);
    const key = response.idempotency.key;
    expect(contexts).toEqual([
      { key, method: 'POST', url: server.url + '/', attempt: 1, retriesLeft: 3, delay: expect.any(Number), status: 500 },
      { key, method: 'POST', url: server.url + '/', attempt: 2, retriesLeft: 2, delay: expect.any(Number), status: 429, retryAfter: 0 },
    ]);
  });

  it('a hook that throws stops the retries; the call rejects with its error', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    const stop = new Error('circuit open');
    const error = await createIdempotentFetch({ ...fast, onRetry: () => Promise.reject(stop) })(server.url, post).catch((e: unknown) => e);
    expect(error).toBe(stop);
    expect(server.seen).toHaveLength(1);
  });
});

describe('never retried: an answer about this request', () => {
  it.each([400, 401, 403, 404, 422, 402, 410, 413])('%i resolves after exactly one request', async (status) => {
    server = await sequence({ status });
    const response = await createIdempotentFetch(fast)(server.url, post);
    expect(response.status).toBe(status);
    expect(response.idempotency.attempts).toBe(1);
    expect(server.seen).toHaveLength(1);
  });

  it('422 with throwOnError: HttpStatusError with the status and the parsed problem', async () => {
    const problem = {
      type: 'urn:idemkit:problem:key-reused',
      title: 'Idempotency-Key is already used',
      status: 422,
      detail: 'This key was already used with a different request payload; use a new key for a new operation.',
    };
    server = await sequence({ status: 422, headers: { 'content-type': 'application/problem+json' }, body: JSON.stringify(problem) });
    const error = await createIdempotentFetch({ ...fast, throwOnError: true })(server.url, post).catch((e: unknown) => e);

    expect(server.seen).toHaveLength(1);
    expect(error).toBeInstanceOf(HttpStatusError);
    const http = error as HttpStatusError;
    expect(http).toMatchObject({ code: 'ERR_IDEMKIT_HTTP_STATUS', status: 422, problem, attempts: 1, replayed: false });
    expect(http.key).toBe(server.seen[0]!.headers['idempotency-key']);
    expect(http.message).toContain(problem.detail);
    expect(await http.response.json()).toEqual(problem); // the body is still readable
  });

  it.each([
    [500, 'urn:idemkit:problem:store-schema-missing'],
    [503, 'https://errors.example.com/problems/store-schema-missing'],
  ])('%i store-schema-missing (%s): a permanent fault, answered once, not retried', async (status, type) => {
    // What idemkit answers while its store's table or function is missing: no Retry-After, and
    // retrying cannot help until an operator migrates the store.
    const problem = { type, title: 'Idempotency store not migrated', status, detail: 'not migrated' };
    server = await scriptedServer(() => ({ status, headers: { 'content-type': 'application/problem+json' }, body: JSON.stringify(problem) }));
    const response = await createIdempotentFetch({ ...fast, retries: 3 })(server.url, post);
    expect(response.status).toBe(status);
    expect(response.idempotency.attempts).toBe(1);
    expect(server.seen).toHaveLength(1);
    const error = await createIdempotentFetch({ ...fast, throwOnError: true })(server.url, post).catch((e: unknown) => e);
    expect(error).toMatchObject({ status, problem, attempts: 1 });
    expect(server.seen).toHaveLength(2);
  });

  it('a 500 with any other problem type is still retried (outcome unknown: keep the key)', async () => {
    const problem = { type: 'https://example.com/problems/internal', title: 'Internal error', status: 500 };
    server = await sequence({ status: 500, headers: { 'content-type': 'application/problem+json' }, body: JSON.stringify(problem) });
    const response = await createIdempotentFetch(fast)(server.url, post);
    expect([response.status, response.idempotency.attempts]).toEqual([201, 2]);
  });

  it('throwOnError with a non-problem body: status set, problem undefined', async () => {
    server = await sequence({ status: 404, body: 'not found' });
    const error = await createIdempotentFetch({ ...fast, throwOnError: true })(server.url, post).catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 404, problem: undefined });
  });

  it('throwOnError also applies to a retryable status that outlasted the retries', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    const error = await createIdempotentFetch({ ...fast, retries: 1, throwOnError: true })(server.url, post).catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 503, attempts: 2 });
  });

  // Bun's fetch does not block port 1: it connects, is refused, and the refusal is retried, as it should be.
  it.skipIf(fetchRuntime === 'bun')('an error that is not a network failure is not retried (fetch refuses port 1 as a "bad port")', async () => {
    let calls = 0;
    const client = createIdempotentFetch({ ...fast, fetch: (input, init) => (calls++, fetch(input, init)) });
    const error = await client('http://127.0.0.1:1/', post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestFailedError);
    expect(calls).toBe(1);
  });

  it('a malformed URL is refused before anything is sent, with fetch\'s TypeError', async () => {
    let calls = 0;
    const client = createIdempotentFetch({ ...fast, fetch: (input, init) => (calls++, fetch(input, init)) });
    const error = await client('http://127.0.0.1:99999/', post).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect(calls).toBe(0);
  });
});
