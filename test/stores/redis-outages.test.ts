/**
 * Redis outages through the real web adapter (issue 3 §8): the middleware answers 503
 * problem+json within `storeTimeoutMs`, never runs the handler unprotected, never hangs, and
 * recovers by itself. Every fault is made on a throwaway redis-server, never on the shared one.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { withIdempotency } from '../../src/http/web.js';
import { redisStore } from '../../src/stores/redis/index.js';
import type { ConnectedStoreClient, RedisServer } from '../support/redis-servers.js';
import { STORE_CLIENT_LIBRARIES, connectStoreClient, connectStoreClientOf, requireRedisBinaries, sleep, startRedisServer } from '../support/redis-servers.js';
import type { TcpProxy } from '../support/tcp-proxy.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { until } from '../support/until.js';

const binaries = requireRedisBinaries();
const STORE_TIMEOUT = 300;
const LEASE = 1_000;
/** The message of the engine's own deadline: a 503 that waited out `storeTimeoutMs`. */
const TIMED_OUT = /did not answer within \d+ ms \(option `storeTimeoutMs`\)/;

interface Sent {
  readonly status: number;
  readonly replayed: boolean;
  readonly body: { type?: string };
  readonly contentType: string | null;
  /** What `onError` was told while this request was answered. */
  readonly errors: readonly unknown[];
}

/**
 * A protected route that counts how often its handler runs, per key. No assertion here measures
 * elapsed time (a loaded machine stretches any duration): a bounded answer is shown by the path
 * that produced it, the store's own error or the engine's `storeTimeoutMs` deadline, as told to
 * `onError`; and a wait is a barrier on a state (the client reconnected, the lease ended on the
 * Redis clock), never a guessed duration.
 */
function app(connected: ConnectedStoreClient) {
  const store = redisStore({ client: connected.client });
  const runs = new Map<string, number>();
  const errors: unknown[] = [];
  const handle = withIdempotency(
    async (request) => {
      const key = request.headers.get('idempotency-key')!;
      runs.set(key, (runs.get(key) ?? 0) + 1);
      return Response.json({ charged: key }, { status: 201 });
    },
    { store, storeTimeoutMs: STORE_TIMEOUT, leaseMs: LEASE, onError: (error) => void errors.push(error) },
  );
  async function send(key: string): Promise<Sent> {
    const told = errors.length;
    const request = new Request('http://local/charges', {
      method: 'POST',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: '{"amount":100}',
    });
    const response = await handle(request);
    return {
      status: response.status,
      replayed: response.headers.get('idempotent-replayed') === 'true',
      body: (await response.json()) as { type?: string },
      contentType: response.headers.get('content-type'),
      errors: errors.slice(told),
    };
  }
  /** True once nobody holds `key`: no record, a completed one, or a lease over on the Redis clock. */
  async function leaseOver(key: string): Promise<boolean> {
    const record = await store.get({ scope: '', key });
    if (record === undefined || record.state === 'completed') return true;
    const [seconds, micros] = (await connected.command('TIME')) as [number | string, number | string];
    return record.leaseUntil <= Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  }
  /**
   * Retries `key` until it is created; returns every status seen. A 503 (the store path, see
   * `expectStoreUnavailable`) is retried once the client is connected again; a 409 (a claim that
   * landed after its request had answered, owned by nobody) once its lease is over, and then
   * the key must run: so a 409 is never followed by another 409.
   */
  async function retryUntilCreated(key: string): Promise<number[]> {
    const statuses: number[] = [];
    for (;;) {
      const sent = await send(key);
      statuses.push(sent.status);
      if (sent.status === 201) return statuses;
      if (sent.status === 409) {
        expect(statuses.at(-2)).not.toBe(409);
        await until(() => leaseOver(key), `the lease on ${key} to end`);
        continue;
      }
      expectStoreUnavailable(sent);
      await until(async () => connected.isReady(), 'the client to reconnect');
    }
  }
  return { send, runs, retryUntilCreated };
}

/**
 * A 503 store-unavailable that came from a bounded path: `via: 'store'` the store's own error
 * (it failed at once, never waiting for the deadline), `'deadline'` the engine's storeTimeoutMs,
 * `'either'` whichever came first.
 */
function expectStoreUnavailable(sent: Sent, via: 'store' | 'deadline' | 'either' = 'either'): void {
  expect(sent.status).toBe(503);
  expect(sent.contentType).toMatch(/^application\/problem\+json/);
  expect(sent.body.type).toBe('urn:idemkit:problem:store-unavailable');
  const unavailable = sent.errors.filter((e): e is StoreUnavailableError => e instanceof StoreUnavailableError);
  expect(unavailable.length).toBeGreaterThan(0);
  const timedOut = unavailable.some((e) => TIMED_OUT.test(e.message));
  if (via === 'deadline') expect(timedOut).toBe(true);
  if (via === 'store') {
    expect(timedOut).toBe(false);
    expect(unavailable[0]!.message).toMatch(/^redis store: /);
  }
}

for (const library of STORE_CLIENT_LIBRARIES) describe.skipIf(!binaries)(`redis store outages through ${library}, through withIdempotency`, () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-redis-outage-'));
  // Durable like a payments deployment should be, so a restart keeps what was acknowledged.
  const durable = ['--appendonly', 'yes', '--appendfsync', 'always'];
  let server: RedisServer;
  let proxy: TcpProxy | undefined;
  const clients: ConnectedStoreClient[] = [];
  const connect = async (port: number) => {
    const client = await connectStoreClientOf(library, port);
    clients.push(client);
    return client;
  };
  beforeAll(async () => {
    server = await startRedisServer({ dir, args: durable });
  });
  afterAll(async () => {
    for (const client of clients) client.close();
    await proxy?.close();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('CLIENT PAUSE: 503 by the storeTimeoutMs deadline, handler not run, and it recovers when the pause ends', async () => {
    const client = await connect(server.port);
    const { send, runs, retryUntilCreated } = app(client);
    expect((await send('warm-up')).status).toBe(201);
    const admin = await connectStoreClient(server.port);
    onTestFinished(() => admin.disconnect());
    expect(await admin.call('CLIENT', 'PAUSE', '2000', 'ALL')).toBe('OK');
    expectStoreUnavailable(await send('during-pause'), 'deadline');
    expectStoreUnavailable(await send('during-pause'), 'deadline');
    expect(runs.get('during-pause')).toBeUndefined();

    // The admin's own command waits out the pause: when it answers, the pause is over.
    expect(await admin.ping()).toBe('PONG');
    expect((await send('after-pause')).status).toBe(201);
    // The claims sent during the pause ran when it ended; their requests had already answered
    // 503, so nobody owns them and the key answers 409 until that lease ends, then runs once.
    // (Or at once: the engine releases a claim that answers after its deadline, when it can.)
    expect([[201], [409, 201]]).toContainEqual(await retryUntilCreated('during-pause'));
    expect(runs.get('during-pause')).toBe(1);
    expect(runs.get('after-pause')).toBe(1);
  });

  it('connection cut: 503 or success on retry, the handler runs once per key, and it recovers by itself', async () => {
    proxy = await startTcpProxy(server.port);
    const client = await connect(proxy.port);
    const { send, runs, retryUntilCreated } = app(client);
    expect((await send('before-cut')).status).toBe(201);
    proxy.cut();
    const statuses = await retryUntilCreated('after-cut');
    expect(statuses.at(-1)).toBe(201);
    expect(statuses.every((s) => s === 503 || s === 409 || s === 201)).toBe(true);
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
      if (first.status === 503) expectStoreUnavailable(first);
      const after = await retryUntilCreated(key);
      expect(after.at(-1)).toBe(201);
      expect(runs.get(key)).toBe(1);
    }
    expect(runs.get('after-cut')).toBe(1);
    expect(runs.get('before-cut')).toBe(1);
  });

  it('server killed: 503 at once (the store fails, no deadline is waited out), never hangs; restarted on the same port, it recovers by itself', async () => {
    const client = await connect(server.port);
    const { send, runs, retryUntilCreated } = app(client);
    expect((await send('before-kill')).status).toBe(201);
    const { port } = server;
    await server.stop('SIGKILL');
    // Once the client has seen the connection go, every command fails at once (no offline queue).
    await until(async () => !client.isReady(), 'the client to see the connection close');
    for (let i = 0; i < 5; i++) {
      expectStoreUnavailable(await send('while-down'), 'store');
      await sleep(100);
    }
    expect(runs.get('while-down')).toBeUndefined();

    server = await startRedisServer({ port, dir, args: durable });
    const statuses = await retryUntilCreated('while-down');
    expect(statuses.at(-1)).toBe(201);
    expect(runs.get('while-down')).toBe(1);
    // appendfsync always: the completed record survived the SIGKILL, so the retry replays.
    expect(await send('before-kill')).toMatchObject({ status: 201, replayed: true });
    expect(runs.get('before-kill')).toBe(1);
  });
});
