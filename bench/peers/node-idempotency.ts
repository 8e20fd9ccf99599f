/**
 * `@node-idempotency/core` (framework-agnostic `Idempotency` class) with its memory and Redis
 * adapters, wired the way its README describes: `onRequest` before the handler (a cached response
 * is sent as is; errors map to 409/422/400), `onResponse` with the handler's answer before it is
 * sent. Its own Express/Fastify packages are not installed; this glue is what they do.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Idempotency, IdempotencyError } from '@node-idempotency/core';
import type { IdempotencyParams, IdempotencyResponse } from '@node-idempotency/core';
import { MemoryStorageAdapter } from '@node-idempotency/storage-adapter-memory';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import express from 'express';
import Fastify from 'fastify';
import { ROUTE } from '../shared.js';
import { listenExpress, listenFastify, quietErrors } from './common.js';
import type { PeerContext, PeerServer } from './types.js';
import { NotApplicable, REPLAYED } from './types.js';

function statusOf(error: unknown): number {
  if (!(error instanceof IdempotencyError)) return 500;
  switch (error.code) {
    case 'REQUEST_IN_PROGRESS':
      return 409;
    case 'IDEMPOTENCY_FINGERPRINT_MISSMATCH':
      return 422;
    default:
      return 400; // missing key (reported with the code IDEMPOTENCY_KEY_LEN_EXEEDED) or too long
  }
}

async function open(ctx: PeerContext): Promise<{ idempotency: Idempotency; close(): Promise<void> }> {
  const options = { enforceIdempotency: ctx.required, cacheKeyPrefix: `bench-ni-${ctx.nonce}` };
  if (ctx.store === 'memory') return { idempotency: new Idempotency(new MemoryStorageAdapter(), options), close: async () => {} };
  if (ctx.store === 'redis') {
    const adapter = new RedisStorageAdapter({ url: ctx.redisUrl });
    await adapter.connect();
    return { idempotency: new Idempotency(adapter, options), close: () => adapter.disconnect() };
  }
  throw new NotApplicable(`no ${ctx.store} adapter (memory and Redis only)`);
}

export async function start(ctx: PeerContext): Promise<PeerServer> {
  const { idempotency, close } = await open(ctx);
  const port = ctx.framework === 'express' ? await startExpress(ctx, idempotency) : await startFastify(ctx, idempotency);
  return { port, close };
}

async function startExpress(ctx: PeerContext, idempotency: Idempotency): Promise<number> {
  const app = express();
  const guard: express.RequestHandler = async (req, res, next) => {
    const params: IdempotencyParams = { method: req.method, path: req.path, headers: req.headers, body: req.body as Record<string, unknown> };
    let cached: IdempotencyResponse | undefined;
    try {
      cached = await idempotency.onRequest(params);
    } catch (error) {
      res.status(statusOf(error)).json({ error: (error as Error).message });
      return;
    }
    if (cached) {
      res.status(Number(cached.additional?.status ?? 200)).set(REPLAYED, 'true').json(cached.body);
      return;
    }
    if (req.get('idempotency-key') !== undefined) {
      // Store the answer before it leaves, as the README's flow does: a retry then finds it complete.
      const json = res.json.bind(res);
      res.json = (body: unknown) => {
        idempotency.onResponse(params, { body, additional: { status: res.statusCode } }).then(() => json(body), next);
        return res;
      };
    }
    next();
  };
  const handler: express.RequestHandler =
    ctx.delayMs > 0
      ? async (req, res) => {
          await sleep(ctx.delayMs);
          res.status(201).json(ctx.execute(req.get('idempotency-key')));
        }
      : (req, res) => {
          res.status(201).json(ctx.execute(req.get('idempotency-key')));
        };
  app.post(ROUTE, express.json(), guard, handler);
  app.use(quietErrors);
  return listenExpress(app);
}

type WithParams = { nodeIdempotency?: IdempotencyParams };

async function startFastify(ctx: PeerContext, idempotency: Idempotency): Promise<number> {
  const app = Fastify({ logger: false });
  app.addHook('preHandler', async (request, reply) => {
    const params: IdempotencyParams = {
      method: request.method,
      path: request.routeOptions.url ?? request.url,
      headers: request.headers,
      body: request.body as Record<string, unknown>,
    };
    let cached: IdempotencyResponse | undefined;
    try {
      cached = await idempotency.onRequest(params);
    } catch (error) {
      return reply.code(statusOf(error)).send({ error: (error as Error).message });
    }
    if (cached) {
      return reply
        .code(Number(cached.additional?.status ?? 200))
        .header(REPLAYED, 'true')
        .header('content-type', 'application/json; charset=utf-8')
        .send(cached.body);
    }
    if (request.headers['idempotency-key'] !== undefined) (request as WithParams).nodeIdempotency = params;
  });
  app.addHook('onSend', async (request, reply, payload) => {
    const params = (request as WithParams).nodeIdempotency;
    if (params) await idempotency.onResponse(params, { body: payload, additional: { status: reply.statusCode } });
    return payload;
  });
  const key = (headers: Record<string, unknown>) => headers['idempotency-key'] as string | undefined;
  if (ctx.delayMs > 0) {
    app.post(ROUTE, async (request, reply) => {
      await sleep(ctx.delayMs);
      return reply.code(201).send(ctx.execute(key(request.headers)));
    });
  } else {
    app.post(ROUTE, async (request, reply) => reply.code(201).send(ctx.execute(key(request.headers))));
  }
  return listenFastify(app);
}
