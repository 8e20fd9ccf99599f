/**
 * The protected service of the network-fault suite, run inside the namespace. Environment as
 * test/proof/server.ts (STORE_URL, NAME, TRANSACTIONAL, LEASE_MS, STORE_TIMEOUT_MS, UNIQUE_ORDERS,
 * ORDERS_FILE) plus HOST, the address to listen on. `POST /work` inserts one order; with
 * `x-park: 1` the handler then tells the parent `{ parked: key }` over IPC and waits for
 * `{ release: key }`, so the test can cut the store link between the effect and the completion.
 * IPC runs over a pipe, not the network: the control path stays up whatever the link does.
 */
import Fastify from 'fastify';
import { idempotency } from '../../src/http/fastify.js';
import { openBackend } from '../proof/backends.js';

const env = process.env;
const backend = await openBackend(env.STORE_URL!, env.NAME!, { uniqueOrders: env.UNIQUE_ORDERS === '1', ordersFile: env.ORDERS_FILE });
const releases = new Map<string, () => void>();
process.on('message', (message: { release?: string }) => {
  if (message.release) releases.get(message.release)?.();
});
// The parent is gone (its test run ended): nothing may outlive it.
process.on('disconnect', () => process.exit(0));

const app = Fastify();
await app.register(idempotency, {
  store: backend.store,
  transactional: env.TRANSACTIONAL === '1',
  leaseMs: Number(env.LEASE_MS),
  storeTimeoutMs: Number(env.STORE_TIMEOUT_MS),
  scope: () => 'proof',
});
app.post('/work', async (request, reply) => {
  const ctx = request.idempotency!;
  await backend.insertOrder(ctx.tx, ctx.key);
  if (request.headers['x-park'] === '1') {
    const released = new Promise<void>((resolve) => releases.set(ctx.key, resolve));
    process.send!({ parked: ctx.key });
    await released;
    releases.delete(ctx.key);
  }
  return reply.code(201).send({ key: ctx.key, pid: process.pid });
});
await app.listen({ port: 0, host: env.HOST! });
console.log(`listening ${(app.server.address() as { port: number }).port}`);
