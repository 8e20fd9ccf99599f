import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Database } from 'better-sqlite3';
import Fastify from 'fastify';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { IdempotencyContext } from '../../../src/core/execution.js';
import { idempotency } from '../../../src/http/fastify.js';
import type { AppFactory } from '../harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, bearerToken, binaryPattern, delayMs, held } from '../harness.js';

export const createFastifyApp: AppFactory = async (options, state) => {
  const app = Fastify();
  // text/plain has a built-in string parser; anything else that is not JSON arrives as a Buffer.
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  // Auth runs before every hook of the plugin, so a 401 never claims a key.
  app.addHook('onRequest', async (request, reply) => {
    if (bearerToken(request.headers.authorization) === undefined) {
      return reply.code(401).send({ error: 'unauthorized' });
    }
  });
  await app.register(idempotency, { ...options, scope: (request) => bearerToken(request.headers.authorization) ?? '' });

  const charge = async (request: FastifyRequest, reply: FastifyReply) => {
    state.executions++;
    await delayMs(request.headers['x-delay-ms'] as string | undefined);
    await held(state, request.headers['x-hold'] as string | undefined);
    const body = Buffer.isBuffer(request.body) ? request.body.toString() : request.body;
    const id = randomUUID();
    reply.code(201).header('location', `/charges/${id}`).header('set-cookie', 'session=secret').header('x-request-id', randomUUID());
    return { id, n: state.executions, body };
  };
  app.post('/charges', charge);
  app.patch('/charges', charge);
  app.get('/charges', async () => ({ n: ++state.executions }));
  app.put('/charges', async () => ({ n: ++state.executions }));
  app.post<{ Params: { code: string } }>('/status/:code', async (request, reply) => {
    state.executions++;
    const code = Number(request.params.code);
    return reply.code(code).send({ error: `status ${code}`, n: state.executions });
  });
  app.post('/throw', async () => {
    state.executions++;
    throw new Error('boom');
  });
  app.post<{ Querystring: { size?: string } }>('/binary', async (request, reply) => {
    state.executions++;
    return reply.type('application/octet-stream').send(Buffer.from(binaryPattern(Number(request.query.size ?? 0))));
  });
  app.post('/empty', async (_request, reply) => {
    state.executions++;
    return reply.code(204).send();
  });
  app.post('/text', async (request, reply) => {
    state.executions++;
    const text = Buffer.isBuffer(request.body) ? request.body.toString() : String(request.body ?? '');
    return reply.type('text/plain; charset=utf-8').send(`echo:${text}`);
  });
  app.post('/discard', async (request, reply) => {
    request.idempotency?.discard();
    return reply.code(400).send({ error: 'invalid' });
  });
  app.post<{ Querystring: { fail?: string } }>('/tx', async (request, reply) => {
    state.executions++;
    const ctx = request.idempotency as IdempotencyContext<Database>;
    ctx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    if (request.query.fail === 'throw') throw new Error('boom');
    if (request.query.fail === 'throw-value') throw THROWN_VALUES.string;
    if (request.query.fail === '500') return reply.code(500).send({ error: 'failed' });
    return reply.code(201).send({ ok: true });
  });

  app.post('/tx-slow', async (request, reply) => {
    state.executions++;
    const ctx = request.idempotency as IdempotencyContext<Database>;
    await delayMs(request.headers['x-delay-ms'] as string | undefined);
    ctx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    return reply.code(201).send({ ok: true });
  });
  app.post<{ Params: { id: string } }>('/orders/:id/cancel', async (request, reply) => {
    state.executions++;
    return reply.code(201).send({ order: request.params.id, status: 'cancelled', n: state.executions });
  });
  app.post<{ Params: { kind: string } }>('/throw-value/:kind', async (request) => {
    state.executions++;
    throw THROWN_VALUES[request.params.kind];
  });
  app.post('/partial', async (_request, reply) => {
    state.executions++;
    const body = Readable.from(
      (async function* () {
        yield Buffer.from(PARTIAL_CHUNK);
        throw new Error('boom');
      })(),
    );
    return reply.type('text/plain').send(body);
  });

  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return { url, close: () => app.close(), quirks: { unparsableJsonStatus: 400 } };
};
