/**
 * Network faults between the service and its store, on a real link (issue 19, item 3). The
 * service runs in its own network namespace and reaches PostgreSQL, MariaDB or Redis over a TUN
 * pair joined by a packet shaper (delay, loss) and a forwarder on the host side; the test talks to
 * it over a veth pair, which no fault touches. Faults: the store link taken down (a partition the
 * service's kernel sees) and a silent partition (every packet dropped, so only timeouts tell) at
 * the claim, while the handler runs past its lease, and between the effect and the completion;
 * the store's answer to the last write (the commit) lost; latency at the completion; 30% packet
 * loss. Effects are counted in the business table, as in test/proof; no assertion measures
 * elapsed time.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ProofBackend } from '../proof/backends.js';
import { MYSQL_URL, POSTGRES_URL, REDIS_URL, openBackend } from '../proof/backends.js';
import { work, workUntilAnswered } from '../proof/spawn.js';
import { MARIADB, POSTGRES, REDIS, requireService } from '../support/services.js';
import type { Forwarder } from './forwarder.js';
import { startForwarder } from './forwarder.js';
import type { NetnsLink } from './netns.js';
import { createLink, netnsUnavailable } from './netns.js';
import type { Service } from './service.js';
import { startService } from './service.js';

const unavailable = netnsUnavailable();
if (unavailable) {
  if (process.env.CI === 'true') throw new Error(`CI=true and ${unavailable}`);
  console.warn(`\n!!!!!!!! SKIPPING THE NETWORK-FAULT SUITE: ${unavailable}\n`);
}

const STORE_TIMEOUT_MS = 500;
const LEASE_MS = 1_500;
/** Sequential requests per store and injected latency; docs/performance.md's table used 200. */
const LATENCY_REQUESTS = Number(process.env.NETNS_LATENCY_REQUESTS ?? 40);
const LATENCIES_MS = [0, 5, 50];

interface StoreUnderTest {
  readonly label: string;
  readonly port: number;
  /** The store's URL through the forwarder at `host:port`. */
  readonly via: (host: string, port: number) => string;
  readonly direct: string;
  readonly transactional: boolean;
}

const stores: StoreUnderTest[] = [];
if (!unavailable && (await requireService(POSTGRES)))
  stores.push({ label: 'PostgreSQL', port: 5432, via: (h, p) => `postgres://postgres@${h}:${p}/test`, direct: POSTGRES_URL, transactional: true });
if (!unavailable && (await requireService(MARIADB)))
  stores.push({ label: 'MariaDB', port: 3306, via: (h, p) => `mysql://root@${h}:${p}/test`, direct: MYSQL_URL, transactional: true });
// Redis shares no transaction with the orders (SQLite here): the documented data-layer guard, a
// unique key on the order written insert-once, keeps a re-run after a lost completion to one effect.
if (!unavailable && (await requireService(REDIS)))
  stores.push({ label: 'Redis', port: 6379, via: (h, p) => `redis://${h}:${p}/0`, direct: REDIS_URL, transactional: false });

const dir = mkdtempSync(join(tmpdir(), 'idemkit-netns-'));
const latencyRows: string[] = [];
const link: NetnsLink | undefined = unavailable === null && stores.length > 0 ? await createLink() : undefined;

afterAll(() => {
  link?.destroy();
  rmSync(dir, { recursive: true, force: true });
  if (latencyRows.length > 0) {
    console.info(
      [
        `\nProtected POST, new key each, sequential; latency added by the link's shaper to each packet towards the store:\n`,
        '| store | injected | requests | p50 ms | p99 ms | 503 (retried) |',
        '| --- | ---: | ---: | ---: | ---: | ---: |',
        ...latencyRows,
      ].join('\n'),
    );
  }
});

async function problem(answer: Response): Promise<void> {
  expect(answer.status).toBe(503);
  expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(await answer.json()).toMatchObject({ type: 'urn:idemkit:problem:store-unavailable', status: 503 });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

describe.skipIf(unavailable !== null || stores.length === 0)('network faults between the service and its store (netns)', () => {
  describe.each(stores)('on $label', (store) => {
    const name = `netns_${randomUUID().slice(0, 8)}`;
    const ordersFile = join(dir, `${name}.db`);
    let forwarder: Forwarder;
    let backend: ProofBackend;
    let service: Service;

    beforeAll(async () => {
      forwarder = await startForwarder(link!.storeHost, store.port);
      // The host's own view of the store (127.0.0.1), to count effects and read records whatever the link does.
      backend = await openBackend(store.direct, name, { ordersFile, uniqueOrders: !store.transactional });
      service = await startService(link!, {
        STORE_URL: store.via(link!.storeHost, forwarder.port),
        NAME: name,
        TRANSACTIONAL: store.transactional ? '1' : '0',
        UNIQUE_ORDERS: store.transactional ? '0' : '1',
        ORDERS_FILE: ordersFile,
        LEASE_MS: String(LEASE_MS),
        STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS),
      });
    }, 60_000);
    afterEach(async () => {
      link!.up();
      await link!.clear();
    });
    afterAll(async () => {
      await service?.kill();
      await forwarder?.close();
      await backend?.drop();
      await backend?.close();
    });

    const record = (key: string) => backend.store.get({ scope: 'proof', key });
    /** Nobody holds `key` any more: no record, a finished one, or a lease over (the store and this test share the machine's clock). */
    const leaseOver = async (key: string) => {
      for (;;) {
        const r = await record(key);
        if (!r || r.state !== 'in_flight' || r.leaseUntil <= Date.now()) return;
        await new Promise((resolve) => setTimeout(resolve, Math.max(10, r.leaseUntil - Date.now())));
      }
    };
    /**
     * The completion did not reach the store in time. In transactional mode the effect is rolled
     * back with it, and the answer is 503; without a shared transaction the effect has happened,
     * and the client gets the handler's real answer.
     */
    const answeredAfterLostCompletion = async (answer: Response) => {
      if (store.transactional) await problem(answer);
      else expect(answer.status).toBe(201);
    };
    /** The key ends answered by this same process, with one effect, replayed, and nothing in flight. */
    const settled = async (key: string) => {
      const { answer } = await workUntilAnswered(service.url, key);
      expect(answer.status).toBe(201);
      expect(await answer.json()).toEqual({ key, pid: service.pid });
      expect(await backend.countOrders(key)).toBe(1);
      const replay = await work(service.url, key);
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect((await record(key))?.state).toBe('completed');
    };

    /** Two partitions: one the service's kernel sees (no route: calls fail at once), one it cannot (every packet lost: only timeouts tell). */
    const partitions = [
      { kind: 'link down', cut: async () => link!.down(), heal: async () => link!.up() },
      { kind: 'silent partition', cut: () => link!.shape({ loss: 1 }), heal: () => link!.clear() },
    ];

    it.each(partitions)('$kind at the claim: 503 problem+json, no effect; healed, the same process runs each key once', async ({ cut, heal }) => {
      const keys = [randomUUID(), randomUUID(), randomUUID()];
      await cut();
      const answers = await Promise.all(keys.map((key) => work(service.url, key)));
      for (const answer of answers) await problem(answer);
      for (const key of keys) expect(await backend.countOrders(key)).toBe(0);
      await heal();
      for (const key of keys) await settled(key);
    }, 60_000);

    it.each(partitions)('$kind while the handler runs, past its lease (renewals lost), then healed: one effect, one original answer', async ({ cut, heal }) => {
      const key = randomUUID();
      const first = work(service.url, key, { 'x-park': '1' });
      first.catch(() => {}); // awaited below; a failed assertion before that must not leave it unhandled
      await service.parked(key);
      await cut();
      await leaseOver(key);
      await heal();
      // A retry after the lease may take over (201) or find the lease renewed by a renewal that
      // reached the store once the link was back (409); either way one execution may commit. Until
      // TCP retransmits on the pool's connections (its backoff grew while the link was cut), the
      // store may still be unreachable: 503, and the client retries, as a client would.
      let retry = await work(service.url, key);
      while (retry.status === 503) {
        await retry.arrayBuffer();
        await new Promise((resolve) => setTimeout(resolve, 50));
        retry = await work(service.url, key);
      }
      expect([201, 409]).toContain(retry.status);
      service.release(key);
      const answers = [retry, await first];
      const originals = answers.filter((a) => a.status === 201 && a.headers.get('idempotent-replayed') === null);
      expect(originals.length).toBeLessThanOrEqual(1);
      await settled(key);
    }, 60_000);

    it.each(partitions)('$kind between the effect and the completion: 503, and once healed one effect', async ({ cut, heal }) => {
      const key = randomUUID();
      const first = work(service.url, key, { 'x-park': '1' });
      await service.parked(key);
      await cut();
      service.release(key);
      await answeredAfterLostCompletion(await first);
      await heal();
      await settled(key);
    }, 60_000);

    it('the answer to the last write lost (the commit, or the completion, lands): 503 or the real answer, and every retry replays it', async () => {
      const key = randomUUID();
      const first = work(service.url, key, { 'x-hold-last-write': '1' });
      first.catch(() => {}); // awaited below; a failed assertion before that must not leave it unhandled
      await service.writing(key);
      // Everything still reaches the store; nothing it sends comes back, the reply to this write neither.
      await link!.shape({ lossFromStore: 1 });
      service.write(key);
      await answeredAfterLostCompletion(await first);
      // The write landed although its sender timed out: one order, a completed record (read from the host).
      expect(await backend.countOrders(key)).toBe(1);
      expect((await record(key))?.state).toBe('completed');
      await link!.clear();
      await settled(key);
    }, 60_000);

    it('the completion slower than storeTimeoutMs (latency on the link): 503, then one effect', async () => {
      const key = randomUUID();
      const first = work(service.url, key, { 'x-park': '1' });
      await service.parked(key);
      await link!.shape({ delayMs: STORE_TIMEOUT_MS * 3 });
      service.release(key);
      await answeredAfterLostCompletion(await first);
      await link!.clear();
      await settled(key);
    }, 60_000);

    it('30% packet loss on the store link, either way: each key runs once', async () => {
      await link!.shape({ loss: 0.3 });
      const keys = Array.from({ length: 3 }, () => randomUUID());
      for (const key of keys) {
        const { answer } = await workUntilAnswered(service.url, key);
        expect(answer.status).toBe(201);
      }
      await link!.clear();
      for (const key of keys) await settled(key);
      // Generous: how long this takes is TCP's retransmission back-off on a lossy link (a request
      // whose packets are lost four times in a row waits seconds), and a loaded CI machine took
      // over a minute for three keys on PostgreSQL. Only correctness is asserted.
    }, 240_000);

    it(`latency of protected requests with ${LATENCIES_MS.join(' / ')} ms injected per store round trip (measured, not asserted): each key runs once`, async () => {
      // Only correctness is asserted. On a loaded machine a store round trip can pass storeTimeoutMs
      // even with 5 or 50 ms injected (MariaDB answered 503 here once): the first answer is the real
      // one or a retryable 503, and every key ends answered once, its retry a replay.
      const keys: string[] = [];
      for (const ms of LATENCIES_MS) {
        await link!.shape({ delayMs: ms });
        const took: number[] = [];
        let unavailable = 0;
        for (let i = 0; i < LATENCY_REQUESTS; i++) {
          const key = randomUUID();
          keys.push(key);
          const start = performance.now();
          const answer = await work(service.url, key);
          const body = await answer.text();
          took.push(performance.now() - start);
          expect([201, 503], body).toContain(answer.status);
          if (answer.status === 503) {
            unavailable++;
            expect(JSON.parse(body)).toMatchObject({ type: 'urn:idemkit:problem:store-unavailable', status: 503 });
          } else {
            expect(answer.headers.get('idempotent-replayed')).toBeNull();
            expect(JSON.parse(body)).toEqual({ key, pid: service.pid });
          }
        }
        took.sort((a, b) => a - b);
        latencyRows.push(`| ${store.label} | ${ms} ms | ${LATENCY_REQUESTS} | ${percentile(took, 50).toFixed(1)} | ${percentile(took, 99).toFixed(1)} | ${unavailable} |`);
      }
      await link!.clear();
      // A 503's retry runs the key (its first attempt left no effect, or its late completion is replayed); a 201's retry replays it.
      for (const key of keys) await settled(key);
    }, 240_000);
  });
});
