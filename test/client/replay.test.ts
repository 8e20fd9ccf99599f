/**
 * The client against the foundation middleware over real HTTP: lost responses, in-flight
 * conflicts and stored errors all end in exactly one effect.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../src/client/index.js';
import type { RetryContext } from '../../src/client/index.js';
import type { IdempotentServer } from './servers.js';
import { idempotentServer } from './servers.js';

let server: IdempotentServer | undefined;
afterEach(async () => {
  await server?.close();
  server?.store.close();
  server = undefined;
});

const fast = { minTimeout: 10, maxTimeout: 20, retryBudget: false } as const;

describe('lost responses', () => {
  it('retries twice after the server executed and dropped the connection; the third attempt is the replay; one effect', async () => {
    server = await idempotentServer({ dropFirst: 2 });
    const retried: unknown[] = [];
    const client = createIdempotentFetch({ ...fast, onRetry: (context) => void retried.push(context.error) });

    const response = await client(`${server.url}/charges`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":1200}' });

    expect(response.status).toBe(201);
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    expect(await response.json()).toEqual({ charge: 1, body: '{"amount":1200}' });
    expect(server.effects()).toBe(1);
    expect(server.seen).toHaveLength(3);
    expect(response.idempotency).toEqual({ key: server.seen[0]!.headers['idempotency-key'], attempts: 3, replayed: true });
    expect(retried).toHaveLength(2);
    expect(retried.every((error) => error instanceof TypeError)).toBe(true); // undici's "fetch failed"
  });

  it('a first attempt that is answered is not a replay', async () => {
    server = await idempotentServer();
    const response = await createIdempotentFetch(fast)(`${server.url}/charges`, { method: 'POST', body: 'x' });
    expect(response.status).toBe(201);
    expect(response.idempotency).toMatchObject({ attempts: 1, replayed: false });
    expect(response.url).toBe(`${server.url}/charges`);
    expect(response.redirected).toBe(false);
    expect(Object.keys(response)).not.toContain('idempotency'); // non-enumerable
  });
});

describe('409: the original is still in flight', () => {
  it('waits for Retry-After and gets the replay of the original', async () => {
    // The first call's handler runs until the second call has had its 409: an order of events.
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    server = await idempotentServer({ leaseMs: 1000, hold: () => (started(), gate) });
    const init = { method: 'POST', headers: { 'idempotency-key': 'order-409' }, body: 'pay' };

    const first = createIdempotentFetch(fast)(`${server.url}/charges`, init);
    await running;
    const contexts: RetryContext[] = [];
    const watcher = createIdempotentFetch({
      ...fast,
      // Awaited before the pause: the original finishes before the retry is due.
      onRetry: async (context) => {
        contexts.push(context);
        release();
        await first;
      },
    });
    const second = await watcher(`${server.url}/charges`, init);

    expect(contexts.map((c) => c.status)).toEqual([409]);
    expect(second.status).toBe(201);
    expect(second.idempotency).toEqual({ key: 'order-409', attempts: 2, replayed: true });
    expect((await first).idempotency).toEqual({ key: 'order-409', attempts: 1, replayed: false });
    expect(server.effects()).toBe(1);
    // The middleware's Retry-After was honoured: the retry did not come earlier.
    const retryAfter = contexts[0]!.retryAfter;
    expect(retryAfter).toBeGreaterThan(0);
    expect(server.seen[2]!.at - server.seen[1]!.at).toBeGreaterThanOrEqual(retryAfter!);
  });
});

describe('500: outcome unknown, keep the key', () => {
  it('retries a 500 with the same key; a replayed 500 is final and not retried again', async () => {
    server = await idempotentServer({ throwFirst: true });
    const response = await createIdempotentFetch({ ...fast, retries: 5 })(`${server.url}/charges`, { method: 'POST', body: 'x' });

    expect(response.status).toBe(500);
    expect(response.idempotency).toMatchObject({ attempts: 2, replayed: true });
    expect(server.effects()).toBe(1);
    const keys = server.seen.map((s) => s.headers['idempotency-key']);
    expect(new Set(keys).size).toBe(1);
  });
});
