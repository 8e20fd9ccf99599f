/**
 * `express-idempotency` (VilledeMontreal) with `express-idempotency-redis-adapter`, as its README
 * wires it: the middleware before the route, and `getSharedIdempotencyService().isHit(req)` at the
 * top of the handler (the middleware calls `next()` even after it sent a replay). Express only.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { getSharedIdempotencyService, idempotency } from 'express-idempotency';
import * as redisAdapterModule from 'express-idempotency-redis-adapter';
import { ROUTE } from '../shared.js';
import { listenExpress, quietErrors } from './common.js';
import type { PeerContext, PeerServer } from './types.js';
import { NotApplicable } from './types.js';

interface Adapter {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
}
type AdapterClass = new (options: { connectionConfig: { url: string } }) => Adapter;

// A CommonJS module whose `exports.default` is the class: ESM sees it one level down.
const RedisAdapter = ((redisAdapterModule as unknown as { default: { default?: AdapterClass } & AdapterClass }).default.default ??
  (redisAdapterModule as unknown as { default: AdapterClass }).default) as AdapterClass;

export async function start(ctx: PeerContext): Promise<PeerServer> {
  if (ctx.framework !== 'express') throw new NotApplicable('Express middleware only');
  if (ctx.store !== 'redis') throw new NotApplicable('measured with its Redis adapter only (its default in-memory adapter scans an array per request)');
  const adapter = new RedisAdapter({ connectionConfig: { url: ctx.redisUrl } });
  await adapter.connect();

  const app = express();
  const middleware = idempotency({ dataAdapter: adapter as never });
  const service = getSharedIdempotencyService();
  const handler: express.RequestHandler =
    ctx.delayMs > 0
      ? async (req, res) => {
          if (service.isHit(req)) return;
          await sleep(ctx.delayMs);
          res.status(201).json(ctx.execute(req.get('idempotency-key')));
        }
      : (req, res) => {
          if (service.isHit(req)) return;
          res.status(201).json(ctx.execute(req.get('idempotency-key')));
        };
  // Body first: the middleware stores and compares `req.body` (its intent validator).
  app.post(ROUTE, express.json(), middleware, handler);
  app.use(quietErrors);
  const port = await listenExpress(app);
  return { port, close: () => adapter.disconnect() };
}
