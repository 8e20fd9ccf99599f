// npm run example:fastify — Fastify with the idemkit plugin.
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { idempotency } from 'idemkit/fastify';
import { delay, leaseMs, port, storeFromUrl, tenantOf } from './store.js';

declare module 'fastify' {
  interface FastifyRequest {
    tenant: string;
  }
}

const app = Fastify();
app.decorateRequest('tenant', '');
app.addHook('onRequest', async (request, reply) => {
  const tenant = tenantOf(request.headers.authorization);
  if (!tenant) return reply.code(401).send({ error: 'unauthorized' });
  request.tenant = tenant;
});
// Accept any body, so that a non-JSON one reaches the handler's own validation.
app.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => done(null, body));

await app.register(idempotency, { store: await storeFromUrl(), scope: (request) => request.tenant, leaseMs });

app.post('/charges', async (request, reply) => {
  const fields = request.body;
  if (typeof fields !== 'object' || fields === null) {
    request.idempotency?.discard(); // nothing happened: the key may be reused with a corrected body
    return reply.code(400).send({ error: 'the body must be a JSON object' });
  }
  await delay();
  return reply.code(201).send({ id: randomUUID(), ...fields });
});

const url = await app.listen({ port, host: '127.0.0.1' });
console.log(`listening on ${url}`);
process.on('SIGTERM', () => void app.close());
