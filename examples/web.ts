// npm run example:web — a fetch-style handler (Next.js route handlers, Bun, Deno) behind idemkit.
import { randomUUID } from 'node:crypto';
import { serve } from '@hono/node-server';
import { withIdempotency } from 'idemkit/web';
import { delay, leaseMs, port, storeFromUrl, tenantOf } from './store.js';

const charges = withIdempotency(
  async (request, ctx) => {
    // The middleware passes methods it does not cover (GET, HEAD, …) through, so the handler
    // answers them as a route table would: this route takes POST only.
    if (request.method !== 'POST') return new Response(null, { status: 405, headers: { allow: 'POST' } });
    const fields = await request.json().catch(() => undefined);
    if (typeof fields !== 'object' || fields === null) {
      ctx?.discard(); // nothing happened: the key may be reused with a corrected body
      return Response.json({ error: 'the body must be a JSON object' }, { status: 400 });
    }
    await delay();
    return Response.json({ id: randomUUID(), ...fields }, { status: 201 });
  },
  { store: await storeFromUrl(), scope: (request) => tenantOf(request.headers.get('authorization')) ?? '', leaseMs },
);

const server = serve({ port, hostname: '127.0.0.1', fetch: (request) => {
  if (!tenantOf(request.headers.get('authorization'))) return Response.json({ error: 'unauthorized' }, { status: 401 });
  if (new URL(request.url).pathname !== '/charges') return new Response('not found', { status: 404 });
  return charges(request);
} }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
process.on('SIGTERM', () => server.close());
