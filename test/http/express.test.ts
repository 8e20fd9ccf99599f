import { randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import express from 'express';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../src/core/store.js';
import { idempotency, problemErrorHandler } from '../../src/http/express.js';
import { InvalidOptionError } from '../../src/core/errors.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { createExpress4App, createExpressApp, express4 } from './apps/express-app.js';
import { listenServer } from './apps/listen.js';
import { sleep, until } from '../support/until.js';
import type { HarnessOptions, TestApp } from './harness.js';
import { describeMatrix } from './matrix.js';
import { describePerRoute } from './per-route.js';
import { twoOnOneConnection } from './wire.js';

interface Answer {
  status: number;
  statusText: string;
  headers: Headers;
  bytes: Uint8Array;
  text: string;
}

interface Send {
  key?: string;
  body?: BodyInit;
  type?: string;
  signal?: AbortSignal;
}

async function post(app: TestApp, path: string, init: Send = {}): Promise<Answer> {
  const headers = new Headers({ authorization: 'Bearer tenant' });
  if (init.key !== undefined) headers.set('idempotency-key', init.key);
  if (init.type !== undefined) headers.set('content-type', init.type);
  const body = init.body ?? '';
  const duplex = body instanceof ReadableStream ? { duplex: 'half' } : {};
  const res = await fetch(app.url + path, { method: 'POST', headers, body, signal: init.signal, ...duplex });
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { status: res.status, statusText: res.statusText, headers: res.headers, bytes, text: new TextDecoder().decode(bytes) };
}

const json = (value: unknown) => ({ body: JSON.stringify(value), type: 'application/json' });

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Every suite here runs on Express 5 and on Express 4. */
const EXPRESS_VERSIONS = [
  ['express 5', express],
  ['express 4', express4],
] as const;

describe.each(EXPRESS_VERSIONS)('express adapter (%s)', (_name, lib) => {
  let store: MemoryStore;
  let executions = 0;
  const apps: TestApp[] = [];

  /** A server with the idempotency middleware (scope: the bearer token) and the given routes. */
  async function serve(
    routes: (app: express.Express) => void,
    options: Partial<HarnessOptions> & { parserFirst?: boolean | 'keeping bytes' } = {},
  ): Promise<TestApp> {
    const { parserFirst = false, ...rest } = options;
    const app = lib();
    app.set('env', 'test');
    // The docs' way to keep the bytes when express.json() runs first (docs/semantics.md).
    if (parserFirst === 'keeping bytes') app.use(lib.json({ verify: (req, _res, buf) => void ((req as express.Request).rawBody = buf) }));
    else if (parserFirst) app.use(lib.json());
    app.use(idempotency({ store, ...rest, scope: (req) => req.get('authorization') ?? '' }));
    if (!parserFirst) app.use(lib.json(), lib.text());
    routes(app);
    const served = await listenServer(createServer(app));
    apps.push(served);
    return served;
  }

  /** The first answer, then the replay, asserting the handler ran once. */
  async function twice(app: TestApp, path: string, init: Send = {}): Promise<[Answer, Answer]> {
    const key = randomUUID();
    const first = await post(app, path, { ...init, key });
    const again = await post(app, path, { ...init, key });
    expect(executions).toBe(1);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    return [first, again];
  }

  /** The shared store, with a `complete` that takes `ms` to land. */
  function slowStore(ms: number, onComplete = () => {}): IdempotencyStore {
    return Object.assign(Object.create(store) as IdempotencyStore, {
      async complete(ref: RecordRef, token: string, response: StoredResponse) {
        await sleep(ms);
        await store.complete(ref, token, response);
        onComplete();
      },
    });
  }

  beforeAll(() => {
    store = memoryStore();
  });
  afterEach(() => {
    executions = 0;
  });
  afterAll(async () => {
    await Promise.all(apps.map((a) => a.close()));
    store.close();
  });

  it('replays res.write chunks (strings with encodings, buffers) and res.end byte for byte', async () => {
    const expected = Buffer.concat([Buffer.from('héllo, '), Buffer.from([0xff, 0x00, 0x01]), Buffer.from('hi'), Buffer.from('end')]);
    const app = await serve((a) =>
      a.post('/chunks', (_req, res) => {
        executions++;
        res.setHeader('content-type', 'application/octet-stream');
        res.write('héllo, ');
        res.write(Buffer.from([0xff, 0x00, 0x01]));
        res.write('6869', 'hex');
        res.end('end');
      }),
    );
    const [first, again] = await twice(app, '/chunks');
    expect(Buffer.from(first.bytes)).toEqual(expected);
    expect(Buffer.from(again.bytes)).toEqual(expected);
    expect(again.headers.get('content-type')).toBe('application/octet-stream');
  });

  it('calls write callbacks, so a handler that waits for them gets to end', async () => {
    const app = await serve((a) =>
      a.post('/callbacks', (_req, res) => {
        executions++;
        res.write('a', () => res.write('b', 'utf8', () => res.end('c', () => {})));
      }),
    );
    const [first, again] = await twice(app, '/callbacks');
    expect(first.text).toBe('abc');
    expect(again.text).toBe('abc');
  });

  it('replays a piped Readable stream byte for byte', async () => {
    const parts = [randomBytes(20_000), randomBytes(1), randomBytes(33_333)];
    const app = await serve((a) =>
      a.post('/piped', (_req, res) => {
        executions++;
        res.type('application/octet-stream');
        Readable.from(parts).pipe(res);
      }),
    );
    const [first, again] = await twice(app, '/piped');
    expect(Buffer.from(first.bytes)).toEqual(Buffer.concat(parts));
    expect(Buffer.from(again.bytes)).toEqual(Buffer.concat(parts));
  });

  it('replays res.send(Buffer) with every byte value', async () => {
    const all = Buffer.from(Array.from({ length: 512 }, (_, i) => i & 255));
    const app = await serve((a) =>
      a.post('/bytes', (_req, res) => {
        executions++;
        res.send(all);
      }),
    );
    const [first, again] = await twice(app, '/bytes');
    expect(Buffer.from(first.bytes)).toEqual(all);
    expect(Buffer.from(again.bytes)).toEqual(all);
    expect(again.headers.get('content-type')).toBe('application/octet-stream');
  });

  it('replays res.json with its content type and ETag', async () => {
    const app = await serve((a) =>
      a.post('/json', (_req, res) => {
        executions++;
        res.status(202).json({ text: 'ünïcode', n: executions });
      }),
    );
    const [first, again] = await twice(app, '/json');
    expect(first.status).toBe(202);
    expect(JSON.parse(first.text)).toEqual({ text: 'ünïcode', n: 1 });
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(again.headers.get('etag')).toBe(first.headers.get('etag'));
  });

  it('replays an empty 204 from res.end()', async () => {
    const app = await serve((a) =>
      a.post('/empty', (_req, res) => {
        executions++;
        res.status(204).end();
      }),
    );
    const [first, again] = await twice(app, '/empty');
    expect(first.status).toBe(204);
    expect(again.status).toBe(204);
    expect(again.bytes.byteLength).toBe(0);
  });

  it('replays res.writeHead(201, { location }) then end', async () => {
    const app = await serve((a) =>
      a.post('/created', (_req, res) => {
        executions++;
        res.writeHead(201, { location: '/things/1', 'x-private': 'no' }).end();
      }),
    );
    const [first, again] = await twice(app, '/created');
    expect(first.status).toBe(201);
    expect(first.headers.get('location')).toBe('/things/1');
    expect(first.headers.get('x-private')).toBe('no');
    expect(again.status).toBe(201);
    expect(again.headers.get('location')).toBe('/things/1');
    expect(again.headers.get('x-private')).toBeNull();
  });

  it('keeps writeHead’s status message and repeated headers from a flat header array', async () => {
    const app = await serve((a) =>
      a.post('/flat', (_req, res) => {
        executions++;
        res.setHeader('link', '<overridden>');
        res.writeHead(202, 'Queued', ['link', '<a>', 'link', '<b>', 'content-type', 'text/plain']);
        res.end('ok');
      }),
    );
    const [first, again] = await twice(app, '/flat');
    expect([first.status, first.statusText, first.text]).toEqual([202, 'Queued', 'ok']);
    expect(first.headers.get('link')).toBe('<a>, <b>');
    expect(again.status).toBe(202);
    expect(again.headers.get('link')).toBe('<a>, <b>');
    expect(again.text).toBe('ok');
  });

  it('holds the response back until the record is written', async () => {
    // Ordered by events, not timestamps: the store's completion, then the client's answer.
    const events: string[] = [];
    const slow = slowStore(150, () => events.push('stored'));
    const app = await serve(
      (a) =>
        a.post('/slow', (_req, res) => {
          executions++;
          res.write('partial ');
          res.end('done');
        }),
      { store: slow },
    );
    const answer = post(app, '/slow', { key: randomUUID() }).then((first) => {
      events.push('answered');
      return first;
    });
    expect((await answer).text).toBe('partial done');
    expect(events).toEqual(['stored', 'answered']);
  });

  it('lets a body parser mounted after it skip the body it already read, without hanging', async () => {
    const app = await serve((a) =>
      a.post('/echo', (req, res) => {
        executions++;
        res.json({ body: req.body as unknown, raw: req.rawBody?.toString('utf8') });
      }),
    );
    const sent = '{ "b": [1, 2], "a": "x" }';
    const [first] = await twice(app, '/echo', { body: sent, type: 'application/json' });
    expect(JSON.parse(first.text)).toEqual({ body: { a: 'x', b: [1, 2] }, raw: sent });
    executions = 0;
    const [text] = await twice(app, '/echo', { body: 'plain words', type: 'text/plain' });
    expect(JSON.parse(text.text)).toEqual({ body: 'plain words', raw: 'plain words' });
  });

  it('keeps the rawBody a body parser verify callback set before it, and fingerprints those bytes', async () => {
    const app = lib();
    app.set('env', 'test');
    app.use(
      lib.json({
        verify: (req, _res, buf) => {
          (req as express.Request).rawBody = buf;
        },
      }),
    );
    app.use(idempotency({ store, scope: () => 'verify' }));
    app.post('/verified', (req, res) => {
      executions++;
      res.status(201).json({ raw: req.rawBody?.toString('utf8'), own: Object.hasOwn(req, 'rawBody'), n: executions });
    });
    const served = await listenServer(createServer(app));
    apps.push(served);
    const key = randomUUID();
    const sent = '{"amount": 5}';
    const first = await post(served, '/verified', { key, body: sent, type: 'application/json' });
    expect(JSON.parse(first.text)).toEqual({ raw: sent, own: true, n: 1 });
    const again = await post(served, '/verified', { key, body: sent, type: 'application/json' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    const changed = await post(served, '/verified', { key, body: '{"amount": 6}', type: 'application/json' });
    expect(changed.status).toBe(422);
    expect(executions).toBe(1);
  });

  it('gives the handler req.idempotency, and leaves it undefined on a request it let through', async () => {
    const app = await serve(
      (a) =>
        a.post('/context', (req, res) => {
          executions++;
          res.status(201).json({ key: req.idempotency?.key ?? null, takeover: req.idempotency?.takeover ?? null, raw: req.rawBody?.toString('utf8') ?? null });
        }),
      { required: false },
    );
    const key = randomUUID();
    const keyed = await post(app, '/context', { key, ...json({ a: 1 }) });
    expect(JSON.parse(keyed.text)).toEqual({ key, takeover: false, raw: '{"a":1}' });
    const unkeyed = await post(app, '/context', json({ a: 1 }));
    // Without a key the middleware neither read the body nor set a context: express.json() did the reading.
    expect(JSON.parse(unkeyed.text)).toEqual({ key: null, takeover: null, raw: null });
  });

  it.each([
    ['in the app, answered in a mounted sub-app', 'parent'],
    ['in a mounted sub-app, answered by a route of the app after it', 'sub'],
  ])('captures with the middleware %s (the sub-app swaps prototypes)', async (_name, where) => {
    const app = lib();
    const sub = lib();
    app.set('env', 'test');
    sub.set('env', 'test');
    const handler = (req: express.Request, res: express.Response) => {
      executions++;
      res.status(201).json({ n: executions, key: req.idempotency?.key ?? null, raw: req.rawBody?.toString('utf8') ?? null, body: req.body as unknown });
    };
    if (where === 'parent') {
      app.use(idempotency({ store, scope: () => 'sub-parent' }));
      sub.post('/charges', lib.json(), handler);
      app.use('/api', sub);
    } else {
      sub.use(idempotency({ store, scope: () => 'sub-inner' }));
      app.use('/api', sub);
      app.post('/api/charges', lib.json(), handler);
    }
    const served = await listenServer(createServer(app));
    apps.push(served);
    const [first, again] = await twice(served, '/api/charges', json({ a: 1 }));
    expect(JSON.parse(first.text)).toEqual({ n: 1, key: expect.any(String), raw: '{"a":1}', body: { a: 1 } });
    expect(again.text).toBe(first.text);
  });

  it('works outside an Express app too (a plain Node server), with own req properties', async () => {
    const middleware = idempotency({ store, scope: () => 'plain-node' });
    const server = createServer((req, res) => {
      const request = req as express.Request;
      Object.assign(request, { originalUrl: req.url });
      middleware(request, res as express.Response, (error?: unknown) => {
        executions++;
        res.statusCode = error ? 500 : 201;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ key: request.idempotency?.key, raw: request.rawBody?.toString('utf8'), own: Object.hasOwn(request, 'idempotency'), n: executions }));
      });
    });
    const served = await listenServer(server);
    apps.push(served);
    const [first, again] = await twice(served, '/plain', json({ b: 2 }));
    expect(JSON.parse(first.text)).toEqual({ key: expect.any(String), raw: '{"b":2}', own: true, n: 1 });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
  });

  it('fingerprints the parsed body when a body parser ran first', async () => {
    const app = await serve(
      (a) =>
        a.post('/parsed', (req, res) => {
          executions++;
          res.status(201).json({ got: req.body as unknown, n: executions });
        }),
      { parserFirst: true },
    );
    const key = randomUUID();
    const first = await post(app, '/parsed', { key, body: '{"a":1,"b":{"c":[1,2]}}', type: 'application/json' });
    expect(first.status).toBe(201);
    expect(JSON.parse(first.text)).toEqual({ got: { a: 1, b: { c: [1, 2] } }, n: 1 });
    const reordered = await post(app, '/parsed', { key, body: '{ "b": { "c": [1, 2] }, "a": 1 }', type: 'application/json' });
    expect(reordered.headers.get('idempotent-replayed')).toBe('true');
    expect(reordered.text).toBe(first.text);
    const different = await post(app, '/parsed', { key, ...json({ a: 2, b: { c: [1, 2] } }) });
    expect(different.status).toBe(422);
    expect(different.headers.get('content-type')).toBe('application/problem+json');
    expect(executions).toBe(1);
  });

  it('sends Set-Cookie on the first response only', async () => {
    const app = await serve((a) =>
      a.post('/cookie', (_req, res) => {
        executions++;
        res.cookie('session', 'secret').status(201).json({ ok: true });
      }),
    );
    const [first, again] = await twice(app, '/cookie');
    expect(first.headers.get('set-cookie')).toBe('session=secret; Path=/');
    expect(again.headers.get('set-cookie')).toBeNull();
    expect(again.text).toBe(first.text);
  });

  it('replays the 500 of a thrown error without running the route again', async () => {
    const app = await serve((a) =>
      a.post('/throw', () => {
        executions++;
        throw new Error('boom');
      }),
    );
    const [first, again] = await twice(app, '/throw');
    expect(first.status).toBe(500);
    expect(again.status).toBe(500);
    expect(again.text).toBe(first.text);
  });

  it('stores what the route sent even when an error handler writes after it', async () => {
    const app = await serve((a) =>
      a.post('/late-error', (_req, res, next) => {
        executions++;
        res.status(200).json({ ok: true });
        next(new Error('after the answer'));
      }),
      // The error handler must run while the record is still being written.
      { store: slowStore(100) },
    );
    const [first, again] = await twice(app, '/late-error');
    expect([first.status, first.text]).toEqual([200, '{"ok":true}']);
    expect([again.status, again.text]).toEqual([200, '{"ok":true}']);
  });

  it('answers only what an error middleware sends after a partial body, framed right on a keep-alive connection', async () => {
    const app = await serve((a) => {
      a.post('/partial', (_req, res, next) => {
        executions++;
        res.type('text/plain').write('half an answer');
        next(new Error('the upstream went away'));
      });
      a.use((_error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
        res.status(502).json({ error: 'upstream' });
      });
    });
    const request = { method: 'POST', path: '/partial', headers: { authorization: 'Bearer tenant', 'idempotency-key': randomUUID() } };
    const [first, retry] = await twoOnOneConnection(app.url, request, request);
    expect([first.status, first.body.toString()]).toEqual([502, '{"error":"upstream"}']);
    expect([retry.status, retry.body.toString(), retry.headers['idempotent-replayed']]).toEqual([502, '{"error":"upstream"}', 'true']);
    expect(executions).toBe(1);
  });

  it('keeps a partial body in front of what an error path only appends (no new status or headers)', async () => {
    const app = await serve((a) => {
      a.post('/partial', (_req, res, next) => {
        executions++;
        res.type('text/plain').write('half an answer, ');
        next(new Error('boom'));
      });
      a.use((_error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
        res.end('then an apology');
      });
    });
    const request = { method: 'POST', path: '/partial', headers: { authorization: 'Bearer tenant', 'idempotency-key': randomUUID() } };
    const [first, retry] = await twoOnOneConnection(app.url, request, request);
    expect([first.status, first.body.toString()]).toEqual([200, 'half an answer, then an apology']);
    expect([retry.status, retry.body.toString(), retry.headers['idempotent-replayed']]).toEqual([200, 'half an answer, then an apology', 'true']);
    expect(executions).toBe(1);
  });

  it('answers 413 to a chunked upload past maxBodyBytes, and runs nothing', async () => {
    const app = await serve(
      (a) =>
        a.post('/upload', (_req, res) => {
          executions++;
          res.end();
        }),
      { maxBodyBytes: 1024 },
    );
    const body = Readable.toWeb(Readable.from([Buffer.alloc(800, 1), Buffer.alloc(800, 2)])) as ReadableStream;
    const key = randomUUID();
    const r = await post(app, '/upload', { key, body, type: 'application/octet-stream' });
    expect(r.status).toBe(413);
    expect(JSON.parse(r.text)).toMatchObject({ type: 'urn:idemkit:problem:body-too-large', limit: 1024 });
    expect(executions).toBe(0);
    expect(await store.get({ scope: 'Bearer tenant', key })).toBeUndefined();
  });

  it('still sends through a wrapper that a middleware mounted before it put on res.end (compression-style)', async () => {
    const app = lib();
    app.set('env', 'test');
    let wrapped = 0;
    app.use((_req, res, next) => {
      const end = res.end as (...args: unknown[]) => unknown;
      res.end = function (this: unknown, ...args: unknown[]) {
        wrapped++;
        res.setHeader('x-wrapped', 'yes');
        return end.apply(this, args);
      } as typeof res.end;
      next();
    });
    app.use(idempotency({ store, scope: () => 'wrapped' }));
    app.post('/wrapped', lib.json(), (_req, res) => {
      executions++;
      res.status(201).json({ ok: true });
    });
    const served = await listenServer(createServer(app));
    apps.push(served);
    const [first, again] = await twice(served, '/wrapped', json({ a: 1 }));
    expect(first.headers.get('x-wrapped')).toBe('yes');
    expect(again.headers.get('x-wrapped')).toBe('yes');
    expect(wrapped).toBe(2);
  });

  it('captures through a wrapper mounted after it, and stores what that wrapper sent', async () => {
    const app = lib();
    app.set('env', 'test');
    app.use(idempotency({ store, scope: () => 'inner-wrapper' }));
    app.use((_req, res, next) => {
      // Reads res.end from the app's response prototype, where the interceptors are installed.
      const end = res.end as (...args: unknown[]) => unknown;
      res.end = function (this: unknown, chunk: unknown, ...rest: unknown[]) {
        // Express hands end() a Buffer once it computed the ETag; ASCII keeps its length.
        const shout = (text: string) => text.toUpperCase();
        return end.call(this, Buffer.isBuffer(chunk) ? Buffer.from(shout(chunk.toString())) : typeof chunk === 'string' ? shout(chunk) : chunk, ...rest);
      } as typeof res.end;
      next();
    });
    app.post('/shout', lib.json(), (_req, res) => {
      executions++;
      res.type('text/plain').send(`quiet ${randomUUID()}`);
    });
    const served = await listenServer(createServer(app));
    apps.push(served);
    const [first, again] = await twice(served, '/shout', json({ a: 1 }));
    expect(first.text).toMatch(/^QUIET [0-9A-F-]{36}$/);
    expect(again.text).toBe(first.text);
  });

  it('leaves responses of routes it does not protect, in the same app, as they were', async () => {
    const app = await serve((a) => {
      a.get('/plain', (_req, res) => {
        res.write('a');
        res.end('b');
      });
      a.post('/keyed', (_req, res) => {
        executions++;
        res.status(201).json({ n: executions });
      });
    });
    // A protected request first, so the app's response prototype carries the interceptors.
    expect((await post(app, '/keyed', { key: randomUUID() })).status).toBe(201);
    const plain = await fetch(`${app.url}/plain`, { headers: { authorization: 'Bearer tenant' } });
    expect(await plain.text()).toBe('ab');
    const unkeyed = await post(app, '/keyed');
    expect(unkeyed.status).toBe(400);
  });

  it('refuses a second idempotency middleware on the same request, before it claims anything', async () => {
    const app = lib();
    app.set('env', 'test');
    app.use(idempotency({ store, scope: () => 'twice' }));
    let reported: unknown;
    app.post('/twice', idempotency({ store, scope: () => 'twice-inner' }), (_req, res) => {
      executions++;
      res.json({ ok: true });
    });
    app.use((error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      reported = error;
      res.status(500).json({ error: 'mounted twice' });
    });
    const served = await listenServer(createServer(app));
    apps.push(served);
    const k = randomUUID();
    const answer = await post(served, '/twice', { key: k, ...json({ a: 1 }) });
    expect(answer.status).toBe(500);
    expect(reported).toMatchObject({ code: 'ERR_IDEMKIT_MOUNTED_TWICE' });
    expect(executions).toBe(0);
    expect(await store.get({ scope: 'twice-inner', key: k })).toBeUndefined();
  });

  it.each([
    ['keeping bytes', 422],
    [true, 201],
  ] as const)('after express.json() (parserFirst: %s), numbers beyond 2^53 with one key answer %i', async (parserFirst, status) => {
    const app = await serve((a) => a.post('/amount', (req, res) => void res.status(201).json({ n: ++executions, body: req.body as unknown })), { parserFirst });
    const k = randomUUID();
    expect((await post(app, '/amount', { key: k, body: '{"amount":9007199254740993}', type: 'application/json' })).status).toBe(201);
    // Without the bytes only doubles are left, so the documented limit holds: a replay.
    expect((await post(app, '/amount', { key: k, body: '{"amount":9007199254740992}', type: 'application/json' })).status).toBe(status);
    expect(executions).toBe(1);
  });

  it('keeps the claim when the client disconnects mid-handler, then replays what the handler sent', async () => {
    const started = deferred();
    const release = deferred();
    const app = await serve((a) =>
      a.post('/slow-charge', async (_req, res) => {
        executions++;
        started.resolve();
        await release.promise;
        res.status(201).json({ charged: true });
      }),
    );
    const key = randomUUID();
    const controller = new AbortController();
    const gone = post(app, '/slow-charge', { key, signal: controller.signal }).catch((error: unknown) => error);
    await started.promise;
    controller.abort();
    await gone;
    const during = await post(app, '/slow-charge', { key });
    expect(during.status).toBe(409);
    release.resolve();
    await until(async () => (await store.get({ scope: 'Bearer tenant', key }))?.state === 'completed', 'the handler\'s answer to be stored');
    const after = await post(app, '/slow-charge', { key });
    expect(after.status).toBe(201);
    expect(after.headers.get('idempotent-replayed')).toBe('true');
    expect(after.text).toBe('{"charged":true}');
    expect(executions).toBe(1);
  });

  it('keeps renewing the claim of a handler whose response never ends after a disconnect, until maxExecutionMs', async () => {
    const stalled = (a: express.Express) =>
      a.post('/stalled', (_req, res) => {
        executions++;
        const source = new Readable({ read() {} });
        source.push('first chunk');
        source.pipe(res); // the closed socket unpipes it: end never comes
      });
    const hangUp = async (app: TestApp, key: string) => {
      const controller = new AbortController();
      const before = executions;
      const gone = post(app, '/stalled', { key, signal: controller.signal }).catch((error: unknown) => error);
      await until(async () => executions > before, 'the handler to start');
      controller.abort();
      await gone;
    };
    const leaseOf = async (key: string) => (await store.get({ scope: 'Bearer tenant', key }))!.leaseUntil;

    // No ceiling (the default): the handler might still act, so its claim is renewed while it runs.
    const renewing = await serve(stalled, { leaseMs: 200 });
    const kept = randomUUID();
    await hangUp(renewing, kept);
    const firstLease = await leaseOf(kept);
    await until(async () => (await leaseOf(kept)) > firstLease + 400, 'two more leases of renewal');
    expect((await post(renewing, '/stalled', { key: kept })).status).toBe(409);

    // With maxExecutionMs: renewal stops at the ceiling (onError is told), the claim stays in
    // flight, and once its lease has run out a retry may take it over.
    const reported: unknown[] = [];
    const capped = await serve(stalled, { leaseMs: 200, maxExecutionMs: 300, onError: (e) => reported.push(e) });
    const given = randomUUID();
    await hangUp(capped, given);
    await until(async () => reported.some((e) => (e as { code?: string }).code === 'ERR_IDEMKIT_EXECUTION_TIMEOUT'), 'the ceiling');
    await until(async () => (await leaseOf(given)) < Date.now(), 'the lease to run out');
    expect((await store.get({ scope: 'Bearer tenant', key: given }))?.state).toBe('in_flight');
    expect(executions).toBe(2);
  });
});

describe.each(EXPRESS_VERSIONS)('problemErrorHandler (%s): errors answer problem+json, never a stack', (_name, lib) => {
  let store: MemoryStore;
  let executions = 0;
  const reported: unknown[] = [];
  const apps: TestApp[] = [];

  /** The README's quickstart, with problemErrorHandler() mounted last. */
  async function quickstart(extra: (app: express.Express) => void = () => {}): Promise<TestApp> {
    const app = lib();
    app.use((req, _res, next) => {
      (req as express.Request & { tenant?: string }).tenant = req.get('authorization') ?? '';
      next();
    });
    const protect = idempotency({ store, scope: (req) => (req as express.Request & { tenant?: string }).tenant ?? '' });
    app.post('/charges', protect, lib.json(), (req, res) => {
      executions++;
      res.status(201).json({ id: randomUUID(), ...(req.body as object) });
    });
    extra(app);
    app.use(problemErrorHandler({ onError: (error) => reported.push(error) }));
    const served = await listenServer(createServer(app));
    apps.push(served);
    return served;
  }

  /** A problem+json answer without anything of a stack trace or an HTML page in it. */
  function expectCleanProblem(answer: Answer, status: number) {
    expect(answer.status).toBe(status);
    expect(answer.headers.get('content-type')).toBe('application/problem+json');
    expect(answer.text).not.toMatch(/<|\bat \/|\bat [\w.]+ \(|node_modules|SyntaxError|Error:/);
    return JSON.parse(answer.text) as Record<string, unknown>;
  }

  beforeAll(() => {
    store = memoryStore();
  });
  afterEach(() => {
    executions = 0;
    reported.length = 0;
  });
  afterAll(async () => {
    await Promise.all(apps.map((a) => a.close()));
    store.close();
  });

  it('a malformed JSON body with a key: 400 problem+json, nothing claimed, the key still usable', async () => {
    const app = await quickstart();
    const key = randomUUID();
    const bad = await post(app, '/charges', { key, body: '{"amount": 12', type: 'application/json' });
    expect(expectCleanProblem(bad, 400)).toEqual({
      type: 'about:blank',
      title: 'Bad Request',
      status: 400,
      detail: 'The request body could not be parsed as its Content-Type says.',
    });
    expect(await store.get({ scope: 'Bearer tenant', key })).toBeUndefined();
    const good = await post(app, '/charges', { key, ...json({ amount: 12 }) });
    expect(good.status).toBe(201);
    expect(executions).toBe(1);
    expect(reported).toEqual([]);
  });

  it("the body parsers' own errors: malformed JSON and a body over their limit, before the middleware", async () => {
    const app = await quickstart((a) => {
      a.post('/parsed-first', lib.json({ limit: 16 }), idempotency({ store }), (_req, res) => void res.status(201).json({}));
    });
    const bad = await post(app, '/parsed-first', { key: randomUUID(), body: 'not json', type: 'application/json' });
    expect(expectCleanProblem(bad, 400)).toMatchObject({ type: 'about:blank', status: 400 });
    const large = await post(app, '/parsed-first', { key: randomUUID(), ...json({ note: 'x'.repeat(64) }) });
    expect(expectCleanProblem(large, 413)).toEqual({
      type: 'about:blank',
      title: 'Payload Too Large',
      status: 413,
      detail: 'The request body is larger than this endpoint accepts.',
    });
    expect(reported).toEqual([]);
  });

  it("idemkit's own problems keep their type and headers", async () => {
    const app = await quickstart();
    const missing = await post(app, '/charges', json({ amount: 1 }));
    expect(expectCleanProblem(missing, 400)).toMatchObject({ type: 'urn:idemkit:problem:missing-key', status: 400 });
  });

  it('a body refused after the claim gives the key back: nothing ran, and a corrected retry runs', async () => {
    let refuse = true;
    const app = await quickstart((a) => {
      a.post(
        '/late-parser',
        idempotency({ store }),
        (_req, _res, next) => {
          if (!refuse) return next();
          // What a parser mounted after the middleware reports (body-parser's shape).
          next(Object.assign(new SyntaxError('Unexpected end of JSON input'), { status: 400, statusCode: 400, expose: true, type: 'entity.parse.failed' }));
        },
        (_req, res) => {
          executions++;
          res.status(201).json({ ok: true });
        },
      );
    });
    const key = randomUUID();
    const refused = await post(app, '/late-parser', { key, ...json({ a: 1 }) });
    expectCleanProblem(refused, 400);
    refuse = false;
    const retried = await post(app, '/late-parser', { key, ...json({ a: 1 }) });
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBeNull();
    expect(executions).toBe(1);
  });

  it('any other error: a generic 500 without its message, told to onError; a thrown handler is stored as that 500', async () => {
    const app = await quickstart((a) => {
      a.post('/throw', idempotency({ store }), () => {
        executions++;
        throw new Error('secret connection string in this message');
      });
      a.post('/expose', () => {
        throw Object.assign(new Error('no such account'), { status: 404, expose: true });
      });
    });
    const key = randomUUID();
    const first = await post(app, '/throw', { key, ...json({}) });
    expect(expectCleanProblem(first, 500)).toEqual({ type: 'about:blank', title: 'Internal Server Error', status: 500 });
    expect(first.text).not.toContain('secret');
    expect(reported).toHaveLength(1);
    expect((reported[0] as Error).message).toContain('secret');
    const again = await post(app, '/throw', { key, ...json({}) });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(executions).toBe(1);
    // An http-errors style 4xx marked `expose` keeps its message.
    expect(expectCleanProblem(await post(app, '/expose'), 404)).toEqual({ type: 'about:blank', title: 'Not Found', status: 404, detail: 'no such account' });
  });

  it('refuses an unknown option', () => {
    expect(() => problemErrorHandler({ onErorr: () => {} } as never)).toThrow(InvalidOptionError);
  });
});

describeMatrix('express', createExpressApp);
describeMatrix('express4', createExpress4App);

for (const [name, lib] of EXPRESS_VERSIONS) {
  describePerRoute(name, {
    middleware: (options) => idempotency(options),
    serve: async (store, state) => {
      const app = lib();
      const idem = idempotency({ store, scope: (req) => req.get('authorization') ?? '' });
      const ok = (_req: express.Request, res: express.Response, next: express.NextFunction) => {
        state.run().then(() => res.status(201).json({ run: randomUUID() }), next);
      };
      app.post('/strict', idem, ok);
      app.post('/conflict', idem, ok);
      app.post('/optional', idem.route({ required: false }), ok);
      app.post('/shared', idem.route({ scope: () => 'one-scope-for-all' }), ok);
      app.post('/wait', idem.route({ inFlight: 'wait', waitTimeoutMs: 60_000 }), ok);
      app.post('/twice', idem, idem.route({ leaseMs: 5_000 }), ok);
      app.use((error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
        state.errors.push(error);
        res.status(500).json({ error: 'failed' });
      });
      return listenServer(createServer(app));
    },
  });
}
