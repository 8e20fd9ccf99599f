import { afterEach, describe, expect, it, vi } from 'vitest';
import type { IdempotencyStore } from '../../src/core/store.js';
import { withIdempotency } from '../../src/http/web.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { Deadlines } from '../../src/core/deadlines.js';
import { StoreUnavailableError } from '../../src/core/errors.js';

/** A store whose claim never answers, like a server behind a dead connection. */
function hangingStore(): IdempotencyStore {
  const store = memoryStore({ sweepIntervalMs: 0 });
  return Object.assign(Object.create(store) as IdempotencyStore, { claim: () => new Promise<never>(() => {}) });
}

describe('storeTimeoutMs', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('answers 503 within the configured time, without running the handler', async () => {
    // Fake timers: the test moves the clock, so "within the configured time" is exact, whatever the load.
    vi.useFakeTimers();
    let executions = 0;
    const handle = withIdempotency(
      async () => {
        executions++;
        return new Response('ran');
      },
      { store: hangingStore(), storeTimeoutMs: 100 },
    );
    let response: Response | undefined;
    void handle(new Request('http://local/x', { method: 'POST', headers: { 'idempotency-key': 'k' }, body: '{}' })).then((r) => (response = r));
    await vi.advanceTimersByTimeAsync(99);
    expect(response).toBeUndefined(); // the store may still answer
    // The deadline is checked by a coarse timer: refused at most 10 % past the limit.
    await vi.advanceTimersByTimeAsync(11);
    expect(response?.status).toBe(503);
    expect((await response!.json()).type).toBe('urn:idemkit:problem:store-unavailable');
    expect(executions).toBe(0);
  });
});

describe('a claim that answers after storeTimeoutMs', () => {
  it('is released, so the retry is not blocked for a lease', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    let slow = true;
    // The release of the late claim, as the engine sends it: the signal that it has been undone.
    const released = opening();
    const lagging = Object.assign(Object.create(store) as IdempotencyStore, {
      claim: async (...args: Parameters<IdempotencyStore['claim']>) => {
        if (slow) await new Promise((r) => setTimeout(r, 150));
        return store.claim(...args);
      },
      release: async (...args: Parameters<IdempotencyStore['release']>) => {
        await store.release(...args);
        released.open();
      },
    });
    let executions = 0;
    const handle = withIdempotency(
      async () => {
        executions++;
        return new Response('ran', { status: 201 });
      },
      { store: lagging, storeTimeoutMs: 50 },
    );
    const request = () => new Request('http://local/x', { method: 'POST', headers: { 'idempotency-key': 'late' }, body: '{}' });
    expect((await handle(request())).status).toBe(503);
    // The late claim lands and is released (a test that never sees it fails at its own timeout);
    // then the store holds nothing for the key.
    await released.promise;
    expect(await store.get({ scope: '', key: 'late' })).toBeUndefined();
    slow = false;
    const retry = await handle(request());
    expect(retry.status).toBe(201);
    expect(executions).toBe(1);
  });
});

describe('a take-over claim that answers after storeTimeoutMs', () => {
  // Found by the model (spec/record.pml, -DBROKEN_LATE): releasing a late take-over deleted the
  // record with the earlier owner's recovery point, and the retry ran committed phases again.
  it('gives the lease back and keeps the recovery point, so the retry resumes there', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    let slow = false;
    // The lease given back (`renew(…, 0)`), as the engine undoes a late take-over: the signal that it has been undone.
    const givenBack = opening();
    const lagging = Object.assign(Object.create(store) as IdempotencyStore, {
      claim: async (...args: Parameters<IdempotencyStore['claim']>) => {
        if (slow) await new Promise((r) => setTimeout(r, 150));
        return store.claim(...args);
      },
      renew: async (...args: Parameters<IdempotencyStore['renew']>) => {
        const renewed = await store.renew(...args);
        // The owner's suspend() gives its lease back too; only the one after the late claim counts.
        if (slow && args[2] === 0) givenBack.open();
        return renewed;
      },
    });
    let phaseOneRuns = 0;
    const resumedFrom: Array<string | undefined> = [];
    const handle = withIdempotency(
      async (_request, ctx) => {
        resumedFrom.push(ctx!.resumeFrom);
        if (ctx!.resumeFrom === undefined) {
          phaseOneRuns++;
          await ctx!.checkpoint('phase-1');
          // The owner stops after phase 1 (as a crash would): the record stays in flight, lease given back.
          ctx!.suspend();
          return new Response('interrupted', { status: 500 });
        }
        return new Response('done', { status: 201 });
      },
      { store: lagging, storeTimeoutMs: 50 },
    );
    const ref = { scope: '', key: 'late-takeover' };
    const request = () => new Request('http://local/x', { method: 'POST', headers: { 'idempotency-key': ref.key }, body: '{}' });
    expect((await handle(request())).status).toBe(500);
    expect((await store.get(ref))?.recoveryPoint).toBe('phase-1');

    slow = true;
    expect((await handle(request())).status).toBe(503);
    // The late take-over lands (attempt 2) and gives its lease back (a test that never sees it
    // fails at its own timeout); then the record is in flight, unleased, with its recovery point.
    await givenBack.promise;
    const inspected = await store.admin.inspect(ref);
    expect(inspected?.attempt).toBe(2);
    expect(inspected!.leaseUntil).toBeLessThanOrEqual(inspected!.now);
    const record = await store.get(ref);
    expect(record?.state).toBe('in_flight');
    expect(record?.recoveryPoint).toBe('phase-1');

    slow = false;
    const retry = await handle(request());
    expect(retry.status).toBe(201);
    expect(resumedFrom).toEqual([undefined, 'phase-1']);
    expect(phaseOneRuns).toBe(1);
  });
});

/** A promise and the function that resolves it: a gate the test waits on until an event has happened. */
function opening(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('store operations that settle before they return (the memory store)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  const settled = <T>(value: T) => Promise.resolve(value);

  it('are not bounded: no promise, entry or timer per call, since no timer could fire before they settle', () => {
    vi.useFakeTimers();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const deadlines = new Deadlines(100, undefined, store);
    for (const name of ['claim', 'renew', 'checkpoint', 'complete', 'release', 'get']) {
      const operation = settled(name);
      expect(deadlines.bound(operation, name), name).toBe(operation);
    }
    expect(vi.getTimerCount()).toBe(0);
    // Through a wrapper that keeps the store's own operations (Object.create), the same.
    const wrapped = Object.create(store) as IdempotencyStore;
    const operation = settled('claim');
    expect(new Deadlines(100, undefined, wrapped).bound(operation, 'claim')).toBe(operation);
  });

  it('an operation a wrapper replaced is bounded again, even when replaced after the engine was made', async () => {
    vi.useFakeTimers();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const wrapped = Object.create(store) as { -readonly [K in keyof IdempotencyStore]: IdempotencyStore[K] };
    const deadlines = new Deadlines(100, undefined, wrapped);
    wrapped.claim = () => new Promise<never>(() => {});
    const bounded = deadlines.bound(wrapped.claim({ scope: '', key: 'k' }, 'v2:x', { leaseMs: 1000, windowMs: 1000 }), 'claim');
    const outcome = bounded.catch((error: unknown) => error);
    await vi.advanceTimersByTimeAsync(200);
    expect(await outcome).toBeInstanceOf(StoreUnavailableError);
    // The operations it did not replace still settle on return.
    const kept = settled('complete');
    expect(deadlines.bound(kept, 'complete')).toBe(kept);
  });

  it('a copy of the store, a store that opens transactions, and what the store does not list are bounded', () => {
    vi.useFakeTimers();
    const store = memoryStore({ sweepIntervalMs: 0 });
    const copy = { ...store };
    const transactional = Object.assign(Object.create(store) as IdempotencyStore, { beginTransaction: () => settled({}) });
    for (const [what, deadlines, name] of [
      ['a copy (the mark is not enumerable)', new Deadlines(100, undefined, copy), 'claim'],
      ['a store with beginTransaction', new Deadlines(100, undefined, transactional), 'complete'],
      ['an operation the store does not list', new Deadlines(100, undefined, store), 'beginTransaction'],
      ['a transaction commit', new Deadlines(100, undefined, store), 'commit'],
    ] as const) {
      const operation = settled(what);
      expect(deadlines.bound(operation, name), what).not.toBe(operation);
    }
  });
});
