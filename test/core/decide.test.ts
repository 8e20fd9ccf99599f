import { describe, expect, it } from 'vitest';
import type { RequestBody, RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { BodyTooLargeError, KeyMismatchError, StoreUnavailableError } from '../../src/core/errors.js';
import { memoryStore } from '../../src/stores/memory/index.js';

/** A plain object standing in for a framework's request. */
interface FakeRequest {
  method: string;
  headers: Record<string, string | string[]>;
  body: string;
  url?: string;
}

const reader: RequestReader<FakeRequest> = {
  method: (r) => r.method,
  header: (r, name) => r.headers[name],
  path: (r) => r.url ?? '/charges',
  contentType: () => 'application/json',
  readBody: (r, limit) => {
    const body = Buffer.from(r.body);
    if (body.byteLength > limit) throw new BodyTooLargeError(limit);
    return { body };
  },
};
const post = (key: string | string[] | undefined, body = '{"amount":1}'): FakeRequest => ({
  method: 'POST',
  headers: key === undefined ? {} : { 'idempotency-key': key },
  body,
});

describe('engine.decide answers every request with one result', () => {
  it('passesAtOnce tells, without a promise, the requests decide would pass untouched', () => {
    const optional = new IdempotencyEngine<FakeRequest>({ store: memoryStore({ sweepIntervalMs: 0 }), required: false });
    const required = new IdempotencyEngine<FakeRequest>({ store: memoryStore({ sweepIntervalMs: 0 }) });
    expect(optional.passesAtOnce({ ...post('k'), method: 'GET' }, reader)).toBe(true);
    expect(optional.passesAtOnce(post(undefined), reader)).toBe(true);
    expect(optional.passesAtOnce(post([]), reader)).toBe(true);
    // A key, even an empty or a malformed one, is for decide to parse (and refuse).
    expect(optional.passesAtOnce(post('k'), reader)).toBe(false);
    expect(optional.passesAtOnce(post(''), reader)).toBe(false);
    // Where a key is required, its absence is a 400 from decide.
    expect(required.passesAtOnce(post(undefined), reader)).toBe(false);
    expect(required.passesAtOnce({ ...post(undefined), method: 'GET' }, reader)).toBe(true);
    // A route's own setting is its engine's (withOverrides), as the adapters derive it.
    expect(optional.withOverrides({ required: true }).passesAtOnce(post(undefined), reader)).toBe(false);
    expect(required.withOverrides({ required: false }).passesAtOnce(post(undefined), reader)).toBe(true);
  });

  it('passes uncovered methods and keyless requests where no key is required, without reading the body', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    let reads = 0;
    const counting: RequestReader<FakeRequest> = { ...reader, readBody: (r, limit) => (reads++, reader.readBody(r, limit)) };
    const engine = new IdempotencyEngine<FakeRequest>({ store, required: false });
    expect(await engine.decide({ ...post('k'), method: 'GET' }, counting)).toEqual({ kind: 'pass', failOpen: false, body: undefined });
    expect(await engine.decide(post(undefined), counting)).toEqual({ kind: 'pass', failOpen: false, body: undefined });
    expect(reads).toBe(0);
    store.close();
  });

  it('rejects a missing key, an invalid key and a body over maxBodyBytes (never thrown), and claims nothing', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine<FakeRequest>({ store, maxBodyBytes: 16 });
    const missing = await engine.decide(post(undefined), reader);
    expect(missing.kind === 'reject' && [missing.error.status, missing.error.code]).toEqual([400, 'ERR_IDEMKIT_KEY_MISSING']);
    const repeated = await engine.decide(post(['a', 'b']), reader);
    expect(repeated.kind === 'reject' && [repeated.error.status, repeated.error.code]).toEqual([400, 'ERR_IDEMKIT_KEY_INVALID']);
    const large = await engine.decide(post('k', JSON.stringify({ amount: 1, note: 'x'.repeat(32) })), reader);
    expect(large.kind === 'reject' && [large.error.status, large.error.code]).toEqual([413, 'ERR_IDEMKIT_BODY_TOO_LARGE']);
    expect(store.stats().records).toBe(0);
    store.close();
  });

  it("honours a route engine's own `required` (withOverrides, as a Fastify route's or a Nest route's setting is)", async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine<FakeRequest>({ store, required: true });
    expect((await engine.withOverrides({ required: false }).decide(post(undefined), reader)).kind).toBe('pass');
    expect((await engine.decide(post(undefined), reader)).kind).toBe('reject');
    store.close();
  });

  it('executes, then replays what finish stored from the raw answer (allowlisted headers only), and rejects a changed body', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine<FakeRequest>({ store, replayHeaders: ['x-request-cost'] });
    const first = await engine.decide(post('k'), reader);
    if (first.kind !== 'execute') throw new Error(`expected execute, got ${first.kind}`);
    expect(Buffer.from(first.body.body).toString()).toBe('{"amount":1}');
    const headers = { 'content-type': 'application/json', 'set-cookie': ['s=1'], 'x-request-cost': 3, 'x-trace': 't' };
    expect(await first.execution.finish(201, headers, Buffer.from('{"id":1}'))).toBeUndefined();
    const replay = await engine.decide(post('k'), reader);
    expect(replay.kind === 'replay' && replay.response).toMatchObject({
      status: 201,
      headers: [
        ['content-type', 'application/json'],
        ['x-request-cost', '3'],
      ],
    });
    const changed = await engine.decide(post('k', '{"amount":2}'), reader);
    expect(changed.kind === 'reject' && changed.error).toBeInstanceOf(KeyMismatchError);
    store.close();
  });

  it('takes a fetch Headers object as well as a Node-style record', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine<FakeRequest>({ store });
    const first = await engine.decide(post('h'), reader);
    if (first.kind !== 'execute') throw new Error(`expected execute, got ${first.kind}`);
    await first.execution.finish(200, new Headers({ 'content-type': 'text/plain', 'set-cookie': 's=1' }), Buffer.from('ok'));
    const replay = await engine.decide(post('h'), reader);
    expect(replay.kind === 'replay' && replay.response.headers).toEqual([['content-type', 'text/plain']]);
    store.close();
  });

  it('hands the scope hook the request the reader put in place of the one whose body it read', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const seen: FakeRequest[] = [];
    const engine = new IdempotencyEngine<FakeRequest>({ store, scope: (r) => (seen.push(r), 'tenant') });
    const replacement = post('r');
    const replacing: RequestReader<FakeRequest> = { ...reader, readBody: (r): RequestBody<FakeRequest> => ({ body: Buffer.from(r.body), request: replacement }) };
    const decision = await engine.decide(post('r'), replacing);
    expect(decision.kind).toBe('execute');
    expect(seen).toEqual([replacement]);
    expect(seen[0]).toBe(replacement);
    store.close();
  });

  it('rejects the promise for what idemkit did not expect: a scope hook that throws, a reader that throws', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const engine = new IdempotencyEngine<FakeRequest>({
      store,
      scope: () => {
        throw new Error('auth is down');
      },
    });
    await expect(engine.decide(post('k'), reader)).rejects.toThrow('auth is down');
    const plain = new IdempotencyEngine<FakeRequest>({ store });
    const broken: RequestReader<FakeRequest> = { ...reader, readBody: () => Promise.reject(new SyntaxError('bad JSON')) };
    await expect(plain.decide(post('k'), broken)).rejects.toThrow(SyntaxError);
    expect(store.stats().records).toBe(0);
    store.close();
  });

  it('with failOpen, a store outage passes the request through with the body it read', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const down = { ...store, name: 'down', claim: () => Promise.reject(new StoreUnavailableError('down')) };
    const errors: unknown[] = [];
    const open = new IdempotencyEngine<FakeRequest>({ store: down, failOpen: true, onError: (e) => errors.push(e) });
    const decision = await open.decide(post('k'), reader);
    expect(decision.kind === 'pass' && decision.failOpen && Buffer.from(decision.body.body).toString()).toBe('{"amount":1}');
    const closed = new IdempotencyEngine<FakeRequest>({ store: down, onError: (e) => errors.push(e) });
    const refused = await closed.decide(post('k'), reader);
    expect(refused.kind === 'reject' && refused.error.status).toBe(503);
    expect(errors).toHaveLength(2);
    store.close();
  });
});

describe("a 409's Retry-After is the retry hint, not the lease", () => {
  /**
   * Claims `k` and leaves it running, then answers what a duplicate gets `elapsedMs` later on the
   * store's clock (a fixed, injected clock: the lease left is exact, whatever the machine's load).
   */
  async function duplicate(options: Partial<ConstructorParameters<typeof IdempotencyEngine<FakeRequest>>[0]> = {}, elapsedMs = 0) {
    return (await conflict(options, elapsedMs)).headers['retry-after'];
  }

  /** The error a duplicate is answered with, as `duplicate` makes it. */
  async function conflict(options: Partial<ConstructorParameters<typeof IdempotencyEngine<FakeRequest>>[0]> = {}, elapsedMs = 0) {
    let now = 1_700_000_000_000;
    const store = memoryStore({ sweepIntervalMs: 0, clock: () => now });
    const engine = new IdempotencyEngine<FakeRequest>({ store, ...options });
    const first = await engine.decide(post('k'), reader);
    expect(first.kind).toBe('execute');
    now += elapsedMs;
    const second = await engine.decide(post('k'), reader);
    if (first.kind === 'execute') await first.execution.finish(201, {}, Buffer.from('{}'));
    store.close();
    if (second.kind !== 'reject') throw new Error(`expected reject, got ${second.kind}`);
    expect([second.error.status, second.error.code]).toEqual([409, 'ERR_IDEMKIT_KEY_IN_FLIGHT']);
    return second.error;
  }

  it('answers 1 s by default, with the default 30 s lease', async () => {
    expect(await duplicate()).toBe('1');
  });

  it('follows `retryAfterMs`, in whole seconds rounded up', async () => {
    expect(await duplicate({ retryAfterMs: 5_000 })).toBe('5');
    expect(await duplicate({ retryAfterMs: 2_500 })).toBe('3');
    // Never 0 (RFC 9110 delay-seconds; 0 would invite a busy loop).
    expect(await duplicate({ retryAfterMs: 1 })).toBe('1');
  });

  it('is never more than what is left of the lease', async () => {
    expect(await duplicate({ leaseMs: 2_000, retryAfterMs: 10_000 })).toBe('2');
    // 1.5 s into a 2 s lease, 0.5 s is left: rounded up to the 1 s floor, not the 10 s hint.
    expect(await duplicate({ leaseMs: 2_000, retryAfterMs: 10_000 }, 1_500)).toBe('1');
    expect(await duplicate({ leaseMs: 4_000, retryAfterMs: 10_000 }, 1_500)).toBe('3');
  });

  it('is in the problem body in ms too (`retryAfterMs`), where the header has whole seconds', async () => {
    const hinted = await conflict({ retryAfterMs: 100 });
    expect(hinted.headers['retry-after']).toBe('1');
    expect(hinted.problem()).toEqual({
      retryAfterMs: 100,
      // What the store said of the request holding the key: claimed just now, its lease whole.
      owner: 'alive',
      leaseEndsInMs: 30_000,
      renewedMsAgo: 0,
      type: 'urn:idemkit:problem:request-in-progress',
      title: 'A request with this Idempotency-Key is in progress',
      status: 409,
      detail: 'The original request is still being processed; retry with the same key and body after Retry-After.',
    });
    // Bounded by what is left of the lease, as the header is: 1.5 s into a 2 s lease, 500 ms.
    const late = await conflict({ leaseMs: 2_000, retryAfterMs: 10_000 }, 1_500);
    expect([late.headers['retry-after'], late.problem().retryAfterMs]).toEqual(['1', 500]);
    expect((await conflict({ inFlight: 'wait', waitTimeoutMs: 1, retryAfterMs: 250 })).problem().retryAfterMs).toBe(250);
  });

  it("is the hint too when `inFlight: 'wait'` gives up", async () => {
    expect(await duplicate({ inFlight: 'wait', waitTimeoutMs: 1 })).toBe('1');
  });
});

describe('engine.withOverrides', () => {
  it('derives an engine with a route\'s options, the rest as the parent\'s, the same store, and errors named as asked', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const parent = new IdempotencyEngine<FakeRequest>({ store, retryAfterMs: 2_000, methods: ['POST', 'PUT'] });
    const derived = parent.withOverrides({ fingerprintFields: ['amount'], leaseMs: undefined });
    expect(derived.options.fingerprintFields).toEqual(['amount']);
    expect(derived.options.retryAfterMs).toBe(2_000);
    expect(derived.options.leaseMs).toBe(parent.options.leaseMs);
    expect(derived.covers('PUT')).toBe(true);
    // One onError, so the logger's one line per distinct failure holds across routes.
    expect(derived.options.onError).toBe(parent.options.onError);
    // One store: a key completed through the parent is replayed through the derived engine.
    const first = await parent.decide(post('shared', '{"amount":1,"note":"a"}'), reader);
    if (first.kind !== 'execute') throw new Error(`expected execute, got ${first.kind}`);
    await first.execution.finish(201, {}, Buffer.from('done'), false);
    expect((await derived.decide(post('shared', '{"amount":1,"note":"b"}'), reader)).kind).toBe('reject'); // found in the one store: the parent's record, fingerprinted on the whole body
    expect((await derived.decide(post('fresh', '{"amount":1,"note":"a"}'), reader)).kind).toBe('execute');
    expect(() => parent.withOverrides({ leaseMs: 5 }, { path: 'config.idempotency', suffix: ' of /orders' })).toThrow(
      'Invalid option `config.idempotency.leaseMs of /orders`: expected an integer >= 10, got 5',
    );
  });
});
