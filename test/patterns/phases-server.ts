/**
 * The server process of the recovery proof: Fastify, the idempotency plugin (not transactional:
 * phases commit one by one), and `POST /orders` running the checkout phases. Environment:
 * STORE_URL, NAME, FOREIGN_URL, LEASE_MS, CRASH (a crash point of phases-app.ts).
 */
import Fastify from 'fastify';
import { idempotency } from '../../src/http/fastify.js';
import type { CheckoutInput, CrashPoint } from './phases-app.js';
import { SCOPE, checkoutPhases, openCheckoutBackend } from './phases-app.js';

const env = process.env;
const backend = await openCheckoutBackend(env.STORE_URL!, env.NAME!);
const crash = (env.CRASH || undefined) as CrashPoint | undefined;
const checkout = checkoutPhases({ name: env.NAME!, foreignUrl: env.FOREIGN_URL!, dialect: backend.db.dialect, crash });

const app = Fastify();
await app.register(idempotency, { store: backend.store, leaseMs: Number(env.LEASE_MS ?? 30_000), scope: () => SCOPE });
app.post('/orders', async (request, reply) => {
  const result = await checkout.run(request.idempotency!, request.body as CheckoutInput);
  if (crash === 'after-phases') process.kill(process.pid, 'SIGKILL');
  return reply.code(201).send(result);
});
await app.listen({ port: 0, host: '127.0.0.1' });
console.log(`listening ${(app.server.address() as { port: number }).port}`);
