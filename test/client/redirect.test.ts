/**
 * Redirects, with two real servers on two ports (two origins). The key, the body and the
 * headers only ever go to the origin the caller named: a redirect to another origin rejects with
 * CrossOriginRedirectError. A same-origin 307/308 is followed with the same method, key and body
 * bytes; a redirect after which fetch would turn a POST into a GET is the answer, returned.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  CrossOriginRedirectError,
  InvalidOptionError,
  RequestFailedError,
  TooManyRedirectsError,
  createIdempotentFetch,
} from '../../src/client/index.js';
import type { Action, ScriptedServer } from './servers.js';
import { scriptedServer } from './servers.js';

const servers: ScriptedServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function serve(script: (n: number, path: string) => Action): Promise<ScriptedServer> {
  const server = await scriptedServer((n, seen) => script(n, seen.url));
  servers.push(server);
  return server;
}

/** Origin B: answers everything with 201, and records what reached it. */
const otherOrigin = () => serve(() => ({ status: 201, body: '{"at":"b"}' }));
const redirect = (status: number, location: string): Action => ({ status, headers: { location }, body: '' });

const fast = { minTimeout: 0, maxTimeout: 0, retryBudget: false } as const;
const payment = { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer secret' }, body: '{"amount":1200}' };

describe('a redirect to another origin', () => {
  it.each([307, 308])('a %i of a POST: CrossOriginRedirectError naming both origins; the other origin never sees the request', async (status) => {
    const b = await otherOrigin();
    const a = await serve(() => redirect(status, `${b.url}/charges`));

    const error = await createIdempotentFetch(fast)(`${a.url}/charges`, payment).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(CrossOriginRedirectError);
    const key = a.seen[0]!.headers['idempotency-key'];
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_CROSS_ORIGIN_REDIRECT', from: a.url, to: b.url, location: `${b.url}/charges`, status, key, attempts: 1 });
    expect((error as Error).message).toContain(a.url);
    expect((error as Error).message).toContain(b.url);
    expect(b.seen).toHaveLength(0);
    expect(a.seen).toHaveLength(1); // not retried
  });

  it.each([
    ['POST', 301],
    ['POST', 302],
    ['POST', 303],
    ['PATCH', 303],
    ['GET with a key', 302],
    ['GET with a key', 303],
    ['PUT with a key', 301],
  ])('a %s answered %i: the other origin never sees the key (nor anything else)', async (what, status) => {
    const b = await otherOrigin();
    const a = await serve(() => redirect(status, `${b.url}/elsewhere`));
    const method = what.split(' ')[0]!;
    const init = method === 'GET'
      ? { headers: { authorization: 'Bearer secret' }, idempotencyKey: 'caller-key-1' }
      : { ...payment, method, ...(method === 'PUT' ? { idempotencyKey: 'caller-key-2' } : {}) };

    const outcome = await createIdempotentFetch(fast)(`${a.url}/charges`, init).catch((e: unknown) => e);

    expect(b.seen).toEqual([]);
    if (method === 'POST' || method === 'PATCH') {
      // fetch would resend it as a GET without the body: that 3xx is the server's answer, returned.
      expect(outcome).toBeInstanceOf(Response);
      expect((outcome as Response).status).toBe(status);
    } else {
      expect(outcome).toBeInstanceOf(CrossOriginRedirectError);
    }
  });

  it('another scheme on the same host is another origin', async () => {
    const a = await serve(() => redirect(308, 'https://127.0.0.1/charges'));
    const error = await createIdempotentFetch(fast)(`${a.url}/charges`, payment).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_CROSS_ORIGIN_REDIRECT', to: 'https://127.0.0.1' });
  });

  it("redirect: 'manual' returns the 3xx itself; the caller decides", async () => {
    const b = await otherOrigin();
    const a = await serve(() => redirect(307, `${b.url}/charges`));
    const response = await createIdempotentFetch(fast)(`${a.url}/charges`, { ...payment, redirect: 'manual' });
    expect(response.status).toBe(307);
    expect(response.headers.get('location')).toBe(`${b.url}/charges`);
    expect(response.idempotency).toMatchObject({ attempts: 1, replayed: false });
    expect(b.seen).toHaveLength(0);
  });

  it("redirect: 'error' rejects as fetch does, and sends nothing further", async () => {
    const b = await otherOrigin();
    const a = await serve(() => redirect(307, `${b.url}/charges`));
    const error = await createIdempotentFetch(fast)(`${a.url}/charges`, { ...payment, redirect: 'error' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestFailedError);
    expect(b.seen).toHaveLength(0);
    expect(a.seen).toHaveLength(1);
  });
});

describe('a redirect within the origin', () => {
  it.each([307, 308])('a %i of a POST is followed with the same method, key and body bytes', async (status) => {
    const a = await serve((_n, path) => (path === '/charges' ? redirect(status, '/v2/charges') : { status: 201, body: '{"id":"ch_1"}' }));

    const response = await createIdempotentFetch(fast)(`${a.url}/charges`, payment);

    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ id: 'ch_1' });
    expect(response.redirected).toBe(true);
    expect(response.url).toBe(`${a.url}/v2/charges`);
    expect(response.idempotency).toMatchObject({ attempts: 1, replayed: false });
    const [first, second] = a.seen;
    expect(second).toMatchObject({ method: 'POST', url: '/v2/charges' });
    expect(second!.headers['idempotency-key']).toBe(first!.headers['idempotency-key']);
    expect(second!.headers['idempotency-key']).toBe(response.idempotency.key);
    expect(second!.body.toString()).toBe('{"amount":1200}');
    expect(first!.body.toString()).toBe('{"amount":1200}');
  });

  it('a retry after a redirect starts again at the URL the caller named, with the same key and bytes', async () => {
    let atTarget = 0;
    const a = await serve((_n, path) => {
      if (path === '/charges') return redirect(307, '/v2/charges');
      return ++atTarget === 1 ? { status: 503 } : { status: 201 };
    });
    const response = await createIdempotentFetch(fast)(`${a.url}/charges`, payment);
    expect(response.status).toBe(201);
    expect(response.idempotency.attempts).toBe(2);
    expect(a.seen.map((s) => s.url)).toEqual(['/charges', '/v2/charges', '/charges', '/v2/charges']);
    expect(new Set(a.seen.map((s) => s.headers['idempotency-key'])).size).toBe(1);
    expect(a.seen.every((s) => s.body.toString() === '{"amount":1200}')).toBe(true);
  });

  it.each([301, 302, 303])('a %i of a POST is not followed: it is returned, with how the call went', async (status) => {
    const a = await serve(() => redirect(status, '/charges/ch_1'));
    const response = await createIdempotentFetch(fast)(`${a.url}/charges`, payment);
    expect(response.status).toBe(status);
    expect(response.headers.get('location')).toBe('/charges/ch_1');
    expect(response.redirected).toBe(false);
    expect(response.idempotency).toMatchObject({ attempts: 1, replayed: false });
    expect(a.seen).toHaveLength(1);
  });

  it.each([301, 302, 303, 307, 308])('a %i of a GET is followed', async (status) => {
    const a = await serve((_n, path) => (path === '/old' ? redirect(status, '/new') : { status: 200, body: '"new"' }));
    const response = await createIdempotentFetch(fast)(`${a.url}/old`);
    expect(await response.json()).toBe('new');
    expect(a.seen.map((s) => `${s.method} ${s.url}`)).toEqual(['GET /old', 'GET /new']);
  });

  it('a 3xx without a Location is the answer', async () => {
    const a = await serve(() => ({ status: 307, body: '' }));
    expect((await createIdempotentFetch(fast)(`${a.url}/charges`, payment)).status).toBe(307);
  });

  it('a loop ends with TooManyRedirectsError after maxRedirects (5) hops', async () => {
    const a = await serve((n) => redirect(307, `/hop/${n + 1}`));
    const error = await createIdempotentFetch(fast)(`${a.url}/hop/0`, payment).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TooManyRedirectsError);
    expect(error).toMatchObject({ code: 'ERR_IDEMKIT_TOO_MANY_REDIRECTS', limit: 5, location: `${a.url}/hop/6`, attempts: 1 });
    expect(a.seen).toHaveLength(6); // the request and 5 redirects followed, then no more; not retried
  });

  it('maxRedirects: 0 follows none', async () => {
    const a = await serve(() => redirect(308, '/v2'));
    await expect(createIdempotentFetch({ ...fast, maxRedirects: 0 })(`${a.url}/v1`, payment)).rejects.toBeInstanceOf(TooManyRedirectsError);
    expect(a.seen).toHaveLength(1);
  });
});

describe('the bytes stay re-usable', () => {
  it('a fetch that detaches (transfers) the buffer of each body it is given cannot empty the next attempt', async () => {
    const a = await serve((n) => (n === 0 ? { status: 503 } : { status: 201 }));
    const detaching: typeof fetch = (input, init) => {
      const body = init?.body;
      // What a runtime that transfers its body's buffer does: the caller's view is left empty.
      const moved = body instanceof Uint8Array ? structuredClone(body.buffer as ArrayBuffer, { transfer: [body.buffer as ArrayBuffer] }) : body;
      return fetch(input, { ...init, body: moved });
    };
    const response = await createIdempotentFetch({ ...fast, fetch: detaching })(`${a.url}/charges`, payment);
    expect(response.status).toBe(201);
    expect(a.seen.map((s) => s.body.toString())).toEqual(['{"amount":1200}', '{"amount":1200}']);
  });
});

describe('options', () => {
  it('maxRedirects and a per-call redirect are validated', async () => {
    expect(() => createIdempotentFetch({ maxRedirects: -1 })).toThrow(InvalidOptionError);
    expect(() => createIdempotentFetch({ follow: 20 } as never)).toThrow(/use `maxRedirects`/);
    await expect(createIdempotentFetch(fast)('http://127.0.0.1:1/x', { redirect: 'sometimes' as RequestRedirect })).rejects.toMatchObject({ option: 'redirect' });
  });
});
