/**
 * The Koa server of bench/server.ts (`--framework=koa`): Koa 3 and @koa/router, as
 * examples/koa.ts wires them, with `POST /charges` → 201 `{ id, ok: true }`. Bare, or with
 * idemkit/koa's middleware listed on the route.
 *
 * Koa parses no bodies, and @koa/bodyparser is not installed: `readJsonBody` stands in for it, on
 * both sides (read the stream, `JSON.parse`), so the bare server parses the body as bare Express
 * and Fastify do. Behind idemkit, a keyed request's body is read by the middleware, which leaves
 * it where a body parser puts it (`ctx.request.body`, `ctx.request.rawBody`), and the parser skips
 * it, as @koa/bodyparser mounted after the middleware does; a request without a key (the no-key
 * workload) is read by the parser.
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import Router from '@koa/router';
import Koa from 'koa';
import type { Next, ParameterizedContext } from 'koa';
import type { KoaRequestBody } from 'idemkit/koa';
import { idempotency } from 'idemkit/koa';
import type { AppSpec } from './shared.js';
import { ROUTE } from './shared.js';

async function readJsonBody(ctx: ParameterizedContext, next: Next): Promise<void> {
  const request = ctx.request as typeof ctx.request & KoaRequestBody;
  if (request.body === undefined && request.rawBody === undefined) {
    const chunks: Buffer[] = [];
    for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    request.rawBody = raw;
    if (raw.byteLength > 0) request.body = JSON.parse(raw.toString('utf8')) as unknown;
  }
  await next();
}

export async function startKoa(spec: AppSpec): Promise<number> {
  const app = new Koa();
  const key = (ctx: ParameterizedContext) => ctx.get('idempotency-key') || undefined;
  const handler =
    spec.delayMs > 0
      ? async (ctx: ParameterizedContext) => {
          await sleep(spec.delayMs);
          ctx.status = 201;
          ctx.body = spec.execute(key(ctx));
        }
      : (ctx: ParameterizedContext) => {
          ctx.status = 201;
          ctx.body = spec.execute(key(ctx));
        };
  const router = new Router();
  if (spec.store) router.post(ROUTE, idempotency({ store: spec.store, required: spec.required }), readJsonBody, handler);
  else router.post(ROUTE, readJsonBody, handler);
  app.use(router.routes());
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}
