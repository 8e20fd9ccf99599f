/**
 * The claim section, which every store runs: one owner per key, the response replayed to the same
 * request and refused to another, the key free again after release, the record's times, and
 * scopes, keys and bodies kept exactly as given.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { InvalidRecordRefError } from '../../core/errors.js';
import type { RecordRef } from '../../core/store.js';
import { hasAdmin, isTransactionalStore } from '../../core/store.js';
import type { ContractSuite, ContractTestContext } from './context.js';
import { LEASE, LIVE, ref, response } from './context.js';

export function claimSection(suite: ContractSuite): void {
  claimCases(suite);
  recordCases(suite);
}

/** Who gets the key, what the others are answered, and when the record was claimed and written. */
function claimCases(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  const { acquire } = suite;

  it('gives exactly one winner among 200 concurrent claims of one key', async () => {
    const r = ref();
    const claims = await Promise.all(Array.from({ length: 200 }, () => suite.store.claim(r, 'fp-1', LIVE)));
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
    await suite.store.complete(r, token, response('{"id":1}'));
    const again = await suite.store.claim(r, 'fp-1', LIVE);
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
    expect((await suite.store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
    const inFlight = await suite.store.get(r);
    expect(inFlight).toMatchObject({ state: 'in_flight', fingerprint: 'fp-1' });
    await suite.store.complete(r, token, response('original'));
    const before = await suite.store.get(r);
    expect((await suite.store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
    const after = await suite.store.get(r);
    expect(after).toEqual(before);
    expect(new TextDecoder().decode(after!.response!.body!)).toBe('original');
  });

  it('makes the key reusable after release', async () => {
    const r = ref();
    const { token } = await acquire(r, 'fp-1');
    await suite.store.release(r, token);
    expect(await suite.store.get(r)).toBeUndefined();
    const again = await suite.store.claim(r, 'fp-2', LIVE);
    expect(again).toMatchObject({ kind: 'acquired', takeover: false });
  });

  // The same times through `get`, which every store has: what a program reads of a record's
  // age. They are optional in IdempotencyRecord, so a store that keeps none (no `admin`, and
  // neither time after a claim) skips this case; every built-in store keeps them. Where the store
  // has `admin`, each time is also bounded by readings of the store's clock taken around the
  // write (`now` of `inspect`, or of `stats` before the record exists).
  it('get: a claim sets createdAt and updatedAt on the store clock; renewal, checkpoint, take-over and completion move updatedAt; createdAt stays', async (...context: [ContractTestContext?]) => {
    const admin = hasAdmin(suite.store) ? suite.store.admin : undefined;
    const r = ref();
    const reading = async () => (admin === undefined ? undefined : ((await admin.inspect(r)) ?? (await admin.stats())).now);
    const times = async () => {
      const got = await suite.store.get(r);
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
    // Live throughout (a loaded machine may take longer than a short lease between two calls);
    // `renew(…, 0)` ends it where the take-over needs it ended.
    const first = await acquire(r, 'fp-1', LIVE);
    const after = await reading();
    const bare = await times();
    if (admin === undefined && bare.createdAt === undefined && bare.updatedAt === undefined) return context[0]?.skip?.();
    const claimed = await known(before, after);
    expect(claimed.updatedAt).toBe(claimed.createdAt);

    await suite.advance(5);
    const renewed = await written(() => suite.store.renew(r, first.token, LIVE.leaseMs));
    expect(renewed.createdAt).toBe(claimed.createdAt);
    expect(renewed.updatedAt).toBeGreaterThan(claimed.updatedAt);

    await suite.advance(5);
    const checkpointed = await written(() => suite.store.checkpoint(r, first.token, 'charged', { id: 1 }));
    expect(checkpointed.createdAt).toBe(claimed.createdAt);
    expect(checkpointed.updatedAt).toBeGreaterThan(renewed.updatedAt);
    // Reads and refused writes change nothing.
    await suite.advance(5);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('in_flight');
    expect((await suite.store.claim(r, 'fp-2', LIVE)).kind).toBe('mismatch');
    expect(await suite.store.renew(r, 'f'.repeat(32), LIVE.leaseMs)).toBe(false);
    expect(await times()).toEqual(checkpointed);

    expect(await suite.store.renew(r, first.token, 0)).toBe(true);
    await suite.advance(5);
    let second: Awaited<ReturnType<typeof acquire>> | undefined;
    const takenOver = await written(async () => (second = await acquire(r, 'fp-1', LIVE)));
    expect(second!.takeover).toBe(true);
    expect(takenOver.createdAt).toBe(claimed.createdAt);
    expect(takenOver.updatedAt).toBeGreaterThan(checkpointed.updatedAt);

    await suite.advance(5);
    const completed = await written(() => suite.store.complete(r, second!.token, response('{"id":1}')));
    expect(completed.createdAt).toBe(claimed.createdAt);
    expect(completed.updatedAt).toBeGreaterThan(takenOver.updatedAt);
    await suite.advance(5);
    expect((await suite.store.claim(r, 'fp-1', LIVE)).kind).toBe('completed');
    expect(await times()).toEqual(completed);
  });
}

/** Scopes, keys and bodies: refused when a lossy encoding would change them, otherwise kept byte for byte. */
function recordCases(suite: ContractSuite): void {
  const { it, expect } = suite.test;
  const { acquire } = suite;

  it('keeps two scopes with the same key independent', async () => {
    const key = `key-${randomUUID()}`;
    const a = { scope: `a-${randomUUID()}`, key };
    const b = { scope: `b-${randomUUID()}`, key };
    const ca = await acquire(a, 'fp-a');
    const cb = await acquire(b, 'fp-b');
    await suite.store.complete(a, ca.token, response('for a'));
    expect((await suite.store.claim(b, 'fp-b', LIVE)).kind).toBe('in_flight');
    await suite.store.complete(b, cb.token, response('for b'));
    const ra = await suite.store.claim(a, 'fp-a', LIVE);
    const rb = await suite.store.claim(b, 'fp-b', LIVE);
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
        await refused(suite.store.claim(bad, 'fp-1', LIVE));
        await refused(suite.store.renew(bad, token, LEASE));
        await refused(suite.store.renew(bad, token, 0));
        await refused(suite.store.checkpoint(bad, token, 'x'));
        await refused(suite.store.complete(bad, token, response('x')));
        await refused(suite.store.release(bad, token));
        await refused(suite.store.get(bad));
        if (isTransactionalStore(suite.store)) {
          const tx = await suite.store.beginTransaction();
          try {
            await refused(tx.checkpoint(bad, token, 'x'));
            await refused(tx.complete(bad, token, response('x')));
          } finally {
            await tx.rollback();
          }
        }
        // Nothing was written under the text a lossy encoding would have made of it.
        expect(await suite.store.get(replaced)).toBeUndefined();
        expect((await suite.store.claim(replaced, 'fp-1', LIVE)).kind).toBe('acquired');
      });
    }
  }

  it('keeps scopes and keys that differ only in an astral character (emoji) apart, and returns them exactly', async () => {
    // U+1F600 and U+1F601 share their high surrogate; U+1F600 and U+1F680 differ in both.
    const key = `key-${randomUUID()}`;
    const base = `tenant-${randomUUID()}-`;
    const scopes = [`${base}\u{1F600}`, `${base}\u{1F601}`, `${base}\u{1F680}`, `${base}\uFFFD`, `${base}`];
    const refs = [...scopes.map((scope) => ({ scope, key })), { scope: base, key: `${key}\u{1F600}` }, { scope: base, key: `${key}\u{1F601}` }];
    const claims = await Promise.all(refs.map((r, i) => suite.store.claim(r, `fp-${i}`, LIVE)));
    expect(claims.map((c) => c.kind)).toEqual(refs.map(() => 'acquired'));
    for (const [i, r] of refs.entries()) {
      const claim = claims[i]!;
      if (claim.kind !== 'acquired') return;
      await suite.store.complete(r, claim.token, response(`for ${i}`));
    }
    for (const [i, r] of refs.entries()) {
      const replay = await suite.store.claim(r, `fp-${i}`, LIVE);
      expect(replay.kind === 'completed' && new TextDecoder().decode(replay.response.body!)).toBe(`for ${i}`);
      expect(await suite.store.get(r)).toMatchObject({ scope: r.scope, key: r.key, fingerprint: `fp-${i}` });
    }
  });

  it('keeps binary bodies byte for byte up to maxResponseBytes, and an empty body as empty', async () => {
    const limit = suite.store.maxResponseBytes;
    const everyByte = Uint8Array.from({ length: 256 }, (_, i) => i);
    const full = new Uint8Array(randomBytes(limit));
    for (const body of [everyByte, full, new Uint8Array(0)]) {
      const r = ref();
      const { token } = await acquire(r);
      await suite.store.complete(r, token, { status: 200, headers: [['content-type', 'application/octet-stream']], body, bodyOmitted: false });
      const replay = await suite.store.claim(r, 'fp-1', LIVE);
      expect(replay.kind).toBe('completed');
      if (replay.kind !== 'completed') return;
      expect(replay.response.bodyOmitted).toBe(false);
      expect(replay.response.body).not.toBeNull();
      expect(Buffer.from(replay.response.body!).equals(Buffer.from(body))).toBe(true);
    }
  });

  it('marks a body over maxResponseBytes omitted, keeping status and headers, never truncating', async () => {
    const r = ref();
    const { token } = await acquire(r);
    const body = new Uint8Array(randomBytes(suite.store.maxResponseBytes + 1));
    await suite.store.complete(r, token, { status: 202, headers: [['etag', '"v1"']], body, bodyOmitted: false });
    const replay = await suite.store.claim(r, 'fp-1', LIVE);
    expect(replay.kind).toBe('completed');
    if (replay.kind !== 'completed') return;
    expect(replay.response).toEqual({ status: 202, headers: [['etag', '"v1"']], body: null, bodyOmitted: true });
  });
}
