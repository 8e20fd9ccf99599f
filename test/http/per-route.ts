/**
 * `middleware.route(overrides)`, run unchanged against each adapter that has it, over real HTTP:
 * a route's own options apply to it and to no other, they are checked when `route` is called,
 * and a request two of the middlewares see is refused.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidOptionError, MountedTwiceError } from '../../src/core/errors.js';
import type { IdempotencyStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { until } from '../support/until.js';
import type { TestApp } from './harness.js';

/** What every route of the app does: counts itself, and waits while the test holds the gate. */
export interface PerRouteState {
  /** Called by every handler before it answers 201 JSON `{ run: <uuid> }`. */
  run(): Promise<void>;
  /** What the framework's error handling saw; it answers them 500. */
  readonly errors: unknown[];
}

export interface PerRouteAdapter {
  /** The adapter's middleware for `options`; the suite calls its `route` only. */
  middleware(options: { store: IdempotencyStore }): { route(overrides?: object): unknown };
  /**
   * The app, with the middleware made of `{ store, scope }` (the scope: the Authorization header)
   * listed on each route as named: POST /strict and /conflict the middleware; /optional
   * `route({ required: false })`; /shared `route({ scope: () => 'one-scope-for-all' })`; /wait
   * `route({ inFlight: 'wait', waitTimeoutMs: 60_000 })`; /twice the middleware and then
   * `route({ leaseMs: 5_000 })`, both.
   */
  serve(store: IdempotencyStore, state: PerRouteState): Promise<TestApp>;
}

/** A memory store that counts the claims it answered `in_flight`. */
function countingStore(): { store: IdempotencyStore; inFlight: () => number } {
  const inner = memoryStore();
  let inFlight = 0;
  const store = new Proxy(inner, {
    get(target, name, receiver) {
      if (name === 'claim') {
        return async (...args: Parameters<IdempotencyStore['claim']>) => {
          const claim = await target.claim(...args);
          if (claim.kind === 'in_flight') inFlight++;
          return claim;
        };
      }
      const value: unknown = Reflect.get(target, name, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  }) as IdempotencyStore;
  return { store, inFlight: () => inFlight };
}

async function post(app: TestApp, path: string, key?: string): Promise<{ status: number; text: string }> {
  const headers = new Headers({ authorization: 'Bearer tenant' });
  if (key !== undefined) headers.set('idempotency-key', key);
  const res = await fetch(app.url + path, { method: 'POST', headers, body: '' });
  return { status: res.status, text: await res.text() };
}

export function describePerRoute(name: string, adapter: PerRouteAdapter): void {
  describe(`per-route options: ${name} middleware.route(overrides)`, () => {
    const apps: TestApp[] = [];
    let started = 0;
    let gate: Promise<void> = Promise.resolve();
    let release = () => {};
    const errors: unknown[] = [];
    const state: PerRouteState = {
      errors,
      run: async () => {
        started++;
        await gate;
      },
    };
    const hold = () => {
      gate = new Promise<void>((resolve) => (release = resolve));
    };
    const serve = async (store: IdempotencyStore) => {
      const app = await adapter.serve(store, state);
      apps.push(app);
      return app;
    };
    afterEach(async () => {
      release();
      gate = Promise.resolve();
      started = 0;
      errors.length = 0;
      await Promise.all(apps.splice(0).map((app) => app.close()));
    });

    it('gives one route its own options, the others keep the middleware\'s', async () => {
      const store = memoryStore();
      const app = await serve(store);
      expect((await post(app, '/strict')).status).toBe(400);
      expect((await post(app, '/optional')).status).toBe(201);
      const key = randomUUID();
      expect((await post(app, '/shared', key)).status).toBe(201);
      expect(await store.get({ scope: 'one-scope-for-all', key })).toMatchObject({ state: 'completed' });
      expect(await store.get({ scope: 'Bearer tenant', key })).toBeUndefined();
      expect(started).toBe(2);
      store.close();
    });

    it('a route with inFlight: \'wait\' replays the first answer to a duplicate; the middleware\'s 409 applies elsewhere', async () => {
      const { store, inFlight } = countingStore();
      const app = await serve(store);
      hold();
      const key = randomUUID();
      const first = post(app, '/wait', key);
      await until(async () => started === 1, 'the first request started');
      const second = post(app, '/wait', key);
      await until(async () => inFlight() >= 1, 'the duplicate found the key in flight');
      const other = randomUUID();
      const conflictFirst = post(app, '/conflict', other);
      await until(async () => started === 2, 'the /conflict request started');
      expect((await post(app, '/conflict', other)).status).toBe(409);
      release();
      const [a, b] = await Promise.all([first, second]);
      expect(a.status).toBe(201);
      expect([b.status, b.text]).toEqual([201, a.text]);
      expect((await conflictFirst).status).toBe(201);
      expect(started).toBe(2);
    });

    it('checks the overrides when route() is called, naming the option', () => {
      const store = memoryStore();
      const idem = adapter.middleware({ store });
      const refused = (call: () => unknown) => {
        try {
          call();
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidOptionError);
          return error as InvalidOptionError;
        }
        throw new Error('accepted');
      };
      expect(refused(() => idem.route({ leaseMs: -1 })).option).toBe('route().leaseMs');
      expect(refused(() => idem.route({ inFlight: 'queue' })).option).toBe('route().inFlight');
      const mountWide = refused(() => idem.route({ store }));
      expect(mountWide.option).toBe('route().store');
      expect(mountWide.message).toMatch(/option of the middleware, not of a route: give it to idempotency/);
      const typo = refused(() => idem.route({ leasMs: 5 }));
      expect(typo.option).toBe('route().leasMs');
      expect(typo.message).toMatch(/did you mean `leaseMs`/);
      expect(refused(() => idem.route('yes' as never)).message).toMatch(/^Invalid option `route\(\)`: expected an object/);
      store.close();
    });

    it('refuses a request two of them see (the middleware and a route\'s copy): MountedTwiceError, and the handler does not run', async () => {
      const store = memoryStore();
      const app = await serve(store);
      expect((await post(app, '/twice', randomUUID())).status).toBe(500);
      expect(started).toBe(0);
      expect(errors).toEqual([expect.any(MountedTwiceError)]);
      store.close();
    });
  });
}
