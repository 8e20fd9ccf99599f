/**
 * The store contract: the cases every `IdempotencyStore` must pass, run unchanged against each
 * store idemkit ships, and offered to third-party stores through `idemkit/kit`.
 *
 * It registers its cases with the test framework the caller passes in (vitest, Jest, or anything
 * with the same shape), so idemkit has no runtime dependency on a test runner:
 *
 *   import { afterAll, beforeAll, describe, expect, it } from 'vitest';
 *   describeStoreContract('my store', () => ({ store, advance }), { describe, it, expect, beforeAll, afterAll });
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { InvalidRecordRefError, LeaseLostError } from '../core/errors.js';
import type { IdempotencyStore, RecordRef, StoredResponse } from '../core/store.js';
import { canListAbandoned, hasAdmin, isTransactionalStore } from '../core/store.js';

/** The matchers the contract uses: a subset of vitest's and Jest's `expect(...)`. */
export interface ContractMatchers {
  toBe(expected: unknown): void;
  toEqual(expected: unknown): void;
  toMatchObject(expected: object): void;
  toMatch(expected: RegExp | string): void;
  toHaveLength(length: number): void;
  toBeGreaterThan(n: number): void;
  toBeGreaterThanOrEqual(n: number): void;
  toBeLessThanOrEqual(n: number): void;
  toBeUndefined(): void;
  toBeNull(): void;
  toBeInstanceOf(type: abstract new (...args: never[]) => unknown): void;
}

export interface ContractAssertion extends ContractMatchers {
  readonly not: ContractMatchers;
  readonly rejects: { toBeInstanceOf(type: abstract new (...args: never[]) => unknown): Promise<void> };
}

/** What a case may receive from the runner: vitest's context can skip at run time; others may pass nothing. */
export interface ContractTestContext {
  skip?(): void;
}

/**
 * The test framework, passed in: `{ describe, it, expect, beforeAll, afterAll }` from vitest (or
 * Jest's globals). Typed by what the contract calls, so any runner of that shape fits.
 */
export interface ContractTestApi {
  describe(name: string, body: () => void): void;
  it(name: string, body: (context: ContractTestContext) => Promise<void>): void;
  expect(actual: unknown): ContractAssertion;
  beforeAll(fn: () => Promise<void>): void;
  afterAll(fn: () => Promise<void>): void;
}

export interface ContractContext {
  readonly store: IdempotencyStore;
  /**
   * Moves the store's clock forward by `ms`: an injected clock where the store has one, otherwise
   * real time passing (with short leases, so the suite stays fast).
   */
  advance(ms: number): Promise<void>;
  close?(): Promise<void> | void;
}

/**
 * Stores on real time (Redis, PostgreSQL, MySQL) see time pass between any two calls, and on a
 * loaded machine that can be long. So no case asserts that *less* than some time has passed: what
 * must stay live gets a lease and a window far longer than any test (LIVE), and only what must
 * end gets a short one, followed by `advance` (which can only ever wait longer, never shorter) or
 * by `renew(…, 0)`.
 */
const LEASE = 200;
const WINDOW = 600;
/** A lease and a window that end within the test, after `advance`. */
const opts = { leaseMs: LEASE, windowMs: WINDOW };
/** Nothing ends during a test. */
const LIVE = { leaseMs: 60_000, windowMs: 120_000 };
/** The lease ends after `advance(LEASE + 50)`; the window stays open. */
const SHORT_LEASE = { leaseMs: LEASE, windowMs: 120_000 };

const response = (body: string | Uint8Array, status = 201): StoredResponse => ({
  status,
  headers: [
    ['content-type', 'application/json'],
    ['location', '/charges/1'],
  ],
  body: typeof body === 'string' ? new TextEncoder().encode(body) : body,
  bodyOmitted: false,
});

export function describeStoreContract(
  name: string,
  setup: () => Promise<ContractContext> | ContractContext,
  { describe, it, expect, beforeAll, afterAll }: ContractTestApi,
): void {
  describe(`store contract: ${name}`, () => {
    let ctx: ContractContext;
    let store: IdempotencyStore;
    const ref = (scope = `scope-${randomUUID()}`): RecordRef => ({ scope, key: `key-${randomUUID()}` });
    const acquire = async (r: RecordRef, fp = 'fp-1', o = LIVE) => {
      const claim = await store.claim(r, fp, o);
      if (claim.kind !== 'acquired') throw new Error(`expected acquired, got ${claim.kind}`);
      return claim;
    };

    beforeAll(async () => {
      ctx = await setup();
      store = ctx.store;
    });
    afterAll(async () => {
      await ctx?.close?.();
    });

    // The admin capability (store.admin, used by the `idemkit` command); stores without it skip
    // these cases. This one runs first, on an empty store, so its counts are exact on every clock.
    it('admin: counts records by state, the oldest owner gone, and the bytes of stored bodies', async (...context: [ContractTestContext?]) => {
      if (!hasAdmin(store)) return context[0]?.skip?.();
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

    it('admin: inspects a record with its owner token cut short, attempt, recovery point and response', async (...context: [ContractTestContext?]) => {
      if (!hasAdmin(store)) return context[0]?.skip?.();
      const r = ref();
      expect(await store.admin.inspect(r)).toBeUndefined();
      const first = await acquire(r, 'fp-1', SHORT_LEASE);
      await store.checkpoint(r, first.token, 'charged', { chargeId: 'ch_1' });
      const inFlight = await store.admin.inspect(r);
      expect(inFlight).toMatchObject({ scope: r.scope, key: r.key, state: 'in_flight', fingerprint: 'fp-1', attempt: 1, expired: false });
      expect(inFlight).toMatchObject({ recoveryPoint: 'charged', recoveryData: { chargeId: 'ch_1' }, tokenPrefix: first.token.slice(0, 8) });
      expect(inFlight!.response).toBeUndefined();
      expect(inFlight!.leaseUntil).toBeGreaterThan(0);
      await ctx.advance(LEASE + 50);
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
      await ctx.advance(WINDOW + 50);
      expect(await store.admin.inspect(old)).toMatchObject({ state: 'completed', expired: true });
    });

    it('admin: lists by scope, state and age (claimed at least olderThanMs ago), oldest lease first, up to limit', async (...context: [ContractTestContext?]) => {
      if (!hasAdmin(store)) return context[0]?.skip?.();
      const scope = `list-${randomUUID()}`;
      const liveInFlight = ref(scope);
      const goneInFlight = ref(scope);
      const oldCompleted = ref(scope);
      const liveCompleted = ref(scope);
      await acquire(goneInFlight, 'fp-1', SHORT_LEASE);
      const c1 = await acquire(oldCompleted, 'fp-1', SHORT_LEASE);
      await store.complete(oldCompleted, c1.token, response('{"id":1}'));
      await acquire(ref()); // another scope
      await ctx.advance(LEASE + 50);
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

    it('admin: stamps a record with createdAt and updatedAt on the store clock; writes move updatedAt, reads do not', async (...context: [ContractTestContext?]) => {
      if (!hasAdmin(store)) return context[0]?.skip?.();
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
      const first = await acquire(r, 'fp-1', SHORT_LEASE);
      const claimed = await stamps(r);
      // On the store's clock: not before a reading of it taken before the claim.
      expect(claimed.createdAt).toBeGreaterThanOrEqual(before);
      expect(claimed.updatedAt).toBe(claimed.createdAt);
      // The listing carries the same stamps.
      expect((await store.admin.list({ scope: r.scope }))[0]).toMatchObject(claimed);

      await ctx.advance(5);
      expect(await store.renew(r, first.token, SHORT_LEASE.leaseMs)).toBe(true);
      const renewed = await stamps(r);
      expect(renewed.createdAt).toBe(claimed.createdAt);
      expect(renewed.updatedAt).toBeGreaterThan(claimed.updatedAt);
      // A refused renewal changes nothing.
      await ctx.advance(5);
      expect(await store.renew(r, 'f'.repeat(32), SHORT_LEASE.leaseMs)).toBe(false);
      expect(await stamps(r)).toEqual(renewed);

      await ctx.advance(5);
      await store.checkpoint(r, first.token, 'charged');
      const checkpointed = await stamps(r);
      expect(checkpointed.updatedAt).toBeGreaterThan(renewed.updatedAt);

      // In flight, a same-request claim answers in_flight and another fingerprint mismatch: reads.
      await ctx.advance(5);
      expect((await store.claim(r, 'fp-1', SHORT_LEASE)).kind).toBe('in_flight');
      expect((await store.claim(r, 'fp-2', SHORT_LEASE)).kind).toBe('mismatch');
      expect(await stamps(r)).toEqual(checkpointed);

      // A take-over keeps the request's creation time (how old the request is) and is a change.
      await ctx.advance(LEASE + 50);
      const second = await acquire(r, 'fp-1', LIVE);
      expect(second.takeover).toBe(true);
      const takenOver = await stamps(r);
      expect(takenOver.createdAt).toBe(claimed.createdAt);
      expect(takenOver.updatedAt).toBeGreaterThan(checkpointed.updatedAt);

      await ctx.advance(5);
      await store.complete(r, second.token, response('{"id":1}'));
      const completed = await stamps(r);
      expect(completed.createdAt).toBe(claimed.createdAt);
      expect(completed.updatedAt).toBeGreaterThan(takenOver.updatedAt);

      // A replay and a mismatch cost no write: the stamps stay.
      await ctx.advance(5);
      expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('completed');
      expect((await store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
      expect(await stamps(r)).toEqual(completed);
    });

    it('admin: a claim after the window ended starts a new record with a new createdAt', async (...context: [ContractTestContext?]) => {
      if (!hasAdmin(store)) return context[0]?.skip?.();
      const r = ref();
      const old = await acquire(r, 'fp-1', opts);
      await store.complete(r, old.token, response('old'));
      const before = await store.admin.inspect(r);
      await ctx.advance(WINDOW + 50);
      const fresh = await acquire(r, 'fp-2', LIVE);
      expect(fresh.takeover).toBe(false);
      const after = await store.admin.inspect(r);
      expect(after).toMatchObject({ state: 'in_flight', attempt: 1, fingerprint: 'fp-2' });
      expect(after!.createdAt!).toBeGreaterThan(before!.createdAt!);
      expect(after!.updatedAt).toBe(after!.createdAt);
      expect(after!.createdAt!).toBeGreaterThanOrEqual(before!.now + WINDOW);
      expect(await store.get(r)).toMatchObject({ createdAt: after!.createdAt, updatedAt: after!.updatedAt });
    });

    // The same times through `get`, which every store has: what a program reads of a record's
    // age. They are optional in IdempotencyRecord, so a store that keeps none (no `admin`, and
    // neither time after a claim) skips this case; every built-in store keeps them. Where the store
    // has `admin`, each time is also bounded by readings of the store's clock taken around the
    // write (`now` of `inspect`, or of `stats` before the record exists).
    it('get: a claim sets createdAt and updatedAt on the store clock; renewal, checkpoint, take-over and completion move updatedAt; createdAt stays', async (...context: [ContractTestContext?]) => {
      const admin = hasAdmin(store) ? store.admin : undefined;
      const r = ref();
      const reading = async () => (admin === undefined ? undefined : ((await admin.inspect(r)) ?? (await admin.stats())).now);
      const times = async () => {
        const got = await store.get(r);
        expect(got).not.toBeUndefined();
        return { createdAt: got!.createdAt, updatedAt: got!.updatedAt };
      };
      /** The times after a write: both known, in order, and updatedAt within the clock readings around it. */
      const known = async (before: number | undefined, after: number | undefined) => {
        const t = await times();
        expect(typeof t.createdAt).toBe('number');
        expect(typeof t.updatedAt).toBe('number');
        expect(t.createdAt!).toBeLessThanOrEqual(t.updatedAt!);
        if (before !== undefined) expect(t.updatedAt!).toBeGreaterThanOrEqual(before);
        if (after !== undefined) expect(t.updatedAt!).toBeLessThanOrEqual(after);
        return { createdAt: t.createdAt!, updatedAt: t.updatedAt! };
      };
      const written = async (write: () => Promise<unknown>) => {
        const before = await reading();
        await write();
        return known(before, await reading());
      };

      const before = await reading();
      const first = await acquire(r, 'fp-1', SHORT_LEASE);
      const after = await reading();
      const bare = await times();
      if (admin === undefined && bare.createdAt === undefined && bare.updatedAt === undefined) return context[0]?.skip?.();
      const claimed = await known(before, after);
      expect(claimed.updatedAt).toBe(claimed.createdAt);

      await ctx.advance(5);
      const renewed = await written(() => store.renew(r, first.token, SHORT_LEASE.leaseMs));
      expect(renewed.createdAt).toBe(claimed.createdAt);
      expect(renewed.updatedAt).toBeGreaterThan(claimed.updatedAt);

      await ctx.advance(5);
      const checkpointed = await written(() => store.checkpoint(r, first.token, 'charged', { id: 1 }));
      expect(checkpointed.createdAt).toBe(claimed.createdAt);
      expect(checkpointed.updatedAt).toBeGreaterThan(renewed.updatedAt);
      // Reads and refused writes change nothing.
      await ctx.advance(5);
      expect((await store.claim(r, 'fp-1', SHORT_LEASE)).kind).toBe('in_flight');
      expect((await store.claim(r, 'fp-2', SHORT_LEASE)).kind).toBe('mismatch');
      expect(await store.renew(r, 'f'.repeat(32), SHORT_LEASE.leaseMs)).toBe(false);
      expect(await times()).toEqual(checkpointed);

      await ctx.advance(LEASE + 50);
      let second: Awaited<ReturnType<typeof acquire>> | undefined;
      const takenOver = await written(async () => (second = await acquire(r, 'fp-1', LIVE)));
      expect(second!.takeover).toBe(true);
      expect(takenOver.createdAt).toBe(claimed.createdAt);
      expect(takenOver.updatedAt).toBeGreaterThan(checkpointed.updatedAt);

      await ctx.advance(5);
      const completed = await written(() => store.complete(r, second!.token, response('{"id":1}')));
      expect(completed.createdAt).toBe(claimed.createdAt);
      expect(completed.updatedAt).toBeGreaterThan(takenOver.updatedAt);
      await ctx.advance(5);
      expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('completed');
      expect(await times()).toEqual(completed);
    });

    it('get: a claim after the window ended starts a new record with a new createdAt (where the store keeps times)', async (...context: [ContractTestContext?]) => {
      const r = ref();
      const old = await acquire(r, 'fp-1', opts);
      await store.complete(r, old.token, response('old'));
      const before = await store.get(r);
      if (!hasAdmin(store) && before?.createdAt === undefined && before?.updatedAt === undefined) return context[0]?.skip?.();
      await ctx.advance(WINDOW + 50);
      expect(await acquire(r, 'fp-2', LIVE)).toMatchObject({ takeover: false });
      const after = await store.get(r);
      expect(after).toMatchObject({ state: 'in_flight', fingerprint: 'fp-2' });
      expect(typeof after!.createdAt).toBe('number');
      expect(after!.updatedAt).toBe(after!.createdAt);
      expect(after!.createdAt!).toBeGreaterThanOrEqual(before!.createdAt! + WINDOW);
      expect(after!.createdAt!).toBeGreaterThan(before!.updatedAt!);
    });

    it('admin: purges a completed record, refuses one in flight unless forced, and reports one not found', async (...context: [ContractTestContext?]) => {
      if (!hasAdmin(store)) return context[0]?.skip?.();
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

    it('gives exactly one winner among 200 concurrent claims of one key', async () => {
      const r = ref();
      const claims = await Promise.all(Array.from({ length: 200 }, () => store.claim(r, 'fp-1', LIVE)));
      expect(claims.filter((c) => c.kind === 'acquired')).toHaveLength(1);
      expect(claims.filter((c) => c.kind === 'in_flight')).toHaveLength(199);
      for (const c of claims) if (c.kind === 'in_flight') expect(c.retryAfterMs).toBeGreaterThan(0);
    });

    it('hands out a fresh 128-bit owner token per claim', async () => {
      const a = await acquire(ref());
      const b = await acquire(ref());
      expect(a.token).toMatch(/^[0-9a-f]{32}$/);
      expect(a.token).not.toBe(b.token);
      expect(a.takeover).toBe(false);
    });

    it('replays the completed response', async () => {
      const r = ref();
      const { token } = await acquire(r);
      await store.complete(r, token, response('{"id":1}'));
      const again = await store.claim(r, 'fp-1', LIVE);
      expect(again.kind).toBe('completed');
      if (again.kind !== 'completed') return;
      expect(again.response.status).toBe(201);
      expect(again.response.headers).toEqual([
        ['content-type', 'application/json'],
        ['location', '/charges/1'],
      ]);
      expect(new TextDecoder().decode(again.response.body!)).toBe('{"id":1}');
      expect(again.response.bodyOmitted).toBe(false);
    });

    it('answers mismatch to another fingerprint and leaves the record untouched', async () => {
      const r = ref();
      const { token } = await acquire(r, 'fp-1');
      expect((await store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
      const inFlight = await store.get(r);
      expect(inFlight).toMatchObject({ state: 'in_flight', fingerprint: 'fp-1' });
      await store.complete(r, token, response('original'));
      const before = await store.get(r);
      expect((await store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
      const after = await store.get(r);
      expect(after).toEqual(before);
      expect(new TextDecoder().decode(after!.response!.body!)).toBe('original');
    });

    it('does not take over a live lease, and does after it expires', async () => {
      const r = ref();
      const first = await acquire(r);
      expect((await store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
      await store.checkpoint(r, first.token, 'charged', { chargeId: 'ch_1' });
      // Now a short lease, which then runs out on the store's clock.
      expect(await store.renew(r, first.token, LEASE)).toBe(true);
      await ctx.advance(LEASE + 50);
      const second = await store.claim(r, 'fp-1', LIVE);
      expect(second.kind).toBe('acquired');
      if (second.kind !== 'acquired') return;
      expect(second.takeover).toBe(true);
      expect(second.token).not.toBe(first.token);
      expect(second.resumeFrom).toBe('charged');
      expect(second.recoveryData).toEqual({ chargeId: 'ch_1' });
    });

    it('does not let an expired lease of one request be taken over by a different request', async () => {
      const r = ref();
      await acquire(r, 'fp-1', SHORT_LEASE);
      await ctx.advance(LEASE + 50);
      expect((await store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
    });

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

    // ctx.suspend() gives the lease back this way, so that an immediate retry resumes the work.
    it('ends the lease now on renew(…, 0): an immediate claim of the same request takes over from the recovery point', async () => {
      const r = ref();
      const first = await acquire(r);
      await store.checkpoint(r, first.token, 'charged', { chargeId: 'ch_1' });
      expect(await store.renew(r, first.token, 0)).toBe(true);
      // No time passes: the lease already ended.
      const second = await store.claim(r, 'fp-1', LIVE);
      expect(second).toMatchObject({ kind: 'acquired', takeover: true, resumeFrom: 'charged', recoveryData: { chargeId: 'ch_1' } });
      if (second.kind !== 'acquired') return;
      expect(second.token).not.toBe(first.token);
      // The record is still inside its window, and the one who gave the lease back is fenced out.
      await expect(store.complete(r, first.token, response('late'))).rejects.toBeInstanceOf(LeaseLostError);
      await store.complete(r, second.token, response('resumed'));
      const replay = await store.claim(r, 'fp-1', LIVE);
      expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe('resumed');
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

    it('makes the key reusable after release', async () => {
      const r = ref();
      const { token } = await acquire(r, 'fp-1');
      await store.release(r, token);
      expect(await store.get(r)).toBeUndefined();
      const again = await store.claim(r, 'fp-2', LIVE);
      expect(again).toMatchObject({ kind: 'acquired', takeover: false });
    });

    it('treats a key as new once its window has passed', async () => {
      const r = ref();
      const { token } = await acquire(r, 'fp-1', opts);
      await store.complete(r, token, response('old'));
      await ctx.advance(WINDOW + 50);
      const fresh = await store.claim(r, 'fp-other', LIVE);
      expect(fresh).toMatchObject({ kind: 'acquired', takeover: false });
      expect((await store.get(r))?.recoveryPoint).toBeUndefined();
    });

    it('reaps expired records in bounded batches, and leaves live ones', async () => {
      const scope = `reap-${randomUUID()}`;
      const old = Array.from({ length: 5 }, () => ref(scope));
      for (const r of old) {
        const { token } = await acquire(r, 'fp-1', opts);
        await store.complete(r, token, response('old'));
      }
      await ctx.advance(WINDOW + 50);
      const live = ref(scope);
      await acquire(live);
      let reaped = 0;
      for (let i = 0; i < 100; i++) {
        const n = await store.reap(2);
        expect(n).toBeLessThanOrEqual(2);
        if (n === 0) break;
        reaped += n;
      }
      expect(reaped).toBeGreaterThanOrEqual(old.length);
      for (const r of old) expect(await store.get(r)).toBeUndefined();
      expect((await store.get(live))?.state).toBe('in_flight');
    });

    it('keeps two scopes with the same key independent', async () => {
      const key = `key-${randomUUID()}`;
      const a = { scope: `a-${randomUUID()}`, key };
      const b = { scope: `b-${randomUUID()}`, key };
      const ca = await acquire(a, 'fp-a');
      const cb = await acquire(b, 'fp-b');
      await store.complete(a, ca.token, response('for a'));
      expect((await store.claim(b, 'fp-b', LIVE)).kind).toBe('in_flight');
      await store.complete(b, cb.token, response('for b'));
      const ra = await store.claim(a, 'fp-a', LIVE);
      const rb = await store.claim(b, 'fp-b', LIVE);
      expect(ra.kind === 'completed' && new TextDecoder().decode(ra.response.body!)).toBe('for a');
      expect(rb.kind === 'completed' && new TextDecoder().decode(rb.response.body!)).toBe('for b');
    });

    // Ill-formed UTF-16 has no exact UTF-8 form (pg sends U+FFFD): refused, so two scopes never become one.
    const illFormed = [
      ['a lone high surrogate', 'tenant-\uD83D-a'],
      ['a lone low surrogate', 'tenant-\uDE00-a'],
      ['a reversed pair', 'tenant-\uDE00\uD83D-a'],
      ['a high surrogate at the end', 'tenant-\uD83D'],
    ] as const;
    for (const field of ['scope', 'key'] as const) {
      for (const [what, text] of illFormed) {
        it(`refuses a ${field} with ${what}, on every operation, with InvalidRecordRefError naming the ${field}`, async () => {
          const { scope, key } = ref();
          const bad: RecordRef = field === 'scope' ? { scope: `${text}-${scope}`, key } : { scope, key: `${text}-${key}` };
          // What a driver that replaces lone surrogates would have stored instead.
          const replaced: RecordRef = { scope: bad.scope.toWellFormed(), key: bad.key.toWellFormed() };
          const token = randomBytes(16).toString('hex');
          const refused = async (operation: Promise<unknown>) => {
            const error = await operation.then(
              () => undefined,
              (e: unknown) => e,
            );
            expect(error).toBeInstanceOf(InvalidRecordRefError);
            expect(error).toMatchObject({ code: 'ERR_IDEMKIT_INVALID_REF', field });
            expect((error as Error).message).toMatch(new RegExp(`${field}.*surrogate`));
          };
          await refused(store.claim(bad, 'fp-1', LIVE));
          await refused(store.renew(bad, token, LEASE));
          await refused(store.renew(bad, token, 0));
          await refused(store.checkpoint(bad, token, 'x'));
          await refused(store.complete(bad, token, response('x')));
          await refused(store.release(bad, token));
          await refused(store.get(bad));
          if (isTransactionalStore(store)) {
            const tx = await store.beginTransaction();
            try {
              await refused(tx.checkpoint(bad, token, 'x'));
              await refused(tx.complete(bad, token, response('x')));
            } finally {
              await tx.rollback();
            }
          }
          // Nothing was written under the text a lossy encoding would have made of it.
          expect(await store.get(replaced)).toBeUndefined();
          expect((await store.claim(replaced, 'fp-1', LIVE)).kind).toBe('acquired');
        });
      }
    }

    it('keeps scopes and keys that differ only in an astral character (emoji) apart, and returns them exactly', async () => {
      // U+1F600 and U+1F601 share their high surrogate; U+1F600 and U+1F680 differ in both.
      const key = `key-${randomUUID()}`;
      const base = `tenant-${randomUUID()}-`;
      const scopes = [`${base}\u{1F600}`, `${base}\u{1F601}`, `${base}\u{1F680}`, `${base}\uFFFD`, `${base}`];
      const refs = [...scopes.map((scope) => ({ scope, key })), { scope: base, key: `${key}\u{1F600}` }, { scope: base, key: `${key}\u{1F601}` }];
      const claims = await Promise.all(refs.map((r, i) => store.claim(r, `fp-${i}`, LIVE)));
      expect(claims.map((c) => c.kind)).toEqual(refs.map(() => 'acquired'));
      for (const [i, r] of refs.entries()) {
        const claim = claims[i]!;
        if (claim.kind !== 'acquired') return;
        await store.complete(r, claim.token, response(`for ${i}`));
      }
      for (const [i, r] of refs.entries()) {
        const replay = await store.claim(r, `fp-${i}`, LIVE);
        expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe(`for ${i}`);
        expect(await store.get(r)).toMatchObject({ scope: r.scope, key: r.key, fingerprint: `fp-${i}` });
      }
    });

    it('keeps binary bodies byte for byte up to maxResponseBytes, and an empty body as empty', async () => {
      const limit = store.maxResponseBytes;
      const everyByte = Uint8Array.from({ length: 256 }, (_, i) => i);
      const full = new Uint8Array(randomBytes(limit));
      for (const body of [everyByte, full, new Uint8Array(0)]) {
        const r = ref();
        const { token } = await acquire(r);
        await store.complete(r, token, { status: 200, headers: [['content-type', 'application/octet-stream']], body, bodyOmitted: false });
        const replay = await store.claim(r, 'fp-1', LIVE);
        expect(replay.kind).toBe('completed');
        if (replay.kind !== 'completed') return;
        expect(replay.response.bodyOmitted).toBe(false);
        expect(replay.response.body).not.toBeNull();
        expect(Buffer.from(replay.response.body!).equals(Buffer.from(body))).toBe(true);
      }
    });

    // An optional capability (for a completer); stores without it (Redis) skip this case.
    // The context is read through rest parameters so the function's length stays 0: Jest takes a
    // declared parameter for a `done` callback. Without a context to skip with, the case passes.
    it('lists abandoned records (in flight, lease over, window open) with their recovery points, and nothing else', async (...context: [ContractTestContext?]) => {
      if (!canListAbandoned(store)) return context[0]?.skip?.();
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
      await ctx.advance(LEASE + 50);
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
      await ctx.advance(WINDOW + 50);
      expect((await store.listAbandoned(1000)).some((r) => r.key === windowOver.key)).toBe(false);
      expect(await store.get(windowOver)).toMatchObject({ state: 'in_flight' }); // still there: expired, not yet reaped
    });

    it('marks a body over maxResponseBytes omitted, keeping status and headers, never truncating', async () => {
      const r = ref();
      const { token } = await acquire(r);
      const body = new Uint8Array(randomBytes(store.maxResponseBytes + 1));
      await store.complete(r, token, { status: 202, headers: [['etag', '"v1"']], body, bodyOmitted: false });
      const replay = await store.claim(r, 'fp-1', LIVE);
      expect(replay.kind).toBe('completed');
      if (replay.kind !== 'completed') return;
      expect(replay.response).toEqual({ status: 202, headers: [['etag', '"v1"']], body: null, bodyOmitted: true });
    });
  });
}
