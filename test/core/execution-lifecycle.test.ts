/**
 * One claimed request from the claim to its end, through the engine's public API (`decide`, the
 * execution it hands out, its context), against the memory store: what each way of ending does to
 * the record (stored, released, kept in flight), what the store's transaction sees in
 * transactional mode, how the lease is renewed and when it stops, what the events and the logger
 * are told. These pin behaviour rather than the class's shape, so that they still hold when
 * Execution is rewritten (docs/mutation.md lists what they were written against).
 *
 * Time is the test's own (fake timers: the lease keeper's ticks, Date.now, performance.now); a
 * store that should be slow waits on a latch the test opens.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Decision, Execution, RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import {
  ExecutionEndedError,
  LeaseLostError,
  NotTransactionalError,
  StoreUnavailableError,
  TransactionalModeError,
  TransactionEndedError,
} from '../../src/core/errors.js';
import type { CompleteEvent } from '../../src/core/events.js';
import { redactedKey } from '../../src/core/events.js';
import type { EngineOptions } from '../../src/core/options.js';
import type { IdempotencyStore, RecordRef, StoredResponse, TransactionalStore } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { latch, recordingEvents, recordingLogger } from '../support/recording.js';
import type { FakeTx } from '../support/transactional-memory.js';
import { transactionalMemory } from '../support/transactional-memory.js';

interface Req {
  readonly key: string;
  readonly tenant?: string;
}

const reader: RequestReader<Req> = {
  method: () => 'POST',
  header: (request) => request.key,
  path: () => '/charges?card=4242',
  contentType: () => 'application/json',
  readBody: () => ({ body: Buffer.from('{"amount":1}') }),
};

const answer: StoredResponse = { status: 201, headers: [], body: Buffer.from('{"paid":true}'), bodyOmitted: false };
const body = (decision: Decision<Req>) => (decision.kind === 'replay' && decision.response.body ? Buffer.from(decision.response.body).toString() : undefined);

async function executing(engine: IdempotencyEngine<Req>, key: string, tenant?: string): Promise<Execution> {
  const decision = await engine.decide({ key, tenant }, reader);
  if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`);
  return decision.execution;
}

/** A store that counts the calls made to it and lets a test replace any one of them. */
function counting<S extends IdempotencyStore>(store: S, overrides: Partial<IdempotencyStore> = {}) {
  const calls: string[] = [];
  const count = <A extends unknown[], R>(name: string, fn: (...args: A) => R) => (...args: A) => {
    calls.push(name);
    return fn(...args);
  };
  const wrapped: IdempotencyStore = {
    ...store,
    name: store.name,
    maxResponseBytes: store.maxResponseBytes,
    claim: count('claim', overrides.claim ?? store.claim.bind(store)),
    renew: count('renew', overrides.renew ?? store.renew.bind(store)),
    checkpoint: count('checkpoint', overrides.checkpoint ?? store.checkpoint.bind(store)),
    complete: count('complete', overrides.complete ?? store.complete.bind(store)),
    release: count('release', overrides.release ?? store.release.bind(store)),
    get: store.get.bind(store),
  };
  const callsOf = (name: string) => calls.filter((call) => call === name).length;
  return { store: wrapped, calls, callsOf };
}

function engineOf(options: Partial<EngineOptions<Req>> & { store: IdempotencyStore }) {
  const reported: unknown[] = [];
  const engine = new IdempotencyEngine<Req>({ onError: (error) => void reported.push(error), ...options } as EngineOptions<Req>);
  return { engine, reported };
}

const ref = (key: string, scope = ''): RecordRef => ({ scope, key });

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('finish', () => {
  it('stores the answer once: a second finish, or an abort after it, changes nothing', async () => {
    const { store, callsOf } = counting(memoryStore({ sweepIntervalMs: 0 }));
    const { engine } = engineOf({ store });
    const execution = await executing(engine, 'once');
    expect(await execution.finish(answer)).toBeUndefined();
    expect(await execution.finish({ ...answer, body: Buffer.from('"again"') })).toBeUndefined();
    await execution.abort();
    expect(callsOf('complete')).toBe(1);
    expect(callsOf('release')).toBe(0);
    expect(body(await engine.decide({ key: 'once' }, reader))).toBe('{"paid":true}');
  });

  it('takes the raw answer (status, headers, body) and keeps only the replayed headers', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine } = engineOf({ store });
    const execution = await executing(engine, 'raw');
    await execution.finish(201, [['content-type', 'application/json'], ['set-cookie', 'a=1']], Buffer.from('{"raw":1}'));
    const replay = await engine.decide({ key: 'raw' }, reader);
    expect(replay.kind === 'replay' && replay.response.headers).toEqual([['content-type', 'application/json']]);
    expect(body(replay)).toBe('{"raw":1}');
  });

  it('a store that fails the completion: the answer still goes out, onError hears it (no events option)', async () => {
    const failure = new Error('disk full');
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { complete: () => Promise.reject(failure) });
    const { engine, reported } = engineOf({ store });
    const execution = await executing(engine, 'lost');
    expect(await execution.finish(answer)).toBeUndefined();
    expect(reported).toEqual([failure]);
  });

  it('a completion past storeTimeoutMs is reported naming the operation, and the answer still goes out', async () => {
    const never = new Promise<void>(() => {});
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { complete: () => never });
    const { engine, reported } = engineOf({ store, storeTimeoutMs: 100 });
    const execution = await executing(engine, 'slow');
    const finished = execution.finish(answer);
    await vi.advanceTimersByTimeAsync(200);
    expect(await finished).toBeUndefined();
    expect(reported).toHaveLength(1);
    expect(reported[0]).toBeInstanceOf(StoreUnavailableError);
    expect((reported[0] as Error).message).toBe('store complete did not answer within 100 ms (option `storeTimeoutMs`)');
  });
});

describe('finishAtOnce', () => {
  const headers = { 'content-type': 'application/json' };

  it('on the memory store: the record is complete when it returns, with nothing to wait for', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine, reported } = engineOf({ store });
    const execution = await executing(engine, 'at-once');
    const result = execution.finishAtOnce(201, headers, Buffer.from('{"paid":true}'));
    expect(result).toBeUndefined(); // not a promise: the adapter answers in the same turn
    // The memory store reads inside its call: asked now, before any turn passes, it has the answer.
    const record = store.get(ref('at-once'));
    expect((await record)?.state).toBe('completed');
    expect(body(await engine.decide({ key: 'at-once' }, reader))).toBe('{"paid":true}');
    // Once only: a later finish stores nothing more.
    expect(await execution.finish(answer)).toBeUndefined();
    expect(reported).toEqual([]);
  });

  it('a completion the store refuses (the lease was taken over) is reported, and the answer still goes out', async () => {
    let now = 0;
    const store = memoryStore({ sweepIntervalMs: 0, clock: () => now });
    const { engine, reported } = engineOf({ store, leaseMs: 1_000, renewLease: false });
    const execution = await executing(engine, 'lost');
    now = 5_000; // the lease is over: another request takes the key over
    expect((await engine.decide({ key: 'lost' }, reader)).kind).toBe('execute');
    expect(execution.finishAtOnce(201, headers, Buffer.from('"late"'))).toBeUndefined();
    await vi.advanceTimersByTimeAsync(0);
    expect(reported).toHaveLength(1);
    expect(reported[0]).toBeInstanceOf(LeaseLostError);
  });

  it('waits for the store as finish does: a store that answers later, a transaction, a listener, a discard', async () => {
    const slow = latch();
    const inner = memoryStore({ sweepIntervalMs: 0 });
    const { store: slowStore } = counting(inner, { complete: async (...args) => (await slow.promise, inner.complete(...args)) });
    const cases: Array<[string, IdempotencyEngine<Req>, (execution: Execution) => void]> = [
      ['a store whose completion is not settled on return', engineOf({ store: slowStore }).engine, () => {}],
      ['transactional mode', engineOf({ store: transactionalMemory().store, transactional: true }).engine, () => {}],
      ['an events listener', engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), events: recordingEvents().events }).engine, () => {}],
      ['ctx.discard()', engineOf({ store: memoryStore({ sweepIntervalMs: 0 }) }).engine, (execution) => execution.context.discard()],
    ];
    for (const [what, engine, before] of cases) {
      const execution = await executing(engine, `waits-${cases.findIndex(([name]) => name === what)}`);
      before(execution);
      const result = execution.finishAtOnce(201, headers, Buffer.from('{}'));
      expect(result, what).toBeInstanceOf(Promise);
      if (what.startsWith('a store')) slow.open();
      expect(await result, what).toBeUndefined();
    }
  });
});

describe('the complete event', () => {
  it('says how long the handler ran and the store took, to a tenth of a ms', async () => {
    const { events, named } = recordingEvents();
    const gate = latch();
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, {
      complete: async (...args) => {
        await gate.promise;
        return base.complete(...args);
      },
    });
    const { engine } = engineOf({ store, events });
    // Not at the fake clock's zero, so that a sum would not pass for a difference.
    await vi.advanceTimersByTimeAsync(1_000);
    const execution = await executing(engine, 'timed');
    await vi.advanceTimersByTimeAsync(25.5);
    const finished = execution.finish(answer);
    await vi.advanceTimersByTimeAsync(4);
    gate.open();
    await finished;
    expect(named('complete')).toEqual([
      { scope: '', key: 'timed', method: 'POST', path: '/charges', outcome: 'stored', status: 201, bodyBytes: 13, handlerMs: 25.5, storeMs: 4 },
    ]);
  });

  it('stored up to maxResponseBytes, omitted past it, and a body-less answer counts 0 bytes', async () => {
    const { events, named } = recordingEvents();
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0, maxResponseBytes: 4 }), events });
    await (await executing(engine, 'fits')).finish({ ...answer, body: Buffer.from('1234') });
    await (await executing(engine, 'over')).finish({ ...answer, body: Buffer.from('12345') });
    await (await executing(engine, 'none')).finish({ status: 204, headers: [], body: null, bodyOmitted: false });
    expect(named('complete').map((event) => [event.key, event.outcome, event.bodyBytes])).toEqual([
      ['fits', 'stored', 4],
      ['over', 'omitted', 5],
      ['none', 'stored', 0],
    ]);
  });

  it("says `failed` and tells storeError (operation complete), not leaseLost, when the store's completion fails", async () => {
    const { events, named } = recordingEvents();
    const failure = new Error('disk full');
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { complete: () => Promise.reject(failure) });
    const { engine } = engineOf({ store, events });
    await (await executing(engine, 'k')).finish(answer);
    expect(named('complete')[0]).toMatchObject({ outcome: 'failed' });
    expect(named('storeError')).toEqual([{ operation: 'complete', error: failure, request: { scope: '', key: 'k', method: 'POST', path: '/charges' } }]);
    expect(named('leaseLost')).toEqual([]);
  });

  it('an abort after suspend says suspended and keeps the record in flight for the retry', async () => {
    const { events, named } = recordingEvents();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine } = engineOf({ store, events });
    const execution = await executing(engine, 'paused');
    execution.context.suspend();
    await execution.abort();
    expect(named('complete')).toMatchObject([{ outcome: 'suspended', status: 0, bodyBytes: 0 }]);
    expect(await store.get(ref('paused'))).toMatchObject({ state: 'in_flight' });
    // Its lease was given back: the retry takes over at once.
    expect((await executing(engine, 'paused')).context.takeover).toBe(true);
  });

  it('suspend then finish says suspended, stores nothing, and the retry takes over at once', async () => {
    const { events, named } = recordingEvents();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine } = engineOf({ store, events });
    const execution = await executing(engine, 'later');
    execution.context.suspend();
    expect(await execution.finish(answer)).toBeUndefined();
    expect(named('complete')).toMatchObject([{ outcome: 'suspended' }]);
    expect((await executing(engine, 'later')).context.takeover).toBe(true);
  });
});

describe('ctx.beginTransaction (a recovery phase of its own)', () => {
  it('is refused in transactional mode, after the request ended, and on a store without transactions', async () => {
    const { store } = transactionalMemory();
    const transactional = engineOf({ store, transactional: true }).engine;
    const inTransaction = (await executing(transactional, 'tx')).context.beginTransaction();
    await expect(inTransaction).rejects.toThrow(TransactionalModeError);
    await expect(inTransaction).rejects.toThrow('ctx.beginTransaction() is refused in transactional mode');

    const plain = engineOf({ store }).engine;
    const ended = await executing(plain, 'ended');
    await ended.finish(answer);
    await expect(ended.context.beginTransaction()).rejects.toThrow(ExecutionEndedError);
    await expect(ended.context.beginTransaction()).rejects.toThrow('ctx.beginTransaction() after the request has ended');

    const memory = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }) }).engine;
    const refused = (await executing(memory, 'none')).context.beginTransaction();
    await expect(refused).rejects.toThrow(NotTransactionalError);
    await expect(refused).rejects.toThrow('the memory store has none');
  });

  it('a phase committed without a checkpoint is no progress: discard then releases the record', async () => {
    const { store } = transactionalMemory();
    const { engine } = engineOf({ store });
    const execution = await executing(engine, 'empty-phase');
    const phase = await execution.context.beginTransaction();
    await phase.commit();
    execution.context.discard();
    await execution.finish({ ...answer, status: 400 });
    expect(await store.get(ref('empty-phase'))).toBeUndefined();
  });

  it('a phase that checkpointed and committed is progress: discard keeps the record for the retry', async () => {
    const { store } = transactionalMemory();
    const { engine } = engineOf({ store });
    const execution = await executing(engine, 'phase');
    const phase = await execution.context.beginTransaction();
    await phase.checkpoint('charged', { id: 1 });
    await phase.commit();
    execution.context.discard();
    await execution.finish({ ...answer, status: 400 });
    expect((await executing(engine, 'phase')).context).toMatchObject({ takeover: true, resumeFrom: 'charged', recoveryData: { id: 1 } });
  });

  it("the phase's tx refuses use once it rolled back, or committed", async () => {
    const { store, log } = transactionalMemory();
    const { engine } = engineOf({ store });
    const execution = await executing(engine, 'fenced');
    const undone = await execution.context.beginTransaction();
    (undone.tx as FakeTx).write('inside');
    await undone.rollback();
    expect(() => (undone.tx as FakeTx).write('after')).toThrow(TransactionEndedError);
    expect(() => (undone.tx as FakeTx).write('after')).toThrow('the phase transaction was used after it rolled back');
    const done = await execution.context.beginTransaction();
    await done.commit();
    expect(() => (done.tx as FakeTx).write('after')).toThrow('the phase transaction was used after it committed');
    expect(log).toEqual(['begin', 'rollback', 'begin', 'commit']);
  });

  it('a transaction that does not open within storeTimeoutMs is refused naming the operation, and closed when it opens late', async () => {
    const { store: inner } = transactionalMemory();
    const opened = latch();
    const late = { rolledBack: 0 };
    const store: TransactionalStore<FakeTx> = {
      ...inner,
      beginTransaction: async () => {
        await opened.promise;
        const transaction = await inner.beginTransaction();
        return { ...transaction, rollback: async () => void late.rolledBack++ };
      },
    };
    const { engine } = engineOf({ store, storeTimeoutMs: 100 });
    const execution = await executing(engine, 'late-phase');
    const begun = execution.context.beginTransaction();
    const refused = expect(begun).rejects.toThrow('store beginTransaction did not answer within 100 ms');
    await vi.advanceTimersByTimeAsync(200);
    await refused;
    opened.open();
    await vi.advanceTimersByTimeAsync(0);
    expect(late.rolledBack).toBe(1);
  });
});

describe('transactional mode', () => {
  it('commits the handler writes with the completion; the raw form with no `threw` is a success', async () => {
    const { store, log, rows } = transactionalMemory();
    const { engine } = engineOf({ store, transactional: true });
    const execution = await executing(engine, 'ok');
    (execution.context.tx as FakeTx).write('order');
    expect(await execution.finish(201, [], Buffer.from('{"paid":true}'))).toBeUndefined();
    expect(log).toEqual(['begin', 'complete', 'commit']);
    expect(rows).toEqual(['order']);
    expect(body(await engine.decide({ key: 'ok' }, reader))).toBe('{"paid":true}');
  });

  it('rolls back and releases an answer to a thrown error (either form), and a 5xx; a 499 commits', async () => {
    for (const [key, finish] of [
      ['threw-raw', (e: Execution) => e.finish(500, [], Buffer.from('oops'), true)],
      ['threw-stored', (e: Execution) => e.finish({ ...answer, status: 400 }, true)],
      ['status-500', (e: Execution) => e.finish({ ...answer, status: 500 })],
    ] as const) {
      const { store, log, rows } = transactionalMemory();
      const { engine } = engineOf({ store, transactional: true });
      const execution = await executing(engine, key);
      (execution.context.tx as FakeTx).write('order');
      expect(await finish(execution), key).toBeUndefined();
      expect(log, key).toEqual(['begin', 'rollback']);
      expect(rows, key).toEqual([]);
      expect(await store.get(ref(key)), key).toBeUndefined();
    }
    const { store, log } = transactionalMemory();
    const { engine } = engineOf({ store, transactional: true });
    await (await executing(engine, 'client-closed')).finish({ ...answer, status: 499 });
    expect(log).toEqual(['begin', 'complete', 'commit']);
  });

  it('discard and suspend roll back; suspend keeps the record in flight with its lease given back', async () => {
    const discarded = transactionalMemory();
    const first = engineOf({ store: discarded.store, transactional: true }).engine;
    const dropped = await executing(first, 'discard');
    dropped.context.discard();
    await dropped.finish(answer);
    expect(discarded.log).toEqual(['begin', 'rollback']);
    expect(await discarded.store.get(ref('discard'))).toBeUndefined();

    const suspended = transactionalMemory();
    const second = engineOf({ store: suspended.store, transactional: true }).engine;
    const paused = await executing(second, 'suspend');
    paused.context.suspend();
    await paused.finish(answer);
    expect(suspended.log).toEqual(['begin', 'rollback']);
    expect(await suspended.store.get(ref('suspend'))).toMatchObject({ state: 'in_flight' });
    expect((await executing(second, 'suspend')).context.takeover).toBe(true);
  });

  it('an abort rolls the transaction back and releases the claim', async () => {
    const { store, log } = transactionalMemory();
    const { engine } = engineOf({ store, transactional: true });
    const execution = await executing(engine, 'hijacked');
    await execution.abort();
    expect(log).toEqual(['begin', 'rollback']);
    expect(await store.get(ref('hijacked'))).toBeUndefined();
  });

  it('ctx.checkpoint goes through the transaction, and is refused once the request ended', async () => {
    const { store, log } = transactionalMemory();
    const { engine } = engineOf({ store, transactional: true });
    const execution = await executing(engine, 'cp');
    await execution.context.checkpoint('step-1');
    await execution.finish(answer);
    expect(log).toEqual(['begin', 'checkpoint', 'complete', 'commit']);
    const late = execution.context.checkpoint('step-2');
    await expect(late).rejects.toThrow(TransactionEndedError);
    await expect(late).rejects.toThrow('ctx.checkpoint() was called after its request ended; nothing was written');
  });

  it('a completion the store refuses as a lost lease answers 409 lease-lost, rolled back, and leaves the record alone', async () => {
    const { events, named } = recordingEvents();
    const { store, log } = transactionalMemory({ complete: () => Promise.reject(new LeaseLostError()) });
    const { engine, reported } = engineOf({ store, transactional: true, events });
    const execution = await executing(engine, 'stolen');
    const answered = await execution.finish(answer);
    expect(answered).toBeInstanceOf(LeaseLostError);
    expect(answered?.status).toBe(409);
    expect((answered as Error).cause).toBeInstanceOf(LeaseLostError);
    expect(log).toEqual(['begin', 'rollback']);
    expect(reported).toEqual([expect.any(LeaseLostError)]);
    expect(named('leaseLost')).toEqual([{ scope: '', key: 'stolen', method: 'POST', path: '/charges', during: 'complete' }]);
    expect(named('complete')).toMatchObject([{ outcome: 'failed' }]);
    expect(await store.get(ref('stolen'))).toMatchObject({ state: 'in_flight' });
  });

  it('a completion that fails otherwise answers 503 with the cause, rolled back, and releases the claim', async () => {
    const { events, named } = recordingEvents();
    const failure = new Error('connection reset');
    const { store, log } = transactionalMemory({ commit: () => Promise.reject(failure) });
    const { engine, reported } = engineOf({ store, transactional: true, events });
    const answered = await (await executing(engine, 'reset')).finish(answer);
    expect(answered).toBeInstanceOf(StoreUnavailableError);
    expect((answered as Error).cause).toBe(failure);
    expect(log).toEqual(['begin', 'complete', 'rollback']);
    expect(reported).toEqual([failure]);
    expect(named('storeError')).toMatchObject([{ operation: 'complete', error: failure }]);
    expect(named('leaseLost')).toEqual([]);
    expect(await store.get(ref('reset'))).toBeUndefined();
  });

  it('a completion or commit past storeTimeoutMs answers 503 naming the operation that was late', async () => {
    for (const late of ['complete', 'commit'] as const) {
      const never = () => new Promise<void>(() => {});
      const { store } = transactionalMemory({ [late]: never });
      const { engine, reported } = engineOf({ store, transactional: true, storeTimeoutMs: 100 });
      const finished = (await executing(engine, late)).finish(answer);
      await vi.advanceTimersByTimeAsync(300);
      const answered = await finished;
      expect(answered, late).toBeInstanceOf(StoreUnavailableError);
      expect(((answered as Error).cause as Error).message, late).toBe(`store ${late} did not answer within 100 ms (option \`storeTimeoutMs\`)`);
      expect(reported, late).toHaveLength(1);
    }
  });

  it('after a lost lease (a renewal the store refused) the completion is not attempted: 409, rolled back', async () => {
    const { store: inner, log } = transactionalMemory();
    const store: TransactionalStore<FakeTx> = { ...inner, renew: () => Promise.resolve(false) };
    const { engine } = engineOf({ store, transactional: true, leaseMs: 300 });
    const execution = await executing(engine, 'renewal-lost');
    await vi.advanceTimersByTimeAsync(100);
    expect(await execution.finish(answer)).toBeInstanceOf(LeaseLostError);
    expect(log).toEqual(['begin', 'rollback']);
  });
});

describe('maxExecutionMs', () => {
  it('is reached at exactly maxExecutionMs (a tick there), not a tick later', async () => {
    const { engine, reported } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), leaseMs: 300, maxExecutionMs: 300 });
    await executing(engine, 'ceiling');
    await vi.advanceTimersByTimeAsync(299);
    expect(reported).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(reported).toHaveLength(1);
  });

  it('outside transactional mode says the outcome is unknown; in it, that nothing was committed (and says so once)', async () => {
    const plain = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), leaseMs: 300, maxExecutionMs: 300 });
    await executing(plain.engine, 'plain');
    const { store } = transactionalMemory();
    const tx = engineOf({ store, transactional: true, leaseMs: 300, maxExecutionMs: 300 });
    const execution = await executing(tx.engine, 'tx');
    await vi.advanceTimersByTimeAsync(1_000);
    expect(plain.reported).toHaveLength(1);
    expect((plain.reported[0] as Error).message).toContain('once its lease ends a retry with the same key may run again');
    expect(tx.reported).toHaveLength(1);
    expect((tx.reported[0] as Error).message).toContain('its transaction was rolled back and nothing was committed');
    const answered = await execution.finish(answer);
    expect(answered?.message).toContain('its transaction was rolled back and nothing was committed');
  });
});

describe('lease renewal', () => {
  it('renews every third of the lease while the handler runs, and stops when it ends', async () => {
    const { store, callsOf } = counting(memoryStore({ sweepIntervalMs: 0 }));
    const { engine } = engineOf({ store, leaseMs: 300 });
    const execution = await executing(engine, 'renewed');
    await vi.advanceTimersByTimeAsync(1_000);
    expect(callsOf('renew')).toBe(10);
    await execution.finish(answer);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(callsOf('renew')).toBe(10);
  });

  it('sends no second renewal while one still waits for the store, and warns naming the lease', async () => {
    const gate = latch();
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store, callsOf } = counting(base, {
      renew: async (...args) => {
        await gate.promise;
        return base.renew(...args);
      },
    });
    const { lines, logger } = recordingLogger();
    const { engine } = engineOf({ store, leaseMs: 300, logger, scope: (request) => request.tenant ?? '' });
    await executing(engine, 'queued', 't1');
    await vi.advanceTimersByTimeAsync(350);
    expect(callsOf('renew')).toBe(1);
    const warnings = lines.filter((line) => line.message.includes('lease renewal starved'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.message).toContain('the renewal of the lease on key "queued" in scope "t1" has waited 100 ms for the store and is still waiting');
    gate.open();
    await vi.advanceTimersByTimeAsync(100);
    expect(callsOf('renew')).toBe(2);
  });

  it('warns when a renewal took longer than a renewal period, not when it took exactly one', async () => {
    const gate = { current: latch() };
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, {
      renew: async (...args) => {
        await gate.current.promise;
        return base.renew(...args);
      },
    });
    const { lines, logger } = recordingLogger();
    const { engine } = engineOf({ store, leaseMs: 300, logger });
    await executing(engine, 'slow');
    const starved = () => lines.filter((line) => line.message.includes('lease renewal starved')).map((line) => line.message);
    await vi.advanceTimersByTimeAsync(100); // the first renewal is sent
    // The store's answer arrives exactly one period later, before the next tick.
    vi.setSystemTime(Date.now() + 100);
    gate.current.open();
    await vi.advanceTimersByTimeAsync(0);
    expect(starved()).toEqual([]);
    gate.current = latch();
    await vi.advanceTimersByTimeAsync(100); // the next one
    vi.setSystemTime(Date.now() + 150);
    gate.current.open();
    await vi.advanceTimersByTimeAsync(0);
    expect(starved()).toHaveLength(1);
    expect(starved()[0]).toContain('the renewal of the lease on key "slow" took 150 ms, longer than the renewal period (100 ms');
  });

  it('names a redacted key by its hash in the warning, never the key', async () => {
    const gate = latch();
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, { renew: () => gate.promise.then(() => true) });
    const { lines, logger } = recordingLogger();
    const { engine } = engineOf({ store, leaseMs: 300, logger, redactKeys: true, scope: (request) => request.tenant ?? '' });
    await executing(engine, 'secret-key', 't1');
    await vi.advanceTimersByTimeAsync(200);
    const warning = lines.find((line) => line.message.includes('lease renewal starved'))!.message;
    expect(warning).toContain(`the lease on key ${redactedKey('t1', 'secret-key')} has waited`);
    expect(warning).not.toContain('secret-key');
    gate.open();
  });

  it('a renewal the store refuses (another owner) stops renewing and tells leaseLost (during renew)', async () => {
    const { events, named } = recordingEvents();
    const { store, callsOf } = counting(memoryStore({ sweepIntervalMs: 0 }), { renew: () => Promise.resolve(false) });
    const { engine } = engineOf({ store, leaseMs: 300, events });
    await executing(engine, 'taken');
    await vi.advanceTimersByTimeAsync(1_000);
    expect(callsOf('renew')).toBe(1);
    expect(named('leaseLost')).toEqual([{ scope: '', key: 'taken', method: 'POST', path: '/charges', during: 'renew' }]);
  });

  it('a renewal that fails is reported and told to storeError (operation renew), and renewal goes on', async () => {
    const { events, named } = recordingEvents();
    const failure = new Error('timeout');
    const { store, callsOf } = counting(memoryStore({ sweepIntervalMs: 0 }), { renew: () => Promise.reject(failure) });
    const { engine, reported } = engineOf({ store, leaseMs: 300, events });
    await executing(engine, 'flaky');
    await vi.advanceTimersByTimeAsync(300);
    expect(callsOf('renew')).toBe(3);
    expect(reported).toEqual([failure, failure, failure]);
    expect(named('storeError')[0]).toEqual({ operation: 'renew', error: failure, request: { scope: '', key: 'flaky', method: 'POST', path: '/charges' } });
    expect(named('leaseLost')).toEqual([]);
  });
});

describe('an answer that went out without finish (watch)', () => {
  it('is noticed at the next tick: the claim is released and the complete event says so', async () => {
    const { events, named } = recordingEvents();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine } = engineOf({ store, leaseMs: 300, events });
    const execution = await executing(engine, 'hijacked');
    const response = { sent: false };
    execution.watch(response, (r) => r.sent);
    await vi.advanceTimersByTimeAsync(100);
    expect(await store.get(ref('hijacked'))).toMatchObject({ state: 'in_flight' });
    response.sent = true;
    await vi.advanceTimersByTimeAsync(100);
    expect(await store.get(ref('hijacked'))).toBeUndefined();
    expect(named('complete')).toMatchObject([{ outcome: 'released', status: 0 }]);
  });
});

describe('releasing a claim', () => {
  it('a release the store refuses as a lost lease is not reported (someone else owns the key); another failure is', async () => {
    for (const [error, reported] of [
      [new LeaseLostError(), 0],
      [new Error('gone'), 1],
    ] as const) {
      const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { release: () => Promise.reject(error) });
      const engine = engineOf({ store });
      const execution = await executing(engine.engine, 'k');
      execution.context.discard();
      await execution.finish(answer);
      expect(engine.reported).toHaveLength(reported);
    }
  });

  it('a release past storeTimeoutMs is reported naming the operation', async () => {
    const { store } = counting(memoryStore({ sweepIntervalMs: 0 }), { release: () => new Promise<void>(() => {}) });
    const { engine, reported } = engineOf({ store, storeTimeoutMs: 100 });
    const execution = await executing(engine, 'k');
    execution.context.discard();
    const finished = execution.finish(answer);
    await vi.advanceTimersByTimeAsync(200);
    await finished;
    expect((reported[0] as Error).message).toBe('store release did not answer within 100 ms (option `storeTimeoutMs`)');
  });

  it('a suspended lease given back past storeTimeoutMs is reported naming the operation', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const { store } = counting(base, { renew: (r, token, leaseMs) => (leaseMs === 0 ? new Promise<boolean>(() => {}) : base.renew(r, token, leaseMs)) });
    const { engine, reported } = engineOf({ store, storeTimeoutMs: 100 });
    const execution = await executing(engine, 'k');
    execution.context.suspend();
    const finished = execution.finish(answer);
    await vi.advanceTimersByTimeAsync(200);
    await finished;
    expect((reported[0] as Error).message).toBe('store renew did not answer within 100 ms (option `storeTimeoutMs`)');
  });
});

/**
 * `previousScope`: while a request runs under the new scope, it also holds the key under the
 * scope the deployment replaced (the guard), so an instance still on the old hook answers 409, and
 * afterwards replays the same answer (or runs, when nothing was stored).
 */
describe('the guard under the previous scope', () => {
  const deployments = (options: Partial<EngineOptions<Req>> = {}) => {
    const { store, callsOf } = counting(memoryStore({ sweepIntervalMs: 0 }));
    const byTenant = (request: Req) => request.tenant ?? '';
    const after = engineOf({ store, scope: byTenant, previousScope: () => '', leaseMs: 300, ...options });
    const before = engineOf({ store, leaseMs: 300 });
    return { store, callsOf, after, before };
  };

  it('is renewed with the claim: the old instance answers 409 for as long as the handler runs', async () => {
    const { after, before } = deployments();
    const execution = await executing(after.engine, 'k', 't1');
    await vi.advanceTimersByTimeAsync(1_500);
    const meanwhile = await before.engine.decide({ key: 'k' }, reader);
    expect(meanwhile.kind === 'reject' && meanwhile.error.status).toBe(409);
    await execution.finish(answer);
  });

  it('is completed with the stored answer, so the old instance replays it (with and without events)', async () => {
    for (const events of [undefined, recordingEvents().events]) {
      const { after, before } = deployments({ events });
      await (await executing(after.engine, 'k', 't1')).finish(answer);
      expect(body(await before.engine.decide({ key: 'k' }, reader))).toBe('{"paid":true}');
    }
  });

  it('is released when nothing was stored (discard, abort), so the old instance runs the request', async () => {
    for (const end of [
      async (e: Execution) => {
        e.context.discard();
        await e.finish(answer);
      },
      (e: Execution) => e.abort(),
    ]) {
      const { after, before, store } = deployments();
      await end(await executing(after.engine, 'k', 't1'));
      expect(await store.get(ref('k'))).toBeUndefined();
      expect((await before.engine.decide({ key: 'k' }, reader)).kind).toBe('execute');
    }
  });

  it('a guard release refused as a lost lease is not reported; a guard completion that fails is', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const byTenant = (request: Req) => request.tenant ?? '';
    const stale = counting(base, { release: (r, token) => (r.scope === '' ? Promise.reject(new LeaseLostError()) : base.release(r, token)) });
    const released = engineOf({ store: stale.store, scope: byTenant, previousScope: () => '' });
    const dropped = await executing(released.engine, 'a', 't1');
    dropped.context.discard();
    await dropped.finish(answer);
    expect(released.reported).toEqual([]);

    const failure = new Error('write failed');
    const failing = counting(base, { complete: (r, token, response) => (r.scope === '' ? Promise.reject(failure) : base.complete(r, token, response)) });
    const completed = engineOf({ store: failing.store, scope: byTenant, previousScope: () => '' });
    await (await executing(completed.engine, 'b', 't1')).finish(answer);
    expect(completed.reported).toEqual([failure]);
  });

  it('a guard release refused otherwise is reported, and so is a guard completion refused as a lost lease', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const byTenant = (request: Req) => request.tenant ?? '';
    const failure = new Error('gone');
    const failingRelease = counting(base, { release: (r, token) => (r.scope === '' ? Promise.reject(failure) : base.release(r, token)) });
    const released = engineOf({ store: failingRelease.store, scope: byTenant, previousScope: () => '' });
    const dropped = await executing(released.engine, 'a', 't1');
    dropped.context.discard();
    await dropped.finish(answer);
    expect(released.reported).toEqual([failure]);

    const stale = new LeaseLostError();
    const staleCompletion = counting(base, { complete: (r, token, response) => (r.scope === '' ? Promise.reject(stale) : base.complete(r, token, response)) });
    const completed = engineOf({ store: staleCompletion.store, scope: byTenant, previousScope: () => '' });
    await (await executing(completed.engine, 'b', 't1')).finish(answer);
    expect(completed.reported).toEqual([stale]);
  });

  it('a guard an old instance took over (its lease ran out) refuses the completion: reported, and the old instance keeps the key', async () => {
    const { after, before, store } = deployments({ renewLease: false });
    const execution = await executing(after.engine, 'k', 't1');
    await vi.advanceTimersByTimeAsync(301);
    const takeover = await executing(before.engine, 'k');
    expect(takeover.context.takeover).toBe(true);
    expect(await execution.finish(answer)).toBeUndefined();
    expect(after.reported).toEqual([expect.any(LeaseLostError)]);
    expect(await store.get(ref('k'))).toMatchObject({ state: 'in_flight' });
    expect(body(await after.engine.decide({ key: 'k', tenant: 't1' }, reader))).toBe('{"paid":true}');
  });

  it('a guard completion or release past storeTimeoutMs is reported naming the operation', async () => {
    for (const [late, end] of [
      ['complete', (e: Execution) => e.finish(answer)],
      [
        'release',
        (e: Execution) => {
          e.context.discard();
          return e.finish(answer);
        },
      ],
    ] as const) {
      const base = memoryStore({ sweepIntervalMs: 0 });
      const never = () => new Promise<never>(() => {});
      const { store } = counting(base, {
        complete: (r, token, response) => (r.scope === '' ? never() : base.complete(r, token, response)),
        release: (r, token) => (r.scope === '' ? never() : base.release(r, token)),
      });
      const { engine, reported } = engineOf({ store, scope: (request) => request.tenant ?? '', previousScope: () => '', storeTimeoutMs: 100 });
      const finished = end(await executing(engine, 'k', 't1'));
      await vi.advanceTimersByTimeAsync(200);
      await finished;
      expect(reported.map((error) => (error as Error).message), late).toEqual([`store ${late} did not answer within 100 ms (option \`storeTimeoutMs\`)`]);
    }
  });

  it('a failed completion under the new scope releases the guard too: nothing is stored under either scope', async () => {
    const base = memoryStore({ sweepIntervalMs: 0 });
    const byTenant = (request: Req) => request.tenant ?? '';
    const failure = new Error('write failed');
    const { store } = counting(base, { complete: (r, token, response) => (r.scope === 't1' ? Promise.reject(failure) : base.complete(r, token, response)) });
    const { engine } = engineOf({ store, scope: byTenant, previousScope: () => '' });
    await (await executing(engine, 'k', 't1')).finish(answer);
    expect(await base.get(ref('k'))).toBeUndefined();
  });
});

describe('the complete event for an abort', () => {
  it('names the request and counts the handler time', async () => {
    const { events, named } = recordingEvents();
    const { engine } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), events });
    const execution = await executing(engine, 'k');
    await vi.advanceTimersByTimeAsync(12);
    await execution.abort();
    expect(named('complete')).toEqual([
      { scope: '', key: 'k', method: 'POST', path: '/charges', outcome: 'released', status: 0, bodyBytes: 0, handlerMs: 12, storeMs: 0 },
    ]);
    const outcomes = named('complete') as unknown as CompleteEvent[];
    expect(outcomes[0]!.outcome).toBe('released');
  });
});
