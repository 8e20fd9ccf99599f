// A correct target for the check: our own Fastify plugin on the memory store.
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import type { FastifyReply } from 'fastify';
import { idempotency } from '../../src/http/fastify.js';
import { memoryStore } from '../../src/stores/memory/index.js';

export interface Running {
  readonly url: string;
  close(): Promise<void>;
}

const bearer = (value: string | undefined) => /^Bearer (\S+)$/.exec(value ?? '')?.[1];

/**
 * POST and PATCH /charges: 201 with a fresh id, a Set-Cookie, and (body `{"fail":true}`) a 402
 * from the handler; `delayMs` keeps each request in flight that long. `overtakeMs` holds the
 * first request of each key that long before it reaches the middleware, so a retry sent
 * meanwhile claims the key first (what a loaded server does to requests on two connections).
 */
export async function startCorrect(options: { delayMs?: number; leaseMs?: number; overtakeMs?: number } = {}): Promise<Running> {
  const app = Fastify();
  const seenKeys = new Set<string>();
  app.addHook('onRequest', async (request, reply) => {
    if (!bearer(request.headers.authorization)) return reply.code(401).send({ error: 'unauthorized' });
    const key = request.headers['idempotency-key'];
    if (options.overtakeMs && typeof key === 'string' && !seenKeys.has(key)) {
      seenKeys.add(key);
      await new Promise((resolve) => setTimeout(resolve, options.overtakeMs));
    }
  });
  await app.register(idempotency, {
    store: memoryStore(),
    scope: (request) => bearer(request.headers.authorization) ?? '',
    ...(options.leaseMs ? { leaseMs: options.leaseMs } : {}),
  });
  const charge = async (request: { body: unknown }, reply: FastifyReply) => {
    if (options.delayMs) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
    const fields = (request.body ?? {}) as Record<string, unknown>;
    reply.header('set-cookie', 'session=secret; HttpOnly');
    if (fields.fail === true) return reply.code(402).send({ error: 'card declined', id: randomUUID() });
    return reply.code(201).send({ id: randomUUID(), ...fields });
  };
  app.post('/charges', charge);
  app.patch('/charges', charge);
  app.get('/charges', async () => ({ id: randomUUID() }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/charges`, close: () => app.close() };
}
