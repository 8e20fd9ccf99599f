/**
 * How `IdempotencyEngine.decide` claims a request and what it answers, on the memory store: the
 * scope hooks (and `previousScope`'s second claim), waiting for a key in flight, a mismatch
 * re-checked the way its record was fingerprinted, a store that fails or refuses, transactional
 * mode's transaction that does not open, and the events each answer tells. Time is the test's
 * own (fake timers) wherever it matters; the store is wrapped to count or fail its calls.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { recordingEvents } from '../support/recording.js';
import type { Decision, Execution, RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import {
  InvalidRecordRefError,
  InvalidScopeError,
  KeyMismatchError,
  StoreBusyError,
  StoreFullError,
  StoreSchemaMissingError,
  StoreUnavailableError,
} from '../../src/core/errors.js';
import { fingerprint } from '../../src/core/fingerprint.js';
import type { EngineOptions } from '../../src/core/options.js';
import type { ClaimOptions, IdempotencyStore, RecordRef, StoredResponse, TransactionalStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';

interface Req {
  readonly key?: string;
  readonly tenant?: string;
  readonly body?: string;
  readonly path?: string;
}

const reader: RequestReader<Req> = {
  method: () => 'POST',
  header: (request) => request.key,
  path: (request) => request.path ?? '/charges?card=4242',
  contentType: () => 'application/json',
  readBody: (request) => ({ body: Buffer.from(request.body ?? '{"amount":1,"note":"a"}') }),
};

const answer: StoredResponse = { status: 201, headers: [], body: Buffer.from('{"paid":true}'), bodyOmitted: false };
const replayed = (decision: Decision<Req>) => (decision.kind === 'replay' && decision.response.body ? Buffer.from(decision.response.body).toString() : undefined);
const rejected = (decision: Decision<Req>) => (decision.kind === 'reject' ? [decision.error.status, decision.error.code] : decision.kind);
const byTenant = (request: Req) => request.tenant ?? '';
const ref = (key: string, scope = ''): RecordRef => ({ scope, key });

function executionOf(decision: Decision<Req>): Execution {
  if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`);
  return decision.execution;
}

/** A store whose claims are counted per scope, and whose operations a test may replace. */
function counting(store: IdempotencyStore, overrides: Partial<IdempotencyStore> = {}) {
  const claims: string[] = [];
  const releases: string[] = [];
  const wrapped: IdempotencyStore = {
    ...store,
    name: store.name,
    maxResponseBytes: store.maxResponseBytes,
    claim: (r: RecordRef, fp: string, options: ClaimOptions) => {
      claims.push(r.scope);
      return (overrides.claim ?? store.claim.bind(store))(r, fp, options);
    },
    renew: overrides.renew ?? store.renew.bind(store),
    checkpoint: store.checkpoint.bind(store),
    complete: store.complete.bind(store),
    release: (r: RecordRef, token: string) => {
      releases.push(r.scope);
      return (overrides.release ?? store.release.bind(store))(r, token);
    },
    get: overrides.get ?? store.get.bind(store),
  };
  return { store: wrapped, claims, releases };
}


function engineOf(options: Partial<EngineOptions<Req>> & { store: IdempotencyStore }) {
  const reported: unknown[] = [];
  const engine = new IdempotencyEngine<Req>({ onError: (error) => void reported.push(error), ...options } as EngineOptions<Req>);
  return { engine, reported };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('the scope hook', () => {
  it('may answer with a promise, and the body may be read asynchronously', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const asyncReader: RequestReader<Req> = { ...reader, readBody: (request) => Promise.resolve(reader.readBody(request, 1_000) as { body: Uint8Array }) };
    const { engine } = engineOf({ store, scope: (request) => Promise.resolve(`tenant-${request.tenant}`) });
    const execution = executionOf(await engine.decide({ key: 'k', tenant: 'a' }, asyncReader));
    expect(execution.context.scope).toBe('tenant-a');
    await execution.finish(answer);
    expect(replayed(await engine.decide({ key: 'k', tenant: 'a' }, asyncReader))).toBe('{"paid":true}');
  });

  it('a problem it throws is the answer (told to `rejected` without the query); anything else rejects the promise', async () => {
    const { events, named } = recordingEvents();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const refusing = engineOf({ store, events, scope: () => Promise.reject(new InvalidScopeError('no tenant')) }).engine;
    const decision = await refusing.decide({ key: 'k' }, reader);
    expect(rejected(decision)).toEqual([400, 'ERR_IDEMKIT_SCOPE_INVALID']);
    expect(named('rejected')).toEqual([{ status: 400, code: 'ERR_IDEMKIT_SCOPE_INVALID', method: 'POST', path: '/charges' }]);
    const throwing = engineOf({ store, scope: () => Promise.reject(new Error('bug')) }).engine;
    await expect(throwing.decide({ key: 'k' }, reader)).rejects.toThrow('bug');
    expect(store.stats().records).toBe(0);
  });

  it('must answer a string: anything else rejects the promise naming the option', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine } = engineOf({ store, scope: () => 5 as never });
    await expect(engine.decide({ key: 'k' }, reader)).rejects.toThrow('The `scope` option must return a string');
    const previous = engineOf({ store, previousScope: () => null as never }).engine;
    await expect(previous.decide({ key: 'k' }, reader)).rejects.toThrow('The `previousScope` option must return a string');
    expect(await store.get(ref('k'))).toBeUndefined();
  });

  it('a path without a query is told to `rejected` as it is', async () => {
    const { events, named } = recordingEvents();
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), events, scope: () => '\ud800' });
    await engine.decide({ key: 'k', path: '/plain' }, reader);
    expect(named('rejected')).toEqual([{ status: 400, code: 'ERR_IDEMKIT_SCOPE_INVALID', method: 'POST', path: '/plain' }]);
  });
});

/**
 * `previousScope`: a key new under the scope hook is also claimed under the scope this deployment
 * replaced, and answered from a record found there.
 */
describe('previousScope', () => {
  function deployment(options: Partial<EngineOptions<Req>> = {}, overrides: Partial<IdempotencyStore> = {}) {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store, claims, releases } = counting(base, overrides);
    const before = engineOf({ store: base, leaseMs: 300 });
    const after = engineOf({ store, scope: byTenant, previousScope: () => '', leaseMs: 300, ...options });
    return { base, store, claims, releases, before, after };
  }

  it('a record completed under the old scope is replayed, told to `replay` under that scope, and the new claim undone', async () => {
    const { events, named } = recordingEvents();
    const { base, before, after, releases } = deployment({ events });
    await executionOf(await before.engine.decide({ key: 'k' }, reader)).finish(answer);
    expect(replayed(await after.engine.decide({ key: 'k', tenant: 't1' }, reader))).toBe('{"paid":true}');
    expect(named('replay')).toMatchObject([{ scope: '', key: 'k', method: 'POST', path: '/charges', status: 201 }]);
    expect(releases).toEqual(['t1']);
    expect(await base.get(ref('k', 't1'))).toBeUndefined();
  });

  it('a record in flight under the old scope answers 409; another body under it 422', async () => {
    const { base, before, after } = deployment();
    const running = executionOf(await before.engine.decide({ key: 'k' }, reader));
    expect(rejected(await after.engine.decide({ key: 'k', tenant: 't1' }, reader))).toEqual([409, 'ERR_IDEMKIT_KEY_IN_FLIGHT']);
    await running.finish(answer);
    expect(rejected(await after.engine.decide({ key: 'k', tenant: 't1', body: '{"amount":2}' }, reader))).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect(await base.get(ref('k', 't1'))).toBeUndefined();
  });

  it("a record under the old scope whose lease ran out is taken over there, resuming from its recovery point", async () => {
    const { base, before, after } = deployment({ events: recordingEvents().events });
    const abandoned = executionOf(await before.engine.decide({ key: 'k' }, reader));
    await abandoned.context.checkpoint('charged');
    abandoned.context.suspend();
    await abandoned.finish(answer);
    const execution = executionOf(await after.engine.decide({ key: 'k', tenant: 't1' }, reader));
    expect(execution.context).toMatchObject({ scope: '', takeover: true, resumeFrom: 'charged' });
    expect(await base.get(ref('k', 't1'))).toBeUndefined();
    await execution.finish(answer);
    expect(replayed(await before.engine.decide({ key: 'k' }, reader))).toBe('{"paid":true}');
  });

  it('a new key is claimed under both scopes; a previous scope equal to the scope is claimed once', async () => {
    const { after, claims } = deployment();
    await executionOf(await after.engine.decide({ key: 'k', tenant: 't1' }, reader)).finish(answer);
    expect(claims).toEqual(['t1', '']);
    claims.length = 0;
    await executionOf(await after.engine.decide({ key: 'same', tenant: '' }, reader)).finish(answer);
    expect(claims).toEqual(['']);
  });

  it('a replay, a 409 or a 422 under the new scope does not look under the old one, nor leave a claim there', async () => {
    const { base, after, claims } = deployment();
    // The same tenant's records, written by an instance without previousScope (nothing under '').
    const plain = engineOf({ store: base, scope: byTenant, leaseMs: 300 }).engine;
    await executionOf(await plain.decide({ key: 'done', tenant: 't1' }, reader)).finish(answer);
    const running = executionOf(await plain.decide({ key: 'running', tenant: 't1' }, reader));
    expect(replayed(await after.engine.decide({ key: 'done', tenant: 't1' }, reader))).toBe('{"paid":true}');
    expect(rejected(await after.engine.decide({ key: 'running', tenant: 't1' }, reader))).toEqual([409, 'ERR_IDEMKIT_KEY_IN_FLIGHT']);
    expect(rejected(await after.engine.decide({ key: 'done', tenant: 't1', body: '{"amount":2}' }, reader))).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect(claims).toEqual(['t1', 't1', 't1']);
    expect(await base.get(ref('done'))).toBeUndefined();
    expect(await base.get(ref('running'))).toBeUndefined();
    await running.finish(answer);
  });

  it('a take-over under the new scope does not look under the old one', async () => {
    const { after, claims } = deployment({ renewLease: false });
    executionOf(await after.engine.decide({ key: 'k', tenant: 't1' }, reader));
    await vi.advanceTimersByTimeAsync(301);
    claims.length = 0;
    const takeover = executionOf(await after.engine.decide({ key: 'k', tenant: 't1' }, reader));
    expect(takeover.context.takeover).toBe(true);
    expect(claims).toEqual(['t1']);
  });

  it('an unusable previous scope answers 400 naming the hook, and the claim under the scope is undone', async () => {
    const { base, after, releases } = deployment({ previousScope: () => '\u001fidemkit:reserved' });
    const decision = await after.engine.decide({ key: 'k', tenant: 't1' }, reader);
    expect(rejected(decision)).toEqual([400, 'ERR_IDEMKIT_SCOPE_INVALID']);
    expect(decision.kind === 'reject' && decision.error.problem().detail).toContain('the `previousScope` hook returned a scope that starts with U+001F');
    expect(releases).toEqual(['t1']);
    expect(await base.get(ref('k', 't1'))).toBeUndefined();
  });

  it('a previous-scope hook that throws: a problem is the answer, anything else rejects; the claim is undone either way', async () => {
    const problem = deployment({ previousScope: () => Promise.reject(new InvalidScopeError('no tenant')) });
    expect(rejected(await problem.after.engine.decide({ key: 'k', tenant: 't1' }, reader))).toEqual([400, 'ERR_IDEMKIT_SCOPE_INVALID']);
    expect(await problem.base.get(ref('k', 't1'))).toBeUndefined();
    const bug = deployment({ previousScope: () => Promise.reject(new Error('bug')) });
    await expect(bug.after.engine.decide({ key: 'k', tenant: 't1' }, reader)).rejects.toThrow('bug');
    expect(await bug.base.get(ref('k', 't1'))).toBeUndefined();
  });

  it('a claim under the old scope that fails answers 503, tells storeError naming the old scope, and undoes the new claim', async () => {
    const { events, named } = recordingEvents();
    const base = memoryStore({ sweepIntervalMs: 0 });
    const failure = new Error('down');
    const { store } = counting(base, { claim: (r, fp, options) => (r.scope === '' ? Promise.reject(failure) : base.claim(r, fp, options)) });
    const { engine, reported } = engineOf({ store, scope: byTenant, previousScope: () => '', events });
    const decision = await engine.decide({ key: 'k', tenant: 't1' }, reader);
    expect(rejected(decision)).toEqual([503, 'ERR_IDEMKIT_STORE_UNAVAILABLE']);
    expect(named('storeError')).toMatchObject([{ operation: 'claim', error: failure, request: { scope: '', key: 'k' } }]);
    expect(reported).toEqual([failure]);
    expect(await base.get(ref('k', 't1'))).toBeUndefined();
  });

  it('undoing the new claim may fail: reported, and the answer stands', async () => {
    const failure = new Error('release failed');
    const { before, after } = deployment({}, { release: () => Promise.reject(failure) });
    await executionOf(await before.engine.decide({ key: 'k' }, reader)).finish(answer);
    expect(replayed(await after.engine.decide({ key: 'k', tenant: 't1' }, reader))).toBe('{"paid":true}');
    expect(after.reported).toEqual([failure]);
  });
});

describe("inFlight: 'wait'", () => {
  it('polls the store from every 10 ms, doubling up to every 250 ms, and replays once the original finished', async () => {
    const { store, claims } = counting(memoryStore({ sweepIntervalMs: 0 }));
    const { engine } = engineOf({ store, inFlight: 'wait', waitTimeoutMs: 5_000 });
    const original = executionOf(await engine.decide({ key: 'k' }, reader));
    const waiting = engine.decide({ key: 'k' }, reader);
    const pollsAfter = async (ms: number) => {
      await vi.advanceTimersByTimeAsync(ms);
      return claims.length;
    };
    expect(claims.length).toBe(2);
    // 10, 20, 40, 80, 160, then 250 ms apart.
    const times = [9, 1, 19, 1, 39, 1, 79, 1, 159, 1, 249, 1, 249, 1];
    const counts: number[] = [];
    for (const ms of times) counts.push(await pollsAfter(ms));
    expect(counts).toEqual([2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9]);
    await original.finish(answer);
    await vi.advanceTimersByTimeAsync(250);
    expect(replayed(await waiting)).toBe('{"paid":true}');
  });

  it("never sleeps past the original's lease: the waiter takes over when it runs out", async () => {
    const { store, claims } = counting(memoryStore({ sweepIntervalMs: 0 }));
    const { engine } = engineOf({ store, inFlight: 'wait', waitTimeoutMs: 5_000, leaseMs: 1_000, renewLease: false });
    executionOf(await engine.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(995);
    const waiting = engine.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(5);
    expect(claims.length).toBe(3);
    expect(executionOf(await waiting).context.takeover).toBe(true);
  });

  it('gives up at waitTimeoutMs with 409 (told to `conflict`), its last sleep cut to what was left', async () => {
    const { events, named } = recordingEvents();
    const { store, claims } = counting(memoryStore({ sweepIntervalMs: 0 }));
    const { engine } = engineOf({ store, inFlight: 'wait', waitTimeoutMs: 100, retryAfterMs: 2_000, events });
    executionOf(await engine.decide({ key: 'k' }, reader));
    const waiting = engine.decide({ key: 'k' }, reader);
    // Polls at 10, 30, 70, then 100 (30 ms were left, not 80).
    await vi.advanceTimersByTimeAsync(99);
    expect(claims.length).toBe(5);
    await vi.advanceTimersByTimeAsync(1);
    const decision = await waiting;
    expect(claims.length).toBe(6);
    expect(rejected(decision)).toEqual([409, 'ERR_IDEMKIT_KEY_IN_FLIGHT']);
    expect(decision.kind === 'reject' && decision.error.problem().retryAfterMs).toBe(2_000);
    expect(named('conflict')).toMatchObject([{ scope: '', key: 'k', method: 'POST', path: '/charges', status: 409, retryAfterMs: 2_000 }]);
  });
});

describe('a mismatch is checked the way its record was fingerprinted', () => {
  const body = (amount: number, note: string) => JSON.stringify({ amount, note });

  it('a record made with fingerprintFields this engine does not know: 422 saying the settings differ', async () => {
    const { events, named } = recordingEvents();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const fields = engineOf({ store, fingerprintFields: ['amount'] }).engine;
    await executionOf(await fields.decide({ key: 'k', body: body(1, 'a') }, reader)).finish(answer);
    const whole = engineOf({ store, events }).engine;
    const decision = await whole.decide({ key: 'k', body: body(1, 'b') }, reader);
    expect(rejected(decision)).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect(decision.kind === 'reject' && decision.error.problem().detail).toContain('its record was made with fingerprint settings this server does not know');
    expect(named('mismatch')).toMatchObject([{ scope: '', key: 'k', method: 'POST', path: '/charges', status: 422 }]);
  });

  it('…which it knows as previousFingerprintFields: replayed for the same fields, an ordinary 422 for others', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const old = engineOf({ store, fingerprintFields: ['amount'] }).engine;
    await executionOf(await old.decide({ key: 'k', body: body(1, 'a') }, reader)).finish(answer);
    const { engine } = engineOf({ store, previousFingerprintFields: ['amount'] });
    expect(replayed(await engine.decide({ key: 'k', body: body(1, 'b') }, reader))).toBe('{"paid":true}');
    const other = await engine.decide({ key: 'k', body: body(2, 'a') }, reader);
    expect(rejected(other)).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect(other.kind === 'reject' && other.error.problem().detail).toBe(new KeyMismatchError().problem().detail);
  });

  it('a record fingerprinted on the whole body, retried through an engine with fingerprintFields: replayed when the body is the same', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const whole = engineOf({ store }).engine;
    await executionOf(await whole.decide({ key: 'k', body: body(1, 'a') }, reader)).finish(answer);
    const { engine } = engineOf({ store, fingerprintFields: ['amount'] });
    expect(replayed(await engine.decide({ key: 'k', body: body(1, 'a') }, reader))).toBe('{"paid":true}');
    expect(rejected(await engine.decide({ key: 'k', body: body(1, 'b') }, reader))).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
  });

  it('a field-list fingerprint in the form before it named its fields (v2:<hex>) is recognised by the lists this engine knows', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const facts = { method: 'POST', path: '/charges?card=4242', contentType: 'application/json', body: Buffer.from(body(1, 'a')) };
    const named = fingerprint(facts, { fields: ['amount'] });
    const bare = `v2:${named.slice(named.lastIndexOf(':') + 1)}`;
    const claim = await store.claim(ref('k'), bare, { leaseMs: 1_000, windowMs: 60_000 });
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    await store.complete(ref('k'), claim.token, answer);
    const { engine } = engineOf({ store, previousFingerprintFields: ['note'], fingerprintFields: ['amount'] });
    expect(replayed(await engine.decide({ key: 'k', body: body(1, 'b') }, reader))).toBe('{"paid":true}');
    expect(rejected(await engine.decide({ key: 'k', body: body(2, 'a') }, reader))).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
  });

  it('a fingerprint of a form this release does not know: 422 saying the settings differ', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const claim = await store.claim(ref('k'), 'v9:abcdef', { leaseMs: 1_000, windowMs: 60_000 });
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    await store.complete(ref('k'), claim.token, answer);
    const decision = await engineOf({ store }).engine.decide({ key: 'k' }, reader);
    expect(decision.kind === 'reject' && decision.error.problem().detail).toContain('fingerprint settings this server does not know');
  });

  it('a record that cannot be read back: the mismatch stands, and the read failure is reported', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const failure = new Error('read failed');
    const { store } = counting(base, { get: () => Promise.reject(failure) });
    await executionOf(await engineOf({ store: base }).engine.decide({ key: 'k', body: body(1, 'a') }, reader)).finish(answer);
    const { engine, reported } = engineOf({ store });
    const decision = await engine.decide({ key: 'k', body: body(1, 'b') }, reader);
    expect(rejected(decision)).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect(decision.kind === 'reject' && decision.error.problem().detail).toBe(new KeyMismatchError().problem().detail);
    expect(reported).toEqual([failure]);
  });
});

describe('a store that fails or refuses the claim', () => {
  it.each([
    ['full', new StoreFullError('full'), 'ERR_IDEMKIT_STORE_FULL'],
    ['busy', new StoreBusyError('busy'), 'ERR_IDEMKIT_STORE_BUSY'],
    ['never migrated', new StoreSchemaMissingError('postgres', ['table'], 'store.migrate()'), 'ERR_IDEMKIT_STORE_SCHEMA_MISSING'],
  ])('%s: answered with its own problem', async (_what, error, code) => {
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { claim: () => Promise.reject(error) });
    const { engine, reported } = engineOf({ store });
    const decision = await engine.decide({ key: 'k' }, reader);
    expect(decision.kind === 'reject' && decision.error).toBe(error);
    expect(decision.kind === 'reject' && decision.error.code).toBe(code);
    expect(reported).toEqual([error]);
  });

  it('anything else: a generic 503 whose cause is the error, told to storeError; with failOpen the request passes', async () => {
    const { events, named } = recordingEvents();
    const failure = new InvalidRecordRefError('key', 'too long for the column');
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { claim: () => Promise.reject(failure) });
    const decision = await engineOf({ store, events }).engine.decide({ key: 'k' }, reader);
    expect(decision.kind === 'reject' && decision.error).toBeInstanceOf(StoreUnavailableError);
    expect(decision.kind === 'reject' && decision.error.cause).toBe(failure);
    expect(named('storeError')).toEqual([{ operation: 'claim', error: failure, request: { scope: '', key: 'k', method: 'POST', path: '/charges' } }]);
    const open = await engineOf({ store, failOpen: true }).engine.decide({ key: 'k' }, reader);
    expect(open).toMatchObject({ kind: 'pass', failOpen: true });
  });
});

describe('transactional mode: a transaction that does not open', () => {
  function failingBegin(error: unknown) {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store: counted, releases } = counting(base);
    const store: TransactionalStore = { ...counted, beginTransaction: () => Promise.reject(error) };
    return { base, store, releases };
  }

  it('answers 503, releases a new claim and tells storeError (operation beginTransaction)', async () => {
    const { events, named } = recordingEvents();
    const failure = new Error('pool exhausted');
    const { base, store } = failingBegin(failure);
    const { engine, reported } = engineOf({ store, transactional: true, events });
    const decision = await engine.decide({ key: 'k' }, reader);
    expect(decision.kind === 'reject' && decision.error).toBeInstanceOf(StoreUnavailableError);
    expect(reported).toEqual([failure]);
    expect(named('storeError')).toEqual([{ operation: 'beginTransaction', error: failure, request: { scope: '', key: 'k', method: 'POST', path: '/charges' } }]);
    expect(await base.get(ref('k'))).toBeUndefined();
  });

  it('gives a take-over its lease back rather than releasing it, so the recovery point stays', async () => {
    const failure = new Error('pool exhausted');
    const { base, store, releases } = failingBegin(failure);
    const first = executionOf(await engineOf({ store: base }).engine.decide({ key: 'k' }, reader));
    await first.context.checkpoint('charged');
    first.context.suspend();
    await first.finish(answer);
    const { engine } = engineOf({ store, transactional: true });
    expect(rejected(await engine.decide({ key: 'k' }, reader))).toEqual([503, 'ERR_IDEMKIT_STORE_UNAVAILABLE']);
    expect(releases).toEqual([]);
    expect(await base.get(ref('k'))).toMatchObject({ state: 'in_flight', recoveryPoint: 'charged' });
    expect((await engineOf({ store: base }).engine.decide({ key: 'k' }, reader)).kind).toBe('execute');
  });

  it('releases the previous scope’s claim too', async () => {
    const { base, store, releases } = failingBegin(new Error('pool exhausted'));
    const { engine } = engineOf({ store, transactional: true, scope: byTenant, previousScope: () => '' });
    await engine.decide({ key: 'k', tenant: 't1' }, reader);
    expect(releases.sort()).toEqual(['', 't1']);
    expect(await base.get(ref('k'))).toBeUndefined();
    expect(await base.get(ref('k', 't1'))).toBeUndefined();
  });

  it('with failOpen, passes the request with its body', async () => {
    const { store } = failingBegin(new Error('pool exhausted'));
    const decision = await engineOf({ store, transactional: true, failOpen: true }).engine.decide({ key: 'k' }, reader);
    expect(decision.kind === 'pass' && decision.failOpen && Buffer.from(decision.body.body).toString()).toBe('{"amount":1,"note":"a"}');
  });
});

describe('events of a claim', () => {
  it('execute, then takeover and execute for a take-over (with the store time), replay with its status', async () => {
    const { events, named, seen } = recordingEvents();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine } = engineOf({ store, events, leaseMs: 300, renewLease: false });
    executionOf(await engine.decide({ key: 'k' }, reader));
    await vi.advanceTimersByTimeAsync(301);
    const takeover = executionOf(await engine.decide({ key: 'k' }, reader));
    await takeover.finish(answer);
    await engine.decide({ key: 'k' }, reader);
    expect(seen.map(([name]) => name)).toEqual(['execute', 'takeover', 'execute', 'complete', 'replay']);
    expect(named('execute')).toEqual([
      { scope: '', key: 'k', method: 'POST', path: '/charges', takeover: false, storeMs: 0 },
      { scope: '', key: 'k', method: 'POST', path: '/charges', takeover: true, storeMs: 0 },
    ]);
    expect(named('takeover')).toEqual([{ scope: '', key: 'k', method: 'POST', path: '/charges', resumeFrom: undefined }]);
    expect(named('replay')).toEqual([{ scope: '', key: 'k', method: 'POST', path: '/charges', status: 201, storeMs: 0 }]);
  });

  it('storeMs is the time the claim took', async () => {
    const { events, named } = recordingEvents();
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, { claim: async (r, fp, options) => {
      await new Promise((resolve) => setTimeout(resolve, 7));
      return base.claim(r, fp, options);
    } });
    const { engine } = engineOf({ store, events });
    const decided = engine.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(7);
    await decided;
    expect(named('execute')[0]).toMatchObject({ storeMs: 7 });
  });
});

describe('derived engines (withOverrides)', () => {
  it('renew on a keeper of their own lease: a route with a longer lease is renewed less often', async () => {
    let renewals = 0;
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, { renew: (r, token, leaseMs) => {
      renewals++;
      return base.renew(r, token, leaseMs);
    } });
    const parent = engineOf({ store, leaseMs: 300 }).engine;
    const slow = parent.withOverrides({ leaseMs: 900 });
    const same = parent.withOverrides({ leaseMs: 300 });
    executionOf(await slow.decide({ key: 'slow' }, reader));
    await vi.advanceTimersByTimeAsync(900);
    expect(renewals).toBe(3);
    executionOf(await same.decide({ key: 'same' }, reader));
    await vi.advanceTimersByTimeAsync(900);
    expect(renewals).toBe(3 + 3 + 9);
  });

  it('a derived engine reports through its parent’s onError', async () => {
    const failure = new Error('down');
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { claim: () => Promise.reject(failure) });
    const { engine, reported } = engineOf({ store });
    await engine.withOverrides({ leaseMs: 900 }).decide({ key: 'k' }, reader);
    expect(reported).toEqual([failure]);
  });
});

describe('what an adapter asks the engine', () => {
  it('covers methods whatever their case; representationHeaders lists the replayed headers and the representation ones', () => {
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), replayHeaders: ['x-request-id'] });
    expect(engine.covers('post')).toBe(true);
    expect(engine.covers('GET')).toBe(false);
    expect(engine.representationHeaders).toContain('x-request-id');
    expect(engine.representationHeaders).toContain('content-type');
    expect(engine.representationHeaders).toContain('set-cookie');
    expect(Object.isFrozen(engine.representationHeaders)).toBe(true);
  });

  it('parseKey: required as configured (by default), or as the caller says', () => {
    const optional = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), required: false }).engine;
    expect(optional.parseKey(undefined)).toBeUndefined();
    expect(() => optional.parseKey(undefined, true)).toThrow('Idempotency-Key');
    const required = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }) }).engine;
    expect(() => required.parseKey(undefined)).toThrow('Idempotency-Key');
    expect(required.parseKey(undefined, false)).toBeUndefined();
    expect(required.parseKey('abc')).toBe('abc');
  });
});

describe('edges of decide', () => {
  it('passesAtOnce: a header read as null is no key; a list with a key is one', () => {
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), required: false });
    const listing = (values: readonly string[] | null): RequestReader<Req> => ({ ...reader, header: () => values });
    expect(engine.passesAtOnce({}, listing(null))).toBe(true);
    expect(engine.passesAtOnce({}, listing(['k']))).toBe(false);
  });

  it("a route engine that requires a key where its parent does not: a keyless request is refused", async () => {
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), required: false });
    expect(rejected(await engine.withOverrides({ required: true }).decide({}, reader))).toEqual([400, 'ERR_IDEMKIT_KEY_MISSING']);
    expect((await engine.decide({}, reader)).kind).toBe('pass');
  });

  it('a reader that throws something unexpected at once rejects the promise', async () => {
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }) });
    const broken: RequestReader<Req> = {
      ...reader,
      readBody: () => {
        throw new TypeError('stream already read');
      },
    };
    await expect(engine.decide({ key: 'k' }, broken)).rejects.toThrow('stream already read');
  });

  it('a lone surrogate in the scope is refused saying why', async () => {
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), scope: () => 'tenant-\ud800' });
    const decision = await engine.decide({ key: 'k' }, reader);
    expect(decision.kind === 'reject' && decision.error.problem().detail).toContain('the `scope` hook returned ill-formed UTF-16 (a lone surrogate)');
  });

  it('previousScope is given the request the reader put in place, and may answer with a promise', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    await executionOf(await engineOf({ store: base, scope: () => 'old' }).engine.decide({ key: 'k' }, reader)).finish(answer);
    const seen: Req[] = [];
    const replacement: Req = { key: 'k', tenant: 'old' };
    const replacing: RequestReader<Req> = { ...reader, readBody: () => ({ body: Buffer.from('{"amount":1,"note":"a"}'), request: replacement }) };
    const { engine } = engineOf({
      store: base,
      scope: () => 'new',
      previousScope: (request) => {
        seen.push(request);
        return Promise.resolve(request.tenant ?? '');
      },
    });
    expect(replayed(await engine.decide({ key: 'k' }, replacing))).toBe('{"paid":true}');
    expect(seen).toEqual([replacement]);
    expect(seen[0]).toBe(replacement);
  });

  it('a record gone by the time a mismatch is looked into: the mismatch stands, nothing reported', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, { claim: () => Promise.resolve({ kind: 'mismatch' }), get: () => Promise.resolve(undefined) });
    const { engine, reported } = engineOf({ store });
    expect(rejected(await engine.decide({ key: 'k' }, reader))).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect(reported).toEqual([]);
  });

  it('a read past storeTimeoutMs while looking into a mismatch is reported naming the operation', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, { claim: () => Promise.resolve({ kind: 'mismatch' }), get: () => new Promise(() => {}) });
    const { engine, reported } = engineOf({ store, storeTimeoutMs: 100 });
    const decided = engine.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(200);
    expect(rejected(await decided)).toEqual([422, 'ERR_IDEMKIT_KEY_MISMATCH']);
    expect((reported[0] as Error).message).toBe('store get did not answer within 100 ms (option `storeTimeoutMs`)');
  });

  it('a claim past storeTimeoutMs: 503 naming the operation; a late answer that claimed nothing is left alone', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    await executionOf(await engineOf({ store: base }).engine.decide({ key: 'k' }, reader)).finish(answer);
    const { store, releases } = counting(base, {
      claim: async (r, fp, options) => {
        await new Promise((resolve) => setTimeout(resolve, 500));
        return base.claim(r, fp, options);
      },
    });
    const { engine, reported } = engineOf({ store, storeTimeoutMs: 100 });
    const decided = engine.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(200);
    const decision = await decided;
    expect(rejected(decision)).toEqual([503, 'ERR_IDEMKIT_STORE_UNAVAILABLE']);
    expect(((decision.kind === 'reject' && decision.error.cause) as Error).message).toBe('store claim did not answer within 100 ms (option `storeTimeoutMs`)');
    await vi.advanceTimersByTimeAsync(400);
    expect(releases).toEqual([]);
    expect(reported).toHaveLength(1);
  });

  it('a transaction that opens after storeTimeoutMs: 503 naming the operation, and rolled back when it opens', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    let rolledBack = 0;
    const store: TransactionalStore = {
      ...base,
      claim: base.claim.bind(base),
      renew: base.renew.bind(base),
      checkpoint: base.checkpoint.bind(base),
      complete: base.complete.bind(base),
      release: base.release.bind(base),
      get: base.get.bind(base),
      beginTransaction: async () => {
        await new Promise((resolve) => setTimeout(resolve, 500));
        return { tx: {}, complete: async () => {}, checkpoint: async () => {}, commit: async () => {}, rollback: async () => void rolledBack++ };
      },
    };
    const { engine } = engineOf({ store, transactional: true, storeTimeoutMs: 100 });
    const decided = engine.decide({ key: 'k' }, reader);
    await vi.advanceTimersByTimeAsync(200);
    const decision = await decided;
    expect(((decision.kind === 'reject' && decision.error.cause) as Error).message).toBe('store beginTransaction did not answer within 100 ms (option `storeTimeoutMs`)');
    expect(rolledBack).toBe(0);
    await vi.advanceTimersByTimeAsync(400);
    expect(rolledBack).toBe(1);
  });

  it('withOverrides: an override left undefined keeps the parent’s own value, not the default', () => {
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), leaseMs: 300, retryAfterMs: 50 });
    const derived = engine.withOverrides({ leaseMs: undefined, retryAfterMs: 70 });
    expect(derived.options.leaseMs).toBe(300);
    expect(derived.options.retryAfterMs).toBe(70);
  });
});
