// npm run example:express — Express with the idemkit middleware.
import { randomUUID } from 'node:crypto';
import express from 'express';
import { idempotency, problemErrorHandler } from 'idemkit/express';
import { delay, leaseMs, port, storeFromUrl, tenantOf } from './store.js';

const app = express();
app.use((req, res, next) => {
  const tenant = tenantOf(req.get('authorization'));
  if (!tenant) return void res.status(401).json({ error: 'unauthorized' });
  res.locals.tenant = tenant;
  next();
});

app.post(
  '/charges',
  idempotency({ store: await storeFromUrl(), scope: (req) => req.res!.locals.tenant as string, leaseMs }),
  express.json({ strict: false }),
  async (req, res) => {
    if (typeof req.body !== 'object' || req.body === null) {
      req.idempotency?.discard(); // nothing happened: the key may be reused with a corrected body
      return void res.status(400).json({ error: 'the body must be a JSON object' });
    }
    await delay();
    res.status(201).json({ id: randomUUID(), ...req.body });
  },
);
// Last: a malformed JSON body (400), a body over the parser's limit (413) or a thrown error (500,
// logged) answer problem+json, never Express's HTML page with a stack trace.
app.use(problemErrorHandler());

const server = app.listen(port, '127.0.0.1', () => {
  const address = server.address();
  console.log(`listening on http://127.0.0.1:${typeof address === 'object' && address ? address.port : port}`);
});
process.on('SIGTERM', () => server.close());
