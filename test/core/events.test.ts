/**
 * Issue 17 item 1: the `events` option tells what the engine decided for each request, with who
 * it was (scope, key or its hash, method, path) and what it cost; nobody listening costs nothing.
 * Requests go through the web adapter against a memory store on a clock the tests move.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { recordingEvents } from '../support/recording.js';
import type { CompleteEvent } from '../../src/core/events.js';
import { redactedKey } from '../../src/core/events.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import type { IdempotencyOptions } from '../../src/core/options.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { manualClock } from '../stores/manual-clock.js';

interface Gate {
  readonly entered: Promise<void>;
  open(): void;
}

function gate(): Gate & { enter(): Promise<void> } {
  let entered!: () => void;
  let open!: () => void;
  const enteredP = new Promise<void>((resolve) => (entered = resolve));
  const opened = new Promise<void>((resolve) => (open = resolve));
  return {
    entered: enteredP,
    open,
    enter: () => {
      entered();
      return opened;
    },
  };
}

function app(options: Partial<IdempotencyOptions<Request>> & { store: IdempotencyStore }, hold?: ReturnType<typeof gate>) {
  const handle = withIdempotency(
    async (request, ctx) => {
      if (new URL(request.url).pathname === '/discard') ctx?.discard();
      if (hold) await hold.enter();
      const body = await request.text();
      return new Response(`paid:${body}`, { status: 201, headers: { 'content-type': 'text/plain' } });
    },
    { scope: (request) => request.headers.get('x-tenant') ?? '', ...options },
  );
  return (key: string | undefined, body = 'a', path = '/pay?card=4242') =>
    handle(
      new Request(`http://shop.test${path}`, {
        method: 'POST',
        headers: { 'x-tenant': 't1', ...(key === undefined ? {} : { 'idempotency-key': key }) },
        body,
      }),
    );
}

afterEach(() => vi.restoreAllMocks());

describe('events', () => {
  it('execute then complete (stored) for a new key, replay for its retry, each naming the request without its query', async () => {
    const { seen, events } = recordingEvents();
    const post = app({ store: memoryStore(), events });
    expect((await post('k1')).status).toBe(201);
    expect((await post('k1')).status).toBe(201);
    const who = { scope: 't1', key: 'k1', method: 'POST', path: '/pay' };
    expect(seen.map(([name]) => name)).toEqual(['execute', 'complete', 'replay']);
    expect(seen[0]![1]).toMatchObject({ ...who, takeover: false, storeMs: expect.any(Number) });
    expect(seen[1]![1]).toMatchObject({ ...who, outcome: 'stored', status: 201, bodyBytes: 'paid:a'.length });
    expect(seen[2]![1]).toMatchObject({ ...who, status: 201 });
  });

  it('conflict (409, with the Retry-After hint) while the key is in flight, mismatch (422) for another body', async () => {
    const { seen, events } = recordingEvents();
    const hold = gate();
    const post = app({ store: memoryStore(), events, retryAfterMs: 2_000 }, hold);
    const first = post('k2');
    await hold.entered;
    expect((await post('k2')).status).toBe(409);
    hold.open();
    expect((await first).status).toBe(201);
    expect((await post('k2', 'other body')).status).toBe(422);
    expect(seen.map(([name]) => name)).toEqual(['execute', 'conflict', 'complete', 'mismatch']);
    expect(seen[1]![1]).toMatchObject({ scope: 't1', key: 'k2', status: 409, retryAfterMs: 2_000 });
    expect(seen[3]![1]).toMatchObject({ scope: 't1', key: 'k2', status: 422 });
  });

  it('rejected before any claim: 400 without a key, 413 over maxBodyBytes, with their codes', async () => {
    const { seen, events } = recordingEvents();
    const post = app({ store: memoryStore(), events, maxBodyBytes: 4 });
    expect((await post(undefined)).status).toBe(400);
    expect((await post('k3', 'too large')).status).toBe(413);
    expect(seen).toEqual([
      ['rejected', { status: 400, code: 'ERR_IDEMKIT_KEY_MISSING', method: 'POST', path: '/pay' }],
      ['rejected', { status: 413, code: 'ERR_IDEMKIT_BODY_TOO_LARGE', method: 'POST', path: '/pay' }],
    ]);
  });

  it('takeover (and execute with takeover) when an earlier lease ran out on the store clock', async () => {
    const { seen, events } = recordingEvents();
    const clock = manualClock();
    const store = memoryStore({ clock: clock.now });
    const post = app({ store, events, leaseMs: 1_000 });
    // An earlier owner claimed with the request's fingerprint, recorded a point, and died.
    const engine = new IdempotencyEngine<Request>({ store, scope: () => 't1', leaseMs: 1_000 });
    const decision = await engine.decide(new Request('http://shop.test/pay?card=4242', { method: 'POST', headers: { 'idempotency-key': 'k4' }, body: 'a' }), {
      method: (r) => r.method,
      header: (r, name) => r.headers.get(name),
      path: () => '/pay?card=4242',
      // What the adapter reads: Bun's Request sets no content type for a string body, Node's and Deno's text/plain;charset=UTF-8.
      contentType: (r) => r.headers.get('content-type'),
      readBody: async (r) => ({ body: new Uint8Array(await r.arrayBuffer()) }),
    });
    if (decision.kind !== 'execute') throw new Error(decision.kind);
    await decision.execution.context.checkpoint('charged');
    await clock.advance(1_001);
    expect((await post('k4')).status).toBe(201);
    expect(seen.map(([name]) => name)).toEqual(['takeover', 'execute', 'complete']);
    expect(seen[0]![1]).toMatchObject({ key: 'k4', resumeFrom: 'charged' });
    expect(seen[1]![1]).toMatchObject({ key: 'k4', takeover: true });
    await decision.execution.abort();
  });

  it('leaseLost and complete "failed" when a late completion is fenced out by the token', async () => {
    const { seen, events } = recordingEvents();
    const clock = manualClock();
    const store = memoryStore({ clock: clock.now });
    const hold = gate();
    const post = app({ store, events, leaseMs: 1_000, renewLease: false, onError: () => {}, logger: { warn: () => {}, error: () => {} } }, hold);
    const first = post('k5');
    await hold.entered;
    // The lease runs out and a retry takes the key over while the first handler still runs.
    await clock.advance(1_001);
    const retry = app({ store, leaseMs: 1_000 });
    expect((await retry('k5')).status).toBe(201);
    hold.open();
    expect((await first).status).toBe(201);
    expect(seen.map(([name]) => name)).toEqual(['execute', 'leaseLost', 'complete']);
    expect(seen[1]![1]).toMatchObject({ key: 'k5', during: 'complete' });
    expect(seen[2]![1]).toMatchObject({ key: 'k5', outcome: 'failed', status: 201 });
  });

  it('storeError (claim) when the store fails, and the 503 still goes out', async () => {
    const { seen, events } = recordingEvents();
    const broken: IdempotencyStore = { ...memoryStore(), name: 'broken', claim: () => Promise.reject(new Error('connection refused')) };
    const post = app({ store: broken, events, onError: () => {}, logger: { warn: () => {}, error: () => {} } });
    expect((await post('k6')).status).toBe(503);
    expect(seen).toHaveLength(1);
    expect(seen[0]![0]).toBe('storeError');
    expect(seen[0]![1]).toMatchObject({ operation: 'claim', request: { scope: 't1', key: 'k6', method: 'POST', path: '/pay' } });
    expect((seen[0]![1].error as Error).message).toBe('connection refused');
  });

  it('complete says omitted for an answer over the store limit, released for discard()', async () => {
    const { seen, events } = recordingEvents();
    const post = app({ store: memoryStore({ maxResponseBytes: 8 }), events });
    await post('k7', 'a body longer than eight bytes');
    await post('k8', 'x', '/discard');
    const outcomes = seen.filter(([name]) => name === 'complete').map(([, event]) => (event as unknown as CompleteEvent).outcome);
    expect(outcomes).toEqual(['omitted', 'released']);
  });

  it('redactKeys: events carry a stable hash of scope and key, never the key', async () => {
    const { seen, events } = recordingEvents();
    const post = app({ store: memoryStore(), events, redactKeys: true });
    await post('secret-key-1');
    await post('secret-key-1');
    const keys = seen.map(([, event]) => event.key);
    expect(keys).toEqual([redactedKey('t1', 'secret-key-1'), redactedKey('t1', 'secret-key-1'), redactedKey('t1', 'secret-key-1')]);
    expect(keys[0]).toMatch(/^sha256:[0-9a-f]{32}$/);
    expect(redactedKey('t2', 'secret-key-1')).not.toBe(keys[0]);
    expect(JSON.stringify(seen)).not.toContain('secret-key-1');
  });

  it('a listener that throws is reported to onError and changes no answer', async () => {
    const errors: unknown[] = [];
    const post = app({
      store: memoryStore(),
      events: { execute: () => { throw new Error('listener bug'); } },
      onError: (error) => errors.push(error),
      logger: { warn: () => {}, error: () => {} },
    });
    expect((await post('k9')).status).toBe(201);
    expect((await post('k9')).headers.get('idempotent-replayed')).toBe('true');
    expect(errors).toEqual([new Error('listener bug')]);
  });

  it('with no listener nothing is built and no clock is read for events', async () => {
    const engine = new IdempotencyEngine({ store: memoryStore() });
    expect(engine.options.events).toBeUndefined();
    expect(new IdempotencyEngine({ store: memoryStore(), events: {} }).options.events).toBeUndefined();
    const now = vi.spyOn(performance, 'now');
    const post = app({ store: memoryStore() });
    await post('k10');
    await post('k10');
    expect(now).not.toHaveBeenCalled();
    // One listener turns the clock on.
    const listened = app({ store: memoryStore(), events: { complete: () => {} } });
    await listened('k11');
    expect(now).toHaveBeenCalled();
  });

  it('refuses an unknown listener name or a listener that is not a function, naming it', () => {
    expect(() => new IdempotencyEngine({ store: memoryStore(), events: { exeucte: () => {} } as never })).toThrow(/events\.exeucte.*execute/s);
    expect(() => new IdempotencyEngine({ store: memoryStore(), events: { replay: 'log' } as never })).toThrow(/events\.replay/);
    expect(() => new IdempotencyEngine({ store: memoryStore(), redactKeys: 'yes' as never })).toThrow(/redactKeys/);
  });
});
