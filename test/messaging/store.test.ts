import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { createPool } from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { isReservedScope } from '../../src/core/namespaces.js';
import type { IdempotencyStore, StoredResponse } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { legacyMessageScope, messageScope } from '../../src/messaging/consume.js';
import { consumeOnce, signWebhook, webhookReceiver } from '../../src/messaging/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { mysqlStore } from '../../src/stores/mysql/index.js';
import { postgresStore } from '../../src/stores/postgres/index.js';
import { redisStore } from '../../src/stores/redis/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { STORE_CLIENT_OPTIONS } from '../support/redis-servers.js';
import { MARIADB, POSTGRES, REDIS, requireService } from '../support/services.js';
import { dropTable, newPool } from '../stores/postgres-support.js';
import { manualClock } from '../stores/manual-clock.js';

const hasRedis = await requireService(REDIS);
const hasPg = await requireService(POSTGRES);
const hasMaria = await requireService(MARIADB);
const run = `${process.pid}_${randomBytes(3).toString('hex')}`;
const prefix = `idem-msg-${run}`;

/** What consumeOnce before issue 14 wrote: fingerprint and answer of a processed message. */
const OLD_FINGERPRINT = 'idemkit:message';
const OLD_DONE: StoredResponse = { status: 200, headers: [], body: null, bodyOmitted: false };

const secret = 'whsec_' + randomBytes(32).toString('base64');
const nowSec = () => Math.floor(Date.now() / 1000);

/**
 * `oldDone`: the answer the old version completed its records with. On MySQL that record (a null
 * body not marked omitted) could not be read back at all, so the upgrade case starts from an empty body there.
 */
function suite(label: string, available: boolean, make: () => Promise<{ store: IdempotencyStore; close(): Promise<void> }>, oldDone = OLD_DONE) {
  describe.skipIf(!available)(`consumeOnce with a store (${label})`, () => {
    let store: IdempotencyStore;
    let close = async () => {};
    const ready = available ? make().then((made) => ({ store, close } = made)) : Promise.resolve();
    afterAll(async () => {
      await ready;
      await close();
    });

    it('processes once, then reports duplicates; a throwing handler releases the claim', async () => {
      await ready;
      let runs = 0;
      await expect(consumeOnce({ store, consumer: 'c', messageId: 'a' }, async () => { runs++; throw new Error('boom'); })).rejects.toThrow('boom');
      expect(await consumeOnce({ store, consumer: 'c', messageId: 'a' }, async () => ++runs)).toEqual({ status: 'processed', value: 2 });
      expect(await consumeOnce({ store, consumer: 'c', messageId: 'a' }, async () => ++runs)).toEqual({ status: 'duplicate' });
      expect(runs).toBe(2);
    });

    it('lets one of many concurrent deliveries run; the others see it in flight', async () => {
      await ready;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let runs = 0;
      const first = consumeOnce({ store, consumer: 'c', messageId: 'b', leaseMs: 30_000 }, async () => {
        runs++;
        await gate;
      });
      // The first claim is made before the handler runs; wait for the handler, not for time.
      while (runs === 0) await new Promise((resolve) => setImmediate(resolve));
      const others = await Promise.all(Array.from({ length: 10 }, () => consumeOnce({ store, consumer: 'c', messageId: 'b' }, async () => runs++)));
      expect(others.every((r) => r.status === 'in_flight')).toBe(true);
      release();
      expect((await first).status).toBe('processed');
      expect((await consumeOnce({ store, consumer: 'c', messageId: 'b' }, async () => runs++)).status).toBe('duplicate');
      expect(runs).toBe(1);
    });

    /** An HTTP app whose tenant's scope is the text consume-once used to put its records under, and a webhook receiver, on one store. */
    function sharedStore(consumer: string) {
      const tenant = { runs: 0 };
      const app = withIdempotency(
        async () => {
          tenant.runs++;
          return Response.json({ tenant: 'order' }, { status: 201 });
        },
        { store, scope: () => `message:${consumer}` },
      );
      const post = (key: string) =>
        app(new Request('http://shop.test/orders', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"sku":1}' }));
      const hook = { events: 0 };
      const receiver = webhookReceiver({ secret, store, consumer, onEvent: () => void hook.events++ });
      const body = new TextEncoder().encode('{"type":"payment.succeeded"}');
      const deliver = async (id: string) => {
        const at = nowSec();
        const reply = await receiver.receive({ 'webhook-id': id, 'webhook-timestamp': String(at), 'webhook-signature': signWebhook(secret, id, at, body) }, body);
        return { status: reply.status, outcome: (JSON.parse(reply.body) as { status?: unknown }).status };
      };
      return { tenant, hook, post, deliver };
    }

    it('one store, HTTP first: a tenant whose scope is `message:<consumer>` used the event id as its key; the deliveries are processed once, then acknowledged (issue 14, item 9)', async () => {
      await ready;
      const { tenant, hook, post, deliver } = sharedStore('stripe');
      const first = await post('evt_1');
      expect(first.status).toBe(201);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect([await deliver('evt_1'), await deliver('evt_1'), await deliver('evt_1')]).toEqual([
        { status: 200, outcome: 'processed' },
        { status: 200, outcome: 'duplicate' },
        { status: 200, outcome: 'duplicate' },
      ]);
      expect(hook.events).toBe(1);
      // The tenant's record is untouched: its retry replays its own answer.
      const retry = await post('evt_1');
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await retry.json()).toEqual({ tenant: 'order' });
      expect(tenant.runs).toBe(1);
    });

    it('one store, webhook first: the tenant’s request with the event id as key runs its handler and then replays (issue 14, item 9)', async () => {
      await ready;
      const { tenant, hook, post, deliver } = sharedStore('stripe-2');
      expect(await deliver('evt_2')).toEqual({ status: 200, outcome: 'processed' });
      const first = await post('evt_2');
      expect(first.status).toBe(201);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(await first.json()).toEqual({ tenant: 'order' });
      const retry = await post('evt_2');
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(tenant.runs).toBe(1);
      // The event's record is untouched too.
      expect([await deliver('evt_2'), await deliver('evt_2')]).toEqual([
        { status: 200, outcome: 'duplicate' },
        { status: 200, outcome: 'duplicate' },
      ]);
      expect(hook.events).toBe(1);
    });

    it('after an upgrade, a message processed under the old scope is a duplicate; a tenant’s record there is not taken for one', async () => {
      await ready;
      const consumer = 'upgraded';
      // Written as consumeOnce did before: claimed and completed under `message:<consumer>`.
      const old = { scope: legacyMessageScope(consumer), key: 'm-old' };
      const claim = await store.claim(old, OLD_FINGERPRINT, { leaseMs: 60_000, windowMs: 3_600_000 });
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      await store.complete(old, claim.token, oldDone);
      let runs = 0;
      expect(await consumeOnce({ store, consumer, messageId: 'm-old' }, async () => ++runs)).toEqual({ status: 'duplicate' });
      expect(runs).toBe(0);
      // Recorded in the reserved namespace too: later deliveries no longer need the old record.
      expect(await store.get({ scope: messageScope(consumer), key: 'm-old' })).toMatchObject({ state: 'completed' });

      // A tenant's completed request at the old scope with the message id as key: not a message record.
      const tenant = withIdempotency(async () => new Response('ok', { status: 201 }), { store, scope: () => legacyMessageScope(consumer) });
      await tenant(new Request('http://shop.test/x', { method: 'POST', headers: { 'idempotency-key': 'm-tenant' }, body: 'x' }));
      expect(await consumeOnce({ store, consumer, messageId: 'm-tenant' }, async () => ++runs)).toEqual({ status: 'processed', value: 1 });
    });
  });
}

suite('memory', true, async () => ({ store: memoryStore(), close: async () => {} }));
suite('SQLite', true, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'idemkit-msg-store-'));
  const database = new Database(join(dir, 'store.db'));
  return {
    store: sqliteStore({ database }),
    close: async () => {
      database.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
suite('PostgreSQL', hasPg, async () => {
  const pool = newPool();
  const table = `idem_msg_store_${run}`;
  const store = postgresStore({ pool, table });
  await store.migrate();
  return {
    store,
    close: async () => {
      await dropTable(pool, table);
      await pool.end();
    },
  };
});
suite('MariaDB', hasMaria, async () => {
  const pool = createPool({ host: MARIADB.host, port: MARIADB.port, user: 'root', database: 'test', connectionLimit: 4 });
  const table = `idem_msg_store_${run}`;
  const store = mysqlStore({ pool, table });
  await store.migrate();
  return {
    store,
    close: async () => {
      await pool.query(`DROP TABLE IF EXISTS ${table}`);
      await pool.end();
    },
  };
}, { ...OLD_DONE, body: new Uint8Array(0) });
suite('Redis', hasRedis, async () => {
  // The client settings docs/stores/redis.md recommends (redisStore warns about the defaults).
  const client = new Redis({ host: REDIS.host, port: REDIS.port, ...STORE_CLIENT_OPTIONS });
  await client.connect();
  return {
    store: redisStore({ client, prefix }),
    close: async () => {
      const keys = await client.keys(`${prefix}:*`);
      if (keys.length) await client.del(...keys);
      await client.quit();
    },
  };
});

describe('the reserved namespace of messaging records', () => {
  it('holds every consumer’s scope; no tenant text, including the old `message:` one, is in it', () => {
    for (const consumer of ['stripe', 'message:stripe', '', ':']) expect(isReservedScope(messageScope(consumer))).toBe(true);
    for (const tenant of ['message:stripe', 'idemkit:message:stripe', '', 'acct_1', ' \u001f']) expect(isReservedScope(tenant)).toBe(false);
    expect(messageScope('a')).not.toBe(messageScope('b'));
    expect(messageScope('stripe')).not.toBe(legacyMessageScope('stripe'));
  });

  it('an old record still in flight holds new deliveries until its lease is over; then the message is processed', async () => {
    const clock = manualClock();
    const store = memoryStore({ clock: clock.now, sweepIntervalMs: 0 });
    const old = { scope: legacyMessageScope('c'), key: 'm' };
    // An instance of the old version holds the message (a rolling deploy).
    const claim = await store.claim(old, OLD_FINGERPRINT, { leaseMs: 30_000, windowMs: 3_600_000 });
    expect(claim.kind).toBe('acquired');
    let runs = 0;
    const deliver = () => consumeOnce({ store, consumer: 'c', messageId: 'm', clock: clock.now }, async () => ++runs);
    expect(await deliver()).toEqual({ status: 'in_flight', retryAfterMs: 30_000 });
    // The claim it made meanwhile was given back: the next delivery is not held by it.
    expect(await store.get({ scope: messageScope('c'), key: 'm' })).toBeUndefined();
    await clock.advance(29_999);
    expect(await deliver()).toEqual({ status: 'in_flight', retryAfterMs: 1 });
    // The old owner died: once its lease is over, the message is processed (as a take-over would).
    await clock.advance(1);
    expect(await deliver()).toEqual({ status: 'processed', value: 1 });
    expect(await deliver()).toEqual({ status: 'duplicate' });
  });

  it('an old record past its retention window counts for nothing', async () => {
    const clock = manualClock();
    const store = memoryStore({ clock: clock.now, sweepIntervalMs: 0 });
    const old = { scope: legacyMessageScope('c'), key: 'm' };
    const claim = await store.claim(old, OLD_FINGERPRINT, { leaseMs: 1_000, windowMs: 60_000 });
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    await store.complete(old, claim.token, OLD_DONE);
    await clock.advance(60_000);
    expect(await consumeOnce({ store, consumer: 'c', messageId: 'm', clock: clock.now }, async () => 'again')).toEqual({ status: 'processed', value: 'again' });
  });
});
