import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import type { IdempotencyVariables } from '../../../src/http/hono.js';
import { idempotency } from '../../../src/http/hono.js';
import type { AppFactory } from '../harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, bearerToken, binaryPattern, delayMs, held, failingBody, sqliteContext } from '../harness.js';
import { listenFetch } from './listen.js';

export const createHonoApp: AppFactory = async (options, state) => {
  const app = new Hono<{ Variables: IdempotencyVariables & { tenant: string } }>();
  app.use('*', async (c, next) => {
    const token = bearerToken(c.req.header('authorization'));
    if (token === undefined) return c.json({ error: 'unauthorized' }, 401);
    c.set('tenant', token);
    await next();
  });
  app.use('*', idempotency({ ...options, scope: (c) => c.get('tenant') as string }));

  // The same 500 Hono's default handler gives, without its console noise in test output.
  app.onError((_error, c) => c.text('Internal Server Error', 500));
  app.get('/charges', (c) => c.json({ n: ++state.executions }));
  app.put('/charges', (c) => c.json({ n: ++state.executions }));
  app.on(['POST', 'PATCH'], '/charges', async (c) => {
    state.executions++;
    await delayMs(c.req.header('x-delay-ms'));
    await held(state, c.req.header('x-hold'));
    const body = c.req.header('content-type')?.includes('json') ? await c.req.json() : await c.req.text();
    const id = randomUUID();
    c.header('location', `/charges/${id}`);
    c.header('set-cookie', 'session=secret');
    c.header('x-request-id', randomUUID());
    return c.json({ id, n: state.executions, body }, 201);
  });
  app.post('/status/:code', (c) => {
    state.executions++;
    const code = Number(c.req.param('code'));
    return c.json({ error: `status ${code}`, n: state.executions }, code as 400);
  });
  app.post('/throw', () => {
    state.executions++;
    throw new Error('boom');
  });
  app.post('/binary', (c) => {
    state.executions++;
    c.header('content-type', 'application/octet-stream');
    return c.body(binaryPattern(Number(c.req.query("size") ?? 0)));
  });
  app.post('/empty', (c) => {
    state.executions++;
    return c.body(null, 204);
  });
  app.post('/text', async (c) => {
    state.executions++;
    return c.text(`echo:${await c.req.text()}`);
  });
  app.post('/discard', (c) => {
    c.get('idempotency')?.discard();
    return c.json({ error: 'invalid' }, 400);
  });
  app.post('/tx', (c) => {
    state.executions++;
    const ctx = sqliteContext(c.get('idempotency'));
    ctx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    const fail = c.req.query('fail');
    if (fail === 'throw') throw new Error('boom');
    if (fail === 'throw-value') throw THROWN_VALUES.string;
    if (fail === '500') return c.json({ error: 'failed' }, 500);
    return c.json({ ok: true }, 201);
  });
  app.post('/tx-slow', async (c) => {
    state.executions++;
    const ctx = sqliteContext(c.get('idempotency'));
    await delayMs(c.req.header('x-delay-ms'));
    ctx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    return c.json({ ok: true }, 201);
  });
  app.post('/orders/:id/cancel', (c) => {
    state.executions++;
    return c.json({ order: c.req.param('id'), status: 'cancelled', n: state.executions }, 201);
  });
  app.post('/throw-value/:kind', (c) => {
    state.executions++;
    throw THROWN_VALUES[c.req.param('kind')];
  });
  app.post('/partial', (c) => {
    state.executions++;
    return c.body(failingBody(PARTIAL_CHUNK), 200, { 'content-type': 'text/plain' });
  });
  return listenFetch(app.fetch);
};
