/**
 * The fencing section, which every store runs: a write counts only with the owner token of the
 * current lease, so a request whose lease ran out and was taken over changes nothing.
 */
import { randomBytes } from 'node:crypto';
import { LeaseLostError } from '../../core/errors.js';
import type { ContractSuite } from './context.js';
import { LEASE, LIVE, SHORT_LEASE, ref, response } from './context.js';

export function fencingSection(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  const { acquire } = suite;

  /** A record whose first owner's short lease ran out and a second claim took it over. */
  const takenOver = async () => {
    const r = ref();
    const first = await acquire(r, 'fp-1', SHORT_LEASE);
    await suite.advance(LEASE + 50);
    const second = await acquire(r);
    expect(second.takeover).toBe(true);
    return { r, first, second };
  };

  it('refuses a stale token on complete, checkpoint and release after a take-over', async () => {
    const { r, first, second } = await takenOver();
    await expect(suite.store.complete(r, first.token, response('late'))).rejects.toBeInstanceOf(LeaseLostError);
    await expect(suite.store.checkpoint(r, first.token, 'x')).rejects.toBeInstanceOf(LeaseLostError);
    await expect(suite.store.release(r, first.token)).rejects.toBeInstanceOf(LeaseLostError);
    expect(await suite.store.renew(r, first.token, LEASE)).toBe(false);
    await suite.store.complete(r, second.token, response('winner'));
    const record = await suite.store.get(r);
    expect(new TextDecoder().decode(record!.response!.body!)).toBe('winner');
  });

  it('refuses unknown tokens, and tokens of completed records', async () => {
    const r = ref();
    const { token } = await acquire(r);
    const forged = randomBytes(16).toString('hex');
    await expect(suite.store.complete(r, forged, response('x'))).rejects.toBeInstanceOf(LeaseLostError);
    await expect(suite.store.checkpoint(r, forged, 'x')).rejects.toBeInstanceOf(LeaseLostError);
    await expect(suite.store.release(r, forged)).rejects.toBeInstanceOf(LeaseLostError);
    await suite.store.complete(r, token, response('done'));
    await expect(suite.store.complete(r, token, response('twice'))).rejects.toBeInstanceOf(LeaseLostError);
    await expect(suite.store.release(r, token)).rejects.toBeInstanceOf(LeaseLostError);
    await expect(suite.store.complete(ref(), token, response('other'))).rejects.toBeInstanceOf(LeaseLostError);
  });

  it('renews a lease only for its owner, which keeps others out', async () => {
    const r = ref();
    const { token } = await acquire(r, 'fp-1', SHORT_LEASE);
    await suite.advance(LEASE * 0.6);
    expect(await suite.store.renew(r, token, LIVE.leaseMs)).toBe(true);
    // Past the first lease: only the renewal keeps the record in flight.
    await suite.advance(LEASE * 0.6);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    expect(await suite.store.renew(r, randomBytes(16).toString('hex'), LEASE)).toBe(false);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
  });

  it('refuses renew(…, 0) with a stale token, changing nothing', async () => {
    const { r, first, second } = await takenOver();
    const before = await suite.store.get(r);
    expect(await suite.store.renew(r, first.token, 0)).toBe(false);
    expect(await suite.store.get(r)).toEqual(before);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    // A completed record is not in flight for anyone: its former owner's renew(…, 0) changes nothing either.
    await suite.store.complete(r, second.token, response('done'));
    const done = await suite.store.get(r);
    expect(await suite.store.renew(r, second.token, 0)).toBe(false);
    expect(await suite.store.get(r)).toEqual(done);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('completed');
  });
}
