import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import Koa from 'koa';
import type { Next, ParameterizedContext } from 'koa';
import Router from '@koa/router';
import { isJsonMediaType } from '../../../src/core/fingerprint.js';
import type { KoaRequestBody } from '../../../src/http/koa.js';
import { idempotency } from '../../../src/http/koa.js';
import type { AppFactory, HarnessOptions } from '../harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, bearerToken, binaryPattern, delayMs, held, sqliteContext } from '../harness.js';
import { listenServer } from './listen.js';

/** The request body where the middleware (or this app's own reader) put it. */
export function bodyOf(ctx: ParameterizedContext): unknown {
  return (ctx.request as typeof ctx.request & KoaRequestBody).body;
}

/**
 * Koa parses no bodies and @koa/bodyparser is not a dependency here: this reads the body of a
 * request the idempotency middleware did not read (no key, an uncovered method), as a body parser
 * mounted after it would (one that skips a request whose body was already read).
 */
async function readUnreadBody(ctx: ParameterizedContext, next: Next): Promise<void> {
  const request = ctx.request as typeof ctx.request & KoaRequestBody;
  if (request.rawBody === undefined && request.body === undefined) {
    const chunks: Buffer[] = [];
    for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    request.rawBody = raw;
    const type = ctx.get('content-type');
    if (raw.byteLength > 0) request.body = isJsonMediaType(type) ? JSON.parse(raw.toString()) : type.startsWith('text/') ? raw.toString() : raw;
  }
  await next();
}

/** The harness app on Koa 3 and @koa/router; `mount` puts the middleware in place (app-wide by default). */
export async function createKoaAppWith(options: HarnessOptions, state: Parameters<AppFactory>[1], extra?: (app: Koa, router: Router) => void) {
  const app = new Koa();
  app.silent = true; // keeps Koa's default error listener from logging every /throw
  app.use(async (ctx, next) => {
    const token = bearerToken(ctx.get('authorization'));
    if (token === undefined) {
      ctx.status = 401;
      ctx.body = { error: 'unauthorized' };
      return;
    }
    ctx.state.tenant = token;
    await next();
  });
  const idem = idempotency({ ...options, scope: (ctx) => ctx.state.tenant as string });
  app.use(idem);
  app.use(readUnreadBody);

  const router = new Router();
  router.get('/charges', (ctx) => {
    ctx.body = { n: ++state.executions };
  });
  router.put('/charges', (ctx) => {
    ctx.body = { n: ++state.executions };
  });
  const charge = async (ctx: ParameterizedContext) => {
    state.executions++;
    await delayMs(ctx.get('x-delay-ms'));
    await held(state, ctx.get('x-hold'));
    const body = bodyOf(ctx);
    const id = randomUUID();
    ctx.status = 201;
    ctx.set({ location: `/charges/${id}`, 'set-cookie': 'session=secret', 'x-request-id': randomUUID() });
    ctx.body = { id, n: state.executions, body: Buffer.isBuffer(body) ? body.toString('utf8') : body };
  };
  router.post('/charges', charge);
  router.patch('/charges', charge);
  router.post('/status/:code', (ctx) => {
    state.executions++;
    const code = Number(ctx.params.code);
    ctx.status = code;
    ctx.body = { error: `status ${code}`, n: state.executions };
  });
  router.post('/throw', () => {
    state.executions++;
    throw new Error('boom');
  });
  router.post('/binary', (ctx) => {
    state.executions++;
    ctx.type = 'application/octet-stream';
    ctx.body = Buffer.from(binaryPattern(Number(ctx.query.size ?? 0)));
  });
  router.post('/empty', (ctx) => {
    state.executions++;
    ctx.status = 204;
  });
  router.post('/text', (ctx) => {
    state.executions++;
    const body = bodyOf(ctx);
    ctx.type = 'text/plain; charset=utf-8';
    ctx.body = `echo:${Buffer.isBuffer(body) ? body.toString() : String(body ?? '')}`;
  });
  router.post('/discard', (ctx) => {
    idem.context(ctx)?.discard();
    ctx.status = 400;
    ctx.body = { error: 'invalid' };
  });
  router.post('/tx', (ctx) => {
    state.executions++;
    const tx = sqliteContext(idem.context(ctx));
    tx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(tx.key);
    if (ctx.query.fail === 'throw') throw new Error('boom');
    if (ctx.query.fail === 'throw-value') throw THROWN_VALUES.string;
    ctx.status = ctx.query.fail === '500' ? 500 : 201;
    ctx.body = ctx.query.fail === '500' ? { error: 'failed' } : { ok: true };
  });
  router.post('/tx-slow', async (ctx) => {
    state.executions++;
    const tx = sqliteContext(idem.context(ctx));
    await delayMs(ctx.get('x-delay-ms'));
    tx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(tx.key);
    ctx.status = 201;
    ctx.body = { ok: true };
  });
  router.post('/orders/:id/cancel', (ctx) => {
    state.executions++;
    ctx.status = 201;
    ctx.body = { order: ctx.params.id, status: 'cancelled', n: state.executions };
  });
  router.post('/throw-value/:kind', (ctx) => {
    state.executions++;
    throw THROWN_VALUES[ctx.params.kind!];
  });
  router.post('/partial', (ctx) => {
    state.executions++;
    ctx.type = 'text/plain';
    ctx.body = Readable.from(
      (async function* () {
        yield Buffer.from(PARTIAL_CHUNK);
        throw new Error('boom');
      })(),
    );
  });
  extra?.(app, router);
  app.use(router.routes());
  const handle = app.callback();
  return { idem, ...(await listenServer(createServer((req, res) => void handle(req, res)))), quirks: { unparsableJsonStatus: 400 } };
}

export const createKoaApp: AppFactory = async (options, state) => {
  const { url, close, quirks } = await createKoaAppWith(options, state);
  return { url, close, quirks };
};
