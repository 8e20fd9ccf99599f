/**
 * A server process for the cross-process and crash proofs. Environment:
 * FRAMEWORK=fastify|express, STORE_URL, NAME (table suffix), TRANSACTIONAL=1, LEASE_MS,
 * UNIQUE_ORDERS=1, ORDERS_FILE (the SQLite file of the orders, for Redis), INSTANCE (an instance
 * name for `startInstance`, with INSTANCE_LEASE_MS), PORT (default: any free port; a gateway in
 * front needs a restarted slot on its predecessor's port). `POST /work` inserts one order (inside the transaction in transactional mode).
 * The `x-crash` header kills the process with SIGKILL: `after-insert` right after the business
 * write (before commit or completion), `before-response` after the record is written, when the
 * response is about to leave.
 */
import type { ServerResponse } from 'node:http';
import express from 'express';
import Fastify from 'fastify';
import { idempotency as expressIdempotency } from '../../src/http/express.js';
import { idempotency as fastifyIdempotency } from '../../src/http/fastify.js';
import { startInstance } from '../../src/core/instance.js';
import { openBackend } from './backends.js';

const env = process.env;
const backend = await openBackend(env.STORE_URL!, env.NAME!, { uniqueOrders: env.UNIQUE_ORDERS === '1', ordersFile: env.ORDERS_FILE });
// Registered before the server listens: a restart takes its crashed predecessor's keys back first.
const instance = env.INSTANCE
  ? await startInstance({ store: backend.store, name: env.INSTANCE, leaseMs: Number(env.INSTANCE_LEASE_MS ?? 5_000) }).catch((error: { code?: string }) => {
      console.log(`refused ${String(error.code)}`);
      process.exit(3);
    })
  : undefined;
if (instance) console.log(`instance ${instance.incarnation} reclaimed ${instance.reclaimed}`);
const options = {
  store: backend.store,
  instance,
  transactional: env.TRANSACTIONAL === '1',
  leaseMs: Number(env.LEASE_MS ?? 30_000),
  ...(env.STORE_TIMEOUT_MS ? { storeTimeoutMs: Number(env.STORE_TIMEOUT_MS) } : {}),
  scope: () => 'proof',
};
const die = () => process.kill(process.pid, 'SIGKILL');
const listenPort = Number(env.PORT ?? 0);

/** Makes the response's first byte kill the process: after the commit, before the answer. */
function crashOnSend(res: ServerResponse): void {
  res.writeHead = (() => die()) as never;
}

async function work(key: string, crash: string | undefined, tx: unknown): Promise<{ key: string; pid: number }> {
  await backend.insertOrder(tx, key);
  if (crash === 'after-insert') die();
  return { key, pid: process.pid };
}

let port: number;
if (env.FRAMEWORK === 'express') {
  const app = express();
  app.use((req, res, next) => {
    if (req.get('x-crash') === 'before-response') crashOnSend(res);
    next();
  });
  app.post('/work', expressIdempotency(options), express.json(), async (req, res, next) => {
    try {
      res.status(201).json(await work(req.idempotency!.key, req.get('x-crash'), req.idempotency!.tx));
    } catch (error) {
      next(error);
    }
  });
  const server = app.listen(listenPort, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  port = (server.address() as { port: number }).port;
} else {
  const app = Fastify();
  app.addHook('onRequest', async (request, reply) => {
    if (request.headers['x-crash'] === 'before-response') crashOnSend(reply.raw);
  });
  await app.register(fastifyIdempotency, options);
  app.post('/work', async (request, reply) => {
    const ctx = request.idempotency!;
    return reply.code(201).send(await work(ctx.key, request.headers['x-crash'] as string | undefined, ctx.tx));
  });
  await app.listen({ port: listenPort, host: '127.0.0.1' });
  port = (app.server.address() as { port: number }).port;
}
console.log(`listening ${port}`);
