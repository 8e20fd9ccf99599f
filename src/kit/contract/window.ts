/**
 * The window section, which every store runs: past its window a key is new again (a new record,
 * with a new creation time), and `reap` removes such records in bounded batches.
 */
import { randomUUID } from 'node:crypto';
import { hasAdmin } from '../../core/store.js';
import type { ContractSuite, ContractTestContext } from './context.js';
import { LIVE, WINDOW, opts, ref, response } from './context.js';

export function windowSection(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  const { acquire } = suite;

  it('treats a key as new once its window has passed', async () => {
    const r = ref();
    const { token } = await acquire(r, 'fp-1', opts);
    await suite.store.complete(r, token, response('old'));
    await suite.advance(WINDOW + 50);
    const fresh = await suite.store.claim(r, 'fp-other', LIVE);
    expect(fresh).toMatchObject({ kind: 'acquired', takeover: false });
    expect((await suite.store.get(r))?.recoveryPoint).toBeUndefined();
  });

  it('reaps expired records in bounded batches, and leaves live ones', async () => {
    const scope = `reap-${randomUUID()}`;
    const old = Array.from({ length: 5 }, () => ref(scope));
    for (const r of old) {
      const { token } = await acquire(r, 'fp-1', opts);
      await suite.store.complete(r, token, response('old'));
    }
    await suite.advance(WINDOW + 50);
    const live = ref(scope);
    await acquire(live);
    let reaped = 0;
    for (let i = 0; i < 100; i++) {
      const n = await suite.store.reap(2);
      expect(n).toBeLessThanOrEqual(2);
      if (n === 0) break;
      reaped += n;
    }
    expect(reaped).toBeGreaterThanOrEqual(old.length);
    for (const r of old) expect(await suite.store.get(r)).toBeUndefined();
    expect((await suite.store.get(live))?.state).toBe('in_flight');
  });

  it('get: a claim after the window ended starts a new record with a new createdAt (where the store keeps times)', async (...context: [ContractTestContext?]) => {
    const r = ref();
    const old = await acquire(r, 'fp-1', opts);
    await suite.store.complete(r, old.token, response('old'));
    const before = await suite.store.get(r);
    if (!hasAdmin(suite.store) && before?.createdAt === undefined && before?.updatedAt === undefined) return context[0]?.skip?.();
    await suite.advance(WINDOW + 50);
    expect(await acquire(r, 'fp-2', LIVE)).toMatchObject({ takeover: false });
    const after = await suite.store.get(r);
    expect(after).toMatchObject({ state: 'in_flight', fingerprint: 'fp-2' });
    expect(typeof after!.createdAt).toBe('number');
    expect(after!.updatedAt).toBe(after!.createdAt);
    expect(after!.createdAt!).toBeGreaterThanOrEqual(before!.createdAt! + WINDOW);
    expect(after!.createdAt!).toBeGreaterThan(before!.updatedAt!);
  });
}
