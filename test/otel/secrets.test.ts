/**
 * Issue 26 item 1: telemetry carries no raw scope or key unless asked to. An application whose
 * `scope` hook answers the raw `Authorization` header (what every README example did) must not
 * put the bearer token on any span or metric point: `idemkit.scope` is a hash of the scope, and
 * with `recordKeys` the key is its `redactedKey` hash on request spans and store spans alike,
 * with or without the adapter's `redactKeys`. `rawScope: true` is the opt-in for the scope as it is.
 */
import type { Database } from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { SpanKind, trace } from '@opentelemetry/api';
import type { Attributes } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Hono } from 'hono';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { redactedKey } from '../../src/core/events.js';
import type { IdempotencyOptions } from '../../src/core/options.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import type { IdempotencyVariables } from '../../src/http/hono.js';
import { idempotency } from '../../src/http/hono.js';
import { instrumentStore, telemetryEvents } from '../../src/otel/index.js';
import type { TelemetryEventsOptions, InstrumentStoreOptions } from '../../src/otel/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteFile } from '../support/sqlite-file.js';
import { startTestSdk } from './sdk.js';

const sdk = startTestSdk();
afterAll(async () => {
  await sdk.shutdown();
});
beforeEach(() => sdk.clearSpans());

const TOKEN = 'sk_live_51Hc9QzKf3T0pSecretToken';
const AUTHORIZATION = `Bearer ${TOKEN}`;
const KEY = 'order-7f3a9c1e-client-key';
const silent = { warn: () => {}, error: () => {} };
const HASH = /^sha256:[0-9a-f]{32}$/;
const scopeHash = `sha256:${createHash('sha256').update(AUTHORIZATION).digest('hex').slice(0, 32)}`;

interface Setup {
  readonly store?: InstrumentStoreOptions;
  readonly events?: TelemetryEventsOptions;
  readonly adapter?: Partial<IdempotencyOptions<never>>;
  readonly transactional?: boolean;
}

/** A Hono app behind a SERVER span whose scope hook is the raw Authorization header (the mistake telemetry must survive). */
function app(store: IdempotencyStore, setup: Setup) {
  const hono = new Hono<{ Variables: IdempotencyVariables<Database> }>();
  hono.use('*', (c, next) =>
    trace.getTracer('test-http').startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
      try {
        await next();
      } finally {
        span.end();
      }
    }),
  );
  hono.use(
    '/orders',
    idempotency({
      store,
      scope: (c) => c.req.header('authorization') ?? '',
      events: telemetryEvents(setup.events),
      logger: silent,
      ...(setup.transactional ? { transactional: true } : {}),
      ...(setup.adapter as object),
    }),
  );
  hono.post('/orders', (c) => c.json({ ok: true }, 201));
  return (key = KEY, body = '{"amount":1}') =>
    hono.request('/orders', { method: 'POST', body, headers: { authorization: AUTHORIZATION, 'content-type': 'application/json', 'idempotency-key': key } });
}

/** Every string a span holds in its attributes and its events' attributes. */
function strings(span: ReadableSpan): string[] {
  const out: string[] = [span.name];
  const add = (attributes: Attributes | undefined) => {
    for (const value of Object.values(attributes ?? {})) {
      for (const item of Array.isArray(value) ? value : [value]) out.push(String(item));
    }
  };
  add(span.attributes);
  for (const event of span.events) add(event.attributes);
  return out;
}

const storeSpans = () => sdk.spans().filter((span) => span.name.startsWith('idemkit.store.'));
const requestSpan = () => sdk.spans().find((span) => span.kind === SpanKind.SERVER)!;

/** No span holds the token or the key, and there are spans to look at. */
function expectNoSecrets(): void {
  const spans = sdk.spans();
  expect(spans.length).toBeGreaterThan(1);
  for (const span of spans) {
    for (const text of strings(span)) {
      expect(text).not.toContain(TOKEN);
      expect(text).not.toContain(KEY);
    }
  }
}

describe('default options: no raw scope or key on any span', () => {
  it('request and store spans carry the hash of the scope, never the bearer token; no key', async () => {
    const post = app(instrumentStore(memoryStore()), {});
    expect((await post()).status).toBe(201);
    expect((await post()).status).toBe(201); // the replay: another claim span
    expectNoSecrets();
    expect(requestSpan().attributes['idemkit.scope']).toBe(scopeHash);
    expect(requestSpan().attributes['idemkit.key']).toBeUndefined();
    const spans = storeSpans();
    expect(spans.map((span) => span.name)).toEqual(['idemkit.store.claim', 'idemkit.store.complete', 'idemkit.store.claim']);
    for (const span of spans) {
      expect(span.attributes['idemkit.scope']).toBe(scopeHash);
      expect(span.attributes['idemkit.key']).toBeUndefined();
    }
  });

  it('one tenant gets one stable scope hash', async () => {
    const post = app(instrumentStore(memoryStore()), {});
    await post('key-of-a-0001');
    const first = requestSpan().attributes['idemkit.scope'];
    sdk.clearSpans();
    await post('key-of-a-0002');
    expect(requestSpan().attributes['idemkit.scope']).toBe(first);
    expect(first).toMatch(HASH);
  });

  it('counters with scopeAttribute carry the hash too', async () => {
    const post = app(instrumentStore(memoryStore()), { events: { scopeAttribute: true } });
    expect((await post('counted-key-0001')).status).toBe(201);
    const points = await sdk.points('idemkit.requests');
    const scoped = points.filter(([attributes]) => attributes['idemkit.scope'] !== undefined);
    expect(scoped.length).toBeGreaterThan(0);
    for (const [attributes] of points) expect(Object.values(attributes).map(String).join(' ')).not.toContain(TOKEN);
    expect(scoped.map(([attributes]) => attributes['idemkit.scope'])).toContain(scopeHash);
  });
});

describe('recordKeys: the key as its redactedKey hash, on request and store spans alike', () => {
  const expected = redactedKey(AUTHORIZATION, KEY);

  for (const redactKeys of [false, true]) {
    it(`with the adapter's redactKeys ${redactKeys ? 'on' : 'off'}`, async () => {
      const post = app(instrumentStore(memoryStore(), { recordKeys: true }), { events: { recordKeys: true }, adapter: { redactKeys } });
      expect((await post()).status).toBe(201);
      expectNoSecrets();
      expect(requestSpan().attributes['idemkit.key']).toBe(expected);
      const spans = storeSpans();
      expect(spans).toHaveLength(2);
      for (const span of spans) expect(span.attributes['idemkit.key']).toBe(expected);
    });
  }

  it('in transactional mode (SQLite, a real file): the transaction\'s spans too', async () => {
    const file = sqliteFile('secrets.db');
    const raw = sqliteStore({ database: file.db });
    try {
      const post = app(instrumentStore(raw, { recordKeys: true }), { events: { recordKeys: true }, adapter: { redactKeys: true }, transactional: true });
      expect((await post()).status).toBe(201);
      expectNoSecrets();
      const spans = storeSpans();
      expect(spans.map((span) => span.name)).toEqual(['idemkit.store.claim', 'idemkit.store.begin_transaction', 'idemkit.store.complete', 'idemkit.store.commit']);
      for (const span of spans.filter((s) => s.attributes['idemkit.store.transaction'] === true && s.name === 'idemkit.store.complete')) {
        expect(span.attributes['idemkit.key']).toBe(expected);
        expect(span.attributes['idemkit.scope']).toBe(scopeHash);
      }
      expect(spans[0]!.attributes['idemkit.key']).toBe(expected);
    } finally {
      raw.close();
      file.cleanup();
    }
  });
});

describe('rawScope: the opt-in for the scope as it is', () => {
  it('puts the scope the hook answered on request and store spans, still no key', async () => {
    const store = instrumentStore(memoryStore(), { rawScope: true });
    const hono = new Hono();
    hono.use('*', (c, next) =>
      trace.getTracer('test-http').startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
        try {
          await next();
        } finally {
          span.end();
        }
      }),
    );
    hono.use('/orders', idempotency({ store, scope: () => 'tenant-42', events: telemetryEvents({ rawScope: true }), logger: silent }));
    hono.post('/orders', (c) => c.json({ ok: true }, 201));
    const response = await hono.request('/orders', { method: 'POST', body: '{}', headers: { 'content-type': 'application/json', 'idempotency-key': KEY } });
    expect(response.status).toBe(201);
    expect(requestSpan().attributes['idemkit.scope']).toBe('tenant-42');
    for (const span of storeSpans()) {
      expect(span.attributes['idemkit.scope']).toBe('tenant-42');
      expect(span.attributes['idemkit.key']).toBeUndefined();
    }
  });

  it('refuses a rawScope that is not a boolean, naming it', () => {
    expect(() => instrumentStore(memoryStore(), { rawScope: 'yes' } as never)).toThrow(/rawScope/);
    expect(() => telemetryEvents({ rawScope: 1 } as never)).toThrow(/rawScope/);
  });
});
