/**
 * The fencing section, which every store runs: a write counts only with the owner token of the
 * current lease, so a request whose lease ran out and was taken over changes nothing.
 */
import { randomBytes } from 'node:crypto';
import { LeaseLostError } from '../../core/errors.js';
import type { IdempotencyStore } from '../../core/store.js';
import type { ContractContext, ContractSuite } from './context.js';
import { LEASE, LIVE, SHORT_LEASE, acquirer, ref, response } from './context.js';

export function fencingSection(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  let ctx: ContractContext;
  let store: IdempotencyStore;
  suite.ready((made) => {
    ctx = made;
    store = made.store;
  });
  const acquire = acquirer(() => store);

  it('refuses a stale token on complete, checkpoint and release after a take-over', async () => {
    const r = ref();
    const first = await acquire(r, 'fp-1', SHORT_LEASE);
    await ctx.advance(LEASE + 50);
    const second = await acquire(r);
    expect(second.takeover).toBe(true);
    await expect(store.complete(r, first.token, response('late'))).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.checkpoint(r, first.token, 'x')).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.release(r, first.token)).rejects.toBeInstanceOf(LeaseLostError);
    expect(await store.renew(r, first.token, LEASE)).toBe(false);
    await store.complete(r, second.token, response('winner'));
    const record = await store.get(r);
    expect(new TextDecoder().decode(record!.response!.body!)).toBe('winner');
  });

  it('refuses unknown tokens, and tokens of completed records', async () => {
    const r = ref();
    const { token } = await acquire(r);
    const forged = randomBytes(16).toString('hex');
    await expect(store.complete(r, forged, response('x'))).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.checkpoint(r, forged, 'x')).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.release(r, forged)).rejects.toBeInstanceOf(LeaseLostError);
    await store.complete(r, token, response('done'));
    await expect(store.complete(r, token, response('twice'))).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.release(r, token)).rejects.toBeInstanceOf(LeaseLostError);
    await expect(store.complete(ref(), token, response('other'))).rejects.toBeInstanceOf(LeaseLostError);
  });

  it('renews a lease only for its owner, which keeps others out', async () => {
    const r = ref();
    const { token } = await acquire(r, 'fp-1', SHORT_LEASE);
    await ctx.advance(LEASE * 0.6);
    expect(await store.renew(r, token, LIVE.leaseMs)).toBe(true);
    // Past the first lease: only the renewal keeps the record in flight.
    await ctx.advance(LEASE * 0.6);
    expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    expect(await store.renew(r, randomBytes(16).toString('hex'), LEASE)).toBe(false);
    expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
  });

  it('refuses renew(…, 0) with a stale token, changing nothing', async () => {
    const r = ref();
    const first = await acquire(r, 'fp-1', SHORT_LEASE);
    await ctx.advance(LEASE + 50);
    const second = await acquire(r);
    expect(second.takeover).toBe(true);
    const before = await store.get(r);
    expect(await store.renew(r, first.token, 0)).toBe(false);
    expect(await store.get(r)).toEqual(before);
    expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    // A completed record is not in flight for anyone: its former owner's renew(…, 0) changes nothing either.
    await store.complete(r, second.token, response('done'));
    const done = await store.get(r);
    expect(await store.renew(r, second.token, 0)).toBe(false);
    expect(await store.get(r)).toEqual(done);
    expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('completed');
  });
}
