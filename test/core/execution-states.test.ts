/**
 * Execution's transition table (src/core/execution.ts, `ExecutionState` and `Ending`) through the
 * public API, on the memory store: the edges where two ways of ending meet, and which one decides
 * the answer. The claim's state (running, overtime, lost, finished) and the handler's ending
 * (result, discarded, suspended) are two dimensions: each case below would answer differently if
 * they were folded into one state, or if either precedence were the other way round.
 *
 * Time is the test's own (fake timers); leaseMs 300 makes the keeper tick every 100 ms.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Execution, RequestReader } from '../../src/core/engine.js';
import { IdempotencyEngine } from '../../src/core/engine.js';
import { ExecutionTimeoutHttpError } from '../../src/core/errors.js';
import type { IdempotencyEvents } from '../../src/core/events.js';
import type { EngineOptions } from '../../src/core/options.js';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../../src/core/store.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { latch } from '../support/recording.js';
import { transactionalMemory } from '../support/transactional-memory.js';

interface Req {
  readonly key: string;
}

const reader: RequestReader<Req> = {
  method: () => 'POST',
  header: (request) => request.key,
  path: () => '/orders',
  contentType: () => 'application/json',
  readBody: () => ({ body: Buffer.from('{}') }),
};

const answer: StoredResponse = { status: 201, headers: [], body: Buffer.from('{"ok":true}'), bodyOmitted: false };
const ref = (key: string): RecordRef => ({ scope: '', key });

function engineOf(options: Partial<EngineOptions<Req>> & { store: IdempotencyStore }) {
  const outcomes: string[] = [];
  const lost: string[] = [];
  const events: IdempotencyEvents = {
    complete: (event) => void outcomes.push(event.outcome),
    leaseLost: (event) => void lost.push(event.during),
  };
  const engine = new IdempotencyEngine<Req>({ onError: () => {}, leaseMs: 300, events, ...options } as EngineOptions<Req>);
  return { engine, outcomes, lost };
}

async function executing(engine: IdempotencyEngine<Req>, key: string): Promise<Execution> {
  const decision = await engine.decide({ key }, reader);
  if (decision.kind !== 'execute') throw new Error(`expected execute, got ${decision.kind}`);
  return decision.execution;
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("the handler's ending", () => {
  it('suspended wins over discarded whatever the order; a discard alone releases', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine, outcomes } = engineOf({ store });
    const first = await executing(engine, 'discard-then-suspend');
    first.context.discard();
    first.context.suspend();
    const second = await executing(engine, 'suspend-then-discard');
    second.context.suspend();
    second.context.discard();
    const third = await executing(engine, 'discard');
    third.context.discard();
    for (const execution of [first, second, third]) expect(await execution.finish(answer)).toBeUndefined();
    expect(outcomes).toEqual(['suspended', 'suspended', 'released']);
    expect(await store.get(ref('discard-then-suspend'))).toMatchObject({ state: 'in_flight' });
    expect(await store.get(ref('suspend-then-discard'))).toMatchObject({ state: 'in_flight' });
    expect(await store.get(ref('discard'))).toBeUndefined();
  });

  it('is read by an abort once its rollback is over: a suspend meanwhile keeps the record', async () => {
    const gate = latch();
    const { store } = transactionalMemory({ rollback: () => gate.promise });
    const { engine, outcomes } = engineOf({ store, transactional: true });
    const execution = await executing(engine, 'hijacked');
    const aborted = execution.abort();
    execution.context.suspend();
    gate.open();
    await aborted;
    expect(outcomes).toEqual(['suspended']);
    expect(await store.get(ref('hijacked'))).toMatchObject({ state: 'in_flight' });
  });
});

describe('overtime', () => {
  it('is entered once: a renew() past the ceiling once overtime, or once finished, changes nothing and reports nothing', async () => {
    const reported: unknown[] = [];
    const { engine, outcomes } = engineOf({ store: memoryStore({ sweepIntervalMs: 0 }), maxExecutionMs: 200, onError: (error) => void reported.push(error) });
    const execution = await executing(engine, 'overtime-once');
    await vi.advanceTimersByTimeAsync(200);
    expect(reported).toEqual([expect.any(ExecutionTimeoutHttpError)]);
    execution.renew();
    expect(await execution.finish(answer)).toBeUndefined();
    execution.renew();
    expect(reported).toHaveLength(1);
    expect(outcomes).toEqual(['stored']);
  });

  it('outside transactional mode the ending still decides: a discard past the ceiling releases', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const { engine, outcomes } = engineOf({ store, maxExecutionMs: 200 });
    const execution = await executing(engine, 'late-discard');
    await vi.advanceTimersByTimeAsync(200);
    execution.context.discard();
    expect(await execution.finish(answer)).toBeUndefined();
    expect(outcomes).toEqual(['released']);
    expect(await store.get(ref('late-discard'))).toBeUndefined();
  });

  it('in transactional mode it outweighs a suspend at the finish (nothing was committed), not in an abort', async () => {
    const { store } = transactionalMemory();
    const { engine, outcomes } = engineOf({ store, transactional: true, maxExecutionMs: 200 });
    const finished = await executing(engine, 'finished');
    const aborted = await executing(engine, 'aborted');
    await vi.advanceTimersByTimeAsync(200);
    finished.context.suspend();
    aborted.context.suspend();
    expect(await finished.finish(answer)).toBeInstanceOf(ExecutionTimeoutHttpError);
    await aborted.abort();
    expect(outcomes).toEqual(['released', 'suspended']);
    expect(await store.get(ref('finished'))).toBeUndefined();
    expect(await store.get(ref('aborted'))).toMatchObject({ state: 'in_flight' });
  });

  it('a renewal refused after the ceiling is told, and the answer stays the timeout (not lease-lost)', async () => {
    let refuse!: (ok: boolean) => void;
    const store = { ...transactionalMemory().store, renew: () => new Promise<boolean>((resolve) => (refuse = resolve)) };
    const { engine, lost } = engineOf({ store, transactional: true, maxExecutionMs: 200 });
    const execution = await executing(engine, 'late-refusal');
    await vi.advanceTimersByTimeAsync(100); // the renewal is sent and waits
    await vi.advanceTimersByTimeAsync(100); // the ceiling passes while it waits
    refuse(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(lost).toEqual(['renew']);
    expect(await execution.finish(answer)).toBeInstanceOf(ExecutionTimeoutHttpError);
  });
});

describe('lost', () => {
  it('a lost lease past the ceiling turns overtime (a renew() the keeper no longer sends): the finish answers the timeout, not lease-lost', async () => {
    const { store: inner } = transactionalMemory();
    const store = { ...inner, renew: () => Promise.resolve(false) };
    const { engine, lost } = engineOf({ store, transactional: true, maxExecutionMs: 200 });
    const execution = await executing(engine, 'lost-then-overtime');
    await vi.advanceTimersByTimeAsync(100);
    expect(lost).toEqual(['renew']);
    await vi.advanceTimersByTimeAsync(100);
    execution.renew();
    expect(await execution.finish(answer)).toBeInstanceOf(ExecutionTimeoutHttpError);
  });

  it("the handler's ending outweighs a lost lease: a discard after it releases, with no 409", async () => {
    const { store: inner, base } = transactionalMemory();
    const store = { ...inner, renew: () => Promise.resolve(false) };
    const { engine, outcomes, lost } = engineOf({ store, transactional: true });
    const execution = await executing(engine, 'lost-discard');
    await vi.advanceTimersByTimeAsync(100);
    expect(lost).toEqual(['renew']);
    execution.context.discard();
    expect(await execution.finish(answer)).toBeUndefined();
    expect(outcomes).toEqual(['released']);
    expect(await base.get(ref('lost-discard'))).toBeUndefined();
  });
});
