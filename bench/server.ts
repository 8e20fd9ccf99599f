/**
 * The benchmarked server, run as a child process by run.ts: `POST /charges` → 201 `{ id, ok: true }`,
 * bare or behind the idemkit middleware on the memory or SQLite store.
 *
 *   node --conditions=idemkit-source --import tsx bench/server.ts --framework=fastify --store=memory
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import express from 'express';
import Fastify from 'fastify';
import type { IdempotencyStore } from 'idemkit';
import { idempotency as expressIdempotency } from 'idemkit/express';
import { idempotency as fastifyIdempotency } from 'idemkit/fastify';
import { openBenchStore } from './stores.js';
import type { ChildMessage, Framework, ServerConfig, StoreKind } from './shared.js';
import { ROUTE } from './shared.js';

const { values } = parseArgs({
  options: {
    framework: { type: 'string', default: 'fastify' },
    store: { type: 'string', default: 'none' },
    delay: { type: 'string', default: '0' },
    required: { type: 'string', default: 'true' },
  },
});
const config: ServerConfig = {
  framework: values.framework as Framework,
  store: values.store as StoreKind,
  delayMs: Number(values.delay),
  required: values.required !== 'false',
};

let handled = 0;
const cleanups: Array<() => Promise<void> | void> = [];

async function openStore(kind: StoreKind): Promise<IdempotencyStore | undefined> {
  if (kind === 'none') return undefined;
  const opened = await openBenchStore(kind);
  cleanups.push(() => opened.close());
  return opened.store;
}

function body() {
  handled++;
  return { id: randomUUID(), ok: true };
}

async function startFastify(store: IdempotencyStore | undefined): Promise<number> {
  const app = Fastify({ logger: false });
  if (store) await app.register(fastifyIdempotency, { store, required: config.required });
  if (config.delayMs > 0) {
    app.post(ROUTE, async (_request, reply) => {
      await sleep(config.delayMs);
      return reply.code(201).send(body());
    });
  } else {
    app.post(ROUTE, async (_request, reply) => reply.code(201).send(body()));
  }
  await app.listen({ port: 0, host: '127.0.0.1' });
  return (app.server.address() as AddressInfo).port;
}

async function startExpress(store: IdempotencyStore | undefined): Promise<number> {
  const app = express();
  const handler: express.RequestHandler =
    config.delayMs > 0
      ? async (_req, res) => {
          await sleep(config.delayMs);
          res.status(201).json(body());
        }
      : (_req, res) => {
          res.status(201).json(body());
        };
  if (store) app.post(ROUTE, expressIdempotency({ store, required: config.required }), express.json(), handler);
  else app.post(ROUTE, express.json(), handler);
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

function send(message: ChildMessage): void {
  process.send?.(message);
}

async function shutdown(): Promise<never> {
  for (const cleanup of cleanups) {
    try {
      await cleanup();
    } catch {
      // best effort: the process is going away
    }
  }
  process.exit(0);
}

process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());
process.on('disconnect', shutdown);
process.on('message', (message: { type?: string }) => {
  if (message.type !== 'stats') return;
  const cpu = process.cpuUsage();
  send({ type: 'stats', userMicros: cpu.user, systemMicros: cpu.system, handled, rssBytes: process.memoryUsage.rss() });
});

const store = await openStore(config.store);
const port = config.framework === 'fastify' ? await startFastify(store) : await startExpress(store);
send({ type: 'listening', port });
if (!process.send) console.log(`listening on http://127.0.0.1:${port}${ROUTE} (${JSON.stringify(config)})`);
