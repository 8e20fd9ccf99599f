/**
 * The admin section: `store.admin` (inspect, list, stats, purge), the capability the `idemkit`
 * command reads and purges the store through. A store without it skips these cases.
 */
import { randomUUID } from 'node:crypto';
import type { RecordRef } from '../../core/store.js';
import { hasAdmin } from '../../core/store.js';
import type { ContractSuite } from './context.js';
import { LEASE, LIVE, SHORT_LEASE, WINDOW, opts, ref, response } from './context.js';

export function adminSection(suite: ContractSuite): void {
  adminReads(suite);
  adminWrites(suite);
}

/** What the admin reads: counts, one record, a listing. */
function adminReads(suite: ContractSuite): void {
  const { expect } = suite.test;
  const { acquire, itWith } = suite;

  // The admin capability (store.admin, used by the `idemkit` command); stores without it skip
  // these cases. This one runs first, on an empty store, so its counts are exact on every clock.
  itWith(hasAdmin, 'admin: counts records by state, the oldest owner gone, and the bytes of stored bodies', async (store) => {
    const before = await store.admin.stats();
    const live = ref();
    await acquire(live);
    const gone = ref();
    const goneClaim = await acquire(gone);
    expect(await store.renew(gone, goneClaim.token, 0)).toBe(true);
    const bodies = ['{"id":1}', 'x'.repeat(300)];
    for (const body of bodies) {
      const r = ref();
      const { token } = await acquire(r);
      await store.complete(r, token, response(body));
    }
    const after = await store.admin.stats();
    expect(after.inFlight - before.inFlight).toBe(2);
    expect(after.abandoned - before.abandoned).toBe(1);
    expect(after.completed - before.completed).toBe(2);
    expect(after.expired - before.expired).toBe(0);
    expect(after.bodyBytes - before.bodyBytes).toBe(bodies.reduce((n, b) => n + b.length, 0));
    expect(after.now).toBeGreaterThanOrEqual(before.now);
    const goneRecord = await store.get(gone);
    expect(after.oldestInFlight).not.toBeNull();
    expect(after.oldestInFlight!.leaseUntil).toBeLessThanOrEqual(goneRecord!.leaseUntil);
    if (before.inFlight === 0) expect(after.oldestInFlight).toEqual({ scope: gone.scope, key: gone.key, leaseUntil: goneRecord!.leaseUntil });
  });

  itWith(hasAdmin, 'admin: inspects a record with its owner token cut short, attempt, recovery point and response', async (store) => {
    const r = ref();
    expect(await store.admin.inspect(r)).toBeUndefined();
    const first = await acquire(r, 'fp-1', SHORT_LEASE);
    await store.checkpoint(r, first.token, 'charged', { chargeId: 'ch_1' });
    const inFlight = await store.admin.inspect(r);
    expect(inFlight).toMatchObject({ scope: r.scope, key: r.key, state: 'in_flight', fingerprint: 'fp-1', attempt: 1, expired: false });
    expect(inFlight).toMatchObject({ recoveryPoint: 'charged', recoveryData: { chargeId: 'ch_1' }, tokenPrefix: first.token.slice(0, 8) });
    expect(inFlight!.response).toBeUndefined();
    expect(inFlight!.leaseUntil).toBeGreaterThan(0);
    await suite.advance(LEASE + 50);
    const second = await acquire(r);
    const takenOver = await store.admin.inspect(r);
    expect(takenOver).toMatchObject({ attempt: 2, tokenPrefix: second.token.slice(0, 8) });
    expect(takenOver!.now).toBeGreaterThanOrEqual(inFlight!.now);
    const body = Uint8Array.from([0, 1, 2, 255]);
    await store.complete(r, second.token, { status: 201, headers: [['content-type', 'application/octet-stream']], body, bodyOmitted: false });
    const done = await store.admin.inspect(r);
    expect(done).toMatchObject({ state: 'completed', fingerprint: 'fp-1', expired: false });
    expect(done!.tokenPrefix.length).toBeLessThanOrEqual(8);
    expect(done!.response).toMatchObject({ status: 201, headers: [['content-type', 'application/octet-stream']], bodyOmitted: false });
    expect(Buffer.from(done!.response!.body!).equals(Buffer.from(body))).toBe(true);
    // Past its window, a record still held is shown as expired.
    const old = ref();
    const o = await acquire(old, 'fp-1', opts);
    await store.complete(old, o.token, response('old'));
    await suite.advance(WINDOW + 50);
    expect(await store.admin.inspect(old)).toMatchObject({ state: 'completed', expired: true });
  });

  itWith(hasAdmin, 'admin: lists by scope, state and age (claimed at least olderThanMs ago), oldest lease first, up to limit', async (store) => {
    const scope = `list-${randomUUID()}`;
    const liveInFlight = ref(scope);
    const goneInFlight = ref(scope);
    const oldCompleted = ref(scope);
    const liveCompleted = ref(scope);
    await acquire(goneInFlight, 'fp-1', SHORT_LEASE);
    const c1 = await acquire(oldCompleted, 'fp-1', SHORT_LEASE);
    await store.complete(oldCompleted, c1.token, response('{"id":1}'));
    await acquire(ref()); // another scope
    await suite.advance(LEASE + 50);
    // Claimed after the advance: younger than LEASE + 50 by the store's clock.
    await acquire(liveInFlight);
    const c2 = await acquire(liveCompleted);
    await store.complete(liveCompleted, c2.token, response('{"id":22}'));
    const keys = (list: Array<{ key: string }>) => list.map((r) => r.key).sort();
    const all = await store.admin.list({ scope });
    expect(keys(all)).toEqual(keys([liveInFlight, goneInFlight, oldCompleted, liveCompleted]));
    expect(keys(await store.admin.list({ scope, state: 'in_flight' }))).toEqual(keys([liveInFlight, goneInFlight]));
    expect(keys(await store.admin.list({ scope, state: 'completed' }))).toEqual(keys([oldCompleted, liveCompleted]));
    // Every record was claimed at or before now.
    expect(keys(await store.admin.list({ scope, olderThanMs: 0 }))).toEqual(keys(all));
    const young = Math.min(...all.filter((r) => r.key === liveInFlight.key || r.key === liveCompleted.key).map((r) => r.createdAt!));
    const aged = await store.admin.list({ scope, olderThanMs: LEASE });
    const agedCompleted = await store.admin.list({ scope, state: 'completed', olderThanMs: LEASE });
    const listedAt = (await store.admin.stats()).now;
    for (const r of [...aged, ...agedCompleted]) expect(r.createdAt!).toBeLessThanOrEqual(listedAt - LEASE);
    for (const old of [goneInFlight, oldCompleted]) expect(aged.some((r) => r.key === old.key)).toBe(true);
    expect(agedCompleted.some((r) => r.key === oldCompleted.key)).toBe(true);
    // On a real clock the young ones are left out only while they are younger than LEASE when
    // listed: a loaded machine may take longer than that between the claims and the listing.
    if (listedAt - young < LEASE) {
      expect(keys(aged)).toEqual(keys([goneInFlight, oldCompleted]));
      expect(keys(agedCompleted)).toEqual([oldCompleted.key]);
    }
    // Oldest lease first: the two whose short leases ended come before the two live ones.
    expect(keys(all.slice(0, 2))).toEqual(keys([goneInFlight, oldCompleted]));
    for (let i = 1; i < all.length; i++) expect(all[i]!.leaseUntil).toBeGreaterThanOrEqual(all[i - 1]!.leaseUntil);
    const first = await store.admin.list({ scope, limit: 1 });
    expect(first).toHaveLength(1);
    expect(first[0]!.key).toBe(all[0]!.key);
    expect(all.find((r) => r.key === liveCompleted.key)).toMatchObject({ state: 'completed', status: 201, bodyBytes: 9, attempt: 1, expired: false });
    expect(all.find((r) => r.key === goneInFlight.key)).toMatchObject({ state: 'in_flight', status: undefined, bodyBytes: null, fingerprint: 'fp-1' });
    expect(await store.admin.list({ scope: `none-${randomUUID()}` })).toEqual([]);
  });
}

/** The times the store stamps on each write, and the one write the admin makes: purge. */
function adminWrites(suite: ContractSuite): void {
  const { expect } = suite.test;
  const { acquire, itWith } = suite;

  itWith(hasAdmin, 'admin: stamps a record with createdAt and updatedAt on the store clock; writes move updatedAt, reads do not', async (store) => {
    const { admin } = store;
    const clock = async () => (await admin.stats()).now;
    const stamps = async (r: RecordRef) => {
      const found = await admin.inspect(r);
      expect(found).not.toBeUndefined();
      expect(typeof found!.createdAt).toBe('number');
      expect(typeof found!.updatedAt).toBe('number');
      expect(found!.createdAt!).toBeLessThanOrEqual(found!.updatedAt!);
      expect(found!.updatedAt!).toBeLessThanOrEqual(found!.now);
      // `get` shows the same times (undefined where the admin says null: never here).
      const got = await store.get(r);
      expect({ createdAt: got?.createdAt, updatedAt: got?.updatedAt }).toEqual({ createdAt: found!.createdAt, updatedAt: found!.updatedAt });
      return { createdAt: found!.createdAt!, updatedAt: found!.updatedAt! };
    };
    const r = ref();
    const before = await clock();
    // Live throughout (a loaded machine may take longer than a short lease between two calls);
    // `renew(…, 0)` ends it where the take-over needs it ended.
    const first = await acquire(r, 'fp-1', LIVE);
    const claimed = await stamps(r);
    // On the store's clock: not before a reading of it taken before the claim.
    expect(claimed.createdAt).toBeGreaterThanOrEqual(before);
    expect(claimed.updatedAt).toBe(claimed.createdAt);
    // The listing carries the same stamps.
    expect((await store.admin.list({ scope: r.scope }))[0]).toMatchObject(claimed);

    await suite.advance(5);
    expect(await store.renew(r, first.token, LIVE.leaseMs)).toBe(true);
    const renewed = await stamps(r);
    expect(renewed.createdAt).toBe(claimed.createdAt);
    expect(renewed.updatedAt).toBeGreaterThan(claimed.updatedAt);
    // A refused renewal changes nothing.
    await suite.advance(5);
    expect(await store.renew(r, 'f'.repeat(32), LIVE.leaseMs)).toBe(false);
    expect(await stamps(r)).toEqual(renewed);

    await suite.advance(5);
    await store.checkpoint(r, first.token, 'charged');
    const checkpointed = await stamps(r);
    expect(checkpointed.updatedAt).toBeGreaterThan(renewed.updatedAt);

    // In flight, a same-request claim answers in_flight and another fingerprint mismatch: reads.
    await suite.advance(5);
    expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    expect((await store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
    expect(await stamps(r)).toEqual(checkpointed);

    // A take-over keeps the request's creation time (how old the request is) and is a change.
    expect(await store.renew(r, first.token, 0)).toBe(true);
    await suite.advance(5);
    const second = await acquire(r, 'fp-1', LIVE);
    expect(second.takeover).toBe(true);
    const takenOver = await stamps(r);
    expect(takenOver.createdAt).toBe(claimed.createdAt);
    expect(takenOver.updatedAt).toBeGreaterThan(checkpointed.updatedAt);

    await suite.advance(5);
    await store.complete(r, second.token, response('{"id":1}'));
    const completed = await stamps(r);
    expect(completed.createdAt).toBe(claimed.createdAt);
    expect(completed.updatedAt).toBeGreaterThan(takenOver.updatedAt);

    // A replay and a mismatch cost no write: the stamps stay.
    await suite.advance(5);
    expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('completed');
    expect((await store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
    expect(await stamps(r)).toEqual(completed);
  });

  itWith(hasAdmin, 'admin: a claim after the window ended starts a new record with a new createdAt', async (store) => {
    const r = ref();
    const old = await acquire(r, 'fp-1', opts);
    await store.complete(r, old.token, response('old'));
    const before = await store.admin.inspect(r);
    await suite.advance(WINDOW + 50);
    const fresh = await acquire(r, 'fp-2', LIVE);
    expect(fresh.takeover).toBe(false);
    const after = await store.admin.inspect(r);
    expect(after).toMatchObject({ state: 'in_flight', attempt: 1, fingerprint: 'fp-2' });
    expect(after!.createdAt!).toBeGreaterThan(before!.createdAt!);
    expect(after!.updatedAt).toBe(after!.createdAt);
    expect(after!.createdAt!).toBeGreaterThanOrEqual(before!.now + WINDOW);
    expect(await store.get(r)).toMatchObject({ createdAt: after!.createdAt, updatedAt: after!.updatedAt });
  });

  itWith(hasAdmin, 'admin: purges a completed record, refuses one in flight unless forced, and reports one not found', async (store) => {
    const done = ref();
    const d = await acquire(done);
    await store.complete(done, d.token, response('done'));
    expect(await store.admin.purge(done)).toBe('purged');
    expect(await store.get(done)).toBeUndefined();
    expect(await store.claim(done, 'fp-other', LIVE)).toMatchObject({ kind: 'acquired', takeover: false });
    const running = ref();
    await acquire(running);
    expect(await store.admin.purge(running)).toBe('in_flight');
    expect(await store.admin.purge(running, { force: false })).toBe('in_flight');
    expect((await store.get(running))?.state).toBe('in_flight');
    expect(await store.admin.purge(running, { force: true })).toBe('purged');
    expect(await store.get(running)).toBeUndefined();
    expect(await store.admin.purge(running)).toBe('not_found');
    expect(await store.admin.purge(ref(), { force: true })).toBe('not_found');
  });
}
