/**
 * idemkit/lambda and idemkit/middy beyond the shared matrix (test/http/lambda.test.ts): leases
 * bounded by the invocation's remaining time, what API Gateway's events carry that a fetch
 * request does not (header case, multiValueHeaders, base64 bodies, v1 query parameters), results
 * without a statusCode, and middy's early return and error chain.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { MiddlewareObj } from '@middy/core';
import type { APIGatewayProxyEvent, Context } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import type { ClaimOptions, IdempotencyStore, RecordRef } from '../../src/core/store.js';
import type { LambdaHttpEvent, LambdaHttpResult } from '../../src/lambda/index.js';
import { withIdempotency } from '../../src/lambda/index.js';
import { idempotency } from '../../src/lambda/middy.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import type { Received } from '../http/apps/lambda-app.js';
import { fakeContext, httpApiEvent, restEvent, tenantOf } from '../http/apps/lambda-app.js';
import { until } from '../support/until.js';

const T0 = Date.UTC(2026, 0, 1);

function request(init: { method?: string; path?: string; headers?: Array<[string, string]>; body?: string | Uint8Array } = {}): Received {
  const body = typeof init.body === 'string' ? Buffer.from(init.body) : (init.body ?? new Uint8Array(0));
  return { method: init.method ?? 'POST', url: new URL(init.path ?? '/charges', 'http://gateway.test'), headers: init.headers ?? [], body };
}

const keyed = (key: string, more: Array<[string, string]> = []): Array<[string, string]> => [['Idempotency-Key', key], ['Content-Type', 'application/json'], ...more];

/** A handler that counts its runs and can be held open (an invocation that never ends: a timeout). */
function counting() {
  const runs: Array<{ takeover: boolean | undefined }> = [];
  let hold: Promise<void> | undefined;
  return {
    runs,
    holdNext(gate: Promise<void>) {
      hold = gate;
    },
    handler: async (_event: LambdaHttpEvent, _context: Context, ctx: { takeover: boolean } | undefined): Promise<LambdaHttpResult> => {
      runs.push({ takeover: ctx?.takeover });
      const wait = hold;
      hold = undefined;
      await wait;
      return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ n: runs.length }) };
    },
  };
}

/** A store that tells every lease it is asked for. */
function leaseSpy(store: IdempotencyStore): { store: IdempotencyStore; claims: number[]; renewals: number[] } {
  const claims: number[] = [];
  const renewals: number[] = [];
  const spied = Object.assign(Object.create(store) as IdempotencyStore, {
    claim: (ref: RecordRef, fp: string, o: ClaimOptions) => {
      claims.push(o.leaseMs);
      return store.claim(ref, fp, o);
    },
    renew: (ref: RecordRef, token: string, leaseMs: number) => {
      renewals.push(leaseMs);
      return store.renew(ref, token, leaseMs);
    },
  });
  return { store: spied, claims, renewals };
}

describe('the lease never outlives the invocation', () => {
  it("a claim's lease ends at getRemainingTimeInMillis() + leaseMarginMs, and the retry of a timed-out invocation takes over then, not after leaseMs", async () => {
    let now = T0;
    const store = memoryStore({ sweepIntervalMs: 0, clock: () => now });
    const app = counting();
    const handler = withIdempotency(app.handler, { store, scope: tenantOf });
    const key = randomUUID();
    const event = () => restEvent(request({ headers: keyed(key), body: '{"amount":1}' }), 'tenant-a');
    // The first invocation has 5 s left and never ends: Lambda stopped it at its timeout.
    app.holdNext(new Promise<void>(() => {}));
    void handler(event(), fakeContext(() => 5_000));
    await until(async () => (await store.get({ scope: 'tenant-a', key })) !== undefined, 'the first invocation to claim');
    expect((await store.get({ scope: 'tenant-a', key }))!.leaseUntil).toBe(T0 + 5_000 + 1_000);
    // Until then the key is held: the retry gets 409.
    now = T0 + 5_999;
    expect((await handler(event(), fakeContext())).statusCode).toBe(409);
    // Then the retry takes it over, 24 s before the default 30 s lease would have let it.
    now = T0 + 6_000;
    const retry = await handler(event(), fakeContext());
    expect(retry.statusCode).toBe(201);
    expect(app.runs).toEqual([{ takeover: false }, { takeover: true }]);
    store.close();
  });

  it('without a context that tells the time left, the lease is leaseMs', async () => {
    const now = T0;
    const store = memoryStore({ sweepIntervalMs: 0, clock: () => now });
    const app = counting();
    const handler = withIdempotency(app.handler, { store, scope: tenantOf });
    const key = randomUUID();
    app.holdNext(new Promise<void>(() => {}));
    void handler(restEvent(request({ headers: keyed(key), body: '{}' }), 'tenant-a'), {} as Context);
    await until(async () => (await store.get({ scope: 'tenant-a', key })) !== undefined, 'the claim');
    expect((await store.get({ scope: 'tenant-a', key }))!.leaseUntil).toBe(T0 + 30_000);
    store.close();
  });

  it('without a Lambda context, 10 rounds of 20 concurrent invocations with one key run once per round (the race check that made Powertools run 10 twice)', async () => {
    const store = memoryStore();
    const app = counting();
    const handler = withIdempotency(app.handler, { store, scope: tenantOf });
    for (let round = 0; round < 10; round++) {
      const event = restEvent(request({ headers: keyed(randomUUID()), body: '{"amount":1}' }), 'tenant-a');
      let open!: () => void;
      app.holdNext(new Promise<void>((resolve) => (open = resolve)));
      const first = handler(event, undefined as unknown as Context);
      // The first holds the key until the 19 others have their answers: each meets it in flight.
      const others = await Promise.all(Array.from({ length: 19 }, () => handler(event, undefined as unknown as Context)));
      open();
      expect((await first).statusCode).toBe(201);
      expect(others.map((r) => r.statusCode)).toEqual(Array(19).fill(409));
    }
    expect(app.runs).toHaveLength(10);
    store.close();
  });

  it('each renewal asks for at most the time left then plus the margin', async () => {
    const inner = memoryStore({ sweepIntervalMs: 0 });
    const { store, claims, renewals } = leaseSpy(inner);
    // The time left, read once per lease the adapter asks for: 200, 150, 100 … 0.
    const left = [200, 150, 100, 50];
    const asked: number[] = [];
    const context = fakeContext(() => {
      const ms = left.shift() ?? 0;
      asked.push(ms);
      return ms;
    });
    const app = counting();
    let open!: () => void;
    app.holdNext(new Promise<void>((resolve) => (open = resolve)));
    const handler = withIdempotency(app.handler, { store, scope: tenantOf, leaseMs: 300, leaseMarginMs: 20 });
    const answer = handler(restEvent(request({ headers: keyed(randomUUID()), body: '{}' }), 'tenant-a'), context);
    await until(async () => renewals.length >= 5, 'five renewals');
    open();
    expect((await answer).statusCode).toBe(201);
    // Every lease asked of the store is the time left at that moment plus 20 ms, never leaseMs.
    expect([...claims, ...renewals.slice(0, 5)]).toEqual(asked.slice(0, 6).map((ms) => ms + 20));
    expect(Math.max(...claims, ...renewals)).toBeLessThan(300);
    inner.close();
  });

  it('refuses a leaseMarginMs that is not a number of ms', () => {
    const store = memoryStore();
    expect(() => withIdempotency(counting().handler, { store, leaseMarginMs: -1 })).toThrow(/leaseMarginMs/);
    expect(() => idempotency({ store, leaseMarginMs: Number.NaN })).toThrow(/leaseMarginMs/);
    store.close();
  });
});

describe("what API Gateway's events carry", () => {
  const store = memoryStore();
  const app = counting();
  const handler = withIdempotency(app.handler, { store, scope: tenantOf });

  it('reads the key in any case, from headers alone or from multiValueHeaders', async () => {
    const key = randomUUID();
    const upper = restEvent(request({ headers: [['IDEMPOTENCY-KEY', key]], body: '{}' }), 'tenant-a');
    const onlyHeaders: APIGatewayProxyEvent = { ...restEvent(request({ headers: [['idempotency-key', key]], body: '{}' }), 'tenant-a'), multiValueHeaders: {} };
    const runs = app.runs.length;
    expect((await handler(upper, fakeContext())).statusCode).toBe(201);
    const replay = await handler(onlyHeaders, fakeContext());
    expect(replay.headers?.['idempotent-replayed']).toBe('true');
    expect(app.runs.length).toBe(runs + 1);
  });

  it('answers 400 to a key repeated in multiValueHeaders, even under two spellings', async () => {
    const event = restEvent(request({ headers: [['Idempotency-Key', 'a'], ['idempotency-key', 'b']], body: '{}' }), 'tenant-a');
    const answer = await handler(event, fakeContext());
    expect(answer.statusCode).toBe(400);
    expect(answer.headers?.['content-type']).toBe('application/problem+json');
    expect(JSON.parse(answer.body!).type).toBe('urn:idemkit:problem:invalid-key');
  });

  it('fingerprints the decoded body: the same JSON base64-encoded replays, other JSON is 422', async () => {
    const key = randomUUID();
    const text = httpApiEvent(request({ headers: keyed(key), body: '{"amount":5}' }), 'tenant-a', 'http-api');
    expect(text.isBase64Encoded).toBe(false);
    expect((await handler(text, fakeContext())).statusCode).toBe(201);
    const encoded = { ...text, body: Buffer.from('{ "amount": 5 }').toString('base64'), isBase64Encoded: true };
    expect((await handler(encoded, fakeContext())).headers?.['idempotent-replayed']).toBe('true');
    const other = { ...text, body: Buffer.from('{"amount":6}').toString('base64'), isBase64Encoded: true };
    expect((await handler(other, fakeContext())).statusCode).toBe(422);
  });

  it("reads a REST event's query from multiValueQueryStringParameters: ?a=1&a=2 after ?a=1 is 422", async () => {
    const key = randomUUID();
    const one = restEvent(request({ path: '/charges?a=1', headers: keyed(key), body: '{}' }), 'tenant-a');
    const two = restEvent(request({ path: '/charges?a=1&a=2', headers: keyed(key), body: '{}' }), 'tenant-a');
    expect(two.multiValueQueryStringParameters).toEqual({ a: ['1', '2'] });
    expect((await handler(one, fakeContext())).statusCode).toBe(201);
    expect((await handler(two, fakeContext())).statusCode).toBe(422);
    expect((await handler(one, fakeContext())).headers?.['idempotent-replayed']).toBe('true');
  });

  it('replays a binary answer base64-encoded, and a REST answer with a repeated header through multiValueHeaders', async () => {
    const bytes = Uint8Array.from({ length: 64 }, (_, i) => (i * 37) & 255);
    const binary = withIdempotency(
      async (): Promise<LambdaHttpResult> => ({
        statusCode: 200,
        multiValueHeaders: { 'content-type': ['application/octet-stream'], link: ['</a>; rel=a', '</b>; rel=b'] },
        body: Buffer.from(bytes).toString('base64'),
        isBase64Encoded: true,
      }),
      { store, scope: tenantOf, replayHeaders: ['content-type', 'link'] },
    );
    const event = restEvent(request({ headers: keyed(randomUUID()), body: '{}' }), 'tenant-a');
    await binary(event, fakeContext());
    const replay = await binary(event, fakeContext());
    expect(replay.isBase64Encoded).toBe(true);
    expect(Buffer.from(replay.body!, 'base64')).toEqual(Buffer.from(bytes));
    expect(replay.multiValueHeaders).toMatchObject({ link: ['</a>; rel=a', '</b>; rel=b'], 'idempotent-replayed': ['true'] });
  });

  it('takes a v2 result without a statusCode as API Gateway does: a 200 JSON body, stored and replayed', async () => {
    let runs = 0;
    const shortcut = withIdempotency(async () => ({ id: ++runs }) as unknown as LambdaHttpResult, { store, scope: tenantOf });
    const event = httpApiEvent(request({ headers: keyed(randomUUID()), body: '{}' }), 'tenant-a', 'http-api');
    const first = await shortcut(event, fakeContext());
    const replay = await shortcut(event, fakeContext());
    expect(replay).toMatchObject({ statusCode: 200, body: '{"id":1}', isBase64Encoded: false });
    expect(replay.headers).toMatchObject({ 'content-type': 'application/json', 'idempotent-replayed': 'true' });
    expect(runs).toBe(1);
    expect(first).toEqual({ statusCode: 200, headers: { 'content-type': 'application/json' }, body: '{"id":1}' });
  });
});

describe('the middy middleware', () => {
  const event = () => httpApiEvent(request({ headers: keyed(randomUUID()), body: '{"amount":1}' }), 'tenant-a', 'http-api');

  it('returns a replay early: neither the handler nor a later before-middleware runs', async () => {
    const store = memoryStore();
    let handled = 0;
    let laterBefore = 0;
    const later: MiddlewareObj<LambdaHttpEvent, LambdaHttpResult> = { before: async () => void laterBefore++ };
    const handler = middy<LambdaHttpEvent, LambdaHttpResult, Error, Context>()
      .use(idempotency({ store, scope: tenantOf }))
      .use(later)
      .handler(async () => ({ statusCode: 201, headers: { 'content-type': 'text/plain' }, body: String(++handled) }));
    const e = event();
    const first = await handler(e, fakeContext());
    const replay = await handler(e, fakeContext());
    expect(first.statusCode).toBe(201);
    expect(replay).toMatchObject({ statusCode: 201, body: '1', headers: { 'idempotent-replayed': 'true' } });
    expect({ handled, laterBefore }).toEqual({ handled: 1, laterBefore: 1 });
    store.close();
  });

  it("stores an inner error middleware's answer to a throw, and replays it without running the handler again", async () => {
    const store = memoryStore();
    let handled = 0;
    const errors: MiddlewareObj<LambdaHttpEvent, LambdaHttpResult> = {
      onError: async (request) => {
        request.response = { statusCode: 418, headers: { 'content-type': 'text/plain' }, body: `caught ${(request.error as Error).message}` };
      },
    };
    const handler = middy<LambdaHttpEvent, LambdaHttpResult, Error, Context>()
      .use(idempotency({ store, scope: tenantOf }))
      .use(errors)
      .handler(async () => {
        handled++;
        throw new Error('declined');
      });
    const e = event();
    expect(await handler(e, fakeContext())).toMatchObject({ statusCode: 418, body: 'caught declined' });
    expect(await handler(e, fakeContext())).toMatchObject({ statusCode: 418, body: 'caught declined', headers: { 'idempotent-replayed': 'true' } });
    expect(handled).toBe(1);
    store.close();
  });

  it("gives the handler its ctx through middleware.context(context), and none to a request that passes through (GET)", async () => {
    const store = memoryStore();
    const idem = idempotency({ store, scope: tenantOf });
    const seen: Array<string | undefined> = [];
    const handler = middy<LambdaHttpEvent, LambdaHttpResult, Error, Context>()
      .use(idem)
      .handler(async (_e, context) => {
        seen.push(idem.context(context)?.key);
        return { statusCode: 200 };
      });
    const key = randomUUID();
    await handler(httpApiEvent(request({ headers: keyed(key), body: '{}' }), 'tenant-a', 'http-api'), fakeContext());
    await handler(httpApiEvent(request({ method: 'GET', headers: keyed(key) }), 'tenant-a', 'http-api'), fakeContext());
    expect(seen).toEqual([key, undefined]);
    store.close();
  });
});
