import { describe, expect, it } from 'vitest';
import type { StoredResponse } from '../../src/core/store.js';
import { InvalidOptionError, StoreUnavailableError } from '../../src/core/errors.js';
import type { MemoryStore } from '../../src/stores/memory.js';
import { DEFAULT_MEMORY_MAX_BYTES, memoryStore } from '../../src/stores/memory.js';
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
    await expect(store.claim({ scope: '', key: 'd' }, 'fp', opts)).rejects.toBeInstanceOf(StoreUnavailableError);
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

  it('validates its options eagerly, naming the option', () => {
    expect(() => memoryStore({ maxRecords: 0 })).toThrow(InvalidOptionError);
    expect(() => memoryStore({ maxRecords: 0 })).toThrow(/maxRecords/);
    expect(() => memoryStore({ sweepIntervalMs: -1 })).toThrow(/sweepIntervalMs/);
    expect(() => memoryStore({ maxBytes: 0 })).toThrow(/maxBytes/);
    expect(() => memoryStore({ maxBytes: 1.5 })).toThrow(/maxBytes/);
    // A body the store accepts must fit in it.
    expect(() => memoryStore({ maxBytes: 1000, maxResponseBytes: 1001 })).toThrow(/maxBytes.*maxResponseBytes/);
    expect(memoryStore({ sweepIntervalMs: 0 }).stats()).toEqual({ records: 0, inFlight: 0, completed: 0, bytes: 0, evicted: 0 });
    expect(DEFAULT_MEMORY_MAX_BYTES).toBe(64 * 1024 * 1024);
  });
});

describe('memoryStore bounds: bytes as well as records, evicting what is safe before refusing', () => {
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

  it('holds the bytes it keeps to maxBytes: 40 responses of 10 KiB in 128 KiB keep only the newest that fit', async () => {
    const maxBytes = 128 * 1024;
    const store = memoryStore({ maxBytes, maxResponseBytes: 16 * 1024, sweepIntervalMs: 0, clock: manualClock().now });
    const keys = Array.from({ length: 40 }, (_, i) => `k${String(i).padStart(2, '0')}`);
    for (const key of keys) {
      await completeNew(store, 'tenant-a', key, body(10 * 1024));
      expect(store.stats().bytes).toBeLessThanOrEqual(maxBytes);
    }
    const { kept, bytes } = await keptBodies(store, 'tenant-a', keys);
    expect(bytes).toBeLessThanOrEqual(maxBytes);
    // The accounting counts at least the bodies it holds, and the newest records are the ones kept.
    expect(store.stats().bytes).toBeGreaterThanOrEqual(bytes);
    expect(kept.length).toBeGreaterThanOrEqual(10);
    expect(kept).toEqual(keys.slice(keys.length - kept.length));
    expect(store.stats()).toMatchObject({ records: kept.length, completed: kept.length, inFlight: 0, evicted: keys.length - kept.length });
    // An evicted key is new again: a late retry would run again (docs/semantics.md says so).
    expect((await store.claim({ scope: 'tenant-a', key: keys[0]! }, 'fp', opts)).kind).toBe('acquired');
  });

  it('evicts completed records in the order they completed, not the order they were claimed', async () => {
    const store = memoryStore({ maxRecords: 3, sweepIntervalMs: 0, clock: manualClock().now });
    const tokens = { a: await acquire(store, 't', 'a'), b: await acquire(store, 't', 'b'), c: await acquire(store, 't', 'c') };
    for (const key of ['b', 'a', 'c'] as const) await store.complete({ scope: 't', key }, tokens[key], body(10));
    await acquire(store, 't', 'd');
    expect(await store.get({ scope: 't', key: 'b' })).toBeUndefined();
    expect((await store.get({ scope: 't', key: 'a' }))?.state).toBe('completed');
    await acquire(store, 't', 'e');
    expect(await store.get({ scope: 't', key: 'a' })).toBeUndefined();
    expect((await store.get({ scope: 't', key: 'c' }))?.state).toBe('completed');
    expect(store.stats()).toMatchObject({ records: 3, evicted: 2 });
  });

  it('lets every other tenant in when one tenant fills maxRecords with completed records', async () => {
    const store = memoryStore({ maxRecords: 50, sweepIntervalMs: 0, clock: manualClock().now });
    for (let i = 0; i < 50; i++) await completeNew(store, 'noisy-tenant', `k${i}`, body(100));
    expect(store.size).toBe(50);
    for (let i = 0; i < 5; i++) expect((await store.claim({ scope: `tenant-${i}`, key: 'k' }, 'fp', opts)).kind).toBe('acquired');
    expect(store.stats()).toMatchObject({ records: 50, inFlight: 5, completed: 45, evicted: 5 });
  });

  it('never evicts a record in flight, and refuses new claims (503) once only records in flight are left', async () => {
    const store = memoryStore({ maxRecords: 3, sweepIntervalMs: 0, clock: manualClock().now });
    const first = await acquire(store, 't', 'first'); // claimed before everything else, still running
    await completeNew(store, 't', 'done-1', body(10));
    await completeNew(store, 't', 'done-2', body(10));
    await acquire(store, 't', 'second');
    await acquire(store, 't', 'third');
    expect(store.stats()).toMatchObject({ records: 3, inFlight: 3, completed: 0, evicted: 2 });
    const refused = await store.claim({ scope: 'other', key: 'k' }, 'fp', opts).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(StoreUnavailableError);
    expect((refused as Error).message).toMatch(/full of requests in flight \(maxRecords = 3\)/);
    // Every request in flight still owns its record and can store its result.
    await store.complete({ scope: 't', key: 'first' }, first, body(10));
    expect((await store.claim({ scope: 't', key: 'first' }, 'fp', opts)).kind).toBe('completed');
    // Now one record is completed: it makes room for the next new key.
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
    expect(refused).toBeInstanceOf(StoreUnavailableError);
    expect((refused as Error).message).toMatch(/maxBytes = 8192/);
    expect(held.length).toBeGreaterThan(5);
    expect(store.stats()).toMatchObject({ records: held.length, inFlight: held.length, evicted: 0 });
    expect(store.stats().bytes).toBeLessThanOrEqual(maxBytes);
    for (const { key, token } of held) expect(await store.renew({ scope: 't', key }, token, 1000)).toBe(true);
  });

  it('refuses a checkpoint whose data does not fit, keeping the earlier checkpoint', async () => {
    const store = memoryStore({ maxBytes: 4096, maxResponseBytes: 1024, sweepIntervalMs: 0, clock: manualClock().now });
    const ref = { scope: 't', key: 'k' };
    const token = await acquire(store, 't', 'k');
    await store.checkpoint(ref, token, 'small', { n: 1 });
    await expect(store.checkpoint(ref, token, 'large', { blob: 'x'.repeat(8192) })).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(await store.get(ref)).toMatchObject({ recoveryPoint: 'small', recoveryData: { n: 1 } });
    expect(store.stats().bytes).toBeLessThanOrEqual(4096);
  });

  it('evicts completed records to keep a checkpoint, and counts the checkpoint data', async () => {
    const store = memoryStore({ maxBytes: 16 * 1024, maxResponseBytes: 8 * 1024, sweepIntervalMs: 0, clock: manualClock().now });
    await completeNew(store, 't', 'old', body(6 * 1024));
    const ref = { scope: 't', key: 'running' };
    const token = await acquire(store, 't', 'running');
    const before = store.stats().bytes;
    await store.checkpoint(ref, token, 'half', { blob: 'x'.repeat(12 * 1024) });
    expect(await store.get({ scope: 't', key: 'old' })).toBeUndefined();
    expect(store.stats().bytes).toBeGreaterThan(12 * 1024);
    expect(store.stats().bytes).toBeLessThanOrEqual(16 * 1024);
    expect(store.stats().bytes).not.toBe(before);
    expect((await store.get(ref))?.recoveryData).toEqual({ blob: 'x'.repeat(12 * 1024) });
  });

  it('keeps a result it has no room for as status and headers with the body omitted, never refusing the completion', async () => {
    const maxBytes = 8 * 1024;
    const store = memoryStore({ maxBytes, maxResponseBytes: maxBytes, sweepIntervalMs: 0, clock: manualClock().now });
    const ref = { scope: 't', key: 'big' };
    const token = await acquire(store, 't', 'big');
    for (let i = 0; i < 5; i++) await acquire(store, 't', `other-${i}`); // in flight: cannot be evicted
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
    expect(store.stats()).toEqual({ ...fresh.stats(), evicted: 0 });
    expect(fresh.stats()).toMatchObject({ records: 1, inFlight: 1, completed: 0 });
    // …which holds no body: the same record completed with its 4,096-byte body counts that much more.
    const completed = memoryStore({ sweepIntervalMs: 0, clock: clock.now });
    await completeNew(completed, 't', 'reused', body(4096));
    expect(completed.stats().bytes - fresh.stats().bytes).toBeGreaterThanOrEqual(4096);
  });
});
