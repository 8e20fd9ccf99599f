// npm run example:koa — Koa with the idemkit middleware.
import { randomUUID } from 'node:crypto';
import Router from '@koa/router';
import Koa from 'koa';
import { idempotency, type KoaRequestBody } from 'idemkit/koa';
import { delay, leaseMs, port, storeFromUrl, tenantOf } from './store.js';

// Koa parses no bodies: the middleware reads a keyed request's body and puts it where a body parser
// would, `ctx.request.body` (parsed) and `ctx.request.rawBody` (the bytes). This declares them.
declare module 'koa' {
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- merged into Koa's own Request.
  interface Request extends KoaRequestBody {}
}

const app = new Koa();
// First: what goes wrong before a key is claimed (a JSON body that does not parse: 400) is answered
// as JSON, never with a stack trace. (An error thrown below the idempotency middleware is answered
// by it, as Koa answers errors, and stored: mount an error handler below it to store another answer.)
app.use(async (ctx, next) => {
  try {
    await next();
  } catch (error) {
    const { status, expose, message } = error as { status?: number; expose?: boolean; message?: string };
    ctx.status = typeof status === 'number' && status >= 400 && status <= 599 ? status : 500;
    ctx.body = { error: expose === true ? message : 'internal error' };
    ctx.app.emit('error', error, ctx);
  }
});
app.use(async (ctx, next) => {
  const tenant = tenantOf(ctx.get('authorization'));
  if (!tenant) {
    ctx.status = 401;
    ctx.body = { error: 'unauthorized' };
    return;
  }
  ctx.state.tenant = tenant;
  await next();
});

const protect = idempotency({ store: await storeFromUrl(), scope: (ctx) => ctx.state.tenant as string, leaseMs });
const router = new Router();
router.post('/charges', protect, async (ctx) => {
  const fields = ctx.request.body;
  if (typeof fields !== 'object' || fields === null) {
    protect.context(ctx)?.discard(); // nothing happened: the key may be reused with a corrected body
    ctx.status = 400;
    ctx.body = { error: 'the body must be a JSON object' };
    return;
  }
  await delay();
  ctx.status = 201;
  ctx.body = { id: randomUUID(), ...fields };
});
app.use(router.routes());

const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  console.log(`listening on http://127.0.0.1:${typeof address === 'object' && address ? address.port : port}`);
});
process.on('SIGTERM', () => server.close());
