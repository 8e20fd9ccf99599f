/**
 * Outages of PostgreSQL under the real web adapter: the middleware answers 503 problem+json within
 * `storeTimeoutMs`, never runs the handler unprotected, and recovers by itself once the path is back.
 * Faults are injected with a TCP proxy in front of the shared server, and with a throwaway cluster
 * for "the server is stopped"; the shared server itself is never touched.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { withIdempotency } from '../../src/http/web.js';
import type { PostgresStore } from '../../src/stores/postgres/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { POSTGRES, requireService } from '../support/services.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import type { TcpProxy } from '../support/tcp-proxy.js';
import { ThrowawayCluster, dropTable, newPool, uniqueTable, until } from './postgres-support.js';
import { freePort } from '../support/ports.js';

const up = await requireService(POSTGRES);
const canInitdb = up && (await ThrowawayCluster.available());
if (up && !canInitdb) console.warn('\n!!!!!!!! SKIPPING the stopped-server outage test: initdb is not on PATH\n');

const STORE_TIMEOUT_MS = 400;
const LEASE_MS = 1_000;
/** The message of the engine's own deadline: a 503 that waited out `storeTimeoutMs`. */
const TIMED_OUT = /did not answer within \d+ ms \(option `storeTimeoutMs`\)/;

interface Hold {
  entered: () => void;
  release: Promise<void>;
}

/**
 * A payment endpoint behind the real web adapter; counts executions and can park inside the
 * handler. No assertion measures elapsed time (a loaded machine stretches any duration): a bounded
 * answer is shown by the path that produced it (the store's own error, or the engine's
 * storeTimeoutMs deadline, as told to `onError`), and a wait is a barrier on a state (a lease over
 * on the server's clock). `clock` is a pool on the same server, for its clock.
 */
function service(o: {
  store: PostgresStore<pg.PoolClient>;
  /** The store's table, and the table the handler writes its effect to. */
  table: string;
  effects: string;
  clock: pg.Pool;
  transactional?: boolean;
  storeTimeoutMs?: number;
}) {
  const { store, effects: effectsTable, clock, transactional = false, storeTimeoutMs = STORE_TIMEOUT_MS } = o;
  const state = { executions: 0, hold: undefined as Hold | undefined, errors: [] as unknown[] };
  const handle = withIdempotency(
    async (_request, ctx) => {
      state.executions++;
      if (ctx?.tx) await ctx.tx.query(`INSERT INTO "${effectsTable}" (key) VALUES ($1)`, [ctx.key]);
      const hold = state.hold;
      state.hold = undefined;
      if (hold) {
        hold.entered();
        await hold.release;
      }
      return new Response('charged', { status: 201 });
    },
    { store, transactional, storeTimeoutMs, leaseMs: LEASE_MS, windowMs: 60_000, onError: (error) => void state.errors.push(error) },
  );
  const post = async (key: string): Promise<Answer> => {
    const told = state.errors.length;
    const response = await handle(new Request('http://local/charges', { method: 'POST', headers: { 'idempotency-key': key }, body: '{"amount":1}' }));
    return { status: response.status, headers: response.headers, body: await response.text(), errors: state.errors.slice(told) };
  };
  /** Parks the next execution inside the handler until `go` is called. */
  const park = () => {
    let entered!: () => void;
    let go!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    state.hold = { entered, release: new Promise<void>((resolve) => (go = resolve)) };
    return { inside, go };
  };
  /** True once nobody holds `key`: no record, a completed one, or a lease over on the server's clock. */
  const leaseOver = async (key: string) => {
    const { rows } = await clock.query(
      `SELECT state = 'completed' OR lease_until <= clock_timestamp() AS over FROM "${o.table}" WHERE scope = '' AND key = $1`,
      [key],
    );
    return rows.length === 0 || rows[0].over === true;
  };
  /**
   * Retries one key until it succeeds. While an orphaned claim holds it, 409 is the only other
   * answer, until that claim's lease ends on the server's clock; then the retry must run.
   */
  const retryUntilDone = async (key: string) => {
    const { status } = await post(key);
    if (status === 201) return;
    expect(status).toBe(409);
    await until(() => leaseOver(key), `the lease on ${key} to end`);
    expect((await post(key)).status).toBe(201);
  };
  return { state, post, park, retryUntilDone };
}

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: string;
  /** What `onError` was told while this request was answered. */
  readonly errors: readonly unknown[];
}

/**
 * A 503 store-unavailable that came from a bounded path: `via: 'store'` the store's own error (it
 * failed by itself, never waiting for the deadline), `'deadline'` the engine's storeTimeoutMs,
 * `'either'` whichever came first.
 */
function expectUnavailable(answer: Answer, via: 'store' | 'deadline' | 'either') {
  expect(answer.status).toBe(503);
  expect(answer.headers.get('content-type')).toBe('application/problem+json');
  expect(JSON.parse(answer.body)).toMatchObject({ type: 'urn:idemkit:problem:store-unavailable', status: 503 });
  const unavailable = answer.errors.filter((e): e is StoreUnavailableError => e instanceof StoreUnavailableError);
  expect(unavailable.length).toBeGreaterThan(0);
  const timedOut = unavailable.some((e) => TIMED_OUT.test(e.message));
  if (via === 'deadline') expect(timedOut).toBe(true);
  if (via === 'store') {
    expect(timedOut).toBe(false);
    expect(unavailable[0]!.message).toMatch(/^postgres store: claim on .* failed: /);
  }
}

const newKey = () => `k-${randomUUID()}`;

describe.skipIf(!up)('postgres store outages (web adapter)', () => {
  let admin: pg.Pool;
  let table: string;
  let effects: string;
  const cleanups: Array<() => Promise<void> | void> = [];
  const rowsFor = async (key: string) =>
    Number((await admin.query(`SELECT count(*) AS n FROM "${effects}" WHERE key = $1`, [key])).rows[0].n);

  beforeAll(async () => {
    admin = newPool();
    table = uniqueTable();
    effects = `${table}_effects`;
    await postgresStore({ pool: admin, table }).migrate();
    await admin.query(`CREATE TABLE "${effects}" (key text NOT NULL)`);
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
  });
  afterAll(async () => {
    await admin.query(`DROP TABLE IF EXISTS "${effects}"`);
    await dropTable(admin, table);
    await admin.end();
  });

  /** A pool and store whose every connection goes through a fresh proxy. */
  async function proxied(max = 2): Promise<{ proxy: TcpProxy; store: PostgresStore<pg.PoolClient> }> {
    const proxy = await startTcpProxy(5432);
    const pool = newPool({ port: proxy.port, max, connectionTimeoutMillis: 1_000 });
    cleanups.push(
      () => proxy.resume(),
      () => proxy.close(),
      () => pool.end(),
    );
    return { proxy, store: postgresStore({ pool, table }) };
  }

  it('answers 503 at once when the pool cannot connect (closed port), without running the handler', async () => {
    const pool = newPool({ port: await freePort(), connectionTimeoutMillis: 1_000 });
    cleanups.push(() => pool.end());
    // "At once": from the refused connection itself. With a deadline far past the test's own
    // timeout, only the store's error can have answered.
    const app = service({ store: postgresStore({ pool, table }), table, effects, clock: admin, storeTimeoutMs: 600_000 });
    const answer = await app.post(newKey());
    expectUnavailable(answer, 'store');
    expect((answer.errors[0] as Error).message).toMatch(/ECONNREFUSED/);
    expect(app.state.executions).toBe(0);
  });

  it('answers 503 within storeTimeoutMs when the server accepts but never speaks', async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const pool = newPool({ port: (silent.address() as AddressInfo).port, connectionTimeoutMillis: 5_000 });
    cleanups.push(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
      await pool.end();
    });
    const app = service({ store: postgresStore({ pool, table }), table, effects, clock: admin });
    // The pool would wait 5 s to connect: the answer came from the engine's storeTimeoutMs deadline.
    expectUnavailable(await app.post(newKey()), 'deadline');
    expect(app.state.executions).toBe(0);
  });

  it('answers 503 when the connection is killed during the claim, then recovers by itself', async () => {
    const { proxy, store } = await proxied();
    const app = service({ store, table, effects, clock: admin });
    expect((await app.post(newKey())).status).toBe(201);
    // An uncommitted row on the same key (on a direct connection) parks the claim in its upsert.
    const key = newKey();
    const blocker = await admin.connect();
    cleanups.push(async () => {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
    });
    await blocker.query('BEGIN');
    await blocker.query(
      `INSERT INTO "${table}" (scope, key, fingerprint, state, token, attempt, lease_until, expires_at)
       VALUES ('', $1, 'x', 'in_flight', 'blocker', 1, now(), now())`,
      [key],
    );
    const pending = app.post(key);
    await until(
      async () =>
        (await admin.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%${table}_claim%'`))
          .rows[0].n === '1',
      'the claim to wait on the row lock',
    );
    proxy.cut();
    // The cut fails the claim, unless a slow machine took longer than storeTimeoutMs to get there.
    expectUnavailable(await pending, 'either');
    expect(app.state.executions).toBe(1);
    await blocker.query('ROLLBACK');
    // The path is back: the pool replaced its dead connections on its own.
    expect((await app.post(newKey())).status).toBe(201);
    // The server may still have committed the claim it was running when the connection died
    // (it only notices the lost client when it answers): the key then answers 409 until that
    // lease ends, and runs exactly once after.
    await app.retryUntilDone(key);
    expect(app.state.executions).toBe(3);
  });

  it('answers 503 when the connection dies mid-transaction, commits nothing, and the retry runs once', async () => {
    const { proxy, store } = await proxied();
    const app = service({ store, table, effects, clock: admin, transactional: true });
    const key = newKey();
    const { inside, go } = app.park();
    const pending = app.post(key);
    await inside;
    expect(await rowsFor(key)).toBe(0);
    proxy.cut();
    go();
    const answer = await pending;
    expect(answer.status).toBe(503);
    expect(JSON.parse(answer.body).type).toBe('urn:idemkit:problem:store-unavailable');
    expect(await rowsFor(key)).toBe(0);
    // The claim was released over a new connection, so the retry runs at once.
    expect((await app.post(key)).status).toBe(201);
    expect(await rowsFor(key)).toBe(1);
    expect(app.state.executions).toBe(2);
    expect((await app.post(key)).headers.get('idempotent-replayed')).toBe('true');
  });

  it('answers 503 within storeTimeoutMs while the server is frozen, and recovers after it resumes', async () => {
    const { proxy, store } = await proxied(1);
    const app = service({ store, table, effects, clock: admin });
    expect((await app.post(newKey())).status).toBe(201);
    proxy.pause();
    const frozen = newKey();
    const answers = await Promise.all([app.post(frozen), app.post(newKey())]);
    // Frozen, the server never answers: both are answered by the deadline (the second waited for
    // the pool's one connection, whose own wait of 1 s ends later).
    for (const answer of answers) expectUnavailable(answer, 'deadline');
    expect(app.state.executions).toBe(1);
    proxy.resume();
    expect((await app.post(newKey())).status).toBe(201);
    // The claim that was frozen in the connection may land after its 503: at most a lease of 409s.
    await app.retryUntilDone(frozen);
    expect(app.state.executions).toBe(3);
  });

  describe.skipIf(!canInitdb)('when the server is stopped', () => {
    let cluster: ThrowawayCluster | undefined;
    let pool: pg.Pool;

    beforeAll(async () => {
      cluster = await ThrowawayCluster.create();
      pool = cluster.pool({ max: 3, connectionTimeoutMillis: 1_000 });
    }, 60_000);
    afterAll(async () => {
      await pool?.end();
      await cluster?.destroy();
    }, 60_000);

    it('answers 503 while it is down, and recovers, durable, once it is started again', async () => {
      const store = postgresStore({ pool, table: 'idempotency_records' });
      await store.migrate();
      await pool.query('CREATE TABLE effects (key text NOT NULL)');
      const app = service({ store, table: 'idempotency_records', effects: 'effects', clock: pool, transactional: true });
      const rows = async (key: string) => Number((await pool.query('SELECT count(*) AS n FROM effects WHERE key = $1', [key])).rows[0].n);

      const done = newKey();
      expect((await app.post(done)).status).toBe(201);
      // A request is inside its transaction when the server goes down.
      const interrupted = newKey();
      const { inside, go } = app.park();
      const pending = app.post(interrupted);
      await inside;
      await cluster!.stopImmediately();
      go();
      expect((await pending).status).toBe(503);
      const whileDown = await app.post(newKey());
      // Refused connections fail the claim, unless a slow machine took longer than storeTimeoutMs.
      expectUnavailable(whileDown, 'either');
      expect(app.state.executions).toBe(2);

      await cluster!.start();
      const replay = await app.post(done);
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      await app.retryUntilDone(interrupted);
      expect(await rows(interrupted)).toBe(1);
      expect(await rows(done)).toBe(1);
      expect((await app.post(newKey())).status).toBe(201);
    }, 60_000);
  });
});
