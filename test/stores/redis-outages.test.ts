/**
 * Redis outages through the real web adapter (issue 3 §8): the middleware answers 503
 * problem+json within `storeTimeoutMs`, never runs the handler unprotected, never hangs, and
 * recovers by itself. Every fault is made on a throwaway redis-server, never on the shared one.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { redisStore } from '../../src/stores/redis.js';
import type { RedisServer } from '../support/redis-servers.js';
import { connectStoreClient, requireRedisBinaries, sleep, startRedisServer } from '../support/redis-servers.js';
import type { TcpProxy } from '../support/tcp-proxy.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

const binaries = requireRedisBinaries();
const STORE_TIMEOUT = 300;
const LEASE = 1_000;
/** A request answers within the store timeout plus this much (scheduling on a loaded 2-core box). */
const SLACK = 400;

interface Sent {
  readonly status: number;
  readonly ms: number;
  readonly replayed: boolean;
  readonly body: { type?: string };
  readonly contentType: string | null;
}

/** A protected route that counts how often its handler runs, per key. */
function app(store: IdempotencyStore) {
  const runs = new Map<string, number>();
  const handle = withIdempotency(
    async (request) => {
      const key = request.headers.get('idempotency-key')!;
      runs.set(key, (runs.get(key) ?? 0) + 1);
      return Response.json({ charged: key }, { status: 201 });
    },
    { store, storeTimeoutMs: STORE_TIMEOUT, leaseMs: LEASE },
  );
  async function send(key: string): Promise<Sent> {
    const started = Date.now();
    const request = new Request('http://local/charges', {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{"amount":100}',
    });
    const response = await handle(request);
    return {
      status: response.status,
      ms: Date.now() - started,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      body: (await response.json()) as { type?: string },
      contentType: response.headers.get('content-type'),
    };
  }
  /** Retries `key` until it succeeds; returns every status seen. Each answer must come in time. */
  async function retryUntilCreated(key: string, withinMs: number): Promise<number[]> {
    const statuses: number[] = [];
    const deadline = Date.now() + withinMs;
    for (;;) {
      const sent = await send(key);
      expect(sent.ms).toBeLessThan(STORE_TIMEOUT + SLACK);
      statuses.push(sent.status);
      if (sent.status === 201 || Date.now() > deadline) return statuses;
      await sleep(100);
    }
  }
  return { send, runs, retryUntilCreated };
}

function expectStoreUnavailable(sent: Sent): void {
  expect(sent.status).toBe(503);
  expect(sent.contentType).toMatch(/^application\/problem\+json/);
  expect(sent.body.type).toBe('https://idemkit.dev/problems/store-unavailable');
  expect(sent.ms).toBeLessThan(STORE_TIMEOUT + SLACK);
}

describe.skipIf(!binaries)('redis store outages, through withIdempotency', () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-redis-outage-'));
  // Durable like a payments deployment should be, so a restart keeps what was acknowledged.
  const durable = ['--appendonly', 'yes', '--appendfsync', 'always'];
  let server: RedisServer;
  let proxy: TcpProxy | undefined;
  const clients: Redis[] = [];
  const connect = async (port: number) => {
    const client = await connectStoreClient(port);
    clients.push(client);
    return client;
  };
  beforeAll(async () => {
    server = await startRedisServer({ dir, args: durable });
  });
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await proxy?.close();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('CLIENT PAUSE: 503 within storeTimeoutMs, handler not run, and it recovers when the pause ends', async () => {
    const { send, runs, retryUntilCreated } = app(redisStore({ client: await connect(server.port) }));
    expect((await send('warm-up')).status).toBe(201);
    const admin = await connect(server.port);
    const pausedAt = Date.now();
    expect(await admin.call('CLIENT', 'PAUSE', '2000', 'ALL')).toBe('OK');
    expectStoreUnavailable(await send('during-pause'));
    expectStoreUnavailable(await send('during-pause'));
    expect(runs.get('during-pause')).toBeUndefined();

    await sleep(pausedAt + 2_000 + 100 - Date.now());
    expect((await send('after-pause')).status).toBe(201);
    // The claims sent during the pause ran when it ended; their requests had already answered
    // 503, so nobody owns them and the key waits out one lease (409) before it can run.
    const statuses = await retryUntilCreated('during-pause', LEASE + 3_000);
    expect(statuses.at(-1)).toBe(201);
    expect(statuses.slice(0, -1).every((s) => s === 409)).toBe(true);
    expect(runs.get('during-pause')).toBe(1);
    expect(runs.get('after-pause')).toBe(1);
  });

  it('connection cut: 503 or success on retry, the handler runs once per key, and it recovers by itself', async () => {
    proxy = await startTcpProxy(server.port);
    const { send, runs, retryUntilCreated } = app(redisStore({ client: await connect(proxy.port) }));
    expect((await send('before-cut')).status).toBe(201);
    proxy.cut();
    const statuses = await retryUntilCreated('after-cut', 5_000);
    expect(statuses.at(-1)).toBe(201);
    expect(statuses.every((s) => s === 503 || s === 201)).toBe(true);
    const replay = await send('before-cut');
    expect(replay).toMatchObject({ status: 201, replayed: true });

    // Cut while requests are on their way to Redis, at a few different moments.
    for (const delayMs of [0, 1, 2, 3, 5, 10]) {
      const key = `mid-cut-${delayMs}`;
      const pending = send(key);
      await sleep(delayMs);
      proxy.cut();
      const first = await pending;
      expect([201, 503]).toContain(first.status);
      expect(first.ms).toBeLessThan(STORE_TIMEOUT + SLACK);
      const after = await retryUntilCreated(key, LEASE + 5_000);
      expect(after.at(-1)).toBe(201);
      expect(runs.get(key)).toBe(1);
    }
    expect(runs.get('after-cut')).toBe(1);
    expect(runs.get('before-cut')).toBe(1);
  });

  it('server killed: 503 at once, never hangs; restarted on the same port, it recovers by itself', async () => {
    const { send, runs, retryUntilCreated } = app(redisStore({ client: await connect(server.port) }));
    expect((await send('before-kill')).status).toBe(201);
    const { port } = server;
    await server.stop('SIGKILL');
    for (let i = 0; i < 5; i++) {
      expectStoreUnavailable(await send('while-down'));
      await sleep(100);
    }
    expect(runs.get('while-down')).toBeUndefined();

    server = await startRedisServer({ port, dir, args: durable });
    const statuses = await retryUntilCreated('while-down', 10_000);
    expect(statuses.at(-1)).toBe(201);
    expect(runs.get('while-down')).toBe(1);
    // appendfsync always: the completed record survived the SIGKILL, so the retry replays.
    expect(await send('before-kill')).toMatchObject({ status: 201, replayed: true });
    expect(runs.get('before-kill')).toBe(1);
  });
});
