/**
 * The window section, which every store runs: past its window a key is new again (a new record,
 * with a new creation time), and `reap` removes such records in bounded batches.
 */
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore } from '../../core/store.js';
import { hasAdmin } from '../../core/store.js';
import type { ContractContext, ContractSuite, ContractTestContext } from './context.js';
import { LIVE, WINDOW, acquirer, opts, ref, response } from './context.js';

export function windowSection(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  let ctx: ContractContext;
  let store: IdempotencyStore;
  suite.ready((made) => {
    ctx = made;
    store = made.store;
  });
  const acquire = acquirer(() => store);

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
}
