/** An abort stops the call at once: no further attempt, the caller's reason, without waiting out a pause or an attempt. */
import { afterEach, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../src/client/index.js';
import type { ScriptedServer } from './servers.js';
import { scriptedServer } from './servers.js';

let server: ScriptedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const post = (signal: AbortSignal) => ({ method: 'POST', body: 'x', signal });
// A backoff pause, and an attempt timeout, far longer than a test may run: a call that waited for
// either instead of stopping at the abort would never settle within the test.
const HOUR = 3_600_000;
const slow = { minTimeout: HOUR, maxTimeout: HOUR, maxRetryTime: Infinity, attemptTimeout: HOUR, randomize: false, retries: 5, retryBudget: false } as const;

describe('abort', () => {
  it('during the pause between attempts: rejects at once with AbortError; no further attempt', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    const controller = new AbortController();
    // onRetry runs just before the pause; the next macrotask runs once the pause has begun.
    const client = createIdempotentFetch({ ...slow, onRetry: () => void setImmediate(() => controller.abort()) });

    const error = await client(server.url, post(controller.signal)).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(DOMException);
    expect((error as DOMException).name).toBe('AbortError');
    expect(server.seen).toHaveLength(1);
  });

  it('during an attempt: rejects with the caller\'s own reason; no retry', async () => {
    const controller = new AbortController();
    const reason = new Error('user navigated away');
    // The server aborts the call once it holds the request, and never answers it.
    server = await scriptedServer(() => {
      controller.abort(reason);
      return 'hang';
    });

    const error = await createIdempotentFetch(slow)(server.url, post(controller.signal)).catch((e: unknown) => e);

    expect(error).toBe(reason);
    expect(server.seen).toHaveLength(1);
  });

  it('the signal of a Request input is respected too', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    const controller = new AbortController();
    const client = createIdempotentFetch({ ...slow, onRetry: () => controller.abort('stop') });
    const error = await client(new Request(server.url, post(controller.signal))).catch((e: unknown) => e);
    expect(error).toBe('stop');
    expect(server.seen).toHaveLength(1);
  });

  it('an already aborted signal: nothing is sent', async () => {
    server = await scriptedServer(() => ({ status: 200 }));
    const error = await createIdempotentFetch(slow)(server.url, post(AbortSignal.abort())).catch((e: unknown) => e);
    expect((error as DOMException).name).toBe('AbortError');
    // A request of our own, answered after everything sent before it: the server saw only that one
    // (a fixed pause only hoped a stray attempt would have arrived by then).
    const after = await fetch(`${server.url}/after`);
    await after.arrayBuffer();
    expect(server.seen.map((s) => `${s.method} ${s.url}`)).toEqual(['GET /after']);
  });
});
