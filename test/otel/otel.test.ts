/**
 * Issue 17 item 2: with the OpenTelemetry SDK registered (in-memory exporters, no collector), a
 * request through an adapter gives store spans under the request's span, the decision on that
 * span, counters per outcome and a latency histogram per store operation. Against the memory
 * store and against SQLite in transactional mode (a real file). No timing is asserted.
 */
import type { Database } from 'better-sqlite3';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import express from 'express';
import { Hono } from 'hono';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { Histogram } from '@opentelemetry/sdk-metrics';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { IdempotencyEvents } from '../../src/core/events.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { isTransactionalStore } from '../../src/core/store.js';
import { StoreUnavailableError } from '../../src/core/errors.js';
import type { IdempotencyOptions } from '../../src/core/options.js';
import { idempotency } from '../../src/http/hono.js';
import { idempotency as expressIdempotency } from '../../src/http/express.js';
import type { IdempotencyVariables } from '../../src/http/hono.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';
import { combineEvents, instrumentStore, telemetryEvents } from '../../src/otel/index.js';
import { sqliteFile } from '../support/sqlite-file.js';
import type { SqliteFile } from '../support/sqlite-file.js';
import { startTestSdk } from './sdk.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestSdk } from './sdk.js';

// Registered before anything below asks for a meter: `metrics.getMeter` before a MeterProvider is
// registered answers a no-op meter for good (a tracer, by contrast, follows the provider set later).
const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8')) as { version: string };
const sdk: TestSdk = startTestSdk();
afterAll(async () => {
  await sdk.shutdown();
});
beforeEach(() => sdk.clearSpans());

const silent = { warn: () => {}, error: () => {} };

/** A Hono app whose first middleware opens the request's SERVER span, as an HTTP instrumentation would. */
function app(store: IdempotencyStore, options: Partial<IdempotencyOptions<never>> = {}, handler?: (c: { get(name: 'idempotency'): unknown }) => Response | Promise<Response>) {
  const tracer = trace.getTracer('test-http');
  const hono = new Hono<{ Variables: IdempotencyVariables }>();
  hono.use('*', (c, next) =>
    tracer.startActiveSpan(`${c.req.method} ${c.req.path}`, { kind: SpanKind.SERVER }, async (span) => {
      try {
        await next();
      } finally {
        span.end();
      }
    }),
  );
  hono.use('/orders', idempotency({ store, events: telemetryEvents(), logger: silent, ...(options as object) }));
  let n = 0;
  hono.post('/orders', (c) => (handler ? handler(c) : c.json({ order: ++n }, 201)));
  return (key: string | undefined, body = '{"amount":1}') =>
    hono.request('/orders', { method: 'POST', body, headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) } });
}

const requestSpans = () => sdk.spans().filter((span) => span.kind === SpanKind.SERVER);
const storeSpans = () => sdk.spans().filter((span) => span.name.startsWith('idemkit.store.'));
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;

describe('memory store', () => {
  const store = instrumentStore(memoryStore());
  const post = app(store);

  it('a first request: claim and complete spans are children of the request span, which says executed', async () => {
    const response = await post('order-key-0001');
    expect(response.status).toBe(201);
    const [request] = requestSpans();
    expect(requestSpans()).toHaveLength(1);
    expect(request!.attributes['idemkit.outcome']).toBe('executed');
    expect(request!.attributes['idemkit.completion']).toBe('stored');
    expect(request!.attributes['idemkit.scope']).toBeTypeOf('string');
    expect(request!.attributes['idemkit.key']).toBeUndefined();
    const spans = storeSpans();
    expect(spans.map((span) => span.name)).toEqual(['idemkit.store.claim', 'idemkit.store.complete']);
    for (const span of spans) {
      expect(span.kind).toBe(SpanKind.CLIENT);
      expect(parentOf(span)).toBe(request!.spanContext().spanId);
      expect(span.spanContext().traceId).toBe(request!.spanContext().traceId);
      expect(span.attributes['idemkit.store.name']).toBe('memory');
      expect(span.status.code).not.toBe(SpanStatusCode.ERROR);
      // The key is never on a span unless asked for.
      expect(Object.values(span.attributes)).not.toContain('order-key-0001');
    }
    expect(spans[0]!.attributes['idemkit.claim.result']).toBe('acquired');
    // The default tracer is the global provider's, named after the package at its version.
    expect(spans[0]!.instrumentationScope).toMatchObject({ name: 'idemkit', version: pkg.version });
  });

  it('the retry is replayed: one claim span (completed), outcome replayed', async () => {
    const response = await post('order-key-0001');
    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ order: 1 });
    expect(requestSpans()[0]!.attributes['idemkit.outcome']).toBe('replayed');
    expect(storeSpans().map((span) => [span.name, span.attributes['idemkit.claim.result']])).toEqual([['idemkit.store.claim', 'completed']]);
  });

  it('the same key with another body is a mismatch; no key is rejected', async () => {
    expect((await post('order-key-0001', '{"amount":2}')).status).toBe(422);
    expect((await post(undefined)).status).toBe(400);
    expect(requestSpans().map((span) => span.attributes['idemkit.outcome'])).toEqual(['mismatch', 'rejected']);
    expect(requestSpans()[1]!.attributes['idemkit.error.code']).toBe('ERR_IDEMKIT_KEY_MISSING');
  });

  it('counts requests by outcome, completions, and records a latency point per store operation', async () => {
    expect(await sdk.count('idemkit.requests', { 'idemkit.outcome': 'executed' })).toBe(1);
    expect(await sdk.count('idemkit.requests', { 'idemkit.outcome': 'replayed' })).toBe(1);
    expect(await sdk.count('idemkit.requests', { 'idemkit.outcome': 'mismatch' })).toBe(1);
    expect(await sdk.count('idemkit.requests', { 'idemkit.outcome': 'rejected' })).toBe(1);
    expect(await sdk.count('idemkit.completions', { 'idemkit.completion': 'stored' })).toBe(1);
    // Counters carry no scope unless asked (one series per tenant is the backend's call).
    for (const [attributes] of await sdk.points('idemkit.requests')) expect(attributes['idemkit.scope']).toBeUndefined();
    const durations = await sdk.points('idemkit.store.operation.duration');
    const byOperation = Object.fromEntries(durations.filter(([a]) => a['idemkit.store.name'] === 'memory').map(([a, v]) => [a['idemkit.store.operation'], (v as Histogram).count]));
    // claim: executed, replayed, mismatch (the rejected request never reached the store); complete: one.
    // (A mismatch may also read the record, a `get`: how it answers is the engine's business.)
    expect({ claim: byOperation.claim, complete: byOperation.complete }).toEqual({ claim: 3, complete: 1 });
    const handler = await sdk.points('idemkit.handler.duration');
    expect(handler.map(([, v]) => (v as Histogram).count)).toEqual([1]);
  });

  it('a 409 while the key is in flight is a conflict', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const slow = app(instrumentStore(memoryStore()), {}, async () => {
      entered();
      await held;
      return new Response('{}', { status: 201, headers: { 'content-type': 'application/json' } });
    });
    const first = slow('order-key-0002');
    await inside;
    expect((await slow('order-key-0002')).status).toBe(409);
    release();
    expect((await first).status).toBe(201);
    const outcomes = requestSpans().map((span) => span.attributes['idemkit.outcome']);
    expect(outcomes).toEqual(['conflict', 'executed']);
    expect(await sdk.count('idemkit.requests', { 'idemkit.outcome': 'conflict' })).toBe(1);
  });
});

describe('Express over real HTTP', () => {
  let server: Server;
  let base: string;
  beforeAll(async () => {
    const tracer = trace.getTracer('test-http');
    const app = express();
    // What an HTTP instrumentation does: a SERVER span, active for the rest of the chain, ended with the response.
    app.use((request, response, next) => {
      const span = tracer.startSpan(`${request.method} ${request.path}`, { kind: SpanKind.SERVER });
      response.once('finish', () => span.end());
      context.with(trace.setSpan(context.active(), span), next);
    });
    app.use(express.json());
    app.post('/orders', expressIdempotency({ store: instrumentStore(memoryStore()), events: telemetryEvents(), logger: silent }), (_request, response) => {
      response.status(201).json({ ok: true });
    });
    server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('the store spans of a request are children of its span, through the middleware chain and the socket', async () => {
    const post = () => fetch(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'express-key-0001' }, body: '{"a":1}' });
    expect((await post()).status).toBe(201);
    expect((await post()).status).toBe(201);
    const requests = requestSpans();
    expect(requests.map((span) => span.attributes['idemkit.outcome'])).toEqual(['executed', 'replayed']);
    const [first, second] = requests;
    expect(storeSpans().map((span) => [span.name, parentOf(span)])).toEqual([
      ['idemkit.store.claim', first!.spanContext().spanId],
      ['idemkit.store.complete', first!.spanContext().spanId],
      ['idemkit.store.claim', second!.spanContext().spanId],
    ]);
  });
});

describe('take-overs and lost leases', () => {
  it('a retry after the lease ran out takes over (counted, span event, claim span marked); the first owner\'s completion is fenced out (lease loss counted, complete span ERROR)', async () => {
    let now = 1_000_000;
    const store = instrumentStore(memoryStore({ clock: () => now }));
    let calls = 0;
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const post = app(store, { leaseMs: 1_000, renewLease: false }, async () => {
      if (++calls === 1) {
        entered();
        await held;
      }
      return new Response(`{"call":${calls}}`, { status: 201, headers: { 'content-type': 'application/json' } });
    });
    const takeoversBefore = await sdk.count('idemkit.takeovers');
    const lossesBefore = await sdk.count('idemkit.lease_losses', { 'idemkit.lease_lost.during': 'complete' });
    const first = post('order-key-0003');
    await inside;
    now += 5_000; // the first owner's lease has run out
    expect((await post('order-key-0003')).status).toBe(201);
    const takeover = requestSpans()[0]!;
    expect(takeover.attributes['idemkit.outcome']).toBe('executed');
    expect(takeover.attributes['idemkit.takeover']).toBe(true);
    expect(takeover.events.map((e) => e.name)).toContain('idemkit.takeover');
    const claims = storeSpans().filter((span) => span.name === 'idemkit.store.claim');
    expect(claims.map((span) => span.attributes['idemkit.takeover'] ?? false)).toEqual([false, true]);
    expect(await sdk.count('idemkit.takeovers')).toBe(takeoversBefore + 1);

    release();
    await first;
    expect(await sdk.count('idemkit.lease_losses', { 'idemkit.lease_lost.during': 'complete' })).toBe(lossesBefore + 1);
    const completes = storeSpans().filter((span) => span.name === 'idemkit.store.complete');
    expect(completes.map((span) => span.status.code)).toEqual([SpanStatusCode.UNSET, SpanStatusCode.ERROR]);
    expect(completes[1]!.attributes['error.type']).toBe('ERR_IDEMKIT_LEASE_LOST');
    expect(completes[1]!.events.map((e) => e.name)).toEqual(['exception']);
    const loser = requestSpans()[1]!;
    expect(loser.events.map((e) => e.name)).toContain('idemkit.lease_lost');
    expect(parentOf(completes[1]!)).toBe(loser.spanContext().spanId);
  });
});

describe('store errors', () => {
  it('a failing claim: span status ERROR with the exception, the error type on the histogram, a store error counted', async () => {
    const failing: IdempotencyStore = {
      ...memoryStore(),
      name: 'failing',
      claim: () => Promise.reject(new StoreUnavailableError('memory', new Error('connection refused'))),
    };
    const post = app(instrumentStore(failing));
    const response = await post('order-key-0005');
    expect(response.status).toBe(503);
    const [claim] = storeSpans();
    expect(claim!.name).toBe('idemkit.store.claim');
    expect(claim!.status.code).toBe(SpanStatusCode.ERROR);
    expect(claim!.attributes['error.type']).toBe('ERR_IDEMKIT_STORE_UNAVAILABLE');
    expect(claim!.events.map((e) => e.name)).toEqual(['exception']);
    expect(parentOf(claim!)).toBe(requestSpans()[0]!.spanContext().spanId);
    const points = await sdk.points('idemkit.store.operation.duration');
    const failed = points.filter(([a]) => a['idemkit.store.name'] === 'failing');
    expect(failed.map(([a, v]) => [a['error.type'], (v as Histogram).count])).toEqual([['ERR_IDEMKIT_STORE_UNAVAILABLE', 1]]);
    expect(await sdk.count('idemkit.store.errors', { 'idemkit.store.operation': 'claim' })).toBeGreaterThanOrEqual(1);
  });
});

describe('SQLite in transactional mode (a real file)', () => {
  let file: SqliteFile;
  let raw: SqliteStore<Database>;
  let store: SqliteStore<Database>;

  beforeAll(() => {
    file = sqliteFile('otel.db');
    raw = sqliteStore({ database: file.db });
    file.db.exec('CREATE TABLE orders (key TEXT NOT NULL)');
    store = instrumentStore(raw);
  });
  afterAll(() => {
    raw.close();
    file.cleanup();
  });

  it('keeps the store\'s capabilities: transactions, verify, listAbandoned, exclusive', async () => {
    expect(isTransactionalStore(store)).toBe(true);
    await store.verify();
    expect(await store.listAbandoned(10)).toEqual([]);
    expect(await store.exclusive((db) => db === file.db)).toBe(true);
    expect(store.name).toBe('sqlite');
  });

  it('claim, begin_transaction, complete and commit in the transaction: all children of the request span', async () => {
    const hono = new Hono<{ Variables: IdempotencyVariables<Database> }>();
    const tracer = trace.getTracer('test-http');
    hono.use('*', (c, next) =>
      tracer.startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
        try {
          await next();
        } finally {
          span.end();
        }
      }),
    );
    hono.use('/orders', idempotency({ store, transactional: true, events: telemetryEvents(), logger: silent }));
    hono.post('/orders', (c) => {
      const ctx = c.get('idempotency')!;
      ctx.tx.prepare('INSERT INTO orders (key) VALUES (?)').run(ctx.key);
      return c.json({ ok: true }, 201);
    });
    sdk.clearSpans();
    const response = await hono.request('/orders', { method: 'POST', body: '{}', headers: { 'content-type': 'application/json', 'idempotency-key': 'sqlite-key-0001' } });
    expect(response.status).toBe(201);
    const request = requestSpans()[0]!;
    expect(request.attributes['idemkit.outcome']).toBe('executed');
    const spans = storeSpans();
    expect(spans.map((span) => [span.name, span.attributes['idemkit.store.transaction'] ?? false])).toEqual([
      ['idemkit.store.claim', false],
      ['idemkit.store.begin_transaction', false],
      ['idemkit.store.complete', true],
      ['idemkit.store.commit', true],
    ]);
    for (const span of spans) {
      expect(parentOf(span)).toBe(request.spanContext().spanId);
      expect(span.attributes['db.system.name']).toBe('sqlite');
    }
    expect((file.db.prepare('SELECT count(*) AS n FROM orders').get() as { n: number }).n).toBe(1);
    const durations = await sdk.points('idemkit.store.operation.duration');
    const operations = durations.filter(([a]) => a['idemkit.store.name'] === 'sqlite').map(([a]) => a['idemkit.store.operation']);
    expect(new Set(operations)).toEqual(new Set(['claim', 'begin_transaction', 'complete', 'commit', 'list_abandoned']));
  });
});

describe('combineEvents', () => {
  it('calls every listener of an event, even after one threw, then throws the first error', () => {
    const heard: string[] = [];
    const events = combineEvents(
      { replay: () => void heard.push('a') },
      { replay: () => { heard.push('b'); throw new Error('b failed'); } },
      undefined,
      { replay: () => void heard.push('c'), conflict: () => void heard.push('conflict') },
    );
    expect(Object.keys(events).sort()).toEqual(['conflict', 'replay']);
    expect(() => events.replay!({ scope: 's', key: 'k', method: 'POST', path: '/', status: 200, storeMs: 0 })).toThrow('b failed');
    expect(heard).toEqual(['a', 'b', 'c']);
  });

  it('keeps an event nobody listens to unlistened (so the engine builds nothing for it)', () => {
    const mine: IdempotencyEvents = { complete: () => {} };
    expect(Object.keys(combineEvents(mine, undefined))).toEqual(['complete']);
  });
});

describe('options', () => {
  it('adds no capability the store lacks: a memory store stays non-transactional', () => {
    const store = instrumentStore(memoryStore());
    expect(isTransactionalStore(store)).toBe(false);
    expect('beginTransaction' in store).toBe(false);
    expect(store.claim).toBe(store.claim); // one wrapper per method, not one per read
  });

  it('refuses an unknown option and a tracer that is not one, naming them', () => {
    expect(() => instrumentStore(memoryStore(), { tracr: {} } as never)).toThrow(/tracr.*did you mean `tracer`/);
    expect(() => instrumentStore(memoryStore(), { tracer: {} } as never)).toThrow(/startSpan/);
    expect(() => telemetryEvents({ meter: {} } as never)).toThrow(/createHistogram/);
  });
});
