/**
 * The benchmarked server, run as a child process by run.ts: `POST /charges` → 201 `{ id, ok: true }`,
 * bare, behind the idemkit middleware (memory, SQLite, PostgreSQL or Redis store), or behind one of
 * the npm peers (bench/peers/*.ts), on Fastify, Express, Koa (server-koa.ts) or Nest on Express
 * (server-nest.ts). One process per configuration; the load generator is the parent.
 *
 *   node --conditions=idemkit-source --import tsx bench/server.ts --impl=idemkit --framework=fastify --store=memory
 *
 * `--impl=floor --store=redis` (Fastify, Express): the same route and handler with no idempotency
 * layer, but the Redis round trips any race-correct one makes, through ioredis (startFloor), for
 * `npm run bench:instructions` to count.
 *
 * Besides the route, a control server on another port answers `GET /__executions?key=…` with how
 * many times the handler ran for that key (keys starting with `ct-` or `race-` are counted one by
 * one): the race check's double-execution count does not trust the implementation's answers.
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
import { Redis } from 'ioredis';
import { notApplicable } from './peers/applicability.js';
import type { Body, PeerContext, PeerServer } from './peers/types.js';
import { NotApplicable } from './peers/types.js';
import { REDIS_URL, openBenchStore } from './stores.js';
import type { AppSpec, ChildMessage, Framework, ServerConfig, ServerImpl, StoreKind } from './shared.js';
import { CONTENT_TYPE, ROUTE, TRACKED_KEY_PREFIXES } from './shared.js';

const { values } = parseArgs({
  options: {
    impl: { type: 'string', default: 'idemkit' },
    framework: { type: 'string', default: 'fastify' },
    store: { type: 'string', default: 'none' },
    delay: { type: 'string', default: '0' },
    required: { type: 'string', default: 'true' },
    nonce: { type: 'string', default: 'manual' },
    variant: { type: 'string', default: '' },
  },
});
const config: ServerConfig = {
  impl: values.impl as ServerImpl,
  framework: values.framework as Framework,
  store: values.store as StoreKind,
  delayMs: Number(values.delay),
  required: values.required !== 'false',
  nonce: values.nonce!,
};

let handled = 0;
let duplicates = 0;
const executions = new Map<string, number>();
const cleanups: Array<() => Promise<void> | void> = [];

function tracked(key: string): boolean {
  for (const prefix of TRACKED_KEY_PREFIXES) if (key.startsWith(prefix)) return true;
  return false;
}

/** The one handler body every implementation runs. */
function execute(key: string | undefined): Body {
  handled++;
  if (key !== undefined && tracked(key)) {
    const n = (executions.get(key) ?? 0) + 1;
    executions.set(key, n);
    if (n > 1) duplicates++;
  }
  return { id: randomUUID(), ok: true };
}

async function openStore(kind: StoreKind): Promise<IdempotencyStore | undefined> {
  if (kind === 'none') return undefined;
  const opened = await openBenchStore(kind);
  cleanups.push(() => opened.close());
  return kind === 'memory' || kind === 'sqlite' ? timeable(opened.store) : opened.store;
}

let storeMicros = 0;
let timeStore: (on: boolean) => void = () => {};

/**
 * The store, with `claim` and `complete` timed while `timeStore(true)`: an in-process store does
 * its work inside the call (the promise it returns is already settled), so the time inside is its
 * own work, as the server does it under load. While off, the methods are the store's own
 * functions, so the timed runs carry no instrument. (Both in-process stores close over their
 * state and never use `this`.)
 */
function timeable(store: IdempotencyStore): IdempotencyStore {
  const wrapped = Object.create(store) as { -readonly [K in keyof IdempotencyStore]: IdempotencyStore[K] };
  const timed = <A extends unknown[], R>(call: (...args: A) => R) =>
    (...args: A): R => {
      const started = performance.now();
      try {
        return call(...args);
      } finally {
        storeMicros += (performance.now() - started) * 1e3;
      }
    };
  const { claim, complete } = store;
  const timedClaim = timed(claim);
  const timedComplete = timed(complete);
  timeStore = (on) => {
    wrapped.claim = on ? timedClaim : claim;
    wrapped.complete = on ? timedComplete : complete;
  };
  timeStore(false);
  return wrapped;
}

/**
 * BENCH_STORE_TIMEOUT_MS: the middleware's `storeTimeoutMs`, for a server slowed down on purpose
 * (bench/instructions-server.ts runs it under callgrind, ~50× slower, where the default 3 s ran
 * out on a loaded machine and a PostgreSQL claim answered 503). The timer is set either way: the
 * value does not change what a request costs.
 */
const storeTimeoutMs = process.env.BENCH_STORE_TIMEOUT_MS === undefined ? {} : { storeTimeoutMs: Number(process.env.BENCH_STORE_TIMEOUT_MS) };

async function startFastify(store: IdempotencyStore | undefined): Promise<number> {
  const app = Fastify({ logger: false });
  if (store) await app.register(fastifyIdempotency, { store, required: config.required, ...storeTimeoutMs });
  const key = (headers: Record<string, unknown>) => headers['idempotency-key'] as string | undefined;
  if (config.delayMs > 0) {
    app.post(ROUTE, async (request, reply) => {
      await sleep(config.delayMs);
      return reply.code(201).send(execute(key(request.headers)));
    });
  } else {
    app.post(ROUTE, async (request, reply) => reply.code(201).send(execute(key(request.headers))));
  }
  await app.listen({ port: 0, host: '127.0.0.1' });
  return (app.server.address() as AddressInfo).port;
}

async function startExpress(store: IdempotencyStore | undefined): Promise<number> {
  const app = express();
  const handler: express.RequestHandler =
    config.delayMs > 0
      ? async (req, res) => {
          await sleep(config.delayMs);
          res.status(201).json(execute(req.get('idempotency-key')));
        }
      : (req, res) => {
          res.status(201).json(execute(req.get('idempotency-key')));
        };
  if (store) app.post(ROUTE, expressIdempotency({ store, required: config.required, ...storeTimeoutMs }), express.json(), handler);
  else app.post(ROUTE, express.json(), handler);
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function startPeer(): Promise<number> {
  // The peers' glue is written for Fastify and Express (bench/peers/applicability.ts says where each applies).
  const impl = config.impl;
  if (impl === 'floor') throw new Error('the floor is no peer');
  const reason = notApplicable(impl, config.framework, config.store);
  if (reason !== undefined) throw new NotApplicable(reason);
  const ctx: PeerContext = { ...config, redisUrl: REDIS_URL, execute };
  let server: PeerServer;
  switch (impl) {
    case 'node-idempotency':
      server = await (await import('./peers/node-idempotency.js')).start(ctx);
      break;
    case 'express-idempotency':
      server = await (await import('./peers/express-idempotency.js')).start(ctx);
      break;
    case 'powertools':
      server = await (await import('./peers/powertools.js')).start(ctx, {
        withContext: values.variant !== 'no-context',
        validatePayload: values.variant === 'validation',
      });
      break;
    default:
      throw new Error(`unknown implementation ${impl}`);
  }
  cleanups.push(() => server.close());
  if (config.store === 'redis') {
    // Peers keep their records under prefixes or keys that all contain the run's nonce.
    cleanups.push(async () => {
      const redis = new Redis(REDIS_URL);
      try {
        await unlinkMatching(redis, `*${config.nonce}*`);
      } finally {
        redis.disconnect();
      }
    });
  }
  return server.port;
}

async function unlinkMatching(redis: Redis, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    if (keys.length > 0) await redis.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/** The floor's fresh record: as long as idemkit's fresh record of a bench request, about. */
const FLOOR_FRESH = `F${'-'.repeat(249)}`;
/** A completed record is 'C' and the answer's body: the first byte says which. */
const FLOOR_COMPLETED = 0x43;
/** Completes a record still there (its TTL kept), as idemkit's complete script does (with no lease to check). */
const FLOOR_COMPLETE = "if redis.call('GET', KEYS[1]) then redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL') return 1 end return 0";

/**
 * `--impl=floor --store=redis`: the least Redis work any race-correct idempotency layer does per
 * request, through the client idemkit's Redis store is measured on (ioredis, made as
 * bench/stores.ts makes it), with no idempotency logic: before the handler, one `SET key <fresh>
 * PX <24 h> NX GET` (a new key: nil; a replay: the completed record, answered from at once, 201
 * with the stored body, and the handler skipped); after it, one `EVALSHA` that stores 'C' + the
 * body, awaited before the answer goes. No fingerprint, no lease, no headers kept, no in-flight
 * answer (a record found not completed runs the handler: the bench never sends one), no errors
 * mapped: what is left is the round trips and the bytes, as idemkit's store sends them
 * (src/stores/redis/claim.ts, store.ts).
 */
async function startFloor(): Promise<number> {
  if (config.store !== 'redis') throw new NotApplicable('the floor is measured on Redis (ioredis) only');
  if (config.framework !== 'fastify' && config.framework !== 'express') throw new NotApplicable('the floor is written for Fastify and Express');
  const redis = new Redis(REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
  await redis.connect();
  // The run's nonce, and the process's own keys (a replay key is not found completed by the row's previous process).
  const prefix = `floor-${config.nonce}-${process.pid}:`;
  cleanups.push(async () => {
    try {
      await unlinkMatching(redis, `${prefix}*`);
    } finally {
      redis.disconnect();
    }
  });
  const sha = (await redis.script('LOAD', FLOOR_COMPLETE)) as string;
  /** The completed record, or null (the key was free: claimed) or a record not completed. */
  const claim = (key: string) => redis.setBuffer(key, FLOOR_FRESH, 'PX', 86_400_000, 'NX', 'GET');
  const complete = (key: string, body: string) => redis.evalsha(sha, 1, key, `C${body}`);
  const completed = (record: Buffer | null): record is Buffer => record !== null && record[0] === FLOOR_COMPLETED;

  if (config.framework === 'fastify') {
    const app = Fastify({ logger: false });
    app.addHook('preHandler', async (request, reply) => {
      const record = await claim(prefix + (request.headers['idempotency-key'] as string));
      if (completed(record)) return reply.code(201).type(CONTENT_TYPE).send(record.subarray(1));
    });
    app.addHook('onSend', async (request, _reply, payload) => {
      // A replay's payload is the record's Buffer (above); the handler's answer is serialized: a string.
      if (typeof payload !== 'string') return payload;
      await complete(prefix + (request.headers['idempotency-key'] as string), payload);
      return payload;
    });
    app.post(ROUTE, async (request, reply) => reply.code(201).send(execute(request.headers['idempotency-key'] as string | undefined)));
    await app.listen({ port: 0, host: '127.0.0.1' });
    return (app.server.address() as AddressInfo).port;
  }

  const app = express();
  const floor: express.RequestHandler = (req, res, next) => {
    const key = prefix + req.get('idempotency-key')!;
    claim(key).then((record) => {
      if (completed(record)) {
        const body = record.subarray(1);
        return void res.writeHead(201, { 'content-type': CONTENT_TYPE, 'content-length': body.length }).end(body);
      }
      // The handler's answer reaches res.end whole (res.json → res.send): stored, then sent.
      const end = res.end as (chunk: string | Buffer, encoding?: BufferEncoding) => express.Response;
      res.end = ((chunk: string | Buffer, encoding?: BufferEncoding) => {
        complete(key, chunk.toString()).then(
          () => end.call(res, chunk, encoding),
          (error: unknown) => res.destroy(error as Error),
        );
        return res;
      }) as express.Response['end'];
      next();
    }, next);
  };
  app.post(ROUTE, floor, express.json(), (req, res) => {
    res.status(201).json(execute(req.get('idempotency-key')));
  });
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function startControl(): Promise<number> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== '/__executions') return void res.writeHead(404).end();
    const key = url.searchParams.get('key') ?? '';
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ key, executions: executions.get(key) ?? 0 }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

function send(message: ChildMessage): void {
  process.send?.(message);
}

async function shutdown(): Promise<never> {
  // Requests still in flight when the load stops fail against closed clients: not worth a stack trace.
  console.log = console.error = console.warn = () => {};
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
process.on('disconnect', () => void shutdown());
process.on('message', (message: { type?: string; on?: boolean }) => {
  if (message.type === 'time-store') return timeStore(message.on === true);
  if (message.type !== 'stats') return;
  const cpu = process.cpuUsage();
  send({ type: 'stats', userMicros: cpu.user, systemMicros: cpu.system, handled, duplicates, rssBytes: process.memoryUsage.rss(), storeMicros });
});

/** The bare server, or idemkit's on the configured store. Koa and Nest are loaded only when asked for. */
async function startOurs(): Promise<number> {
  const store = await openStore(config.impl === 'bare' ? 'none' : config.store);
  const spec: AppSpec = { store, delayMs: config.delayMs, required: config.required, execute };
  switch (config.framework) {
    case 'fastify':
      return startFastify(store);
    case 'express':
      return startExpress(store);
    case 'koa':
      return (await import('./server-koa.js')).startKoa(spec);
    case 'nest':
      return (await import('./server-nest.js')).startNest(spec);
    default:
      throw new Error(`unknown framework ${String(config.framework)}`);
  }
}

try {
  const port = config.impl === 'bare' || config.impl === 'idemkit' ? await startOurs() : config.impl === 'floor' ? await startFloor() : await startPeer();
  const controlPort = await startControl();
  send({ type: 'listening', port, controlPort });
  if (!process.send) console.log(`listening on http://127.0.0.1:${port}${ROUTE}, control ${controlPort} (${JSON.stringify(config)})`);
} catch (error) {
  if (error instanceof NotApplicable) send({ type: 'not-applicable', reason: error.message });
  else throw error;
  await shutdown();
}
