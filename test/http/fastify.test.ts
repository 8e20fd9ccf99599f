import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { IdemkitError, InvalidOptionError, StoreUnavailableError } from '../../src/core/errors.js';
import type { IdempotencyStore, RecordRef } from '../../src/core/store.js';
import type { IdempotencyOptions } from '../../src/core/options.js';
import { idempotency } from '../../src/http/fastify.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { createFastifyApp } from './apps/fastify-app.js';
import { describeMatrix } from './matrix.js';
import { sqliteFile } from '../support/sqlite-file.js';
import { until } from '../support/until.js';

interface Sent {
  status: number;
  headers: Headers;
  bytes: Uint8Array;
  text: string;
}

const key = () => `key-${randomUUID()}`;
const ref = (k: string) => ({ scope: '', key: k });

async function post(url: string, init: { key?: string; body?: BodyInit; type?: string; signal?: AbortSignal } = {}): Promise<Sent> {
  const headers = new Headers();
  if (init.key !== undefined) headers.set('idempotency-key', init.key);
  if (init.type !== undefined) headers.set('content-type', init.type);
  const res = await fetch(url, { method: 'POST', headers, body: init.body, signal: init.signal, duplex: 'half' } as RequestInit);
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, bytes, text: new TextDecoder().decode(bytes) };
}

const json = (body: unknown) => ({ body: JSON.stringify(body), type: 'application/json' });


/** A Fastify app with the plugin on a memory store, and a handler that answers how many times it ran. */
async function appCountingRuns() {
  const app = Fastify();
  await app.register(idempotency, { store: memoryStore() });
  const counter = { runs: 0 };
  return { app, counter, handler: async () => ({ run: ++counter.runs }) };
}

describe('fastify adapter', () => {
  let store: MemoryStore;
  let executions = 0;
  /** `/slow` calls slowStarted() when it begins, then waits for slowGate. */
  let slowStarted = () => {};
  let slowGate: Promise<void> = Promise.resolve();
  let app: FastifyInstance;
  let base: string;

  async function listen(routes: (app: FastifyInstance) => void, options: Partial<IdempotencyOptions> = {}) {
    const server = Fastify();
    await server.register(idempotency, { store, ...options });
    routes(server);
    const url = await server.listen({ port: 0, host: '127.0.0.1' });
    return { server, url };
  }

  beforeAll(async () => {
    store = memoryStore();
    ({ server: app, url: base } = await listen((server) => {
      server.post('/buffer', async (_request, reply) => {
        executions++;
        return reply.send(Buffer.from([0, 1, 2, 250, 255]));
      });
      server.post('/string', async (_request, reply) => {
        executions++;
        return reply.send(`plain ${randomUUID()}`);
      });
      server.post('/object', async (request) => {
        executions++;
        return { id: randomUUID(), echo: request.body };
      });
      server.post('/stream', async (_request, reply) => {
        executions++;
        return reply.type('text/csv').send(Readable.from([Buffer.from('a,b\n'), Buffer.from(`${randomUUID()},2\n`), Buffer.from('3,4\n')]));
      });
      server.post('/broken-stream', async (_request, reply) => {
        executions++;
        const broken = new Readable({ read() {} });
        broken.push('partial');
        setTimeout(() => broken.destroy(new Error('source failed')), 5);
        return reply.send(broken);
      });
      server.post('/web-response', async () => {
        executions++;
        return new Response(`made ${randomUUID()}`, { status: 202, headers: { 'content-type': 'text/x-made', location: '/made/1' } });
      });
      server.post('/throw', async () => {
        executions++;
        throw new Error(`boom ${randomUUID()}`);
      });
      server.post('/payment-required', async () => {
        executions++;
        throw Object.assign(new Error('pay first'), { statusCode: 402 });
      });
      server.post(
        '/validated',
        { schema: { body: { type: 'object', required: ['amount'], properties: { amount: { type: 'integer', minimum: 1 } } } } },
        async (request, reply) => {
          executions++;
          return reply.code(201).send({ id: randomUUID(), body: request.body });
        },
      );
      server.post('/unprotected', { config: { idempotency: false } }, async () => ({ n: ++executions }));
      server.post('/optional', { config: { idempotency: { required: false } } }, async () => ({ n: ++executions, id: randomUUID() }));
      server.post('/cookie', async (_request, reply) => {
        executions++;
        reply.header('set-cookie', ['session=secret; HttpOnly', 'theme=dark']).header('x-trace', randomUUID());
        return { id: randomUUID() };
      });
      server.post('/slow', async () => {
        executions++;
        slowStarted();
        await slowGate; // opened by the test, not after a guessed duration
        return { id: randomUUID(), n: executions };
      });
      server.post('/echo-bytes', async (request, reply) => {
        executions++;
        return reply.type('application/octet-stream').send(request.body as Buffer);
      });
      server.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    }));
  });
  afterEach(() => {
    executions = 0;
  });
  afterAll(async () => {
    await app.close();
    store.close();
  });

  it.each([
    ['a Buffer', '/buffer', 'application/octet-stream'],
    ['a string', '/string', 'text/plain; charset=utf-8'],
    ['an object', '/object', 'application/json; charset=utf-8'],
    ['a stream', '/stream', 'text/csv'],
  ])('replays %s sent with reply.send byte for byte', async (_label, path, type) => {
    const k = key();
    const first = await post(base + path, { key: k, ...json({ amount: 1 }) });
    const again = await post(base + path, { key: k, ...json({ amount: 1 }) });
    expect(first.status).toBe(200);
    expect(first.bytes.byteLength).toBeGreaterThan(0);
    expect(first.headers.get('content-type')).toBe(type);
    expect(again.status).toBe(200);
    expect(again.bytes).toEqual(first.bytes);
    expect(again.headers.get('content-type')).toBe(type);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(executions).toBe(1);
    const record = await store.get(ref(k));
    expect(record?.state).toBe('completed');
    expect(new Uint8Array(record!.response!.body!)).toEqual(first.bytes);
  });

  it('parses the body after reading it for the fingerprint (JSON and raw bytes)', async () => {
    const object = await post(`${base}/object`, { key: key(), ...json({ amount: 12, note: 'é' }) });
    expect(JSON.parse(object.text).echo).toEqual({ amount: 12, note: 'é' });
    const bytes = new Uint8Array([9, 8, 7, 0, 255]);
    const echoed = await post(`${base}/echo-bytes`, { key: key(), body: bytes, type: 'application/octet-stream' });
    expect(echoed.bytes).toEqual(bytes);
  });

  it('stores and replays the status, headers and body of a fetch Response', async () => {
    const k = key();
    const first = await post(`${base}/web-response`, { key: k });
    const again = await post(`${base}/web-response`, { key: k });
    expect(first.status).toBe(202);
    expect(first.text).toMatch(/^made /);
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('content-type')).toBe('text/x-made');
    expect(again.headers.get('location')).toBe('/made/1');
    expect(executions).toBe(1);
  });

  it('stores the 500 of a thrown error and replays it without running the handler again', async () => {
    const k = key();
    const first = await post(`${base}/throw`, { key: k });
    const again = await post(`${base}/throw`, { key: k });
    expect(first.status).toBe(500);
    expect(JSON.parse(first.text).message).toMatch(/^boom /);
    expect(again.status).toBe(500);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(executions).toBe(1);
    expect((await store.get(ref(k)))?.response?.status).toBe(500);
  });

  it('stores the 500 of a stream that fails while it is buffered, never a partial body', async () => {
    const k = key();
    const first = await post(`${base}/broken-stream`, { key: k });
    expect(first.status).toBe(500);
    expect(first.text).not.toContain('partial');
    expect(JSON.parse(first.text).message).toBe('source failed');
    const again = await post(`${base}/broken-stream`, { key: k });
    expect(again.status).toBe(500);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(executions).toBe(1);
    expect((await store.get(ref(k)))?.state).toBe('completed');
  });

  it('stores a thrown error with statusCode 402 as a 402', async () => {
    const k = key();
    const first = await post(`${base}/payment-required`, { key: k });
    const again = await post(`${base}/payment-required`, { key: k });
    expect(first.status).toBe(402);
    expect(JSON.parse(first.text).message).toBe('pay first');
    expect(again.status).toBe(402);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(executions).toBe(1);
  });

  it('stores nothing when schema validation refuses the body, and the key then runs with a valid body', async () => {
    const k = key();
    const invalid = await post(`${base}/validated`, { key: k, ...json({ amount: 0 }) });
    expect(invalid.status).toBe(400);
    expect(JSON.parse(invalid.text).code).toBe('FST_ERR_VALIDATION');
    expect(await store.get(ref(k))).toBeUndefined();
    expect(executions).toBe(0);
    const again = await post(`${base}/validated`, { key: k, ...json({ amount: 0 }) });
    expect(again.status).toBe(400);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    const valid = await post(`${base}/validated`, { key: k, ...json({ amount: 5 }) });
    expect(valid.status).toBe(201);
    expect(JSON.parse(valid.text).body).toEqual({ amount: 5 });
    expect(executions).toBe(1);
    const replay = await post(`${base}/validated`, { key: k, ...json({ amount: 5 }) });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.text).toBe(valid.text);
    expect(executions).toBe(1);
  });

  it('passes a route with config.idempotency = false through, even with a key', async () => {
    const k = key();
    const a = await post(`${base}/unprotected`, { key: k, ...json({}) });
    const b = await post(`${base}/unprotected`, { key: k, ...json({}) });
    expect(JSON.parse(a.text).n).toBe(1);
    expect(JSON.parse(b.text).n).toBe(2);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(await store.get(ref(k))).toBeUndefined();
    // Not even a malformed key is looked at.
    expect((await post(`${base}/unprotected`, { key: 'a b', ...json({}) })).status).toBe(200);
  });

  it('lets a keyless POST through on a route with required: false, and still protects keyed ones', async () => {
    const missing = await post(`${base}/object`, json({}));
    expect(missing.status).toBe(400);
    expect(JSON.parse(missing.text).type).toBe('urn:idemkit:problem:missing-key');
    expect(executions).toBe(0);
    expect((await post(`${base}/optional`, json({}))).status).toBe(200);
    expect((await post(`${base}/optional`, json({}))).status).toBe(200);
    expect(executions).toBe(2);
    const k = key();
    const first = await post(`${base}/optional`, { key: k, ...json({}) });
    const again = await post(`${base}/optional`, { key: k, ...json({}) });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(executions).toBe(3);
  });

  it('sends Set-Cookie on the first response and never on the replay', async () => {
    const k = key();
    const first = await post(`${base}/cookie`, { key: k });
    const again = await post(`${base}/cookie`, { key: k });
    expect(first.headers.getSetCookie()).toEqual(['session=secret; HttpOnly', 'theme=dark']);
    expect(first.headers.get('x-trace')).not.toBeNull();
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.getSetCookie()).toEqual([]);
    expect(again.headers.get('x-trace')).toBeNull();
    expect(again.text).toBe(first.text);
    expect(executions).toBe(1);
  });

  it('answers 413 to a chunked body over maxBodyBytes and stores nothing', async () => {
    const small = await listen((server) => server.post('/charges', async () => ({ n: ++executions })), { maxBodyBytes: 1024 });
    try {
      const k = key();
      const chunks = [new Uint8Array(700).fill(120), new Uint8Array(700).fill(121)];
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          const next = chunks.shift();
          if (next) controller.enqueue(next);
          else controller.close();
        },
      });
      const r = await post(`${small.url}/charges`, { key: k, body, type: 'text/plain' });
      expect(r.status).toBe(413);
      expect(JSON.parse(r.text).type).toBe('urn:idemkit:problem:body-too-large');
      expect(executions).toBe(0);
      expect(await store.get(ref(k))).toBeUndefined();
      expect((await post(`${small.url}/charges`, { key: k, body: 'x'.repeat(1000), type: 'text/plain' })).status).toBe(200);
      expect(executions).toBe(1);
    } finally {
      await small.server.close();
    }
  });

  it('keeps the claim of a handler whose client went away, and replays its answer to the retry', async () => {
    const k = key();
    const started = new Promise<void>((resolve) => (slowStarted = resolve));
    let openGate = () => {};
    slowGate = new Promise<void>((resolve) => (openGate = resolve));
    const controller = new AbortController();
    const gone = post(`${base}/slow`, { key: k, ...json({ a: 1 }), signal: controller.signal });
    await started;
    controller.abort();
    await expect(gone).rejects.toThrow();
    // The handler is still running (it waits for the gate): the retry must not run it a second time.
    expect((await post(`${base}/slow`, { key: k, ...json({ a: 1 }) })).status).toBe(409);
    openGate();
    await until(async () => (await store.get(ref(k)))?.state === 'completed', 'the completion');
    const retry = await post(`${base}/slow`, { key: k, ...json({ a: 1 }) });
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(JSON.parse(retry.text).n).toBe(1);
    expect(executions).toBe(1);
  });

  it('releases the key of a hijacked reply, whose answer cannot be captured, at the lease keeper\'s next tick', async () => {
    // Counted, not timed: the keeper ticks every third of a lease and each tick either renews a
    // running execution or ends a finished one. Released at the next tick after the answer went
    // out means: a release, and no renewal once the response had finished.
    const k = key();
    let raw: ServerResponse | undefined;
    let renewalsAfterFinish = 0;
    let released = false;
    const watched: IdempotencyStore = Object.assign(Object.create(store) as IdempotencyStore, {
      renew: (r: RecordRef, token: string, leaseMs: number) => {
        // Read in the same synchronous turn as the keeper's own look at the response.
        if (r.key === k && raw?.writableFinished === true) renewalsAfterFinish++;
        return store.renew(r, token, leaseMs);
      },
      release: async (r: RecordRef, token: string) => {
        await store.release(r, token);
        if (r.key === k) released = true;
      },
    });
    const { server, url } = await listen((s) => {
      s.post('/hijack', async (_request, reply) => {
        executions++;
        reply.hijack();
        raw = reply.raw;
        reply.raw.writeHead(200, { 'content-type': 'text/plain' });
        reply.raw.end('raw');
      });
    }, { leaseMs: 300, store: watched });
    try {
      expect((await post(`${url}/hijack`, { key: k })).text).toBe('raw');
      await until(async () => released, 'the release of the hijacked claim');
      expect(renewalsAfterFinish).toBe(0);
      expect(await store.get(ref(k))).toBeUndefined();
      expect((await post(`${url}/hijack`, { key: k })).headers.get('idempotent-replayed')).toBeNull();
      expect(executions).toBe(2);
    } finally {
      await server.close();
    }
  });

  it('answers the problem, without the handler headers, when a transactional completion fails', async () => {
    const { db, cleanup } = sqliteFile();
    const real = sqliteStore({ database: db });
    const failing = {
      ...real,
      beginTransaction: async () => ({
        ...(await real.beginTransaction()),
        complete: async () => {
          throw new StoreUnavailableError('disk full');
        },
      }),
    };
    const errors: unknown[] = [];
    const txApp = await listen(
      (server) =>
        server.post('/charges', async (_request, reply) => {
          executions++;
          return reply.code(201).header('location', '/charges/1').header('set-cookie', 'a=b').send({ ok: true });
        }),
      { store: failing, transactional: true, onError: (error) => errors.push(error) },
    );
    try {
      const k = key();
      const r = await post(`${txApp.url}/charges`, { key: k, ...json({}) });
      expect(r.status).toBe(503);
      expect(r.headers.get('content-type')).toBe('application/problem+json');
      expect(r.headers.get('retry-after')).toBe('1');
      expect(r.headers.get('location')).toBeNull();
      expect(r.headers.get('set-cookie')).toBeNull();
      expect(JSON.parse(r.text).type).toBe('urn:idemkit:problem:store-unavailable');
      expect(errors).toHaveLength(1);
      expect(await real.get(ref(k))).toBeUndefined();
    } finally {
      await txApp.server.close();
      real.close();
      cleanup();
    }
  });

  it('refuses an unknown key in config.idempotency with a hint; the rest of the route config belongs to others', async () => {
    const app = Fastify();
    await app.register(idempotency, { store });
    expect(() => app.post('/typo', { config: { idempotency: { requierd: false } as never } }, async () => ({}))).toThrow(
      'Invalid option `config.idempotency.requierd of /typo`: unknown option; did you mean `required`?',
    );
    expect(() => app.post('/others', { config: { rateLimit: { max: 5 }, idempotency: { required: false } } as never }, async () => ({}))).not.toThrow();
    await app.close();
  });

  it('refuses an invalid per-route config and a second registration on the same routes', async () => {
    const bad = Fastify();
    await bad.register(idempotency, { store });
    expect(() => bad.post('/x', { config: { idempotency: 'yes' as never } }, async () => ({}))).toThrow(/config\.idempotency/);
    expect(() => bad.post('/y', { config: { idempotency: { required: 'no' as never } } }, async () => ({}))).toThrow(/required/);
    await bad.close();
    const twice = Fastify();
    await twice.register(idempotency, { store });
    await twice.register(idempotency, { store });
    let thrown: unknown;
    try {
      twice.post('/z', async () => ({}));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(IdemkitError);
    expect(thrown).toMatchObject({ code: 'ERR_IDEMKIT_MOUNTED_TWICE', message: expect.stringMatching(/registered twice/) });
    await twice.close();
  });
});

describe('fastify per-route config', () => {
  /** A memory store that counts the claims it answered `in_flight`. */
  function countingStore(): { store: IdempotencyStore; inFlight: () => number } {
    const inner = memoryStore();
    let inFlight = 0;
    const store = new Proxy(inner, {
      get(target, name, receiver) {
        if (name === 'claim') {
          return async (...args: Parameters<IdempotencyStore['claim']>) => {
            const claim = await target.claim(...args);
            if (claim.kind === 'in_flight') inFlight++;
            return claim;
          };
        }
        const value: unknown = Reflect.get(target, name, receiver);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    }) as IdempotencyStore;
    return { store, inFlight: () => inFlight };
  }

  const inject = (app: FastifyInstance, url: string, init: { key?: string; body?: unknown; headers?: Record<string, string> } = {}) =>
    app.inject({
      method: 'POST',
      url,
      headers: { ...(init.key === undefined ? {} : { 'idempotency-key': init.key }), ...init.headers },
      ...(init.body === undefined ? {} : { payload: init.body as Record<string, unknown> }),
    });

  /** Routes whose handler waits for `open()` once it started; `started()` tells how many began. */
  function gated() {
    let release = () => {};
    let gate = new Promise<void>((resolve) => (release = resolve));
    let started = 0;
    return {
      handler: async () => {
        started++;
        await gate;
        return { run: randomUUID() };
      },
      started: () => started,
      open: () => {
        release();
        gate = Promise.resolve();
      },
    };
  }

  it('a route\'s retryAfterMs and leaseMs set its 409\'s Retry-After; the plugin\'s apply elsewhere', async () => {
    const app = Fastify();
    // The store's clock stands still (injected), so the lease left is exact whatever the load.
    await app.register(idempotency, { store: memoryStore({ clock: () => 1_700_000_000_000 }) });
    const slow = gated();
    app.post('/hint', { config: { idempotency: { retryAfterMs: 3_000 } } }, slow.handler);
    // The hint is never past what is left of the lease: 10 s asked, 4 s of lease left.
    app.post('/short-lease', { config: { idempotency: { leaseMs: 4_000, retryAfterMs: 10_000 } } }, slow.handler);
    app.post('/plain', slow.handler);
    const answers = [];
    for (const url of ['/hint', '/short-lease', '/plain']) {
      const k = key();
      const first = inject(app, url, { key: k });
      await until(async () => slow.started() === answers.length + 1, `${url} started`);
      const second = await inject(app, url, { key: k });
      expect(second.statusCode).toBe(409);
      answers.push(Number(second.headers['retry-after']));
      void first;
    }
    slow.open();
    expect(answers).toEqual([3, 4, 1]);
    await app.close();
  });

  it('a route with inFlight: \'wait\' replays the first answer to a duplicate; the plugin\'s 409 applies elsewhere', async () => {
    const { store, inFlight } = countingStore();
    const app = Fastify();
    await app.register(idempotency, { store });
    const slow = gated();
    app.post('/wait', { config: { idempotency: { inFlight: 'wait', waitTimeoutMs: 60_000 } } }, slow.handler);
    app.post('/conflict', slow.handler);
    const k = key();
    const first = inject(app, '/wait', { key: k });
    await until(async () => slow.started() === 1, 'the first request started');
    const second = inject(app, '/wait', { key: k });
    await until(async () => inFlight() >= 1, 'the duplicate found the key in flight');
    const other = key();
    const conflictFirst = inject(app, '/conflict', { key: other });
    await until(async () => slow.started() === 2, 'the /conflict request started');
    expect((await inject(app, '/conflict', { key: other })).statusCode).toBe(409);
    slow.open();
    const [a, b] = await Promise.all([first, second]);
    expect(a.statusCode).toBe(200);
    expect(b.statusCode).toBe(200);
    expect(b.body).toBe(a.body);
    expect(slow.started()).toBe(2);
    await conflictFirst;
    await app.close();
  });

  it('a route\'s fingerprintFields replays a key whose other fields changed; the plugin\'s whole-body fingerprint answers 422', async () => {
    const { app, handler } = await appCountingRuns();
    app.post('/amount', { config: { idempotency: { fingerprintFields: ['amount'] } } }, handler);
    app.post('/whole', handler);
    for (const url of ['/amount', '/whole']) {
      const k = key();
      expect((await inject(app, url, { key: k, body: { amount: 5, note: 'a' } })).statusCode).toBe(200);
    }
    const k = key();
    const first = await inject(app, '/amount', { key: k, body: { amount: 5, note: 'a' } });
    const replay = await inject(app, '/amount', { key: k, body: { amount: 5, note: 'b' } });
    expect(replay.statusCode).toBe(200);
    expect(replay.body).toBe(first.body);
    expect((await inject(app, '/amount', { key: k, body: { amount: 6, note: 'a' } })).statusCode).toBe(422);
    const w = key();
    await inject(app, '/whole', { key: w, body: { amount: 5, note: 'a' } });
    expect((await inject(app, '/whole', { key: w, body: { amount: 5, note: 'b' } })).statusCode).toBe(422);
    await app.close();
  });

  it('a route\'s scope keeps tenants apart; the plugin\'s single scope shares the key', async () => {
    const { app, handler, counter } = await appCountingRuns();
    app.post('/tenant', { config: { idempotency: { scope: (request) => String(request.headers['x-tenant']) } } }, handler);
    app.post('/global', handler);
    const k = key();
    const a = await inject(app, '/tenant', { key: k, headers: { 'x-tenant': 'a' } });
    const b = await inject(app, '/tenant', { key: k, headers: { 'x-tenant': 'b' } });
    expect(b.body).not.toBe(a.body);
    expect((await inject(app, '/tenant', { key: k, headers: { 'x-tenant': 'a' } })).body).toBe(a.body);
    const g = key();
    const ga = await inject(app, '/global', { key: g, headers: { 'x-tenant': 'a' } });
    expect((await inject(app, '/global', { key: g, headers: { 'x-tenant': 'b' } })).body).toBe(ga.body);
    expect(counter.runs).toBe(3);
    await app.close();
  });

  it('a route\'s required holds together with its other overrides, and true protects a route with the plugin\'s options', async () => {
    const app = Fastify();
    await app.register(idempotency, { store: memoryStore(), required: false });
    app.post('/strict', { config: { idempotency: { required: true, retryAfterMs: 2_000 } } }, async () => ({ ok: true }));
    app.post('/lax', { config: { idempotency: { required: false, leaseMs: 5_000 } } }, async () => ({ run: randomUUID() }));
    app.post('/on', { config: { idempotency: true } }, async () => ({ run: randomUUID() }));
    expect((await inject(app, '/strict')).statusCode).toBe(400);
    expect((await inject(app, '/lax')).statusCode).toBe(200);
    const k = key();
    const lax = await inject(app, '/lax', { key: k });
    expect((await inject(app, '/lax', { key: k })).body).toBe(lax.body);
    expect((await inject(app, '/on')).statusCode).toBe(200); // the plugin's required: false
    const o = key();
    const on = await inject(app, '/on', { key: o });
    expect((await inject(app, '/on', { key: o })).body).toBe(on.body);
    await app.close();
  });

  it('refuses, at route registration, an unknown or invalid route option and a plugin-wide one, naming config.idempotency.<key> of <url>', async () => {
    const app = Fastify();
    await app.register(idempotency, { store: memoryStore() });
    const thrown = (register: () => void): unknown => {
      try {
        register();
      } catch (error) {
        return error;
      }
      return undefined;
    };
    const typo = thrown(() => app.post('/typo', { config: { idempotency: { leaseMS: 1_000 } as never } }, async () => ({})));
    expect(typo).toBeInstanceOf(InvalidOptionError);
    expect((typo as Error).message).toBe('Invalid option `config.idempotency.leaseMS of /typo`: unknown option; did you mean `leaseMs`?');
    expect(() => app.post('/short', { config: { idempotency: { leaseMs: 5 } } }, async () => ({}))).toThrow(
      /`config\.idempotency\.leaseMs of \/short`: expected an integer >= 10/,
    );
    expect(() => app.post('/policy', { config: { idempotency: { inFlight: 'queue' as never } } }, async () => ({}))).toThrow(
      /`config\.idempotency\.inFlight of \/policy`: expected 'conflict' or 'wait'/,
    );
    expect(() => app.post('/fields', { config: { idempotency: { fingerprintFields: [] } } }, async () => ({}))).toThrow(
      /`config\.idempotency\.fingerprintFields of \/fields`/,
    );
    expect(() => app.post('/store', { config: { idempotency: { store: memoryStore() } as never } }, async () => ({}))).toThrow(
      /`config\.idempotency\.store of \/store`: is an option of the plugin, not of a route/,
    );
    await app.close();
  });

  it('protects sibling encapsulated groups of routes, each with its own registration and options', async () => {
    const store = memoryStore();
    const app = Fastify();
    const slow = gated();
    await app.register(async (child) => {
      await child.register(idempotency, { store, retryAfterMs: 2_000 });
      child.post('/a', slow.handler);
    });
    await app.register(async (child) => {
      await child.register(idempotency, { store, required: false, inFlight: 'conflict', retryAfterMs: 5_000 });
      child.post('/b', async () => ({ run: randomUUID() }));
      child.post('/b-route', { config: { idempotency: { retryAfterMs: 3_000 } } }, slow.handler);
    });
    app.post('/outside', async () => ({ run: randomUUID() }));
    await app.ready();
    expect((await inject(app, '/a')).statusCode).toBe(400);
    expect((await inject(app, '/b')).statusCode).toBe(200);
    const k = key();
    const b = await inject(app, '/b', { key: k });
    expect((await inject(app, '/b', { key: k })).body).toBe(b.body);
    const o = key();
    expect((await inject(app, '/outside', { key: o })).body).not.toBe((await inject(app, '/outside', { key: o })).body);
    const hints = [];
    for (const url of ['/a', '/b-route']) {
      const k2 = key();
      const first = inject(app, url, { key: k2 });
      await until(async () => slow.started() === hints.length + 1, `${url} started`);
      hints.push((await inject(app, url, { key: k2 })).headers['retry-after']);
      void first;
    }
    slow.open();
    expect(hints).toEqual(['2', '3']);
    await app.close();
  });

  it('is not encapsulated: covers the routes beside it and in child contexts, and other plugins can depend on it by name', async () => {
    const app = Fastify();
    await app.register(idempotency, { store: memoryStore() });
    app.post('/beside', async () => ({}));
    await app.register(async (child) => {
      child.post('/child', async () => ({}));
    });
    const dependent = Object.assign(async () => {}, { [Symbol.for('plugin-meta')]: { name: 'dependent', dependencies: ['idemkit'] } });
    await app.register(dependent);
    await app.ready();
    expect(app.hasPlugin('idemkit')).toBe(true);
    expect((await app.inject({ method: 'POST', url: '/beside' })).statusCode).toBe(400);
    expect((await app.inject({ method: 'POST', url: '/child' })).statusCode).toBe(400);
    await app.close();
  });

  it('names the fix when the plugin really is registered twice over the same routes', async () => {
    const store = memoryStore();
    const nested = Fastify();
    await nested.register(idempotency, { store });
    let thrown: unknown;
    await nested.register(async (child) => {
      await child.register(idempotency, { store, leaseMs: 5_000 });
      try {
        child.post('/group', async () => ({}));
      } catch (error) {
        thrown = error;
      }
    });
    expect(thrown).toMatchObject({ code: 'ERR_IDEMKIT_MOUNTED_TWICE' });
    expect((thrown as Error).message).toMatch(/registered twice for \/group/);
    expect((thrown as Error).message).toContain('config: { idempotency: { … } }');
    expect((thrown as Error).message).toContain('app.register(async (child) =>');
    await nested.close();
  });
});

describeMatrix('fastify', createFastifyApp);
