/** An abort stops the call at once: no further attempt, the caller's reason, promptly. */
import { afterEach, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../src/client/index.js';
import type { ScriptedServer } from './servers.js';
import { scriptedServer } from './servers.js';

let server: ScriptedServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const post = (signal: AbortSignal) => ({ method: 'POST', body: 'x', signal });
// A long, fixed backoff: any retry the abort failed to stop would show up within the test.
const slow = { minTimeout: 300, maxTimeout: 300, randomize: false, retries: 5, retryBudget: false } as const;

describe('abort', () => {
  it('during the pause between attempts: rejects at once with AbortError; no further attempt', async () => {
    server = await scriptedServer(() => ({ status: 503 }));
    const controller = new AbortController();
    const client = createIdempotentFetch({ ...slow, onRetry: () => void setTimeout(() => controller.abort(), 20) });
    let abortedAt = 0;
    controller.signal.addEventListener('abort', () => (abortedAt = performance.now()));

    const error = await client(server.url, post(controller.signal)).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(DOMException);
    expect((error as DOMException).name).toBe('AbortError');
    expect(performance.now() - abortedAt).toBeLessThan(100);
    await pause(400);
    expect(server.seen).toHaveLength(1);
  });

  it('during an attempt: rejects promptly with the caller\'s own reason; no retry', async () => {
    server = await scriptedServer(() => 'hang');
    const controller = new AbortController();
    const reason = new Error('user navigated away');
    let abortedAt = 0;
    setTimeout(() => {
      abortedAt = performance.now();
      controller.abort(reason);
    }, 100);

    const error = await createIdempotentFetch(slow)(server.url, post(controller.signal)).catch((e: unknown) => e);

    expect(error).toBe(reason);
    expect(performance.now() - abortedAt).toBeLessThan(100);
    await pause(400);
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
    await pause(50);
    expect(server.seen).toHaveLength(0);
  });
});
