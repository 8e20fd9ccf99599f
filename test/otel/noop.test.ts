/**
 * Issue 17 item 2: `idemkit/otel` with the API installed but no SDK registered (this file never
 * registers one) is the API's no-op: requests answer as without it, nothing throws, nothing records.
 */
import { context, trace } from '@opentelemetry/api';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { idempotency } from '../../src/http/hono.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { combineEvents, instrumentStore, telemetryEvents } from '../../src/otel/index.js';

describe('no SDK registered', () => {
  it('executes, replays and refuses as without instrumentation; the store answers the same', async () => {
    const plain = memoryStore();
    const store = instrumentStore(plain);
    const heard: string[] = [];
    const hono = new Hono();
    hono.use('/orders', idempotency({ store, events: combineEvents(telemetryEvents(), { replay: () => void heard.push('replay') }) }));
    let n = 0;
    hono.post('/orders', (c) => c.json({ order: ++n }, 201));
    const post = (body: string) => hono.request('/orders', { method: 'POST', body, headers: { 'content-type': 'application/json', 'idempotency-key': 'noop-key-0001' } });
    expect((await post('{"a":1}')).status).toBe(201);
    const again = await post('{"a":1}');
    expect(again.status).toBe(201);
    expect(await again.json()).toEqual({ order: 1 });
    expect((await post('{"a":2}')).status).toBe(422);
    expect(heard).toEqual(['replay']);
    expect((await store.get({ scope: '', key: 'noop-key-0001' }))?.state).toBe('completed');
    expect(await plain.reap()).toBe(0);
    // Nothing was recording: there is no active span, and the global tracer makes non-recording ones.
    expect(trace.getActiveSpan()).toBeUndefined();
    expect(trace.getTracer('x').startSpan('y', {}, context.active()).isRecording()).toBe(false);
  });

  it('a store error still reaches the caller unchanged', async () => {
    const failure = new Error('down');
    const failing: IdempotencyStore = { ...memoryStore(), claim: () => Promise.reject(failure) };
    const store = instrumentStore(failing);
    await expect(store.claim({ scope: 's', key: 'k' }, 'v2:x', { leaseMs: 1_000, windowMs: 1_000 })).rejects.toBe(failure);
  });
});
