import { describe, expect, it } from 'vitest';
import { InvalidOptionError, StoreUnavailableError } from '../../src/core/errors.js';
import { memoryStore } from '../../src/stores/memory.js';
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
    clock.advance(6000);
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
  });
});
