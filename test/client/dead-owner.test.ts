/**
 * End to end, issue 28 item 2: an instance dies mid-charge (its connection drops, its lease is no
 * longer renewed, nothing was charged), and the key answers 409 until its lease runs out. A client
 * with default options, against a real idemkit server (the Express adapter, the default 30 s
 * lease, a memory store whose clock the test moves), must end with the answer of the one real
 * execution, never report the charge as failed: the server's 409 says the owner is unresponsive and
 * when its lease ends, the client waits that out, and its retry takes the key over.
 */
import type { Server } from 'node:http';
import { createServer } from 'node:http';
import express from 'express';
import { afterEach, expect, it } from 'vitest';
import { createIdempotentFetch } from '../../src/client/index.js';
import type { RetryContext } from '../../src/client/index.js';
import { idempotency } from '../../src/http/express.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import type { TestApp } from '../http/harness.js';
import { listenServer } from '../http/apps/listen.js';

let app: TestApp | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

/** The default lease (DESIGN.md §2): what a client with its defaults must outlast. */
const LEASE_MS = 30_000;

it('the owner dies mid-charge: a default client waits out its lease, takes the key over, and gets the one charge', async () => {
  // The store's clock, moved by the test: the dead owner's lease runs out without the test waiting 30 s.
  let skew = 0;
  const store = memoryStore({ sweepIntervalMs: 0, clock: () => Date.now() + skew });
  // The dead owner's renewals never reach the store (its process is gone); everyone else's do.
  let dead: string | undefined;
  const stopped = new Proxy(store, {
    get(target, name, receiver) {
      if (name === 'claim') {
        return async (...args: Parameters<typeof store.claim>) => {
          const claim = await target.claim(...args);
          if (claim.kind === 'acquired') dead ??= claim.token;
          return claim;
        };
      }
      if (name === 'renew') return (...args: Parameters<typeof store.renew>) => (args[1] === dead ? Promise.resolve(true) : target.renew(...args));
      return Reflect.get(target, name, receiver) as unknown;
    },
  });

  let executions = 0;
  let charges = 0;
  const server = express();
  server.use(idempotency({ store: stopped, leaseMs: LEASE_MS }));
  server.post('/charges', (req, res) => {
    executions++;
    if (executions === 1) {
      // SIGKILL mid-charge, before anything was charged: no answer, no renewal, no completion.
      // 29 s of the lease pass without a renewal before the client's retry arrives.
      skew += LEASE_MS - 1_000;
      req.socket.destroy();
      return;
    }
    charges++;
    res.status(201).json({ charge: charges });
  });
  app = await listenServer(createServer(server) as Server);

  const contexts: RetryContext[] = [];
  const response = await createIdempotentFetch({ onRetry: (c) => void contexts.push(c) })(`${app.url}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"amount":1200}',
  });

  // Without the server half of issue 28 item 2, the 409 carries no `owner` and the client only polls.
  const owners = contexts.map((c) => c.owner);
  expect(owners, "no 409 said owner: 'unresponsive': the server's request-in-progress problem lacks `owner`/`leaseEndsInMs` (issue 28 item 2, server side)").toContain('unresponsive');
  // The last pause was the one wait for the lease's end; the retry after it took the key over.
  expect(contexts.at(-1)).toMatchObject({ status: 409, owner: 'unresponsive' });
  expect(response.status).toBe(201);
  expect(response.idempotency).toMatchObject({ replayed: false });
  expect(await response.json()).toEqual({ charge: 1 });
  expect([executions, charges]).toEqual([2, 1]);
}, 30_000);
