/**
 * The recovery section: a lease that ended is taken over by the same request, from its last
 * recovery point, never by another request; an in-flight answer says how long ago its owner last
 * wrote (how a live owner is told from a gone one); and, where the store can list them
 * (`listAbandoned`, for a completer), the abandoned records.
 */
import { randomUUID } from 'node:crypto';
import { LeaseLostError } from '../../core/errors.js';
import type { Claim } from '../../core/store.js';
import { canListAbandoned, hasAdmin } from '../../core/store.js';
import type { ContractSuite } from './context.js';
import { LEASE, LIVE, SHORT_LEASE, WINDOW, opts, ref, response } from './context.js';

/** How far the age in an in-flight answer is moved in the case below. */
const AGE_STEP_MS = 250;
/** A store's rounding of its times to ms (PostgreSQL floors µs, Redis derives times from PTTL). */
const ROUNDING_MS = 2;
/** How much earlier than asked a timer may fire, measured on the host's clock. */
const TIMER_SLOP_MS = 20;

export function recoverySection(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  const { acquire } = suite;

  it('does not take over a live lease, and does after it expires', async () => {
    const r = ref();
    const first = await acquire(r);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    await suite.store.checkpoint(r, first.token, 'charged', { chargeId: 'ch_1' });
    // Now a short lease, which then runs out on the store's clock.
    expect(await suite.store.renew(r, first.token, LEASE)).toBe(true);
    await suite.advance(LEASE + 50);
    const second = await suite.store.claim(r, 'fp-1', LIVE);
    expect(second.kind).toBe('acquired');
    if (second.kind !== 'acquired') return;
    expect(second.takeover).toBe(true);
    expect(second.token).not.toBe(first.token);
    expect(second.resumeFrom).toBe('charged');
    expect(second.recoveryData).toEqual({ chargeId: 'ch_1' });
  });

  // The engine tells a live owner (renewing every third of its lease) from one that stopped by this
  // age (docs/semantics.md). Bounds come from readings of this process's clock around the calls,
  // widened by the store's rounding; a slow machine widens them instead of failing the case.
  it('says, in flight, how long ago the record last changed: little after the claim, more as the clock advances, reset by a renewal and a checkpoint', async () => {
    const r = ref();
    /** The age an in-flight answer gives; `leased`: the last change set the lease, so both count from it. */
    const inFlight = async (leased = true) => {
      const claim = await suite.store.claim(r, 'fp-1', LIVE);
      expect(claim.kind).toBe('in_flight');
      const { retryAfterMs, renewedMsAgo } = claim as Extract<Claim, { kind: 'in_flight' }>;
      expect(typeof renewedMsAgo).toBe('number');
      expect(renewedMsAgo!).toBeGreaterThanOrEqual(0);
      if (leased) {
        expect(retryAfterMs + renewedMsAgo!).toBeGreaterThanOrEqual(LIVE.leaseMs - ROUNDING_MS);
        expect(retryAfterMs + renewedMsAgo!).toBeLessThanOrEqual(LIVE.leaseMs + ROUNDING_MS);
      }
      return renewedMsAgo!;
    };
    const claimedFrom = Date.now();
    const { token } = await acquire(r);
    const fresh = await inFlight();
    expect(fresh).toBeLessThanOrEqual(Date.now() - claimedFrom + ROUNDING_MS);
    // `advance` moves an injected clock by exactly this much, and real time by at least this much
    // (a timer may fire a little early on the host's clock: TIMER_SLOP_MS).
    const advancedFrom = Date.now();
    await suite.advance(AGE_STEP_MS);
    const older = await inFlight();
    expect(older - fresh).toBeGreaterThanOrEqual(AGE_STEP_MS - TIMER_SLOP_MS);
    expect(older).toBeLessThanOrEqual(Date.now() - claimedFrom + AGE_STEP_MS + ROUNDING_MS);
    expect(older - fresh).toBeLessThanOrEqual(Date.now() - advancedFrom + AGE_STEP_MS + ROUNDING_MS);
    const renewedFrom = Date.now();
    expect(await suite.store.renew(r, token, LIVE.leaseMs)).toBe(true);
    expect(await inFlight()).toBeLessThanOrEqual(Date.now() - renewedFrom + ROUNDING_MS);
    await suite.advance(AGE_STEP_MS);
    expect(await inFlight()).toBeGreaterThanOrEqual(AGE_STEP_MS - TIMER_SLOP_MS);
    // A checkpoint is a change too (it leaves the lease as it was).
    const checkpointFrom = Date.now();
    await suite.store.checkpoint(r, token, 'charged');
    expect(await inFlight(false)).toBeLessThanOrEqual(Date.now() - checkpointFrom + ROUNDING_MS);
    // Reads (the in-flight answers above) changed nothing: a renewal still succeeds with the token.
    expect(await suite.store.renew(r, token, LIVE.leaseMs)).toBe(true);
  });

  it('does not let an expired lease of one request be taken over by a different request', async () => {
    const r = ref();
    await acquire(r, 'fp-1', SHORT_LEASE);
    await suite.advance(LEASE + 50);
    expect((await suite.store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
  });

  // ctx.suspend() gives the lease back this way, so that an immediate retry resumes the work.
  it('ends the lease now on renew(…, 0): an immediate claim of the same request takes over from the recovery point', async () => {
    const r = ref();
    const first = await acquire(r);
    await suite.store.checkpoint(r, first.token, 'charged', { chargeId: 'ch_1' });
    expect(await suite.store.renew(r, first.token, 0)).toBe(true);
    // No time passes: the lease already ended.
    const second = await suite.store.claim(r, 'fp-1', LIVE);
    expect(second).toMatchObject({ kind: 'acquired', takeover: true, resumeFrom: 'charged', recoveryData: { chargeId: 'ch_1' } });
    if (second.kind !== 'acquired') return;
    expect(second.token).not.toBe(first.token);
    // The record is still inside its window, and the one who gave the lease back is fenced out.
    await expect(suite.store.complete(r, first.token, response('late'))).rejects.toBeInstanceOf(LeaseLostError);
    await suite.store.complete(r, second.token, response('resumed'));
    const replay = await suite.store.claim(r, 'fp-1', LIVE);
    expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe('resumed');
  });

  // An optional capability (for a completer); stores without it (Redis) skip this case.
  suite.itWith(canListAbandoned, 'lists abandoned records (in flight, lease over, window open) with their recovery points, and nothing else', async (store) => {
    const scope = `abandoned-${randomUUID()}`;
    const abandoned = ref(scope);
    const bare = ref(scope);
    const live = ref(scope);
    const done = ref(scope);
    // Its own scope: it is listed or not depending on how long the first listing takes; what
    // matters is that it is never listed once its window is over.
    const windowOver = ref(`abandoned-${randomUUID()}`);
    await acquire(windowOver, 'fp-1', opts);
    const first = await acquire(abandoned, 'fp-1', SHORT_LEASE);
    await store.checkpoint(abandoned, first.token, 'started', { input: { amount: 5 } });
    await acquire(bare, 'fp-bare', SHORT_LEASE);
    await acquire(live);
    const finished = await acquire(done, 'fp-1', SHORT_LEASE);
    await store.complete(done, finished.token, response('done'));
    await suite.advance(LEASE + 50);
    const mine = (await store.listAbandoned(1000)).filter((r) => r.scope === scope);
    expect(mine.map((r) => r.key).sort()).toEqual([abandoned.key, bare.key].sort());
    const found = mine.find((r) => r.key === abandoned.key)!;
    expect(found).toMatchObject({ state: 'in_flight', fingerprint: 'fp-1', recoveryPoint: 'started', recoveryData: { input: { amount: 5 } } });
    // With the times `get` shows (how old the abandoned request is), where the store keeps them.
    const read = await store.get(abandoned);
    expect({ createdAt: found.createdAt, updatedAt: found.updatedAt }).toEqual({ createdAt: read!.createdAt, updatedAt: read!.updatedAt });
    if (hasAdmin(store)) expect(typeof found.createdAt).toBe('number');
    expect(mine.find((r) => r.key === bare.key)).toMatchObject({ fingerprint: 'fp-bare', recoveryPoint: undefined });
    expect((await store.listAbandoned(1)).length).toBeLessThanOrEqual(1);
    // Taken over, it is owned again and no longer listed; past its window it is gone for every purpose.
    expect(await acquire(abandoned)).toMatchObject({ takeover: true, resumeFrom: 'started' });
    expect((await store.listAbandoned(1000)).some((r) => r.key === abandoned.key)).toBe(false);
    await suite.advance(WINDOW + 50);
    expect((await store.listAbandoned(1000)).some((r) => r.key === windowOver.key)).toBe(false);
    expect(await store.get(windowOver)).toMatchObject({ state: 'in_flight' }); // still there: expired, not yet reaped
  });
}
