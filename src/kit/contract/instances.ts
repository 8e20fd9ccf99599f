/**
 * The instances section, for stores with `endLeasesOf` (instance identities, `startInstance`): a
 * claim made for an incarnation carries it in its owner token, and ending that incarnation's
 * leases frees exactly its own in-flight records, at once, and nothing else. Stores without the
 * capability (Redis) skip these cases.
 */
import { InvalidOptionError, LeaseLostError } from '../../core/errors.js';
import type { ClaimOptions } from '../../core/store.js';
import { canEndLeasesOf } from '../../core/store.js';
import { newIncarnation } from '../../core/token.js';
import type { ContractSuite } from './context.js';
import { LIVE, ref, response } from './context.js';

/** Claim options that end nothing during a test, for an incarnation. */
const liveFor = (incarnation: string): ClaimOptions => ({ leaseMs: LIVE.leaseMs, windowMs: LIVE.windowMs, incarnation });

export function instancesSection(suite: ContractSuite): void {
  const { expect } = suite.test;
  const { acquire, itWith } = suite;

  itWith(canEndLeasesOf, 'hands out owner tokens that start with the claiming incarnation, and 32 fresh hex characters without one', async (store) => {
    const incarnation = newIncarnation();
    const tagged = await acquire(ref(), 'fp-1', liveFor(incarnation));
    expect(tagged.token).toHaveLength(32);
    expect(tagged.token.slice(0, 16)).toBe(incarnation);
    const plain = await acquire(ref());
    expect(plain.token).toMatch(/^[0-9a-f]{32}$/);
    // A take-over by the same incarnation's retry carries it too.
    const r = ref();
    const first = await acquire(r, 'fp-1', liveFor(incarnation));
    await store.renew(r, first.token, 0);
    const again = await acquire(r, 'fp-1', liveFor(incarnation));
    expect(again).toMatchObject({ takeover: true });
    expect(again.token.slice(0, 16)).toBe(incarnation);
    expect(again.token).not.toBe(first.token);
  });

  itWith(canEndLeasesOf, 'ends the live leases of that incarnation’s in-flight records, and no other record’s', async (store) => {
    const gone = newIncarnation();
    const other = newIncarnation();
    const [held, done, moved, theirs, plain] = [ref(), ref(), ref(), ref(), ref()];
    const dead = await acquire(held, 'fp-1', liveFor(gone));
    await store.checkpoint(held, dead.token, 'charged', { chargeId: 'ch_1' });
    await store.complete(done, (await acquire(done, 'fp-1', liveFor(gone))).token, response('done'));
    // Claimed by the dead incarnation, then taken over by another owner: no longer its.
    const given = await acquire(moved, 'fp-1', liveFor(gone));
    await store.renew(moved, given.token, 0);
    const taker = await acquire(moved);
    await acquire(theirs, 'fp-1', liveFor(other));
    await acquire(plain);

    expect(await store.endLeasesOf(gone)).toBe(1);
    // No time passes: the dead owner's lease already ended, and its retry resumes from its point.
    const retry = await store.claim(held, 'fp-1', LIVE);
    expect(retry).toMatchObject({ kind: 'acquired', takeover: true, resumeFrom: 'charged', recoveryData: { chargeId: 'ch_1' } });
    await expect(store.complete(held, dead.token, response('late'))).rejects.toBeInstanceOf(LeaseLostError);
    expect((await store.claim(done, 'fp-1', LIVE)).kind).toBe('completed');
    for (const r of [moved, theirs, plain]) expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    await store.complete(moved, taker.token, response('taker'));
    // Nothing of it is left to end.
    expect(await store.endLeasesOf(gone)).toBe(0);
  });

  itWith(canEndLeasesOf, 'refuses to end leases by anything but a whole incarnation: a shorter prefix would end other owners’ leases', async (store) => {
    for (const bad of ['', 'a', newIncarnation().slice(0, 15), `${newIncarnation()}0`, 'ABCDEF0123456789', '%%%%%%%%%%%%%%%%']) {
      await expect(Promise.resolve().then(() => store.endLeasesOf(bad))).rejects.toBeInstanceOf(InvalidOptionError);
    }
  });
}
