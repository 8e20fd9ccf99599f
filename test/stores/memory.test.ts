import { describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../src/core/store.js';
import { InvalidOptionError, StoreFullError } from '../../src/core/errors.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { DEFAULT_MEMORY_MAX_BYTES } from '../../src/stores/memory/store.js';
import { describeStoreContract } from './contract.js';
import { manualClock } from './manual-clock.js';

describeStoreContract('memory', () => {
  const clock = manualClock();
  const store = memoryStore({ clock: clock.now, maxResponseBytes: 64 * 1024 });
  return { store, advance: clock.advance, close: () => store.close() };
});

describe('memoryStore', () => {
  const opts = { leaseMs: 1000, windowMs: 5000 };

  it('is bounded: when full of live records it refuses new claims instead of forgetting keys', async () => {
    const clock = manualClock();
    const store = memoryStore({ maxRecords: 3, clock: clock.now, sweepIntervalMs: 0 });
    for (const key of ['a', 'b', 'c']) expect((await store.claim({ scope: '', key }, 'fp', opts)).kind).toBe('acquired');
    await expect(store.claim({ scope: '', key: 'd' }, 'fp', opts)).rejects.toBeInstanceOf(StoreFullError);
    await clock.advance(6000);
    expect((await store.claim({ scope: '', key: 'd' }, 'fp', opts)).kind).toBe('acquired');
    expect(store.size).toBe(1);
  });

  it('keeps its own copy of a completed response: the caller changing its buffer or list later changes nothing', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const ref = { scope: 't', key: 'copy' };
    const claim = await store.claim(ref, 'fp', opts);
    if (claim.kind !== 'acquired') throw new Error(claim.kind);
    const body = Buffer.from('{"id":"ch_1"}');
    const headers: Array<[string, string]> = [['content-type', 'application/json']];
    await store.complete(ref, claim.token, { status: 201, headers, body, bodyOmitted: false });
    body.fill(0x78);
    headers[0]![1] = 'text/plain';
    headers.push(['x-late', '1']);
    const replay = await store.claim(ref, 'fp', opts);
    expect(replay.kind === 'completed' && Buffer.from(replay.response.body!).toString()).toBe('{"id":"ch_1"}');
    expect(replay.kind === 'completed' && replay.response.headers).toEqual([['content-type', 'application/json']]);
  });

  it('replays every byte value and any header text, including what its packed form cannot hold', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const bytes = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));
    const cases: Array<ReadonlyArray<readonly [string, string]>> = [
      [],
      [['etag', 'W/"2-abc"'], ['link', '<a>; rel=next'], ['link', '<b>; rel=prev']],
      [['x-latin', 'café\tbar']],
      [['x-newline', 'one\ntwo']],
      [['x-wide', 'ā → ☃']],
    ];
    for (const [i, headers] of cases.entries()) {
      const ref = { scope: '', key: `h${i}` };
      const claim = await store.claim(ref, 'fp', opts);
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      await store.complete(ref, claim.token, { status: 200, headers, body: bytes, bodyOmitted: false });
      const replay = await store.claim(ref, 'fp', opts);
      if (replay.kind !== 'completed') throw new Error(replay.kind);
      expect(replay.response.headers).toEqual(headers);
      expect(Buffer.from(replay.response.body!).equals(bytes)).toBe(true);
      expect((await store.get(ref))?.response).toEqual(replay.response);
    }
  });

  it('counts records across scopes', async () => {
    const store = memoryStore({ sweepIntervalMs: 0 });
    const a = await store.claim({ scope: 'a', key: 'k' }, 'fp', opts);
    await store.claim({ scope: 'b', key: 'k' }, 'fp', opts);
    expect(store.size).toBe(2);
    if (a.kind !== 'acquired') throw new Error(a.kind);
    await store.release({ scope: 'a', key: 'k' }, a.token);
    expect(store.size).toBe(1);
    expect(await store.get({ scope: 'a', key: 'k' })).toBeUndefined();
    expect((await store.get({ scope: 'b', key: 'k' }))?.state).toBe('in_flight');
  });

  it('listAbandoned and endLeasesOf see exactly the records in flight, whichever way a record left that state (complete, release, purge, reap, a new window)', async () => {
    const clock = manualClock();
    const store = memoryStore({ clock: clock.now, sweepIntervalMs: 0 });
    const incarnation = 'c0ffee00c0ffee00';
    const o = { leaseMs: 1000, windowMs: 5000, incarnation };
    const ref = (key: string) => ({ scope: 't', key });
    const tokens = new Map<string, string>();
    const claim = async (key: string, options = o) => {
      const c = await store.claim(ref(key), 'fp', options);
      if (c.kind !== 'acquired') throw new Error(`${key}: ${c.kind}`);
      tokens.set(key, c.token);
    };
    for (const key of ['done', 'released', 'purged', 'reaped', 'renewed', 'taken']) await claim(key);
    await claim('stays', { ...o, windowMs: 60_000 });
    await claim('short', { ...o, windowMs: 1000 });
    await store.complete(ref('done'), tokens.get('done')!, { status: 201, headers: [], body: null, bodyOmitted: false });
    await store.release(ref('released'), tokens.get('released')!);
    expect(await store.admin.purge(ref('purged'), { force: true })).toBe('purged');
    // 'short' ends with its lease and window: a new claim of it replaces the old record.
    await clock.advance(1000);
    await claim('short', { ...o, windowMs: 60_000 });
    await store.renew(ref('renewed'), tokens.get('renewed')!, 10_000);
    await claim('taken');
    // Only the leases that ran out, in flight, inside their windows.
    const abandoned = async () => (await store.listAbandoned(100)).map((r) => r.key).sort();
    expect(await abandoned()).toEqual(['reaped', 'stays']);
    // At 5 s the 5 s windows end: reap removes 'reaped', 'done' and 'taken' (its lease ended at 2 s), not 'renewed' (leased to 11 s).
    await clock.advance(4000);
    expect(await store.reap()).toBe(3);
    expect(await abandoned()).toEqual(['short', 'stays']);
    // The incarnation's live leases: 'renewed' and a new 'fresh'. Ended, 'fresh' is listed; 'renewed', past its window, is not.
    await claim('fresh');
    expect(await store.endLeasesOf(incarnation)).toBe(2);
    expect(await abandoned()).toEqual(['fresh', 'short', 'stays']);
    expect(store.stats()).toMatchObject({ inFlight: 4, completed: 0 });
  });

  it('validates its options eagerly, naming the option', () => {
    expect(() => memoryStore({ maxRecords: 0 })).toThrow(InvalidOptionError);
    expect(() => memoryStore({ maxRecords: 0 })).toThrow(/maxRecords/);
    expect(() => memoryStore({ sweepIntervalMs: -1 })).toThrow(/sweepIntervalMs/);
    expect(() => memoryStore({ maxBytes: 0 })).toThrow(/maxBytes/);
    expect(() => memoryStore({ maxBytes: 1.5 })).toThrow(/maxBytes/);
    // A body the store accepts must fit in it.
    expect(() => memoryStore({ maxBytes: 1000, maxResponseBytes: 1001 })).toThrow(/maxBytes.*maxResponseBytes/);
    expect(() => memoryStore({ maxRecordsPerScope: 0 })).toThrow(/maxRecordsPerScope/);
    expect(() => memoryStore({ maxRecords: 10, maxRecordsPerScope: 11 })).toThrow(/`maxRecordsPerScope`.*at most `maxRecords` \(10\)/);
    expect(memoryStore({ sweepIntervalMs: 0 }).stats()).toEqual({ records: 0, inFlight: 0, completed: 0, bytes: 0, refused: 0 });
    expect(DEFAULT_MEMORY_MAX_BYTES).toBe(64 * 1024 * 1024);
  });
});

describe('memoryStore bounds: bytes as well as records, never forgetting an answer inside its window', () => {
  const opts = { leaseMs: 1000, windowMs: 60_000 };
  const body = (bytes: number, fill = 0x61): StoredResponse => ({
    status: 201,
    headers: [['content-type', 'application/json']],
    body: new Uint8Array(bytes).fill(fill),
    bodyOmitted: false,
  });
  async function acquire(store: MemoryStore, scope: string, key: string) {
    const claim = await store.claim({ scope, key }, 'fp', opts);
    if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
    return claim.token;
  }
  async function completeNew(store: MemoryStore, scope: string, key: string, response: StoredResponse) {
    await store.complete({ scope, key }, await acquire(store, scope, key), response);
  }
  /** The body bytes still replayable, read back through the store, not from its own accounting. */
  async function keptBodies(store: MemoryStore, scope: string, keys: string[]) {
    const kept: string[] = [];
    let bytes = 0;
    for (const key of keys) {
      const record = await store.get({ scope, key });
      if (record?.response?.body) {
        kept.push(key);
        bytes += record.response.body.byteLength;
      }
    }
    return { kept, bytes };
  }

  /** Claims a new key, expecting the store to refuse it for want of room; the refusal. */
  async function refusedClaim(store: MemoryStore, scope: string, key: string): Promise<StoreFullError> {
    const error = await store.claim({ scope, key }, 'fp', opts).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreFullError);
    return error as StoreFullError;
  }

  it('past maxBytes refuses new keys (store-full) and still replays every answer it holds: 40 responses of 10 KiB in 128 KiB', async () => {
    const maxBytes = 128 * 1024;
    const store = memoryStore({ maxBytes, maxResponseBytes: 16 * 1024, sweepIntervalMs: 0, clock: manualClock().now });
    const keys = Array.from({ length: 40 }, (_, i) => `k${String(i).padStart(2, '0')}`);
    const completed: string[] = [];
    let refusal: StoreFullError | undefined;
    for (const key of keys) {
      try {
        await completeNew(store, 'tenant-a', key, body(10 * 1024));
        completed.push(key);
      } catch (error) {
        refusal = error as StoreFullError;
        break;
      }
    }
    expect(refusal).toBeInstanceOf(StoreFullError);
    expect(refusal!.message).toMatch(/maxBytes = 131072/);
    expect(completed.length).toBeGreaterThanOrEqual(10);
    // Every key that completed is still there: none was dropped to admit another. The first ones
    // keep their bodies; a key claimed when its record fitted but completed when its body did not
    // keeps status and headers with the body marked omitted (those few bytes past the bound).
    const { kept, bytes } = await keptBodies(store, 'tenant-a', completed);
    expect(kept.length).toBeGreaterThanOrEqual(10);
    expect(kept).toEqual(completed.slice(0, kept.length));
    expect(bytes).toBeLessThanOrEqual(maxBytes);
    expect(store.stats().bytes).toBeLessThanOrEqual(maxBytes + 1024);
    for (const key of completed) {
      const replay = await store.claim({ scope: 'tenant-a', key }, 'fp', opts);
      if (replay.kind !== 'completed') throw new Error(`${key}: ${replay.kind}`);
      expect(replay.response.bodyOmitted, key).toBe(!kept.includes(key));
    }
    expect(store.stats()).toMatchObject({ records: completed.length, completed: completed.length, inFlight: 0, refused: 1 });
  });

  it('makes room by sweeping records whose window ended, and only those', async () => {
    const clock = manualClock();
    const store = memoryStore({ maxRecords: 3, sweepIntervalMs: 0, clock: clock.now });
    const windowed = { leaseMs: 1000, windowMs: 5000 };
    for (const key of ['a', 'b', 'c']) {
      const claim = await store.claim({ scope: 't', key }, 'fp', windowed);
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      await store.complete({ scope: 't', key }, claim.token, body(10));
      await clock.advance(1000);
    }
    // At 3 s every window is open: the fourth key is refused, and Retry-After says when `a` ends (at 5 s).
    const refusal = await refusedClaim(store, 't', 'd');
    expect(refusal.retryAfterMs).toBe(2000);
    expect(refusal.headers).toEqual({ 'retry-after': '2' });
    await clock.advance(2000); // 5 s: `a`'s window is over, `b`'s and `c`'s are not
    expect((await store.claim({ scope: 't', key: 'd' }, 'fp', windowed)).kind).toBe('acquired');
    expect(await store.get({ scope: 't', key: 'a' })).toBeUndefined();
    expect((await store.claim({ scope: 't', key: 'b' }, 'fp', windowed)).kind).toBe('completed');
    expect((await store.claim({ scope: 't', key: 'c' }, 'fp', windowed)).kind).toBe('completed');
    await refusedClaim(store, 't', 'e');
  });

  it('one tenant filling maxRecords with completed records: another tenant’s retry still replays, its new key is refused', async () => {
    const store = memoryStore({ maxRecords: 50, sweepIntervalMs: 0, clock: manualClock().now });
    await completeNew(store, 'quiet-tenant', 'charge-1', body(100));
    for (let i = 0; i < 49; i++) await completeNew(store, 'noisy-tenant', `k${i}`, body(100));
    expect(store.size).toBe(50);
    const refusal = await refusedClaim(store, 'noisy-tenant', 'k49');
    expect(refusal.message).toMatch(/maxRecords = 50/);
    expect((await store.claim({ scope: 'quiet-tenant', key: 'charge-1' }, 'fp', opts)).kind).toBe('completed');
    await refusedClaim(store, 'quiet-tenant', 'charge-2');
    expect(store.stats()).toMatchObject({ records: 50, inFlight: 0, completed: 50, refused: 2 });
  });

  it('maxRecordsPerScope: a tenant at its quota is refused, naming the quota, while the others get in', async () => {
    const store = memoryStore({ maxRecords: 50, maxRecordsPerScope: 10, sweepIntervalMs: 0, clock: manualClock().now });
    for (let i = 0; i < 10; i++) await completeNew(store, 'noisy-tenant', `k${i}`, body(100));
    const refusal = await refusedClaim(store, 'noisy-tenant', 'k10');
    expect(refusal.message).toMatch(/maxRecordsPerScope = 10/);
    expect(refusal.message).not.toMatch(/noisy-tenant/); // a scope may be a secret: never in a log line
    for (let i = 0; i < 5; i++) expect((await store.claim({ scope: `tenant-${i}`, key: 'k' }, 'fp', opts)).kind).toBe('acquired');
    expect((await store.claim({ scope: 'noisy-tenant', key: 'k0' }, 'fp', opts)).kind).toBe('completed');
    expect(store.stats()).toMatchObject({ records: 15, inFlight: 5, completed: 10, refused: 1 });
  });

  it('never drops a record in flight or a completed one inside its window; refuses new claims (503) until a window ends', async () => {
    const clock = manualClock();
    const store = memoryStore({ maxRecords: 3, sweepIntervalMs: 0, clock: clock.now });
    const first = await acquire(store, 't', 'first'); // claimed before everything else, still running
    await acquire(store, 't', 'second');
    await acquire(store, 't', 'third');
    const refusal = await refusedClaim(store, 'other', 'k');
    expect(refusal.message).toMatch(/memory store is full \(maxRecords = 3\)/);
    // Every request in flight still owns its record and can store its result.
    await store.complete({ scope: 't', key: 'first' }, first, body(10));
    expect((await store.claim({ scope: 't', key: 'first' }, 'fp', opts)).kind).toBe('completed');
    // Completed inside its window, it is an answer still owed: no room for a new key yet.
    await refusedClaim(store, 'other', 'k');
    await clock.advance(opts.windowMs);
    expect((await store.claim({ scope: 'other', key: 'k' }, 'fp', opts)).kind).toBe('acquired');
    expect(await store.get({ scope: 't', key: 'first' })).toBeUndefined();
  });

  it('refuses new claims when records in flight fill maxBytes, and keeps every one of them', async () => {
    const maxBytes = 8 * 1024;
    const store = memoryStore({ maxBytes, maxResponseBytes: 1024, sweepIntervalMs: 0, clock: manualClock().now });
    const held: Array<{ key: string; token: string }> = [];
    let refused: unknown;
    for (let i = 0; i < 1000 && refused === undefined; i++) {
      const key = `k${i}`;
      try {
        held.push({ key, token: await acquire(store, 't', key) });
      } catch (error) {
        refused = error;
      }
    }
    expect(refused).toBeInstanceOf(StoreFullError);
    expect((refused as Error).message).toMatch(/maxBytes = 8192/);
    expect(held.length).toBeGreaterThan(5);
    expect(store.stats()).toMatchObject({ records: held.length, inFlight: held.length, refused: 1 });
    expect(store.stats().bytes).toBeLessThanOrEqual(maxBytes);
    for (const { key, token } of held) expect(await store.renew({ scope: 't', key }, token, 1000)).toBe(true);
  });

  it('refuses a checkpoint whose data does not fit, keeping the earlier checkpoint', async () => {
    const store = memoryStore({ maxBytes: 4096, maxResponseBytes: 1024, sweepIntervalMs: 0, clock: manualClock().now });
    const ref = { scope: 't', key: 'k' };
    const token = await acquire(store, 't', 'k');
    await store.checkpoint(ref, token, 'small', { n: 1 });
    await expect(store.checkpoint(ref, token, 'large', { blob: 'x'.repeat(8192) })).rejects.toBeInstanceOf(StoreFullError);
    expect(await store.get(ref)).toMatchObject({ recoveryPoint: 'small', recoveryData: { n: 1 } });
    expect(store.stats().bytes).toBeLessThanOrEqual(4096);
  });

  it('keeps a checkpoint by sweeping a record whose window ended, never one inside it, and counts the checkpoint data', async () => {
    const clock = manualClock();
    const store = memoryStore({ maxBytes: 16 * 1024, maxResponseBytes: 8 * 1024, sweepIntervalMs: 0, clock: clock.now });
    await completeNew(store, 't', 'old', body(6 * 1024));
    const ref = { scope: 't', key: 'running' };
    const token = await acquire(store, 't', 'running');
    const before = store.stats().bytes;
    const data = { blob: 'x'.repeat(12 * 1024) };
    // `old` is inside its window: its answer is owed, so the checkpoint is refused and the record stays.
    await expect(store.checkpoint(ref, token, 'half', data)).rejects.toBeInstanceOf(StoreFullError);
    expect((await store.get({ scope: 't', key: 'old' }))?.state).toBe('completed');
    await clock.advance(opts.windowMs);
    expect(await store.renew(ref, token, opts.windowMs)).toBe(true); // the running one stays live
    await store.checkpoint(ref, token, 'half', data);
    expect(await store.get({ scope: 't', key: 'old' })).toBeUndefined();
    expect(store.stats().bytes).toBeGreaterThan(12 * 1024);
    expect(store.stats().bytes).toBeLessThanOrEqual(16 * 1024);
    expect(store.stats().bytes).not.toBe(before);
    expect((await store.get(ref))?.recoveryData).toEqual(data);
  });

  it('keeps a result it has no room for as status and headers with the body omitted, never refusing the completion', async () => {
    const maxBytes = 8 * 1024;
    const store = memoryStore({ maxBytes, maxResponseBytes: maxBytes, sweepIntervalMs: 0, clock: manualClock().now });
    const ref = { scope: 't', key: 'big' };
    const token = await acquire(store, 't', 'big');
    for (let i = 0; i < 5; i++) await acquire(store, 't', `other-${i}`); // in flight: never dropped
    await store.complete(ref, token, body(maxBytes - 1024));
    const replay = await store.claim(ref, 'fp', opts);
    expect(replay).toEqual({
      kind: 'completed',
      response: { status: 201, headers: [['content-type', 'application/json']], body: null, bodyOmitted: true },
    });
    expect(store.stats().bytes).toBeLessThanOrEqual(maxBytes);
  });

  it('gives the bytes back when records leave: release, sweep and a new claim after the window', async () => {
    const clock = manualClock();
    const store = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    const token = await acquire(store, 't', 'released');
    await store.release({ scope: 't', key: 'released' }, token);
    expect(store.stats().bytes).toBe(0);
    await completeNew(store, 't', 'expiring', body(4096));
    await completeNew(store, 't', 'reused', body(4096));
    await clock.advance(opts.windowMs + 1);
    await acquire(store, 't', 'reused'); // its window is over: a new record replaces it
    expect(await store.reap()).toBe(1);
    // What is left costs what the same claim costs in an empty store.
    const fresh = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    await acquire(fresh, 't', 'reused');
    expect(store.stats()).toEqual({ ...fresh.stats(), refused: 0 });
    expect(fresh.stats()).toMatchObject({ records: 1, inFlight: 1, completed: 0 });
    // …which holds no body: the same record completed with its 4,096-byte body counts that much more.
    const completed = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    await completeNew(completed, 't', 'reused', body(4096));
    expect(completed.stats().bytes - fresh.stats().bytes).toBeGreaterThanOrEqual(4096);
  });
});
