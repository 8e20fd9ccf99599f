// npm run example:hono — Hono with the idemkit middleware.
import { randomUUID } from 'node:crypto';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idemkit/hono';
import { delay, leaseMs, port, storeFromUrl, tenantOf } from './store.js';

const app = new Hono<{ Variables: IdempotencyVariables & { tenant: string } }>();
app.use('*', async (c, next) => {
  const tenant = tenantOf(c.req.header('authorization'));
  if (!tenant) return c.json({ error: 'unauthorized' }, 401);
  c.set('tenant', tenant);
  await next();
});
app.use('/charges', idempotency({ store: await storeFromUrl(), scope: (c) => c.get('tenant') as string, leaseMs }));

app.post('/charges', async (c) => {
  const fields = await c.req.json().catch(() => undefined);
  if (typeof fields !== 'object' || fields === null) {
    c.get('idempotency')?.discard(); // nothing happened: the key may be reused with a corrected body
    return c.json({ error: 'the body must be a JSON object' }, 400);
  }
  await delay();
  return c.json({ id: randomUUID(), ...fields }, 201);
});

const server = serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, (info) => console.log(`listening on http://127.0.0.1:${info.port}`));
process.on('SIGTERM', () => server.close());
