import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import type { Context } from 'hono';
import { idempotency } from '../../src/http/hono.js';
import { createHonoApp } from './apps/hono-app.js';
import { listenFetch } from './apps/listen.js';
import { describeMatrix } from './matrix.js';
import { describePerRoute } from './per-route.js';

describeMatrix('hono', createHonoApp);

describePerRoute('hono', {
  middleware: (options) => idempotency(options),
  serve: async (store, state) => {
    const app = new Hono();
    const idem = idempotency({ store, scope: (c) => c.req.header('authorization') ?? '' });
    const ok = async (c: Context) => {
      await state.run();
      return c.json({ run: randomUUID() }, 201);
    };
    app.post('/strict', idem, ok);
    app.post('/conflict', idem, ok);
    app.post('/optional', idem.route({ required: false }), ok);
    app.post('/shared', idem.route({ scope: () => 'one-scope-for-all' }), ok);
    app.post('/wait', idem.route({ inFlight: 'wait', waitTimeoutMs: 60_000 }), ok);
    app.post('/twice', idem, idem.route({ leaseMs: 5_000 }), ok);
    app.onError((error, c) => {
      state.errors.push(error);
      return c.text('failed', 500);
    });
    return listenFetch(app.fetch);
  },
});
