import { randomUUID } from 'node:crypto';
import type { IdempotencyContext } from '../../../src/core/execution.js';
import { withIdempotency } from '../../../src/http/web.js';
import type { AppFactory } from '../harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, bearerToken, binaryPattern, delayMs, held, failingBody, sqliteContext } from '../harness.js';
import { listenFetch } from './listen.js';

export const createWebApp: AppFactory = async (options, state) => {
  const protectedRoutes = withIdempotency(
    async (request, ctx) => route(request, ctx),
    { ...options, scope: (request) => bearerToken(request.headers.get('authorization')) ?? '' },
  );

  async function route(request: Request, ctx: IdempotencyContext | undefined): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path === '/charges' && (request.method === 'GET' || request.method === 'PUT')) {
      state.executions++;
      return Response.json({ n: state.executions });
    }
    if (path === '/discard') {
      ctx?.discard();
      return Response.json({ error: 'invalid' }, { status: 400 });
    }
    state.executions++;
    if (path === '/charges') {
      await delayMs(request.headers.get('x-delay-ms'));
      await held(state, request.headers.get('x-hold'));
      const text = await request.text();
      const body = request.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text;
      const id = randomUUID();
      return Response.json(
        { id, n: state.executions, body },
        { status: 201, headers: { location: `/charges/${id}`, 'set-cookie': 'session=secret', 'x-request-id': randomUUID() } },
      );
    }
    const status = /^\/status\/(\d{3})$/.exec(path);
    if (status) {
      const code = Number(status[1]);
      return Response.json({ error: `status ${code}`, n: state.executions }, { status: code });
    }
    if (path === '/throw') throw new Error('boom');
    if (path === '/binary') {
      return new Response(binaryPattern(Number(url.searchParams.get('size') ?? 0)), {
        headers: { 'content-type': 'application/octet-stream' },
      });
    }
    if (path === '/empty') return new Response(null, { status: 204 });
    if (path === '/text') {
      return new Response(`echo:${await request.text()}`, { headers: { 'content-type': 'text/plain; charset=utf-8' } });
    }
    if (path === '/tx') {
      sqliteContext(ctx).tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx!.key);
      const fail = url.searchParams.get('fail');
      if (fail === 'throw') throw new Error('boom');
      if (fail === 'throw-value') throw THROWN_VALUES.string;
      if (fail === '500') return Response.json({ error: 'failed' }, { status: 500 });
      return Response.json({ ok: true }, { status: 201 });
    }
    if (path === '/tx-slow') {
      await delayMs(request.headers.get('x-delay-ms'));
      sqliteContext(ctx).tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx!.key);
      return Response.json({ ok: true }, { status: 201 });
    }
    const cancel = /^\/orders\/([^/]+)\/cancel$/.exec(path);
    if (cancel) return Response.json({ order: cancel[1], status: 'cancelled', n: state.executions }, { status: 201 });
    const thrown = /^\/throw-value\/([^/]+)$/.exec(path);
    if (thrown) throw THROWN_VALUES[thrown[1]!];
    if (path === '/partial') return new Response(failingBody(PARTIAL_CHUNK), { headers: { 'content-type': 'text/plain' } });
    return new Response('not found', { status: 404 });
  }

  return listenFetch(async (request) => {
    if (bearerToken(request.headers.get('authorization')) === undefined) {
      return Response.json({ error: 'unauthorized' }, { status: 401 });
    }
    return protectedRoutes(request);
  });
};
