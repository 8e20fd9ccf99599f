/**
 * The decision matrix (DESIGN.md §3), run unchanged against every HTTP adapter over real HTTP.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import type { AppFactory, AppState, HarnessOptions, TestApp } from './harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, binaryPattern } from './harness.js';
import { twoOnOneConnection } from './wire.js';
import { sleep, until } from '../support/until.js';
import { closeSqlite, openSqlite } from '../support/sqlite-driver.js';

interface Sent {
  status: number;
  headers: Headers;
  bytes: Uint8Array;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- test responses are inspected ad hoc
  json: () => any;
}

async function send(
  app: TestApp,
  path: string,
  init: { method?: string; key?: string | string[]; token?: string | null; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Sent> {
  const headers = new Headers(init.headers);
  if (init.token !== null) headers.set('authorization', `Bearer ${init.token ?? 'tenant-a'}`);
  for (const k of typeof init.key === 'string' ? [init.key] : (init.key ?? [])) headers.append('idempotency-key', k);
  let body: BodyInit | undefined;
  if (init.body instanceof Uint8Array || typeof init.body === 'string') body = init.body as BodyInit;
  else if (init.body !== undefined) {
    body = JSON.stringify(init.body);
    if (!headers.has('content-type')) headers.set('content-type', 'application/json');
  }
  const res = await fetch(app.url + path, { method: init.method ?? 'POST', headers, body });
  const bytes = new Uint8Array(await res.arrayBuffer());
  const text = new TextDecoder().decode(bytes);
  return { status: res.status, headers: res.headers, bytes, text, json: () => JSON.parse(text) };
}

const key = () => `key-${randomUUID()}`;

export function describeMatrix(name: string, factory: AppFactory): void {
  describe(`decision matrix: ${name}`, () => {
    const state: AppState = { executions: 0 };
    let store: ReturnType<typeof memoryStore>;
    const apps: TestApp[] = [];
    const start = async (options: Partial<HarnessOptions> = {}, withStore?: IdempotencyStore) => {
      const app = await factory({ store: withStore ?? store, ...options }, state);
      apps.push(app);
      return app;
    };
    let app: TestApp;

    beforeAll(async () => {
      store = memoryStore({ maxResponseBytes: 64 * 1024 });
      app = await start();
    });
    afterEach(() => {
      state.executions = 0;
      state.hold = undefined;
    });
    afterAll(async () => {
      await Promise.all(apps.map((a) => a.close()));
      store.close();
    });

    it('runs 100 concurrent requests with one key exactly once; the others get 409 with Retry-After', async () => {
      const k = key();
      // The request that claims is held until the other 99 have their answers, so each of them
      // meets the claim in flight however slowly a loaded machine delivers them (a timed handler
      // let stragglers arrive after it finished).
      const gate = opening();
      state.hold = gate.promise;
      let answered = 0;
      const others = opening();
      const pending = Array.from({ length: 100 }, () =>
        send(app, '/charges', { key: k, body: { amount: 100 }, headers: { 'x-hold': '1' } }).then((r) => {
          if (++answered === 99) others.open();
          return r;
        }),
      );
      await others.promise;
      gate.open();
      const all = await Promise.all(pending);
      expect(state.executions).toBe(1);
      const original = all.filter((r) => r.status === 201);
      expect(original).toHaveLength(1);
      expect(original[0]!.headers.get('idempotent-replayed')).toBeNull();
      const conflicts = all.filter((r) => r.status === 409);
      expect(conflicts).toHaveLength(99);
      for (const c of conflicts) {
        expect(c.headers.get('content-type')).toContain('application/problem+json');
        // The retry hint (`retryAfterMs`, 1 s by default), not the 30 s lease.
        expect(c.headers.get('retry-after')).toBe('1');
        const problem = c.json();
        expect(problem.type).toBe('urn:idemkit:problem:request-in-progress');
        // The holder is alive: claimed within the test, its lease barely begun.
        expect(problem).toMatchObject({ owner: 'alive', retryAfterMs: 1000 });
        expect(problem.leaseEndsInMs).toBeGreaterThan(0);
        expect(problem.leaseEndsInMs).toBeLessThanOrEqual(30_000);
        expect(problem.renewedMsAgo).toBeGreaterThanOrEqual(0);
        expect(problem.leaseEndsInMs + problem.renewedMsAgo).toBeGreaterThanOrEqual(30_000);
      }
    });

    it("a 409 says whether the key's holder is alive; one that stopped renewing gets Retry-After the end of its lease", async () => {
      // The store's clock is the test's: it moves 20 s on while the held handler's renewals (every
      // 10 s of real time) have not run, which to the store is an owner that stopped renewing.
      let now = Date.UTC(2026, 0, 1);
      const clocked = memoryStore({ sweepIntervalMs: 0, clock: () => now });
      const frozen = await start({}, clocked);
      const k = key();
      const gate = opening();
      state.hold = gate.promise;
      const original = send(frozen, '/charges', { key: k, body: { amount: 3 }, headers: { 'x-hold': '1' } });
      await until(async () => (await clocked.get({ scope: 'tenant-a', key: k })) !== undefined, 'the first request to claim its key');
      const alive = await send(frozen, '/charges', { key: k, body: { amount: 3 } });
      expect(alive.status).toBe(409);
      expect(alive.headers.get('retry-after')).toBe('1');
      expect(alive.json()).toMatchObject({ type: 'urn:idemkit:problem:request-in-progress', owner: 'alive', leaseEndsInMs: 30_000, renewedMsAgo: 0, retryAfterMs: 1000 });
      now += 20_000;
      const silent = await send(frozen, '/charges', { key: k, body: { amount: 3 } });
      expect(silent.status).toBe(409);
      expect(silent.headers.get('retry-after')).toBe('10');
      expect(silent.json()).toMatchObject({
        type: 'urn:idemkit:problem:request-in-progress',
        owner: 'unresponsive',
        leaseEndsInMs: 10_000,
        renewedMsAgo: 20_000,
        retryAfterMs: 10_000,
      });
      gate.open();
      expect((await original).status).toBe(201);
      expect(state.executions).toBe(1);
      clocked.close();
    });

    it('in wait mode, 100 concurrent requests get one execution and byte-identical replays', async () => {
      // Longer than the test's own timeout: however slow the machine, a waiter never gives up
      // first. The handler's delay only makes the requests overlap; one that arrives after the
      // original finished is a replay all the same.
      const waiting = await start({ inFlight: 'wait', waitTimeoutMs: 120_000 });
      const k = key();
      const all = await Promise.all(
        Array.from({ length: 100 }, () => send(waiting, '/charges', { key: k, body: { amount: 7 }, headers: { 'x-delay-ms': '300' } })),
      );
      expect(state.executions).toBe(1);
      const original = all.find((r) => r.headers.get('idempotent-replayed') === null);
      expect(original?.status).toBe(201);
      for (const r of all) {
        expect(r.status).toBe(201);
        expect(r.text).toBe(original!.text);
      }
      expect(all.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(99);
    });

    it('a client that hangs up changes nothing: the slow handler keeps its claim, its answer is stored and replayed', async () => {
      // Lease 300 ms, handler 1.5 s: the claim must be renewed for the handler, not the connection.
      const leased = await start({ leaseMs: 300 });
      const k = key();
      await hangUpDuring(leased, '/charges', { key: k, body: { amount: 5 }, headers: { 'x-delay-ms': '1500' } }, () => state.executions > 0);
      // Retries while the handler runs: 409, never a second execution, until its answer is stored
      // (one sent just as it completes gets the replay).
      const during: string[] = [];
      while ((await store.get({ scope: 'tenant-a', key: k }))?.state !== 'completed') {
        const retry = await send(leased, '/charges', { key: k, body: { amount: 5 } });
        during.push(retry.status === 409 ? '409' : `${retry.status} replayed=${retry.headers.get('idempotent-replayed')}`);
        await sleep(50);
      }
      for (const answer of during) expect(['409', '201 replayed=true']).toContain(answer);
      const replay = await send(leased, '/charges', { key: k, body: { amount: 5 } });
      expect(replay.status).toBe(201);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.json()).toMatchObject({ n: 1, body: { amount: 5 } });
      expect(state.executions).toBe(1);
    });

    it('replays status, allowlisted headers and body; never Set-Cookie or unlisted headers', async () => {
      const k = key();
      const first = await send(app, '/charges', { key: k, body: { amount: 1 } });
      expect(first.status).toBe(201);
      expect(first.headers.get('set-cookie')).toBe('session=secret');
      const replay = await send(app, '/charges', { key: k, body: { amount: 1 } });
      expect(state.executions).toBe(1);
      expect(replay.status).toBe(201);
      expect(replay.text).toBe(first.text);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(replay.headers.get('location')).toBe(first.headers.get('location'));
      expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
      expect(replay.headers.get('set-cookie')).toBeNull();
      expect(replay.headers.get('x-request-id')).toBeNull();
    });

    it.each([400, 402, 404, 500, 503])('replays a first answer of %i without running the handler again', async (code) => {
      const k = key();
      const first = await send(app, `/status/${code}`, { key: k, body: {} });
      const again = await send(app, `/status/${code}`, { key: k, body: {} });
      expect(first.status).toBe(code);
      expect(again.status).toBe(code);
      expect(again.text).toBe(first.text);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(state.executions).toBe(1);
    });

    it('stores the 500 of a throwing handler and replays it', async () => {
      const k = key();
      const first = await send(app, '/throw', { key: k, body: {} });
      const again = await send(app, '/throw', { key: k, body: {} });
      expect(first.status).toBe(500);
      expect(again.status).toBe(500);
      expect(again.text).toBe(first.text);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(state.executions).toBe(1);
    });

    it('answers 422 to a different body, path or method under the same key, and the original still replays', async () => {
      const k = key();
      const first = await send(app, '/charges', { key: k, body: { amount: 10 } });
      for (const attempt of [
        send(app, '/charges', { key: k, body: { amount: 11 } }),
        send(app, '/charges?x=1', { key: k, body: { amount: 10 } }),
        send(app, '/charges', { key: k, method: 'PATCH', body: { amount: 10 } }),
      ]) {
        const r = await attempt;
        expect(r.status).toBe(422);
        expect(r.headers.get('content-type')).toContain('application/problem+json');
        expect(r.json()).toMatchObject({ type: 'urn:idemkit:problem:key-reused', status: 422 });
      }
      const replay = await send(app, '/charges', { key: k, body: { amount: 10 } });
      expect(replay.status).toBe(201);
      expect(replay.text).toBe(first.text);
      expect(state.executions).toBe(1);
      const record = await store.get({ scope: 'tenant-a', key: k });
      expect(record?.state).toBe('completed');
      expect(record?.response?.status).toBe(201);
    });

    it('answers 422 to a different body while the original is still in flight, without disturbing it', async () => {
      const k = key();
      const gate = opening();
      state.hold = gate.promise;
      const original = send(app, '/charges', { key: k, body: { amount: 1 }, headers: { 'x-hold': '1' } });
      await until(async () => (await store.get({ scope: 'tenant-a', key: k })) !== undefined, 'the original request to claim its key');
      const mismatch = await send(app, '/charges', { key: k, body: { amount: 2 } });
      expect(mismatch.status).toBe(422);
      expect((await store.get({ scope: 'tenant-a', key: k }))?.state).toBe('in_flight');
      gate.open();
      const first = await original;
      expect(first.status).toBe(201);
      expect((await send(app, '/charges', { key: k, body: { amount: 1 } })).text).toBe(first.text);
      expect(state.executions).toBe(1);
    });

    it('treats JSON bodies canonically: key order and whitespace do not matter', async () => {
      const k = key();
      const first = await send(app, '/charges', { key: k, body: '{"a":1,"b":[1,2]}', headers: { 'content-type': 'application/json' } });
      const again = await send(app, '/charges', { key: k, body: '{ "b": [1, 2], "a": 1.0 }', headers: { 'content-type': 'application/json' } });
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.text).toBe(first.text);
      expect(state.executions).toBe(1);
    });

    it('hashes non-JSON and invalid JSON bodies as raw bytes', async () => {
      const k = key();
      const text = (body: string, type = 'text/plain') => send(app, '/text', { key: k, body, headers: { 'content-type': type } });
      expect((await text('hello')).text).toBe('echo:hello');
      expect((await text('hello')).headers.get('idempotent-replayed')).toBe('true');
      expect((await text('hello ')).status).toBe(422);
      const k2 = key();
      const bad = (body: string) => send(app, '/text', { key: k2, body, headers: { 'content-type': 'text/plain' } });
      expect((await bad('{"not json')).status).toBe(200);
      expect((await bad('{"not json ')).status).toBe(422);
      expect(state.executions).toBe(2);
    });

    it('accepts JSON that RFC 8785 cannot canonicalise (a lone surrogate), and replays it', async () => {
      const k = key();
      const body = '{"note":"\\ud800"}';
      const first = await send(app, '/charges', { key: k, body, headers: { 'content-type': 'application/json' } });
      expect(first.status).toBe(201);
      const again = await send(app, '/charges', { key: k, body, headers: { 'content-type': 'application/json' } });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.text).toBe(first.text);
      expect(state.executions).toBe(1);
    });

    it('treats the quoted sf-string key and the bare key as the same key', async () => {
      const k = key();
      const first = await send(app, '/charges', { key: `"${k}"`, body: { amount: 5 } });
      const bare = await send(app, '/charges', { key: k, body: { amount: 5 } });
      expect(bare.headers.get('idempotent-replayed')).toBe('true');
      expect(bare.text).toBe(first.text);
      expect(state.executions).toBe(1);
    });

    it('keeps tenants apart: the same key in two scopes runs twice and each replays its own', async () => {
      const k = key();
      const a = await send(app, '/charges', { key: k, token: 'tenant-a', body: { amount: 1 } });
      const b = await send(app, '/charges', { key: k, token: 'tenant-b', body: { amount: 1 } });
      expect(state.executions).toBe(2);
      expect(a.json().id).not.toBe(b.json().id);
      expect((await send(app, '/charges', { key: k, token: 'tenant-a', body: { amount: 1 } })).text).toBe(a.text);
      expect((await send(app, '/charges', { key: k, token: 'tenant-b', body: { amount: 1 } })).text).toBe(b.text);
      expect(state.executions).toBe(2);
    });

    describe('stores nothing for requests rejected before the handler ran', () => {
      const rejected = async (r: Sent, status: number, type?: string) => {
        expect(r.status).toBe(status);
        if (type) {
          expect(r.headers.get('content-type')).toContain('application/problem+json');
          expect(r.json().type).toBe(`urn:idemkit:problem:${type}`);
        }
      };
      const nothingStored = async (k: string, scope = 'tenant-a') => {
        expect(state.executions).toBe(0);
        expect(await store.get({ scope, key: k })).toBeUndefined();
      };

      it('a missing key: 400', async () => {
        const before = store.size;
        await rejected(await send(app, '/charges', { body: { amount: 1 } }), 400, 'missing-key');
        expect(state.executions).toBe(0);
        expect(store.size).toBe(before);
      });

      it.each([
        ['empty', ''],
        ['256 characters', 'k'.repeat(256)],
        ['an unterminated sf-string', '"abc'],
        ['a control character in an sf-string', '"a\tb"'],
        ['a space in a bare key', 'a b'],
        ['a non-ASCII character', 'clé-1'],
      ])('a malformed key (%s): 400', async (_label, bad) => {
        const before = store.size;
        // fetch sends each of these as it is (é as the byte 0xe9): every one reaches the server.
        await rejected(await send(app, '/charges', { key: bad, body: { amount: 1 } }), 400, 'invalid-key');
        expect(state.executions).toBe(0);
        expect(store.size).toBe(before);
      });

      it('a repeated Idempotency-Key header: 400', async () => {
        const k = key();
        await rejected(await send(app, '/charges', { key: [k, key()], body: { amount: 1 } }), 400, 'invalid-key');
        await nothingStored(k);
      });

      it('a 255-character key is accepted', async () => {
        const r = await send(app, '/charges', { key: 'k'.repeat(255), token: randomUUID(), body: { amount: 1 } });
        expect(r.status).toBe(201);
      });

      it('keyPolicy: a key of exactly minLength runs, one character shorter is 400; a UUID policy refuses text around a UUID (issue 26, item 23)', async () => {
        const long = await start({ keyPolicy: { minLength: 24 } });
        const short = 'k'.repeat(23);
        await rejected(await send(long, '/charges', { key: short, body: { amount: 1 } }), 400, 'invalid-key');
        await nothingStored(short);
        const exact = `${randomUUID().slice(0, 23)}k`;
        const first = await send(long, '/charges', { key: exact, body: { amount: 1 } });
        expect(first.status).toBe(201);
        expect(state.executions).toBe(1);
        expect((await send(long, '/charges', { key: `"${exact}"`, body: { amount: 1 } })).headers.get('idempotent-replayed')).toBe('true');
        expect(state.executions).toBe(1);

        state.executions = 0;
        const uuids = await start({ keyPolicy: { format: 'uuid' } });
        const id = randomUUID();
        for (const around of [`order-${id}`, `${id}-retry`, `0${id}`, `${id}0`]) {
          await rejected(await send(uuids, '/charges', { key: around, body: { amount: 1 } }), 400, 'invalid-key');
          await nothingStored(around);
        }
        expect((await send(uuids, '/charges', { key: id, body: { amount: 1 } })).status).toBe(201);
        expect(state.executions).toBe(1);
      });

      it('a body over maxBodyBytes: 413', async () => {
        const small = await start({ maxBodyBytes: 1024 });
        const k = key();
        await rejected(await send(small, '/charges', { key: k, body: 'x'.repeat(2048), headers: { 'content-type': 'text/plain' } }), 413, 'body-too-large');
        await nothingStored(k);
        expect((await send(small, '/charges', { key: k, body: { a: 1 } })).status).toBe(201);
      });

      it('an unauthenticated request: 401 from the auth step', async () => {
        const k = key();
        const before = store.size;
        await rejected(await send(app, '/charges', { key: k, token: null, body: { amount: 1 } }), 401);
        expect(state.executions).toBe(0);
        expect(store.size).toBe(before);
        expect(await store.get({ scope: '', key: k })).toBeUndefined();
      });

      it('a handler that discards (validation failed inside it): the key stays usable', async () => {
        const k = key();
        expect((await send(app, '/discard', { key: k, body: { amount: -1 } })).status).toBe(400);
        await nothingStored(k);
        expect((await send(app, '/discard', { key: k, body: { amount: -1 } })).headers.get('idempotent-replayed')).toBeNull();
      });
    });

    it('passes GET through untouched, even with a key; PUT is not covered by default', async () => {
      const k = key();
      const a = await send(app, '/charges', { method: 'GET', key: k });
      const b = await send(app, '/charges', { method: 'GET', key: k });
      expect(a.json().n).toBe(1);
      expect(b.json().n).toBe(2);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
      await send(app, '/charges', { method: 'PUT', key: k, body: {} });
      expect(state.executions).toBe(3);
      expect(await store.get({ scope: 'tenant-a', key: k })).toBeUndefined();
    });

    it('covers PATCH like POST, and PUT when configured', async () => {
      const k = key();
      await send(app, '/charges', { method: 'PATCH', key: k, body: { amount: 1 } });
      const again = await send(app, '/charges', { method: 'PATCH', key: k, body: { amount: 1 } });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      const withPut = await start({ methods: ['PUT'] });
      const k2 = key();
      await send(withPut, '/charges', { method: 'PUT', key: k2, body: {} });
      expect((await send(withPut, '/charges', { method: 'PUT', key: k2, body: {} })).headers.get('idempotent-replayed')).toBe('true');
      expect(state.executions).toBe(2);
    });

    it('lets a keyless request through unprotected when the key is optional', async () => {
      const optional = await start({ required: false });
      expect((await send(optional, '/charges', { body: { a: 1 } })).status).toBe(201);
      expect((await send(optional, '/charges', { body: { a: 1 } })).status).toBe(201);
      expect(state.executions).toBe(2);
    });

    it('replays binary bodies byte for byte, empty 204s and text', async () => {
      for (const size of [0, 1, 4096, 64 * 1024]) {
        const k = key();
        const first = await send(app, `/binary?size=${size}`, { key: k, body: {} });
        const again = await send(app, `/binary?size=${size}`, { key: k, body: {} });
        expect(first.bytes).toEqual(binaryPattern(size));
        expect(again.bytes).toEqual(binaryPattern(size));
        expect(again.headers.get('content-type')).toBe('application/octet-stream');
        expect(again.headers.get('idempotent-body-omitted')).toBeNull();
      }
      const k = key();
      await send(app, '/empty', { key: k, body: {} });
      const empty = await send(app, '/empty', { key: k, body: {} });
      expect(empty.status).toBe(204);
      expect(empty.bytes.byteLength).toBe(0);
      expect(empty.headers.get('idempotent-replayed')).toBe('true');
      expect(state.executions).toBe(5);
    });

    it('marks an over-limit response body omitted instead of truncating it', async () => {
      const k = key();
      const size = 64 * 1024 + 1;
      const first = await send(app, `/binary?size=${size}`, { key: k, body: {} });
      expect(first.bytes).toEqual(binaryPattern(size));
      const again = await send(app, `/binary?size=${size}`, { key: k, body: {} });
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.headers.get('idempotent-body-omitted')).toBe('true');
      expect(again.headers.get('content-type')).toBe('application/octet-stream');
      expect(again.bytes.byteLength).toBe(0);
      expect(state.executions).toBe(1);
    });

    it('tells its events listeners each decision with the scope, key, method and path (issue 17)', async () => {
      const seen: string[] = [];
      const on = (name: string) => (event: { scope?: string; key?: string; method: string; path: string; status?: number }) =>
        void seen.push(`${name} ${event.method} ${event.path} ${event.scope ?? '-'} ${event.key ?? '-'} ${event.status ?? '-'}`);
      const listened = await start({ events: { execute: on('execute'), complete: on('complete'), replay: on('replay'), mismatch: on('mismatch'), rejected: on('rejected') } });
      const k = key();
      await send(listened, '/charges?x=1', { key: k, body: { amount: 1 } });
      await send(listened, '/charges?x=1', { key: k, body: { amount: 1 } });
      await send(listened, '/charges?x=1', { key: k, body: { amount: 2 } });
      await send(listened, '/charges', { body: { amount: 1 } });
      expect(seen).toEqual([
        `execute POST /charges tenant-a ${k} -`,
        `complete POST /charges tenant-a ${k} 201`,
        `replay POST /charges tenant-a ${k} 201`,
        `mismatch POST /charges tenant-a ${k} 422`,
        'rejected POST /charges - - 400',
      ]);
    });

    it('answers 503 and runs nothing when the store is unreachable (fail closed)', async () => {
      const down = await start({}, unreachableStore());
      const r = await send(down, '/charges', { key: key(), body: { amount: 1 } });
      expect(r.status).toBe(503);
      expect(r.json().type).toBe('urn:idemkit:problem:store-unavailable');
      expect(state.executions).toBe(0);
      const open = await start({ failOpen: true }, unreachableStore());
      expect((await send(open, '/charges', { key: key(), body: { amount: 1 } })).status).toBe(201);
      expect(state.executions).toBe(1);
    });

    describe('transactional mode (SQLite)', () => {
      let dir: string;
      let db: Database.Database;
      let txApp: TestApp;
      let txStore: ReturnType<typeof sqliteStore>;
      const effects = (k: string) => (db.prepare('SELECT count(*) AS n FROM effects WHERE key = ?').get(k) as { n: number }).n;

      beforeAll(async () => {
        dir = mkdtempSync(join(tmpdir(), 'idemkit-matrix-'));
        db = openSqlite(join(dir, 'tx.db'));
        txStore = sqliteStore({ database: db });
        db.exec('CREATE TABLE effects (key TEXT NOT NULL)');
        txApp = await start({ transactional: true }, txStore);
      });
      afterAll(() => {
        txStore.close();
        db.close();
        rmSync(dir, { recursive: true, force: true });
      });

      it('commits the business write and the record together, then replays', async () => {
        const k = key();
        expect((await send(txApp, '/tx', { key: k, body: {} })).status).toBe(201);
        const again = await send(txApp, '/tx', { key: k, body: {} });
        expect(again.status).toBe(201);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(effects(k)).toBe(1);
        expect((await txStore.get({ scope: 'tenant-a', key: k }))?.state).toBe('completed');
      });

      it('a client that hangs up changes nothing: the write through ctx.tx and the record commit once, together', async () => {
        const leased = await start({ transactional: true, leaseMs: 300 }, txStore);
        const k = key();
        await hangUpDuring(leased, '/tx-slow', { key: k, body: {}, headers: { 'x-delay-ms': '1500' } }, () => state.executions > 0);
        await until(async () => (await txStore.get({ scope: 'tenant-a', key: k }))?.state === 'completed', 'the slow handler to commit');
        const retry = await send(leased, '/tx-slow', { key: k, body: {} });
        expect(retry.status).toBe(201);
        expect(retry.headers.get('idempotent-replayed')).toBe('true');
        expect(effects(k)).toBe(1);
        expect(state.executions).toBe(1);
      });

      it('past maxExecutionMs the transaction is rolled back, ctx.tx refuses the late write, and a retry runs once', async () => {
        const reported: unknown[] = [];
        const capped = await start({ transactional: true, leaseMs: 300, maxExecutionMs: 300, onError: (e) => reported.push(e) }, txStore);
        const k = key();
        const late = await send(capped, '/tx-slow', { key: k, body: {}, headers: { 'x-delay-ms': '1200' } });
        expect(late.status).toBe(503);
        expect(late.json().type).toBe('urn:idemkit:problem:execution-timeout');
        expect(effects(k)).toBe(0);
        expect(reported).toContainEqual(expect.objectContaining({ code: 'ERR_IDEMKIT_EXECUTION_TIMEOUT' }));
        // Nothing was committed, so the key is free again (released, or its lease has run out).
        let retry = await send(capped, '/tx-slow', { key: k, body: {} });
        while (retry.status === 409) {
          await sleep(50);
          retry = await send(capped, '/tx-slow', { key: k, body: {} });
        }
        expect(retry.status).toBe(201);
        expect(retry.headers.get('idempotent-replayed')).toBeNull();
        expect(effects(k)).toBe(1);
        expect(state.executions).toBe(2);
      });

      it.each(['throw', 'throw-value', '500'])('rolls back and releases the key when the handler fails (%s)', async (fail) => {
        const k = key();
        expect((await send(txApp, `/tx?fail=${fail}`, { key: k, body: {} })).status).toBe(500);
        expect(effects(k)).toBe(0);
        expect(await txStore.get({ scope: 'tenant-a', key: k })).toBeUndefined();
        const retry = await send(txApp, `/tx?fail=${fail}`, { key: k, body: {} });
        expect(retry.headers.get('idempotent-replayed')).toBeNull();
        expect(state.executions).toBe(2);
      });

      it('runs 50 concurrent requests with one key once, with one committed effect', async () => {
        const k = key();
        const all = await Promise.all(Array.from({ length: 50 }, () => send(txApp, '/tx', { key: k, body: {} })));
        expect(state.executions).toBe(1);
        expect(effects(k)).toBe(1);
        expect(all.filter((r) => r.status === 201 && r.headers.get('idempotent-replayed') === null)).toHaveLength(1);
        for (const r of all) expect([201, 409]).toContain(r.status);
      });
    });

    // --- adapters (issue 14: 5, 6, 7)
    describe('adapters: body-less requests, non-Error throws, a body that fails part-way', () => {
      it.each([
        ['POST', '/orders/o-1/cancel', 201],
        ['POST', '/empty', 204],
        ['PATCH', '/charges', 201],
      ] as const)('runs a keyed %s %s without a body once (%i) and replays it to the retry', async (method, path, status) => {
        const k = key();
        const first = await send(app, path, { method, key: k });
        expect(first.status).toBe(status);
        const again = await send(app, path, { method, key: k });
        expect(again.status).toBe(status);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(again.bytes).toEqual(first.bytes);
        expect(state.executions).toBe(1);
      });

      it('runs a keyed POST whose empty body comes chunked (no Content-Length) once, and replays it', async () => {
        const k = key();
        const cancel = () =>
          fetch(`${app.url}/orders/o-2/cancel`, {
            method: 'POST',
            headers: { authorization: 'Bearer tenant-a', 'idempotency-key': k },
            body: new ReadableStream({ start: (controller) => controller.close() }),
            duplex: 'half',
          } as RequestInit);
        const first = await cancel();
        expect(first.status).toBe(201);
        const firstText = await first.text();
        const again = await cancel();
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(await again.text()).toBe(firstText);
        expect(state.executions).toBe(1);
      });

      it.each(Object.keys(THROWN_VALUES))('stores the answer to a thrown non-Error value (%s) and replays it; the handler runs once', async (kind) => {
        const k = key();
        const first = await send(app, `/throw-value/${kind}`, { key: k, body: {} });
        // Express reads `throw undefined` / `throw null` in a route as next(): its own 404.
        const passedOn = app.quirks?.falsyThrowIsNext === true && !THROWN_VALUES[kind];
        expect(first.status).toBe(passedOn ? 404 : 500);
        const again = await send(app, `/throw-value/${kind}`, { key: k, body: {} });
        expect(again.status).toBe(first.status);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(again.bytes).toEqual(first.bytes);
        expect(state.executions).toBe(1);
        expect((await store.get({ scope: 'tenant-a', key: k }))?.state).toBe('completed');
      });

      it('answers a body that fails part-way with one 500, framed as sent on a keep-alive connection, stored as sent and replayed byte for byte', async () => {
        // Nest on Express answers a failing StreamableFile 400 (FrameworkQuirks.failedStreamStatus).
        const failed = app.quirks?.failedStreamStatus ?? 500;
        const k = key();
        const request = { method: 'POST', path: '/partial', headers: { authorization: 'Bearer tenant-a', 'idempotency-key': k } };
        // Both requests go on one connection: bytes the first answer sent beyond its declared
        // length would sit where the second answer starts, and twoOnOneConnection rejects.
        const [first, retry] = await twoOnOneConnection(app.url, request, request);
        expect(first.status).toBe(failed);
        // The failed answer is replaced whole: none of its partial body goes out with the 500.
        expect(first.body.toString('latin1')).not.toContain(PARTIAL_CHUNK);
        expect(first.headers['idempotent-replayed']).toBeUndefined();
        expect(retry.status).toBe(failed);
        expect(retry.headers['idempotent-replayed']).toBe('true');
        expect(retry.body).toEqual(first.body);
        expect(state.executions).toBe(1);
        const record = await store.get({ scope: 'tenant-a', key: k });
        expect(record?.state).toBe('completed');
        expect(record?.response?.status).toBe(failed);
        expect(Buffer.from(record!.response!.body!)).toEqual(first.body);
      });
    });

    describe('the fingerprint (issue 14, items 10 and 11)', () => {
      const json = (body: string, k: string, type = 'application/json', path = '/charges') =>
        send(app, path, { key: k, body, headers: { 'content-type': type } });
      const refused = (r: Sent) => {
        expect(r.status).toBe(422);
        expect(r.json().type).toBe('urn:idemkit:problem:key-reused');
      };

      it('answers deep JSON (6,000 levels) without a 500: it runs once and is replayed', async () => {
        const deep = '{"a":['.repeat(3000) + ']}'.repeat(3000);
        const k = key();
        const first = await json(deep, k, 'application/json', '/empty');
        expect(first.status).toBe(204);
        expect(first.headers.get('idempotent-replayed')).toBeNull();
        const again = await json(deep, k, 'application/json', '/empty');
        expect(again.status).toBe(204);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(state.executions).toBe(1);
        // A body one level shallower is another request.
        refused(await json('{"a":['.repeat(2999) + ']}'.repeat(2999), k, 'application/json', '/empty'));
        expect(state.executions).toBe(1);
      });

      it('tells numbers beyond 2^53 apart by their digits: 9007199254740993 after …992 is 422', async () => {
        const k = key();
        const first = await json('{"amount":9007199254740992}', k);
        expect(first.status).toBe(201);
        refused(await json('{"amount":9007199254740993}', k));
        refused(await json('{"amount":0.10000000000000001}', k));
        // Other spellings of the same value are the same request.
        const replay = await json('{ "amount" : 9007199254740992.0 }', k);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.text).toBe(first.text);
        expect(state.executions).toBe(1);
      });

      it('tells media types apart: the same bytes as application/merge-patch+json after application/json is 422', async () => {
        const k = key();
        const first = await json('{"amount":5}', k);
        expect(first.status).toBe(201);
        refused(await json('{"amount":5}', k, 'application/merge-patch+json'));
        // Parameters and case are not the media type.
        const replay = await json('{"amount":5}', k, 'Application/JSON; charset=utf-8');
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(state.executions).toBe(1);
      });

      it('does not replay a text/plain answer to the same bytes sent as (invalid) application/json', async () => {
        const k = key();
        const first = await json('{"not json', k, 'text/plain', '/text');
        expect(first.status).toBe(200);
        const again = await json('{"not json', k, 'application/json', '/text');
        // Web and Hono read the bytes and answer 422; the others' JSON parsers refuse JSON that
        // does not parse (400) before the key is claimed (the app says so in its quirks). Neither replays.
        expect(again.headers.get('idempotent-replayed')).toBeNull();
        const parserStatus = app.quirks?.unparsableJsonStatus;
        if (parserStatus === undefined) refused(again);
        else expect(again.status).toBe(parserStatus);
        expect(state.executions).toBe(1);
        expect(Buffer.from((await store.get({ scope: 'tenant-a', key: k }))!.response!.body!).toString()).toBe(first.text);
      });

      it('tells JSON bodies apart by their bytes when they are not UTF-8: the same key with other invalid bytes is 422 (issue 26, item 24)', async () => {
        // A lenient decoder makes U+FFFD of both 0xff and 0xfe: the second would replay the first's answer.
        const invalid = (byte: number) => new Uint8Array([...Buffer.from('{"amount":1,"note":"'), byte, ...Buffer.from('"}')]);
        const bytes = (body: Uint8Array, k: string) => send(app, '/charges', { key: k, body, headers: { 'content-type': 'application/json' } });
        const k = key();
        const first = await bytes(invalid(0xff), k);
        expect(first.status).toBe(201);
        refused(await bytes(invalid(0xfe), k));
        // Nor is it the valid replacement character.
        refused(await json('{"amount":1,"note":"\ufffd"}', k));
        // The same bytes again are the same request.
        const replay = await bytes(invalid(0xff), k);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.text).toBe(first.text);
        expect(state.executions).toBe(1);
      });
    });
  });
}

/** Sends a request and hangs up (aborts the connection) once `started()` says its handler runs. */
async function hangUpDuring(app: TestApp, path: string, init: { key: string; body: unknown; headers: Record<string, string> }, started: () => boolean): Promise<void> {
  const controller = new AbortController();
  const headers = new Headers(init.headers);
  headers.set('authorization', 'Bearer tenant-a');
  headers.set('idempotency-key', init.key);
  headers.set('content-type', 'application/json');
  const gone = fetch(app.url + path, { method: 'POST', headers, body: JSON.stringify(init.body), signal: controller.signal }).then(
    () => 'answered',
    () => 'aborted',
  );
  await until(async () => started(), 'the handler to start');
  controller.abort();
  expect(await gone).toBe('aborted');
}

/** A promise and the function that resolves it: a gate a test opens when an event has happened. */
function opening(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** A real SQLite store whose connection has been closed: every operation fails, as a lost server would. */
function unreachableStore(): IdempotencyStore {
  const db = openSqlite(':memory:');
  const store = sqliteStore({ database: db });
  closeSqlite(db);
  return store;
}
