/**
 * Recovery phases in one process: the definition's validation, resuming through an adapter
 * (Hono on a SQLite file), fencing after a lost lease, and the completer's choices.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Hono } from 'hono';
import { afterAll, afterEach, beforeEach, describe, expect, expectTypeOf, it } from 'vitest';
import { InvalidOptionError, LeaseLostError, TransactionalModeError } from '../../src/core/errors.js';
import type { FencedTransaction } from '../../src/core/engine.js';
import type { Claim, RecordRef } from '../../src/core/store.js';
import type { IdempotencyVariablesFor } from '../../src/http/hono.js';
import { idempotency } from '../../src/http/hono.js';
import { completer } from '../../src/patterns/completer.js';
import { PhaseError } from '../../src/patterns/phase-errors.js';
import type { PhaseHost } from '../../src/patterns/phases.js';
import { STARTED, definePhases, foreignKeyFor } from '../../src/patterns/phases.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import type { SqliteDatabase } from '../../src/drivers/sqlite.js';
import type { SqliteStore } from '../../src/stores/sqlite/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { manualClock } from '../stores/manual-clock.js';

const dir = mkdtempSync(join(tmpdir(), 'idemkit-phases-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function expectPhaseError(fn: () => unknown, code: string, phase: string | undefined, message: RegExp): void {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(PhaseError);
    expect((error as PhaseError).code).toBe(code);
    expect((error as PhaseError).phase).toBe(phase);
    expect((error as Error).message).toMatch(message);
    return;
  }
  throw new Error(`expected PhaseError ${code}`);
}

/** A host over a claim made directly on the store, as the completer builds one. */
function hostFor<DB extends SqliteDatabase>(store: SqliteStore<DB>, ref: RecordRef, claim: Extract<Claim, { kind: 'acquired' }>): PhaseHost<DB> {
  return {
    ...ref,
    resumeFrom: claim.resumeFrom,
    recoveryData: claim.recoveryData,
    checkpoint: (point, data) => store.checkpoint(ref, claim.token, point, data),
    async beginTransaction(): Promise<FencedTransaction<DB>> {
      const tx = await store.beginTransaction();
      return { tx: tx.tx, checkpoint: (p, d) => tx.checkpoint(ref, claim.token, p, d), commit: () => tx.commit(), rollback: () => tx.rollback() };
    },
  };
}

const fakeHost = (resumeFrom: string | undefined, recoveryData: unknown, tx?: unknown): PhaseHost => ({
  scope: 's',
  key: 'k',
  resumeFrom,
  recoveryData,
  tx,
  checkpoint: async () => {},
  beginTransaction: async () => ({ tx: undefined, checkpoint: async () => {}, commit: async () => {}, rollback: async () => {} }),
});

describe('a phases definition', () => {
  const two = definePhases<{ n: number }>('two')
    .phase('a', () => 1)
    .phase('b', () => 2);

  it('refuses a phase name used twice, naming it', () => {
    expectPhaseError(() => two.phase('a', () => 3), 'DUPLICATE_PHASE', 'a', /"a" is used twice/);
    expectPhaseError(() => two.foreign('b', () => 3), 'DUPLICATE_PHASE', 'b', /"b" is used twice/);
  });

  it('refuses empty names, the reserved name and an unnamed definition', () => {
    expectPhaseError(() => two.phase('', () => 3), 'EMPTY_PHASE_NAME', undefined, /phase #3/);
    expectPhaseError(() => two.phase('  ', () => 3), 'EMPTY_PHASE_NAME', undefined, /non-empty/);
    expectPhaseError(() => two.phase(STARTED, () => 3), 'RESERVED_PHASE', STARTED, /reserved/);
    expectPhaseError(() => definePhases(''), 'EMPTY_PHASE_NAME', undefined, /needs a non-empty name/);
  });

  it('is immutable: adding a phase returns a new definition', () => {
    const three = two.phase('c', () => 3);
    expect(two.names).toEqual(['a', 'b']);
    expect(three.names).toEqual(['a', 'b', 'c']);
  });

  it('refuses to resume at a recovery point that names no phase, naming it and the known ones', async () => {
    const error = await two.run(fakeHost('renamed', { phases: 'two', input: {}, data: {} })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PhaseError);
    expect(error).toMatchObject({ code: 'UNKNOWN_PHASE', phase: 'renamed' });
    expect((error as Error).message).toMatch(/"renamed" names no phase \(known: started, a, b\)/);
  });

  it('refuses recovery data of another definition, or not written by phases', async () => {
    await expect(two.run(fakeHost('a', { phases: 'other', input: {}, data: {} }))).rejects.toMatchObject({ code: 'DEFINITION_MISMATCH' });
    await expect(two.run(fakeHost('a', { charged: true }))).rejects.toMatchObject({ code: 'CORRUPT_RECOVERY_DATA', phase: 'a' });
  });

  it('refuses an empty definition, a missing context and whole-request transactional mode', async () => {
    await expect(definePhases('none').run(fakeHost(undefined, undefined))).rejects.toMatchObject({ code: 'NO_PHASES' });
    await expect(two.run(undefined as never)).rejects.toMatchObject({ code: 'NO_CONTEXT' });
    await expect(two.run(fakeHost(undefined, undefined, {}), { n: 1 })).rejects.toThrow(TransactionalModeError);
    await expect(two.run(fakeHost(undefined, undefined, {}), { n: 1 })).rejects.toMatchObject({ code: 'ERR_IDEMKIT_TRANSACTIONAL_MODE' });
  });

  it('refuses an output that cannot be kept as JSON, naming the phase', async () => {
    const bad = definePhases('bad').phase('big', () => ({ n: 1n }));
    await expect(bad.run(fakeHost(undefined, undefined), {})).rejects.toMatchObject({ code: 'OUTPUT_NOT_JSON', phase: 'big' });
  });

  it('resumed at its last phase, runs nothing and returns the recorded result', async () => {
    const result = await two.run(fakeHost('b', { phases: 'two', input: { n: 1 }, data: { a: 1, b: 2 } }));
    expect(result).toBe(2);
  });

  it('types each output for the phases after it, and run() as the last output', () => {
    const typed = definePhases<{ a: number }>('typed')
      .phase('one', () => ({ v: 1 }))
      .foreign('two', ({ data, foreignKey }) => ({ v: data.one.v, foreignKey }));
    expectTypeOf(typed.run).returns.resolves.toEqualTypeOf<{ v: number; foreignKey: string }>();
  });

  it('derives one stable, opaque foreign key per scope, key and phase', () => {
    expect(foreignKeyFor('s', 'k', 'charged')).toBe(foreignKeyFor('s', 'k', 'charged'));
    expect(foreignKeyFor('s', 'k', 'charged')).toMatch(/^[0-9a-f]{32}$/);
    const others = [foreignKeyFor('s', 'k', 'refunded'), foreignKeyFor('s', 'k2', 'charged'), foreignKeyFor('s2', 'k', 'charged'), foreignKeyFor('s', 'kc', 'harged')];
    expect(new Set([foreignKeyFor('s', 'k', 'charged'), ...others]).size).toBe(5);
  });
});

describe('phases through an adapter (Hono, SQLite)', () => {
  let db: Database.Database;
  let store: SqliteStore<Database.Database>;
  let file: string;
  let foreignCalls: string[];
  let failForeign: number;
  // The store's clock, moved by hand: a lease runs out when a test says so, and "the lease was
  // given back" is an exact comparison, not one against a wall clock that moves under load.
  let clock: ReturnType<typeof manualClock>;

  beforeEach(() => {
    file = join(dir, `unit-${Math.random().toString(36).slice(2)}.db`);
    db = new Database(file);
    clock = manualClock(Date.now());
    store = sqliteStore({ database: db, clock: clock.now });
    db.exec('CREATE TABLE orders (key TEXT NOT NULL, charge TEXT)');
    foreignCalls = [];
    failForeign = 0;
  });
  afterEach(() => db.close());

  const phases = () =>
    definePhases<{ amount: number; note?: string }, Database.Database>('checkout')
      .phase('order_created', ({ tx, key }) => {
        tx.prepare('INSERT INTO orders (key) VALUES (?)').run(key);
        return { order: key };
      })
      .foreign('charged', ({ foreignKey, input }) => {
        foreignCalls.push(foreignKey);
        if (failForeign-- > 0) throw new Error('the foreign service is down');
        return { charge: `ch_${input.amount}` };
      })
      .phase('finished', ({ tx, key, data, input }) => {
        tx.prepare('UPDATE orders SET charge = ? WHERE key = ?').run(data.charged.charge, key);
        return { order: data.order_created.order, charge: data.charged.charge, amount: input.amount, note: input.note };
      });

  function app(options: { transactional?: boolean; fingerprintFields?: string[] } = {}) {
    const checkout = phases();
    const errors: unknown[] = [];
    const hono = new Hono<{ Variables: IdempotencyVariablesFor<typeof store, boolean> }>();
    hono.use('*', idempotency({ store, scope: () => 't', leaseMs: 60_000, ...options }));
    hono.onError((error, c) => {
      errors.push(error);
      return c.json({ error: String(error) }, 500);
    });
    hono.post('/orders', async (c) => c.json(await checkout.run(c.get('idempotency')!, await c.req.json()), 201));
    const post = (key: string, amount = 5, note?: string) =>
      hono.request('/orders', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ amount, note }) });
    return { post, errors };
  }
  const orders = (key: string) => db.prepare('SELECT key, charge FROM orders WHERE key = ?').all(key);

  it('runs every phase once, records each recovery point, and replays the stored answer', async () => {
    const { post } = app();
    const first = await post('k1');
    expect(first.status).toBe(201);
    expect(await first.json()).toEqual({ order: 'k1', charge: 'ch_5', amount: 5 });
    const record = await store.get({ scope: 't', key: 'k1' });
    expect(record).toMatchObject({ state: 'completed', recoveryPoint: 'finished' });
    expect(record!.recoveryData).toMatchObject({ phases: 'checkout', input: { amount: 5 }, data: { charged: { charge: 'ch_5' } } });
    const replay = await post('k1');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(orders('k1')).toEqual([{ key: 'k1', charge: 'ch_5' }]);
    expect(foreignCalls).toEqual([foreignKeyFor('t', 'k1', 'charged')]);
  });

  it('a failed phase is not stored: the record stays resumable, its lease given up, and a retry resumes after the last commit', async () => {
    const { post } = app();
    failForeign = 1;
    const failed = await post('k2');
    expect(failed.status).toBe(500);
    const record = await store.get({ scope: 't', key: 'k2' });
    expect(record).toMatchObject({ state: 'in_flight', recoveryPoint: 'order_created' });
    // Given back: over now on the store's clock (held, it would end a 60 s lease from now).
    expect(record!.leaseUntil).toBeLessThanOrEqual(clock.now());
    const retry = await post('k2');
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(orders('k2')).toEqual([{ key: 'k2', charge: 'ch_5' }]);
    // The foreign call was repeated with the same key: the foreign service deduplicates it.
    expect(foreignCalls).toEqual([foreignKeyFor('t', 'k2', 'charged'), foreignKeyFor('t', 'k2', 'charged')]);
  });

  it('a retry resumes with the recorded input, not its own body', async () => {
    // Only `amount` is fingerprinted, so a retry may differ elsewhere; the recorded input is what counts.
    const { post } = app({ fingerprintFields: ['amount'] });
    failForeign = 1;
    expect((await post('k3', 7, 'first')).status).toBe(500);
    const retry = await post('k3', 7, 'second');
    expect(await retry.json()).toEqual({ order: 'k3', charge: 'ch_7', amount: 7, note: 'first' });
  });

  it('is refused in whole-request transactional mode, and nothing is written', async () => {
    const { post, errors } = app({ transactional: true });
    expect((await post('k4')).status).toBe(500);
    // One refusal, one code: the same class and code as ctx.beginTransaction() in that mode.
    expect(errors[0]).toBeInstanceOf(TransactionalModeError);
    expect(errors[0]).not.toBeInstanceOf(PhaseError);
    expect(errors[0]).toMatchObject({ code: 'ERR_IDEMKIT_TRANSACTIONAL_MODE' });
    expect(orders('k4')).toEqual([]);
  });

  it('ctx.suspend() keeps the record resumable in any mode; in transactional mode the request transaction rolls back', async () => {
    const hono = new Hono<{ Variables: IdempotencyVariablesFor<typeof store, true> }>();
    hono.use('*', idempotency({ store, scope: () => 't', transactional: true }));
    hono.post('/suspend', (c) => {
      const ctx = c.get('idempotency')!;
      ctx.tx.prepare('INSERT INTO orders (key) VALUES (?)').run(ctx.key);
      ctx.suspend();
      return c.json({ later: true }, 503);
    });
    const post = () => hono.request('/suspend', { method: 'POST', headers: { 'idempotency-key': 'k6' } });
    expect((await post()).status).toBe(503);
    expect(orders('k6')).toEqual([]);
    const record = await store.get({ scope: 't', key: 'k6' });
    expect(record?.state).toBe('in_flight');
    expect(record!.leaseUntil).toBeLessThanOrEqual(clock.now());
    // Not stored, and the lease is free: the next attempt runs (and the store is not stuck behind an open transaction).
    expect((await post()).status).toBe(503);
  });

  it('a phase whose lease was taken over cannot commit: its writes roll back', async () => {
    const ref = { scope: 't', key: 'k5' };
    const stale = await store.claim(ref, 'fp', { leaseMs: 20, windowMs: 60_000 });
    if (stale.kind !== 'acquired') throw new Error(stale.kind);
    await store.checkpoint(ref, stale.token, STARTED, { phases: 'checkout', input: { amount: 5 }, data: {} });
    // The lease runs out on the store's clock; then take over.
    await clock.advance(20);
    const owner = await store.claim(ref, 'fp', { leaseMs: 60_000, windowMs: 60_000 });
    expect(owner).toMatchObject({ kind: 'acquired', takeover: true, resumeFrom: STARTED });
    const old = hostFor(store, ref, { ...stale, resumeFrom: STARTED, recoveryData: { phases: 'checkout', input: { amount: 5 }, data: {} } });
    await expect(phases().run(old)).rejects.toBeInstanceOf(LeaseLostError);
    expect(orders('k5')).toEqual([]);
    // The new owner runs every phase once.
    if (owner.kind !== 'acquired') return;
    expect(await phases().run(hostFor(store, ref, owner))).toEqual({ order: 'k5', charge: 'ch_5', amount: 5 });
    expect(orders('k5')).toHaveLength(1);
  });

  it('the completer finishes records of its definitions and leaves the others', async () => {
    const opts = { leaseMs: 20, windowMs: 60_000 };
    const abandon = async (key: string, run?: (host: PhaseHost<Database.Database>) => Promise<unknown>) => {
      const ref = { scope: 't', key };
      const claim = await store.claim(ref, `fp-${key}`, opts);
      if (claim.kind !== 'acquired') throw new Error(claim.kind);
      await run?.(hostFor(store, ref, claim)).catch(() => {});
      return ref;
    };
    failForeign = 1;
    const ours = await abandon('c1', (host) => phases().run(host, { amount: 9 })); // died in the foreign phase
    const bare = await abandon('c2'); // died before recording its input
    const other = await abandon('c3', (host) => definePhases('refund').phase('x', () => { throw new Error('died'); }).run(host, {}));
    // Their leases run out on the store's clock: the three are abandoned.
    await clock.advance(20);
    const run = completer({ store, phases: phases(), response: (result) => ({ status: 201, body: result }), leaseMs: 5_000 });
    const report = await run.runOnce();
    expect(report.completed).toEqual([ours]);
    expect(report.skipped).toEqual(expect.arrayContaining([bare, other]));
    expect(report.failed).toEqual([]);
    const record = await store.get(ours);
    expect(record?.state).toBe('completed');
    expect(JSON.parse(new TextDecoder().decode(record!.response!.body!))).toEqual({ order: 'c1', charge: 'ch_9', amount: 9 });
    expect(record!.response!.status).toBe(201);
    expect(orders('c1')).toHaveLength(1);
    expect((await run.runOnce()).completed).toEqual([]);
    // The records it left are as they were.
    expect(await store.get(bare)).toMatchObject({ state: 'in_flight', recoveryPoint: undefined });
  });

  it('the completer validates its options', () => {
    expect(() => completer({ store: memoryStore() as never, phases: phases() })).toThrow(InvalidOptionError);
    expect(() => completer({ store, phases: [phases(), phases()] })).toThrow(/two definitions are named "checkout"/);
    expect(() => completer({ store, phases: [] })).toThrow(/at least one/);
    expect(() => completer({ store, phases: phases(), leaseMs: 0 })).toThrow(/leaseMs/);
    expect(() => completer({ store, phases: phases(), batch: 5 } as never)).toThrow(/batch/);
  });
});
