import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import Router from '@koa/router';
import Koa from 'koa';
import type { ParameterizedContext } from 'koa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { CompleteEvent } from '../../src/core/events.js';
import { InvalidOptionError, MountedTwiceError } from '../../src/core/errors.js';
import type { IdempotencyOptions } from '../../src/core/options.js';
import type { IdempotencyMiddleware, KoaContext, KoaRequestBody } from '../../src/http/koa.js';
import { idempotency } from '../../src/http/koa.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { createKoaApp } from './apps/koa-app.js';
import { listenServer } from './apps/listen.js';
import { until } from '../support/until.js';
import type { TestApp } from './harness.js';
import { describeMatrix } from './matrix.js';

describeMatrix('koa', createKoaApp);

interface Answer {
  status: number;
  headers: Headers;
  bytes: Uint8Array;
  text: string;
}

async function post(app: TestApp, path: string, init: { key?: string; body?: string; type?: string } = {}): Promise<Answer> {
  const headers = new Headers({ authorization: 'Bearer tenant' });
  if (init.key !== undefined) headers.set('idempotency-key', init.key);
  if (init.type !== undefined) headers.set('content-type', init.type);
  const res = await fetch(app.url + path, { method: 'POST', headers, body: init.body ?? '' });
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, bytes, text: new TextDecoder().decode(bytes) };
}

/** What a client can tell of an answer, besides idemkit's own header and the framing. */
const visible = (a: Answer) => ({ status: a.status, type: a.headers.get('content-type'), location: a.headers.get('location'), text: a.text });

type Routes = (router: Router, idem: IdempotencyMiddleware<unknown> | undefined) => void;

/** A throwing or answering route, per kind: the same on a plain Koa app and on a protected one. */
const ANSWERS: Record<string, (ctx: ParameterizedContext) => unknown> = {
  error: () => {
    throw new Error('a detail the client must not see');
  },
  'http-403': (ctx) => ctx.throw(403, 'not yours'),
  'http-503-headers': (ctx) => ctx.throw(503, 'down for a while', { headers: { 'retry-after': '5', 'content-type': 'text/html' } }),
  'unknown-status': () => {
    throw Object.assign(new Error('odd'), { status: 799 });
  },
  string: () => {
    throw 'boom';
  },
  'headers-dropped': (ctx) => {
    ctx.status = 201;
    ctx.set('location', '/charges/1');
    ctx.body = { half: 'done' };
    throw new Error('after setting an answer');
  },
  'node-stream': (ctx) => {
    ctx.type = 'text/csv';
    ctx.body = Readable.from([Buffer.from('a,b\n'), 'c,d\n']);
  },
  'web-stream': (ctx) => {
    ctx.body = new Blob(['x', 'y']).stream();
  },
  blob: (ctx) => {
    ctx.body = new Blob(['<p>hi</p>'], { type: 'text/html' });
  },
  response: (ctx) => {
    ctx.body = new Response('made elsewhere', { status: 202, headers: { 'content-type': 'text/plain', location: '/elsewhere' } });
  },
  json: (ctx) => {
    ctx.status = 201;
    ctx.body = { n: 1, list: [1, 2] };
  },
  html: (ctx) => {
    ctx.body = '<b>bold</b>';
  },
  nothing: () => {},
  'null-then-200': (ctx) => {
    ctx.body = null;
    ctx.status = 200;
  },
  'buffer-untyped': (ctx) => {
    ctx.body = Buffer.from([1, 2, 3]);
    ctx.remove('Content-Type');
  },
  'failing-stream': (ctx) => {
    ctx.type = 'text/plain';
    ctx.body = Readable.from(
      (async function* () {
        yield Buffer.from('partial');
        throw new Error('stream broke');
      })(),
    );
  },
};

describe('koa adapter', () => {
  let store: MemoryStore;
  let executions = 0;
  const apps: TestApp[] = [];
  const errors: unknown[] = [];

  /**
   * A Koa app: auth (scope = bearer token), then `mount` (the app-wide middleware unless
   * `appWide: false`), then the routes.
   */
  async function serve(routes: Routes, options: Partial<IdempotencyOptions<KoaContext>> & { appWide?: boolean; plain?: boolean } = {}) {
    const { appWide = true, plain = false, ...rest } = options;
    const app = new Koa();
    app.silent = true;
    app.on('error', (error) => errors.push(error));
    const idem = plain ? undefined : idempotency({ store, ...rest, scope: (ctx) => ctx.get('authorization') });
    if (idem && appWide) app.use(idem);
    const router = new Router();
    routes(router, idem);
    app.use(router.routes());
    const handle = app.callback();
    const served = await listenServer(createServer((req, res) => void handle(req, res)));
    apps.push(served);
    return { app: served, idem: idem! };
  }

  const answering: Routes = (router) => {
    router.post('/answer/:kind', (ctx) => {
      executions++;
      return ANSWERS[ctx.params.kind!]!(ctx);
    });
  };

  beforeAll(() => {
    store = memoryStore();
  });
  afterEach(() => {
    executions = 0;
    errors.length = 0;
  });
  afterAll(async () => {
    await Promise.all(apps.map((a) => a.close()));
    store.close();
  });

  describe('answers as Koa does, stores that answer and replays it byte for byte', () => {
    let plain: TestApp;
    let protectedApp: TestApp;
    beforeAll(async () => {
      plain = (await serve(answering, { plain: true })).app;
      protectedApp = (await serve(answering)).app;
    });

    it.each(Object.keys(ANSWERS).filter((kind) => kind !== 'failing-stream'))('%s', async (kind) => {
      const koa = await post(plain, `/answer/${kind}`);
      const koaErrors = errors.length;
      const key = randomUUID();
      const first = await post(protectedApp, `/answer/${kind}`, { key });
      // Told to app.on('error') as Koa tells it: once, for the execution, never for the replay.
      expect(errors.length - koaErrors).toBe(koaErrors);
      const again = await post(protectedApp, `/answer/${kind}`, { key });
      expect(errors.length - koaErrors).toBe(koaErrors);
      expect(executions).toBe(2); // once on plain Koa, once protected
      expect(visible(first)).toEqual(visible(koa));
      expect(first.headers.get('retry-after')).toBe(koa.headers.get('retry-after'));
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.status).toBe(first.status);
      expect(again.bytes).toEqual(first.bytes);
      expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
      expect(again.headers.get('location')).toBe(first.headers.get('location'));
      const record = await store.get({ scope: 'Bearer tenant', key });
      expect(record?.state).toBe('completed');
      expect(Buffer.from(record!.response!.body ?? new Uint8Array())).toEqual(Buffer.from(first.bytes));
    });

    it('hides what an error does not expose, and shows what it does', async () => {
      const hidden = await post(protectedApp, '/answer/error', { key: randomUUID() });
      expect(hidden).toMatchObject({ status: 500, text: 'Internal Server Error' });
      expect(hidden.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      expect((await post(protectedApp, '/answer/http-403', { key: randomUUID() })).text).toBe('not yours');
      expect(errors.map((e) => (e as Error).message)).toEqual(['a detail the client must not see', 'not yours']);
    });

    it('answers a body stream that fails part-way as a thrown error: one 500, none of the partial body, stored and replayed', async () => {
      const key = randomUUID();
      const first = await post(protectedApp, '/answer/failing-stream', { key });
      expect(first).toMatchObject({ status: 500, text: 'Internal Server Error' });
      expect(errors).toEqual([expect.objectContaining({ message: 'stream broke' })]);
      const again = await post(protectedApp, '/answer/failing-stream', { key });
      expect(again.bytes).toEqual(first.bytes);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(executions).toBe(1);
    });
  });

  it('an error handler mounted below the middleware answers the error, and its answer is what is stored', async () => {
    const { app } = await serve((router) => {
      router.post(
        '/fails',
        async (ctx, next) => {
          try {
            await next();
          } catch (error) {
            ctx.status = 502;
            ctx.body = { problem: (error as Error).message };
          }
        },
        () => {
          executions++;
          throw new Error('upstream refused');
        },
      );
    });
    const key = randomUUID();
    const first = await post(app, '/fails', { key });
    expect(first.status).toBe(502);
    expect(JSON.parse(first.text)).toEqual({ problem: 'upstream refused' });
    const again = await post(app, '/fails', { key });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.bytes).toEqual(first.bytes);
    expect(executions).toBe(1);
    expect(errors).toEqual([]);
  });

  it('a route that answers on the Node response itself (ctx.respond = false) stores nothing: the key is released', async () => {
    const completed: CompleteEvent[] = [];
    const { app } = await serve(
      (router) => {
        router.post('/raw', (ctx) => {
          executions++;
          ctx.respond = false;
          ctx.res.statusCode = 200;
          ctx.res.end('raw');
        });
      },
      { events: { complete: (event) => void completed.push(event) } },
    );
    const key = randomUUID();
    expect((await post(app, '/raw', { key })).text).toBe('raw');
    expect(await store.get({ scope: 'Bearer tenant', key })).toBeUndefined();
    const again = await post(app, '/raw', { key });
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(executions).toBe(2);
    expect(completed.map((event) => event.outcome)).toEqual(['released', 'released']);
  });

  it('tells events listeners of a thrown error: execute, then complete with the stored 500', async () => {
    const seen: string[] = [];
    const { app } = await serve(answering, {
      events: { execute: (e) => void seen.push(`execute ${e.path}`), complete: (e) => void seen.push(`complete ${e.outcome} ${e.status} ${e.bodyBytes}`), replay: (e) => void seen.push(`replay ${e.status}`) },
    });
    const key = randomUUID();
    await post(app, '/answer/error', { key });
    await post(app, '/answer/error', { key });
    expect(seen).toEqual(['execute /answer/error', `complete stored 500 ${'Internal Server Error'.length}`, 'replay 500']);
  });

  describe('the request body', () => {
    const echo: Routes = (router) => {
      router.post('/echo', (ctx) => {
        executions++;
        const request = ctx.request as typeof ctx.request & KoaRequestBody;
        const raw = request.rawBody;
        ctx.body = {
          body: Buffer.isBuffer(request.body) ? { buffer: request.body.toString('hex') } : request.body,
          raw: Buffer.isBuffer(raw) ? raw.toString('hex') : typeof raw,
        };
      });
    };

    it('is read by the middleware and handed on: ctx.request.body parsed, ctx.request.rawBody the bytes', async () => {
      const { app } = await serve(echo);
      const hex = (text: string) => Buffer.from(text).toString('hex');
      const json = await post(app, '/echo', { key: randomUUID(), body: '{"a": 1}', type: 'application/json' });
      expect(JSON.parse(json.text)).toEqual({ body: { a: 1 }, raw: hex('{"a": 1}') });
      const text = await post(app, '/echo', { key: randomUUID(), body: 'hello', type: 'text/plain' });
      expect(JSON.parse(text.text)).toEqual({ body: 'hello', raw: hex('hello') });
      const bytes = await post(app, '/echo', { key: randomUUID(), body: 'bin', type: 'application/octet-stream' });
      expect(JSON.parse(bytes.text)).toEqual({ body: { buffer: hex('bin') }, raw: hex('bin') });
    });

    it('a JSON body that does not parse is answered 400 by Koa before anything is claimed', async () => {
      const { app } = await serve(echo);
      const key = randomUUID();
      const bad = await post(app, '/echo', { key, body: '{"a":', type: 'application/json' });
      expect(bad).toMatchObject({ status: 400, text: 'idemkit: the JSON request body does not parse' });
      expect(await store.get({ scope: 'Bearer tenant', key })).toBeUndefined();
      expect(executions).toBe(0);
      expect((await post(app, '/echo', { key, body: '{"a":1}', type: 'application/json' })).status).toBe(200);
    });

    it('a body parser mounted before it: its raw text is the fingerprint (every digit of a number counts)', async () => {
      const app = new Koa();
      app.silent = true;
      // What @koa/bodyparser leaves: the parsed body and the text it parsed.
      app.use(async (ctx, next) => {
        const chunks: Buffer[] = [];
        for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
        const request = ctx.request as typeof ctx.request & KoaRequestBody;
        request.rawBody = Buffer.concat(chunks).toString();
        request.body = JSON.parse(request.rawBody as string);
        await next();
      });
      app.use(idempotency({ store, scope: () => 'parsed-first' }));
      app.use((ctx) => {
        executions++;
        ctx.status = 201;
        ctx.body = { got: (ctx.request as typeof ctx.request & KoaRequestBody).body };
      });
      const handle = app.callback();
      const served = await listenServer(createServer((req, res) => void handle(req, res)));
      apps.push(served);
      const key = randomUUID();
      const first = await post(served, '/', { key, body: '{"amount":9007199254740992}', type: 'application/json' });
      expect(first.status).toBe(201);
      expect((await post(served, '/', { key, body: '{"amount":9007199254740993}', type: 'application/json' })).status).toBe(422);
      expect((await post(served, '/', { key, body: '{ "amount": 9007199254740992 }', type: 'application/json' })).headers.get('idempotent-replayed')).toBe('true');
      expect(executions).toBe(1);
    });

    it('a client that leaves before its body is read: nothing claimed, nothing run, no error told', async () => {
      const app = new Koa();
      app.on('error', (error) => errors.push(error));
      let finished = 0;
      app.use(async (_ctx, next) => {
        try {
          await next();
        } finally {
          finished++;
        }
      });
      app.use(idempotency({ store, scope: () => 'left-early' }));
      app.use((ctx) => {
        executions++;
        ctx.body = 'ran';
      });
      const handle = app.callback();
      const served = await listenServer(createServer((req, res) => void handle(req, res)));
      apps.push(served);
      const key = randomUUID();
      const socket = connect(Number(new URL(served.url).port), '127.0.0.1');
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      // Headers and 10 of the 100 bytes announced; the rest never comes.
      await new Promise<void>((resolve) => socket.write(`POST / HTTP/1.1\r\nhost: x\r\nidempotency-key: ${key}\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\nten bytes.`, () => resolve()));
      socket.destroy();
      await until(async () => finished === 1, 'the middleware chain to return');
      // Koa tells app.on('error') after the chain has returned: give it that turn.
      await new Promise((resolve) => setImmediate(resolve));
      // Koa itself reports the broken socket (its on-finished listener: HPE_INVALID_EOF_STATE);
      // the middleware adds nothing: no 500 for the body it could not read.
      const codes = errors.map((error) => (error as { code?: string }).code);
      expect(codes).not.toContain('ECONNRESET');
      expect(codes).not.toContain('ERR_IDEMKIT_REQUEST_ABORTED');
      expect(executions).toBe(0);
      expect(await store.get({ scope: 'left-early', key })).toBeUndefined();
    });

    it('read before it and not kept: refused (500) before anything is claimed', async () => {
      const app = new Koa();
      app.silent = true;
      app.on('error', (error) => errors.push(error));
      app.use(async (ctx, next) => {
        for await (const _chunk of ctx.req) void _chunk;
        await next();
      });
      app.use(idempotency({ store, scope: () => 'lost-body' }));
      app.use((ctx) => void (ctx.body = 'ran'));
      const handle = app.callback();
      const served = await listenServer(createServer((req, res) => void handle(req, res)));
      apps.push(served);
      expect((await post(served, '/', { key: randomUUID(), body: 'x', type: 'text/plain' })).status).toBe(500);
      expect(errors).toEqual([expect.objectContaining({ code: 'ERR_IDEMKIT_BODY_NOT_KEPT' })]);
    });
  });

  describe('per-route options: middleware.route(overrides)', () => {
    it('gives one route its own options, the others keep the middleware\'s', async () => {
      const { app } = await serve(
        (router, idem) => {
          const ok = (ctx: ParameterizedContext) => {
            executions++;
            ctx.status = 201;
            ctx.body = { n: executions };
          };
          router.post('/strict', idem!, ok);
          router.post('/optional', idem!.route({ required: false }), ok);
          router.post('/shared', idem!.route({ scope: () => 'one-scope-for-all' }), ok);
        },
        { appWide: false },
      );
      expect((await post(app, '/strict')).status).toBe(400);
      expect((await post(app, '/optional')).status).toBe(201);
      const key = randomUUID();
      expect((await post(app, '/shared', { key })).status).toBe(201);
      expect(await store.get({ scope: 'one-scope-for-all', key })).toMatchObject({ state: 'completed' });
      expect(await store.get({ scope: 'Bearer tenant', key })).toBeUndefined();
      expect(executions).toBe(2);
    });

    it('checks the overrides when route() is called, naming the option', () => {
      const idem = idempotency({ store });
      const refused = (call: () => unknown) => {
        try {
          call();
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidOptionError);
          return error as InvalidOptionError;
        }
        throw new Error('accepted');
      };
      expect(refused(() => idem.route({ leaseMs: -1 })).option).toBe('route().leaseMs');
      expect(refused(() => idem.route({ inFlight: 'queue' as never })).option).toBe('route().inFlight');
      const store2 = refused(() => idem.route({ store } as never));
      expect(store2.option).toBe('route().store');
      expect(store2.message).toMatch(/option of the middleware, not of a route/);
      const typo = refused(() => idem.route({ leasMs: 5 } as never));
      expect(typo.option).toBe('route().leasMs');
      expect(typo.message).toMatch(/did you mean `leaseMs`/);
      expect(refused(() => idempotency({ store, waitTimeoutMs: 'soon' as never })).option).toBe('waitTimeoutMs');
    });

    it('refuses a request two of them see (app-wide and on the route): MountedTwiceError', async () => {
      const { app } = await serve((router, idem) => {
        router.post('/twice', idem!.route({ leaseMs: 5_000 }), (ctx) => {
          executions++;
          ctx.body = 'ran';
        });
      });
      const answer = await post(app, '/twice', { key: randomUUID() });
      expect(answer.status).toBe(500);
      expect(executions).toBe(0);
      expect(errors).toEqual([expect.any(MountedTwiceError)]);
    });
  });
});
